"""The jobs of rules/cocodr.smk: COCO's span files and pretraining, iDRO's query clusters, COCO-DR's analyses,
figures and Table 4 (docs/methods/cocodr.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds
from zsdr.plan.params import Settings

IDRO_SIDES = ("with_idro", "without_idro")
"""The two systems of Figure 5c and Table 4 (config cocodr.analysis): the fine-tuning with iDRO and without."""


@dataclass(frozen=True)
class SpansJob(RuleJob):
    """One corpus's COCO span file: written in one pass, merged from its shards' span files, or (a
    `coco_spans_shard` job, its `shard` / `shards` wildcards) one shard's contiguous rows."""

    dataset: str                  # the corpus's dataset folder
    tokenizer: str                # the folder (or Hugging Face id) of cocodr.spans.tokenizer, whose word pieces count
    parts: list[str]              # the shards' span files merged into this one, in order (none: written in one pass)
    spans: dict[str, Any]         # config cocodr.spans
    seed: int


@dataclass(frozen=True)
class ClusterQueriesJob(RuleJob):
    """iDRO's groups for one ANCE episode: the model that mines the episode embeds the training queries,
    K-means groups them (zsdr.training.query_clusters)."""

    model: str                    # the model that mines the episode (the previous episode's)
    options: dict[str, Any]       # its encoder settings at the mining's lengths
    dataset: str                  # the training dataset's folder
    clusters: int                 # K: the recipe's dro.clusters
    clustering: dict[str, Any]    # config cocodr.clustering (K-means niter, nredo)
    seed: int                     # the recipe's train seed + the episode
    dense: Settings               # config dense (device, precision, batch size)


@dataclass(frozen=True)
class GeometryJob(RuleJob):
    """COCO loss, alignment and uniformity of one model's [CLS] on one corpus's spans (Figure 5a/b)."""

    model: str                    # the pretrained model or backbone measured
    docs: int                     # cocodr.analysis.docs: documents sampled
    batch_size: int               # cocodr.analysis.batch_size
    seed: int
    device: str                   # dense.device


@dataclass(frozen=True)
class Figure3Job(RuleJob):
    """COCO-DR Figure 3: average target metric against K and against iDRO's update step."""

    points: list[dict[str, Any]]          # one per sweep value: its system and metrics files
    reference: dict[str, Any] | None      # cocodr.sweeps.reference's line (None: no reference)
    metric: str                           # table1.metric
    scale: str


@dataclass(frozen=True)
class Figure4Job(RuleJob):
    """COCO-DR Figure 4: the metric per training episode of each variant."""

    points: list[dict[str, Any]]          # variant, episode, dataset, system and metrics file
    metric: str
    scale: str


@dataclass(frozen=True)
class ClustersJob(RuleJob):
    """Figure 5c / Table 4: each target's nearest source query cluster and iDRO's effect on it
    (zsdr.tables.cocodr_figures.cocodr_cluster_analysis)."""

    source: str                           # the source dataset's folder
    targets: dict[str, str]               # target -> its dataset folder
    splits: dict[str, str]                # target -> its evaluation split
    with_idro: dict[str, Any]             # system, model, encoder options and logit scale of the iDRO system
    without_idro: dict[str, Any]          # the same of the system without iDRO
    metrics: dict[str, dict[str, str]]    # target -> with_idro / without_idro -> metrics file
    table4_dataset: str                   # cocodr.table4.dataset (null: the first target)
    queries: int                          # cocodr.table4.queries: Table 4's rows
    max_source_queries: int | None        # cocodr.analysis.max_source_queries (null: every clustered query)
    seed: int
    dense: Settings
    scale: str


@dataclass(frozen=True)
class Figure5Job(RuleJob):
    """COCO-DR Figure 5's three panels: (a) COCO loss reduction vs zero-shot gain, (b) alignment vs
    uniformity, (c) iDRO's training-loss gain on the nearest source cluster vs its target gain."""

    loss_points: list[dict[str, str]]
    geometry_points: list[dict[str, str]]
    cluster_points: list[dict[str, str]]
    scale: str


def spans_tokenizer(plan: Any) -> str:
    """What loads cocodr.spans.tokenizer: a model folder the DAG builds or fetches, else its Hugging Face id."""
    ref = plan.refs.model_ref(plan.cocodr.section["spans"]["tokenizer"])
    files = plan.refs.model_files(ref)
    return os.path.dirname(files[0]) if files else ref


