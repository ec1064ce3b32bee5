"""The jobs of rules/labels.smk: BERM's essential-unit labels of a dataset's split (zsdr.training.unit_labels),
its unit-BM25 statistics, its shards and their join."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds


@dataclass(frozen=True)
class UnitStatsJob(RuleJob):
    """The collection statistics of the unit BM25 over one split's pairs (config `berm.labels.collection`)."""

    dataset: str                # the dataset's folder
    labels: dict[str, Any]      # config `berm.labels`: the unit BM25's collection, variant, k1 and b
    max_pairs: int | None       # the split's pairs labelled at most (a sample of them beyond)
    seed: int                   # config `seed`: which pairs the sample keeps


@dataclass(frozen=True)
class LabelUnitsShardJob(RuleJob):
    """One shard of a split's pairs: its positives' units, their BM25 + delta x reader scores, the essential unit."""

    dataset: str                # the dataset's folder
    labels: dict[str, Any]      # config `berm.labels`: delta, the unit BM25's settings, the reader's batch size
    reader: str | None          # the reader's model folder (None: BM25 alone)
    max_pairs: int | None       # as UnitStatsJob's: the same sample of pairs
    seed: int
    device: str                 # config `dense.device` (in a job that holds a GPU; one without stays on the CPU)
    precision: str              # config `dense.precision`: the reader's


@dataclass(frozen=True)
class LabelUnitsJob(RuleJob):
    """A split's shards joined, with a summary (agreement with the mini generator's truth where it has one)."""

    dataset: str                # the dataset's folder
    info: dict[str, Any]        # the summary's settings: the split and config `berm.labels`


@builds(UnitStatsJob, "unit_stats")
def unit_stats_job(plan: Any, wc: Any) -> UnitStatsJob:
    return UnitStatsJob(dataset=plan.datasets.data_folder(wc.dataset), labels=plan.berm.labels,
                        max_pairs=plan.berm.label_max_pairs(wc.split), seed=plan.config["seed"])


@builds(LabelUnitsShardJob, "label_units_shard")
def label_units_shard_job(plan: Any, wc: Any) -> LabelUnitsShardJob:
    dense = plan.config["dense"]
    return LabelUnitsShardJob(dataset=plan.datasets.data_folder(wc.dataset), labels=plan.berm.labels,
                              reader=plan.berm.berm_reader(), max_pairs=plan.berm.label_max_pairs(wc.split),
                              seed=plan.config["seed"], device=dense["device"], precision=dense["precision"])


@builds(LabelUnitsJob, "label_units")
def label_units_job(plan: Any, wc: Any) -> LabelUnitsJob:
    return LabelUnitsJob(dataset=plan.datasets.data_folder(wc.dataset), info={"split": wc.split, **plan.berm.labels})
