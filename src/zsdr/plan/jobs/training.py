"""The job of every rule that runs the one trainer (workflow_scripts/train.py): recipes, cross-encoders and readers
(rules/finetune.smk), DDR's domain adaption modules (rules/pretrain.smk), COCO pretraining (rules/cocodr.smk) and
RMSC's query generator (rules/rmsc.smk), each made of the plan's bundle of its training (:data:`BUNDLES`)."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from zsdr.plan.jobs import RuleJob, builds
from zsdr.plan.params import Settings
from zsdr.plan.summary import Note


@dataclass(frozen=True)
class TrainerJob(RuleJob):
    """One run of the trainer (zsdr.training): what it trains and how it starts."""

    shape: Note         # what the job asks the scheduler for (GPUs, nodes, CPUs, memory, runtime): its message
    spec: Settings      # the trainer's input (description, provenance, log and save intervals not compared)
    summary: Note       # the training in one line: its message
    launch: Settings    # processes, nodes, launcher and loop (its batch workers not compared)

    @classmethod
    def of(cls, plan: Any, training: Any) -> TrainerJob:
        """The job of the plan's bundle ``training`` (a :class:`zsdr.plan.core.TrainingJob`)."""
        return cls(shape=Note(plan.training_shape(training)), spec=training.spec, summary=training.summary,
                   launch=training.launch)


BUNDLES: dict[str, Callable[[Any, Any], Any]] = {
    "train": lambda plan, wc: plan.train_job(wc.run),                       # rules/finetune.smk
    "train_cross_encoder": lambda plan, wc: plan.cross_encoder_job(wc.name),
    "train_reader": lambda plan, wc: plan.reader_job(wc.name),
    "train_dam": lambda plan, wc: plan.dam_job(wc.dam),                     # rules/pretrain.smk
    "pretrain_coco": lambda plan, wc: plan.coco_job(wc.name),               # rules/cocodr.smk
    "train_generator": lambda plan, wc: plan.generator_job(wc.name),        # rules/rmsc.smk
}
"""rule -> the plan's bundle of one of its trainings (zsdr.plan.core.TrainingJob), from the job's wildcards."""


def _trainer_job(rule: str) -> Callable[[Any, Any], TrainerJob]:
    bundle = BUNDLES[rule]
    return lambda plan, wc: TrainerJob.of(plan, bundle(plan, wc))


for _rule in BUNDLES:
    builds(TrainerJob, _rule)(_trainer_job(_rule))