def metrics_file(plan: Any, dataset: str, key: str) -> str:
    """The metrics file of the cocodr.analysis system ``key`` (with_idro, without_coco, ...) on ``dataset``."""
    return f"{plan.paths.metrics}/{dataset}/{plan.figures.cocodr_analysis_system(key)}.json"


@builds(SpansJob, "coco_spans", "coco_spans_shard")
def spans_job(plan: Any, wc: Any) -> SpansJob:
    shard = hasattr(wc, "shard")  # one shard's rows: nothing to merge
    return SpansJob(dataset=plan.datasets.data_folder(wc.corpus), tokenizer=spans_tokenizer(plan),
                    parts=[] if shard else plan.cocodr.span_parts(wc.corpus), spans=plan.cocodr.section["spans"],
                    seed=plan.config["seed"])


@builds(ClusterQueriesJob, "cluster_queries")
def cluster_queries_job(plan: Any, wc: Any) -> ClusterQueriesJob:
    job = plan.cluster_job(wc.run, wc.source)
    return ClusterQueriesJob(model=job.model, options=job.options,
                             dataset=plan.datasets.data_folder(wc.source), clusters=job.clusters,
                             clustering=plan.cocodr.section["clustering"], seed=job.seed, dense=plan.dense_settings)


@builds(GeometryJob, "cocodr_geometry")
def geometry_job(plan: Any, wc: Any) -> GeometryJob:
    analysis = plan.cocodr.analysis
    return GeometryJob(model=plan.figures.cocodr_analysis_model(wc.model), docs=analysis["docs"],
                       batch_size=analysis["batch_size"], seed=plan.config["seed"],
                       device=plan.config["dense"]["device"])


@builds(Figure3Job, "cocodr_figure3")
def figure3_job(plan: Any, wc: Any) -> Figure3Job:
    points, reference = plan.figures.cocodr_figure3_points()
    return Figure3Job(points=points, reference=reference, metric=plan.config["table1"]["metric"],
                      scale=plan.config["scale"])


@builds(Figure4Job, "cocodr_figure4")
def figure4_job(plan: Any, wc: Any) -> Figure4Job:
    return Figure4Job(points=plan.figures.cocodr_figure4_points(), metric=plan.config["table1"]["metric"],
                      scale=plan.config["scale"])


@builds(ClustersJob, "cocodr_clusters")
def clusters_job(plan: Any, wc: Any) -> ClustersJob:
    datasets, systems, section = plan.datasets, plan.systems, plan.cocodr.section

    def side(key: str) -> dict[str, Any]:
        system = plan.figures.cocodr_analysis_system(key)
        return {"system": system, "model": systems.dense_model(system, datasets.source),
                "options": systems.encoder_options(system, datasets.source), "scale": systems.system_scale(system)}

    table4 = datasets.check_dataset(section["table4"]["dataset"] or datasets.targets[0])
    if table4 not in datasets.targets:
        raise ValueError(f"config key cocodr.table4.dataset: {table4!r} is not one of datasets.targets "
                         f"({', '.join(datasets.targets)}): Table 4 lists target queries")
    return ClustersJob(
        source=plan.datasets.data_folder(datasets.source),
        targets={d: plan.datasets.data_folder(d) for d in datasets.targets},
        splits={d: datasets.eval_split(d) for d in datasets.targets},
        with_idro=side("with_idro"), without_idro=side("without_idro"),
        metrics={d: {k: metrics_file(plan, d, k) for k in IDRO_SIDES} for d in datasets.targets},
        table4_dataset=table4,
        queries=section["table4"]["queries"], max_source_queries=plan.cocodr.analysis["max_source_queries"],
        seed=plan.config["seed"], dense=plan.dense_settings, scale=plan.config["scale"],
    )


@builds(Figure5Job, "cocodr_figure5")
def figure5_job(plan: Any, wc: Any) -> Figure5Job:
    cocodr, targets = plan.cocodr, plan.datasets.targets
    return Figure5Job(
        loss_points=[{"dataset": d, "before": cocodr.geometry_file(cocodr.analysis["before"], d),
                      "after": cocodr.geometry_file(cocodr.analysis["after"], d),
                      "with": metrics_file(plan, d, "with_coco"), "without": metrics_file(plan, d, "without_coco")}
                     for d in targets],
        geometry_points=[{"label": m, "dataset": d, "stats": cocodr.geometry_file(m, d)}
                         for m in cocodr.analysis["models"] for d in targets],
        cluster_points=[{"dataset": d, "analysis": cocodr.cluster_analysis_file(d),
                         "with": metrics_file(plan, d, "with_idro"), "without": metrics_file(plan, d, "without_idro")}
                        for d in targets],
        scale=plan.config["scale"],
    )
