"""The jobs of rules/regressions.smk: the reproduction regressions' evaluations and their report
(zsdr.plan.regressions: which published rows are measured; docs/regressions.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds


@dataclass(frozen=True)
class EvaluateRegressionJob(RuleJob):
    """The metrics of one system's run on one dataset's evaluation split, for the regression rows that name them
    (the `evaluate` rule's job, with the metrics every regression row asks for)."""

    dataset: str                  # the dataset's folder (its qrels)
    split: str                    # its evaluation split
    metrics: list[str]            # config `evaluation.metrics` and every published row's metric
    ignore_identical_ids: bool    # the dataset is one of config `evaluation.ignore_identical_ids`: a hit whose
                                  # document id is its query's id is dropped (BEIR's convention)


@dataclass(frozen=True)
class RegressionsJob(RuleJob):
    """The report: every published value beside the pipeline's, PASS / FAIL / NOT RUN (with its reason)."""

    rows: list[dict[str, Any]]    # the published rows, each with its metrics file (measured) or the reason it is not


@builds(EvaluateRegressionJob, "evaluate_regression")
def evaluate_regression_job(plan: Any, wc: Any) -> EvaluateRegressionJob:
    datasets = plan.datasets
    return EvaluateRegressionJob(dataset=datasets.data_folder(wc.dataset), split=datasets.eval_split(wc.dataset),
                                 metrics=plan.regressions.metrics,
                                 ignore_identical_ids=wc.dataset in plan.config["evaluation"]["ignore_identical_ids"])


@builds(RegressionsJob, "regressions")
def regressions_job(plan: Any, wc: Any) -> RegressionsJob:
    return RegressionsJob(rows=plan.regressions.rows)
