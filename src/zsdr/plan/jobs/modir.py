"""The jobs of rules/modir.smk: MoDIR's target triples, the domain analyses of the curve runs' snapshots, and
MoDIR's analysis tables and figures (docs/methods/modir.md; the plan stage zsdr.plan.modir)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds
from zsdr.plan.params import Settings


@dataclass(frozen=True)
class ModirTriplesJob(RuleJob):
    """A target's unlabelled (query, document, document) triples for MoDIR's domain classifier."""

    dataset: str                  # the target dataset's folder
    split: str                    # modir.triples_split: the split whose queries the triples hold


@dataclass(frozen=True)
class ModirDomainJob(RuleJob):
    """Global Domain-Acc and KNN-Source% of one system between the source dataset and one target."""

    model: str                    # what the system loads on the target (a snapshot of a curve run, a folder, an HF id)
    options: dict[str, Any]       # the system's encoder settings on the target
    source: str                   # the source dataset's folder
    target: str                   # the target dataset's folder
    target_split: str             # the target's evaluation split
    analysis: dict[str, Any]      # config modir.analysis (sample sizes, KNN, the domain classifier)
    seed: int
    dense: Settings               # config dense (batch size, device; keep_embeddings not compared)


@dataclass(frozen=True)
class ModirCurvesJob(RuleJob):
    """MoDIR Figures 3 and 5 and Table 3 from the curve runs' evaluated snapshots."""

    points: list[dict[str, Any]]          # every (recipe, dataset, step) with its domain-analysis and metrics files
    logs: dict[str, dict[str, str]]       # {dataset: {recipe: train_log.jsonl}} (Local Domain-Acc)
    dataset: str                          # Figure 3's and Table 3's target (modir.table3.dataset)
    figure5: dict[str, Any]               # Figure 5's recipe and datasets
    table3: dict[str, Any]                # config modir.table3 (its settings and steps)
    scale: str                            # the config's scale, printed on the figures and tables


@dataclass(frozen=True)
class ModirFigure4Job(RuleJob):
    """MoDIR Figure 4: t-SNE of source and target passages over training, with and without momentum."""

    models: dict[str, str]                # {panel label: model folder}
    options: dict[str, dict[str, Any]]    # {panel label: encoder settings}
    domains: dict[str, str]               # {dataset: folder} of the source and Figure 4's target
    points: int                           # modir.figure4.points: passages per domain
    seed: int
    device: str                           # dense.device
    batch_size: int                       # dense.batch_size


@dataclass(frozen=True)
class ModirTable4Job(RuleJob):
    """MoDIR Table 4: nearest source training queries of the most helped and most hurt target queries."""

    models: list[str]                     # the models before and after MoDIR on Table 4's target
    options: list[dict[str, Any]]         # their encoder settings
    systems: list[str]                    # the two systems (modir.table4.before / after)
    source: str                           # the source dataset's folder
    target: str                           # Table 4's target's folder
    split: str                            # the target's evaluation split
    neighbours: int                       # modir.table4.neighbours
    max_source_queries: int | None        # modir.table4.max_source_queries (None: every training query)
    seed: int
    device: str                           # dense.device
    batch_size: int                       # dense.batch_size
    scale: str


@builds(ModirTriplesJob, "modir_triples")
def modir_triples_job(plan: Any, wc: Any) -> ModirTriplesJob:
    return ModirTriplesJob(dataset=plan.datasets.data_folder(wc.dataset), split=plan.modir.section["triples_split"])


@builds(ModirDomainJob, "modir_domain")
def modir_domain_job(plan: Any, wc: Any) -> ModirDomainJob:
    systems = plan.systems
    return ModirDomainJob(
        model=systems.dense_model(wc.system, wc.dataset), options=systems.encoder_options(wc.system, wc.dataset),
        source=plan.datasets.data_folder(plan.datasets.source), target=plan.datasets.data_folder(wc.dataset),
        target_split=plan.datasets.eval_split(wc.dataset), analysis=plan.modir.section["analysis"],
        seed=plan.config["seed"], dense=plan.dense_settings,
    )


@builds(ModirCurvesJob, "modir_curves")
def modir_curves_job(plan: Any, wc: Any) -> ModirCurvesJob:
    modir = plan.modir
    return ModirCurvesJob(points=plan.figures.modir_points(), logs=modir.modir_logs(),
                          dataset=modir.modir_dataset("table3"), figure5=modir.modir_figure5(),
                          table3=modir.section["table3"], scale=plan.config["scale"])


@builds(ModirFigure4Job, "modir_figure4")
def modir_figure4_job(plan: Any, wc: Any) -> ModirFigure4Job:
    source, target, dense = plan.datasets.source, plan.modir.modir_dataset("figure4"), plan.config["dense"]
    return ModirFigure4Job(
        models=plan.figures.modir_tsne_models(), options=plan.figures.modir_tsne_models(options=True),
        domains={source: plan.datasets.data_folder(source), target: plan.datasets.data_folder(target)},
        points=plan.modir.section["figure4"]["points"], seed=plan.config["seed"], device=dense["device"],
        batch_size=dense["batch_size"],
    )


@builds(ModirTable4Job, "modir_table4")
def modir_table4_job(plan: Any, wc: Any) -> ModirTable4Job:
    modir, systems, dense = plan.modir, plan.systems, plan.config["dense"]
    target, case = modir.modir_dataset("table4"), modir.modir_case()
    table4 = modir.section["table4"]
    return ModirTable4Job(
        models=[systems.dense_model(s, target) for s in case],
        options=[systems.encoder_options(s, target) for s in case], systems=case,
        source=plan.datasets.data_folder(plan.datasets.source), target=plan.datasets.data_folder(target),
        split=plan.datasets.eval_split(target), neighbours=table4["neighbours"],
        max_source_queries=table4["max_source_queries"], seed=plan.config["seed"], device=dense["device"],
        batch_size=dense["batch_size"], scale=plan.config["scale"],
    )
