"""The jobs of rules/pretrain.smk: DDR's domain adaption modules (masked language modelling on one corpus,
zsdr.pretrain.mlm), named by their chain <backbone>--<corpus>[--<corpus>]: one trainer run each."""

from __future__ import annotations

from typing import Any

from zsdr.plan.jobs import builds
from zsdr.plan.jobs.training import TrainerJob


@builds(TrainerJob, "train_dam")
def train_dam_job(plan: Any, wc: Any) -> TrainerJob:
    return TrainerJob.of(plan, plan.dam_job(wc.dam))
