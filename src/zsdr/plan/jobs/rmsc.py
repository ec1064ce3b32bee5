"""The jobs of rules/rmsc.smk: RMSC's query generators, the weak-supervision pairs of a corpus, and RMSC's
learning-curve figures (docs/methods/rmsc.md; the plan stage zsdr.plan.rmsc)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds
from zsdr.plan.params import Settings
from zsdr.plan.summary import Note


@dataclass(frozen=True)
class BuildGeneratorJob(RuleJob):
    """A randomly initialised tiny T5 query generator over a tiny backbone's tokenizer."""

    tokenizer: str                # the folder of the backbone whose tokenizer the generator uses
    size: dict[str, Any]          # rmsc.qgen.generators.<name>.build: layers, heads, hidden, intermediate
    seed: int


@dataclass(frozen=True)
class WeakPairsJob(RuleJob):
    """Weak (pseudo-query, pseudo-positive) pairs of one corpus by one method: SCL, ICT or QGen."""

    dataset: str                  # the corpus's dataset folder
    method: str                   # scl | ict | qgen
    weak: dict[str, Any]          # config rmsc.weak (pair count, passes, SCL's spans, ICT's keep probability)
    qgen: Settings                # config rmsc.qgen (the generator and its sampling)
    tokenizer: str                # the model whose word pieces SCL's spans are counted in
    generator: str | None         # QGen's generator (an HF id or a folder); None for SCL and ICT
    seed: int
    device: str                   # dense.device (a job without a GPU runs on the CPU)
    precision: str                # dense.precision of QGen's generation
    summary: Note                 # the dry run's line for the job (not compared)


@dataclass(frozen=True)
class RmscCurvesJob(RuleJob):
    """RMSC Figure 2 or 3: nDCG@10 on the source dev set and the targets at snapshots during training."""

    points: list[dict[str, Any]]  # every (recipe, dataset, step) with its metrics file
    figure: int                   # 2 or 3
    metric: str                   # table1.metric
    scale: str                    # the config's scale, printed on the figure
    summary: Note                 # the dry run's line for the job (not compared)


@builds(BuildGeneratorJob, "build_generator")
def build_generator_job(plan: Any, wc: Any) -> BuildGeneratorJob:
    generator = plan.rmsc.generators[wc.name]
    ref = plan.refs.model_ref(generator["tokenizer"])
    files = plan.refs.model_files(ref)
    # the folder of the files the job waits for (a trained model's, for one of its snapshots); a hub id's own name
    return BuildGeneratorJob(tokenizer=os.path.dirname(files[0]) if files else ref, size=generator["build"],
                             seed=plan.config["seed"])


@builds(WeakPairsJob, "weak_pairs")
def weak_pairs_job(plan: Any, wc: Any) -> WeakPairsJob:
    rmsc, dense = plan.rmsc, plan.config["dense"]
    generator = plan.refs.generator_path(rmsc.qgen["generator"]) if wc.method == "qgen" else None
    return WeakPairsJob(
        dataset=plan.datasets.data_folder(wc.corpus), method=wc.method, weak=rmsc.weak,
        qgen=Settings(rmsc.qgen), tokenizer=plan.refs.model_ref(rmsc.weak_tokenizer), generator=generator,
        seed=plan.config["seed"], device=dense["device"], precision=dense["precision"],
        summary=Note(rmsc.weak_summary(wc)),
    )


@builds(RmscCurvesJob, "rmsc_curves")
def rmsc_curves_job(plan: Any, wc: Any) -> RmscCurvesJob:
    figure = int(wc.n)
    return RmscCurvesJob(points=plan.figures.rmsc_curve_points(figure), figure=figure,
                         metric=plan.config["table1"]["metric"], scale=plan.config["scale"],
                         summary=Note(plan.rmsc.curves_summary(figure)))
