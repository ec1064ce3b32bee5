"""The jobs of rules/tables.smk: table 1 and its model cards, every paper table and figure drawn from a table,
and the figures that read evaluated systems (DDR Figure 4, BERM Figures 4 and 5).

The rules `tables`, `all_results`, `berm` and `ddr` have no params (they gather files), so no job here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds
from zsdr.plan.params import Labels, Settings


@dataclass(frozen=True)
class Table1Job(RuleJob):
    """results/table1.{csv,md,png}: every table-1 system on the source dev set and every target."""

    systems: Labels                 # table1.systems -> description (the legend's text, not compared)
    baselines: list[str]            # table1.baselines: the systems each row is tested against
    papers: dict[str, str]          # system -> the paper file defining it ("baselines" for none)
    datasets: list[str]             # the evaluated datasets, source first
    source: str                     # the source dataset
    metric: str                     # table1.metric
    significance: dict[str, Any]    # evaluation.significance: test, trials, holm
    scale: str                      # the config's scale (the title's)


@dataclass(frozen=True)
class ModelCardsJob(RuleJob):
    """A model card in every trained model folder a table-1 system uses, and their index."""

    cards: Settings                 # trained folder -> its card's entry (zsdr.plan.tables.model_cards)
    metric: str                     # table1.metric
    scale: str
    source: str                     # the source dataset


@dataclass(frozen=True)
class PaperTableJob(RuleJob):
    """One table of one paper, regenerated at this scale beside its published numbers."""

    paper: str
    table: int
    scale: str
    datasets_override: list[str] | dict[str, str] | None  # what stands for the dataset rows at mini scale
    available_datasets: list[str] | None                  # the datasets this config fetches (None at mini)
    produced_systems: list[str]                            # every system this config defines, sorted
    splits: dict[str, str]                                 # datasets.eval_splits
    significance: dict[str, Any]                           # evaluation.significance
    rem_files: dict[str, str]                              # DDR Table 5: system key -> its REM's rem.json


@dataclass(frozen=True)
class PaperFigureJob(RuleJob):
    """A paper figure whose numbers are one of its tables', drawn from that table's CSV."""

    paper: str
    figure: int
    scale: str


@dataclass(frozen=True)
class DdrFigure4Job(RuleJob):
    """DDR Figure 4: R@1000 on each target vs the target DAM's training time."""

    points: list[dict[str, Any]]    # per target and DAM snapshot: its system and metrics file
    dams: dict[str, str]            # target -> its DAM's folder (snapshots.json: each snapshot's time)
    baseline: dict[str, str]        # target -> the baseline system's metrics file
    labels: dict[str, str]          # system, baseline: the curve's and the baseline's system names
    metric: str                     # ddr.figure4.metric
    devices: dict[str, int]         # target -> devices its DAM trained on (training time x devices)
    scale: str


@dataclass(frozen=True)
class BermFigure4Job(RuleJob):
    """BERM Figure 4: average target score over the (alpha, beta) grid of loss weights."""

    points: list[dict[str, Any]]    # per grid point: alpha, beta, its system and metrics files
    metric: str                     # table1.metric
    scale: str


@dataclass(frozen=True)
class BermFigure5Job(RuleJob):
    """BERM Figure 5: t-SNE of source and target passages under each of berm.analysis.tsne_models."""

    models: dict[str, str]              # system -> its model folder
    options: dict[str, dict[str, Any]]  # system -> its encoder settings
    domains: dict[str, str]             # dataset -> its folder
    points: int                         # berm.analysis.tsne_points: passages per domain
    seed: int
    device: str                         # dense.device
    batch_size: int                     # dense.batch_size


def _scale(plan: Any) -> str:
    return plan.config["scale"]


@builds(Table1Job, "table1")
def table1_job(plan: Any, wc: Any) -> Table1Job:
    from zsdr.workflow import system_papers

    tables, datasets = plan.tables, plan.datasets
    return Table1Job(systems=tables.table1_labels(), baselines=tables.table1_baselines,
                     papers=system_papers(plan.code_plan.root, tables.table1_systems), datasets=datasets.evaluated,
                     source=datasets.source, metric=plan.config["table1"]["metric"],
                     significance=plan.config["evaluation"]["significance"], scale=_scale(plan))


@builds(ModelCardsJob, "model_cards")
def model_cards_job(plan: Any, wc: Any) -> ModelCardsJob:
    return ModelCardsJob(cards=Settings(plan.tables.model_cards), metric=plan.config["table1"]["metric"],
                         scale=_scale(plan), source=plan.datasets.source)


@builds(PaperTableJob, "paper_table")
def paper_table_job(plan: Any, wc: Any) -> PaperTableJob:
    tables, key = plan.tables, (wc.paper, int(wc.n))
    return PaperTableJob(
        paper=wc.paper, table=int(wc.n), scale=_scale(plan), datasets_override=tables.override(key),
        available_datasets=tables.available_datasets, produced_systems=sorted(plan.systems.by_name),
        splits=plan.datasets.eval_splits, significance=plan.config["evaluation"]["significance"],
        rem_files={k: f"{m}/rem/rem.json" for k, m in tables.rem_models(key).items()},
    )


@builds(PaperFigureJob, "paper_figure")
def paper_figure_job(plan: Any, wc: Any) -> PaperFigureJob:
    return PaperFigureJob(paper=wc.paper, figure=int(wc.n), scale=_scale(plan))


def ddr_dam_folder(plan: Any, dataset: str) -> str:
    """DDR Figure 4: the folder of the DAM of target ``dataset`` (its config.json is the figure's input)."""
    return f"{plan.paths.models}/dams/{plan.ddr.figure4_dam(dataset)}"


@builds(DdrFigure4Job, "ddr_figure4")
def ddr_figure4_job(plan: Any, wc: Any) -> DdrFigure4Job:
    ddr, recipes = plan.ddr, plan.recipes
    figure4, targets = ddr.figure4, ddr.figure4_datasets
    gpus = max(recipes.training["gpus"], 1)
    return DdrFigure4Job(
        points=plan.figures.figure4_points(),
        dams={d: ddr_dam_folder(plan, d) for d in targets},
        baseline={d: f"{plan.paths.metrics}/{d}/{figure4['baseline']}.json" for d in targets},
        labels={"system": figure4["system"], "baseline": figure4["baseline"]},
        metric=figure4["metric"],
        devices={d: gpus * recipes.launch_settings(ddr.dam_settings(d))["processes"] for d in targets},
        scale=_scale(plan),
    )


@builds(BermFigure4Job, "berm_figure4")
def berm_figure4_job(plan: Any, wc: Any) -> BermFigure4Job:
    return BermFigure4Job(points=plan.figures.berm_grid_points(), metric=plan.config["table1"]["metric"],
                          scale=_scale(plan))


@builds(BermFigure5Job, "berm_figure5")
def berm_figure5_job(plan: Any, wc: Any) -> BermFigure5Job:
    systems, analysis, dense = plan.systems, plan.berm.section["analysis"], plan.config["dense"]
    return BermFigure5Job(
        models={s: systems.by_name[s]["model"] for s in analysis["tsne_models"]},
        options={s: systems.encoder_options(s) for s in analysis["tsne_models"]},
        domains=plan.berm.tsne_domains(), points=analysis["tsne_points"], seed=plan.config["seed"],
        device=dense["device"], batch_size=dense["batch_size"],
    )
