"""The jobs of rules/finetune.smk: training data (BM25 and ANCE negatives, teacher scores) and the trainings of
recipes, cross-encoders and readers.

A training rule's job is a :class:`zsdr.plan.jobs.training.TrainerJob`, made of the plan's bundle of that training
(:class:`zsdr.plan.core.TrainingJob`, which also gives the rule its inputs, threads and resources): every rule that
runs the one trainer (workflow_scripts/train.py) reads one, whatever it trains. ANCE's mining job is made of the
plan's :class:`zsdr.plan.core.MineJob` of the run (which also gives the rule its model files and shards).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds
from zsdr.plan.params import Settings


@dataclass(frozen=True)
class Bm25NegativesJob(RuleJob):
    """BM25 negatives of one training dataset's queries, mined with the sparse stage."""

    dataset: str                  # the dataset's folder
    depth: int                    # training.bm25_negatives: the hits kept per query
    bm25: dict[str, float]        # config bm25's k1 and b (its threads: the job's, not compared)
    language: str                 # the analyzer's language


@dataclass(frozen=True)
class MineNegativesJob(RuleJob):
    """ANCE's refresh: the previous checkpoint at the episode's lengths retrieves top-k for the training queries,
    and negatives are sampled from them."""

    model: str                    # the previous system's model
    options: dict[str, Any]       # its encoder settings at the episode's query / document lengths
    dataset: str                  # the training dataset's folder
    mine: dict[str, Any]          # training.mine under the recipe's `mine`: depth, sample, batch size
    seed: int                     # the recipe's seed plus the episode
    max_examples: int | None      # the queries mined for (the recipe's max_examples; None: all)
    dense: Settings               # config `dense`: device and precision


@dataclass(frozen=True)
class TeacherScoresJob(RuleJob):
    """A cross-encoder's scores of every (query, candidate) pair of a dataset's training negatives."""

    model: str                    # the cross-encoder's folder
    dataset: str                  # the training dataset's folder
    max_candidates: int | None    # negatives scored per query (None: all)
    random_candidates: int        # random corpus documents also scored per query
    seed: int                     # training.seed: which random documents
    max_examples: int | None      # the queries scored: what the distilling recipes read (None: all)
    dense: Settings               # config `dense`: batch size, device, precision


@builds(Bm25NegativesJob, "bm25_negatives")
def bm25_negatives_job(plan: Any, wc: Any) -> Bm25NegativesJob:
    bm25 = plan.config["bm25"]
    return Bm25NegativesJob(dataset=plan.datasets.data_folder(wc.source), depth=plan.recipes.training["bm25_negatives"],
                            bm25={k: bm25[k] for k in ("k1", "b")}, language=plan.datasets.language(wc.source))


@builds(MineNegativesJob, "mine_negatives")
def mine_negatives_job(plan: Any, wc: Any) -> MineNegativesJob:
    mine = plan.mine_job(wc.run, wc.source)
    return MineNegativesJob(model=mine.model, options=mine.options, dataset=plan.datasets.data_folder(wc.source),
                            mine=mine.mine, seed=mine.seed, max_examples=mine.max_examples,
                            dense=plan.dense_settings)


@builds(TeacherScoresJob, "teacher_scores")
def teacher_scores_job(plan: Any, wc: Any) -> TeacherScoresJob:
    teacher = plan.recipes.cross_encoders[wc.name]
    return TeacherScoresJob(model=f"{plan.paths.models}/cross-encoders/{wc.name}",
                            dataset=plan.datasets.data_folder(wc.source), max_candidates=teacher["max_candidates"],
                            random_candidates=teacher["random_candidates"], seed=plan.recipes.training["seed"],
                            max_examples=plan.trainings.teacher_max_examples(wc.name, wc.source),
                            dense=plan.dense_settings)
