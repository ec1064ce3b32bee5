"""The jobs of rules/evaluate.smk: the metrics of runs on a dataset's evaluation split, and the datasets' statistics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds


@dataclass(frozen=True)
class EvaluateJob(RuleJob):
    """Metrics of runs on one dataset's evaluation split (every run of the job's inputs, one metrics file each)."""

    dataset: str                  # the dataset's folder (its qrels)
    split: str                    # its evaluation split
    metrics: list[str]            # config evaluation.metrics
    ignore_identical_ids: bool    # drop a hit whose document id is its query's (evaluation.ignore_identical_ids)


@dataclass(frozen=True)
class DatasetStatsJob(RuleJob):
    """Corpus, query and qrels statistics of every split of one dataset."""

    dataset: str
    doc_fields: str               # statistics.doc_fields: the document fields counted


@dataclass(frozen=True)
class ShiftStatsJob(RuleJob):
    """Query-type and unigram weighted Jaccard between the source dataset and one target."""

    source: str                   # the source dataset's folder
    source_split: str             # statistics.source_split
    target: str                   # the target dataset's folder
    target_split: str             # the target's evaluation split
    max_docs: int | None          # statistics.max_docs: documents read per corpus (None: all)


@builds(EvaluateJob, "evaluate", "evaluate_system", "evaluate_table1")
def evaluate_job(plan: Any, wc: Any) -> EvaluateJob:
    evaluation = plan.config["evaluation"]
    return EvaluateJob(dataset=plan.datasets.data_folder(wc.dataset), split=plan.datasets.eval_split(wc.dataset),
                       metrics=evaluation["metrics"],
                       ignore_identical_ids=wc.dataset in evaluation["ignore_identical_ids"])


@builds(DatasetStatsJob, "dataset_stats")
def dataset_stats_job(plan: Any, wc: Any) -> DatasetStatsJob:
    return DatasetStatsJob(dataset=plan.datasets.data_folder(wc.dataset),
                           doc_fields=plan.config["statistics"]["doc_fields"])


@builds(ShiftStatsJob, "shift_stats")
def shift_stats_job(plan: Any, wc: Any) -> ShiftStatsJob:
    statistics, datasets = plan.config["statistics"], plan.datasets
    return ShiftStatsJob(source=datasets.data_folder(datasets.source), source_split=statistics["source_split"],
                         target=datasets.data_folder(wc.dataset), target_split=datasets.eval_split(wc.dataset),
                         max_docs=statistics["max_docs"])
