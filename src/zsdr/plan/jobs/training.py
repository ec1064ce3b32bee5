"""The job of every rule that runs the one trainer (workflow_scripts/train.py): recipes, cross-encoders and readers
(rules/finetune.smk), DDR's domain adaption modules (rules/pretrain.smk), COCO pretraining (rules/cocodr.smk) and
RMSC's query generator (rules/rmsc.smk)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob
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
