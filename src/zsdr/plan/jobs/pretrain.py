"""The jobs of rules/pretrain.smk: DDR's domain adaption modules (masked language modelling on one corpus,
zsdr.pretrain.mlm), named by their chain <backbone>--<corpus>[--<corpus>]."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds
from zsdr.plan.params import Settings
from zsdr.plan.summary import Note


@dataclass(frozen=True)
class DamTrainingJob(RuleJob):
    """One DAM's training (its `dam` wildcard is the chain): what the trainer reads, how it is launched, and the
    lines its dry run shows."""

    shape: Note        # what the job asks the scheduler for (GPUs, nodes, CPUs, memory, runtime): not compared
    spec: Settings     # the trainer's input (description, provenance, log and save intervals not compared)
    summary: Note      # what it trains, in words: not compared
    launch: Settings   # processes, nodes, launcher and loop settings (batch workers not compared)


@builds(DamTrainingJob, "train_dam")
def train_dam_job(plan: Any, wc: Any) -> DamTrainingJob:
    job = plan.dam_job(wc.dam)
    return DamTrainingJob(shape=plan.training_shape(job), spec=job.spec, summary=job.summary, launch=job.launch)
