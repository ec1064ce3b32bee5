"""A training rule's job (zsdr.plan.jobs.finetune.TrainerJob): its message's shape is what the planned job asks the
scheduler for, computed by the plan from the training's bundle (zsdr.plan.core.Plan.training_shape), and equal to
the shape of the resources and threads Snakemake planned for it, for every training of the golden plans."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest

from zsdr.plan.core import load_plan
from zsdr.plan.resources import Resources

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {"mini": (), "small": (ROOT / "configs" / "small.yaml",), "paper": (ROOT / "configs" / "paper.yaml",)}

# every rule that runs the trainer: the plan's bundle of its job, by its wildcards
BUNDLES = {
    "train": lambda plan, wc: plan.train_job(wc["run"]),
    "train_cross_encoder": lambda plan, wc: plan.cross_encoder_job(wc["name"]),
    "train_reader": lambda plan, wc: plan.reader_job(wc["name"]),
    "train_dam": lambda plan, wc: plan.dam_job(wc["dam"]),
    "pretrain_coco": lambda plan, wc: plan.coco_job(wc["name"]),
    "train_generator": lambda plan, wc: plan.generator_job(wc["name"]),
}


@cache
def plan(scale: str):
    return load_plan(ROOT, *CONFIGS[scale])


def _trainings(scale: str) -> list[dict]:
    with gzip.open(ROOT / "tests" / "golden" / f"plan-{scale}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [job for job in map(json.loads, f) if job["rule"] in BUNDLES]


@pytest.mark.parametrize("scale", list(CONFIGS))
def test_a_trainings_shape_is_what_its_planned_job_asks_for(scale):
    trainings = _trainings(scale)
    assert "train" in {job["rule"] for job in trainings}
    p = plan(scale)
    for golden in trainings:
        bundle = BUNDLES[golden["rule"]](p, golden["wildcards"])
        planned = Resources.job_shape(golden["resources"], golden["threads"])
        assert p.training_shape(bundle) == planned, (golden["rule"], golden["wildcards"])
    for golden in trainings:
        if golden["rule"] in ("train", "train_cross_encoder", "train_reader"):
            job = p.job(golden["rule"], golden["wildcards"])
            assert str(job.shape) == Resources.job_shape(golden["resources"], golden["threads"])
            assert job.spec is BUNDLES[golden["rule"]](p, golden["wildcards"]).spec


def test_the_paper_shape_names_the_nodes_and_cpus_per_gpu():
    """An 8-GPU training on the paper config's nodes of 4 GPUs: 2 nodes, 8 CPUs per GPU."""
    p = plan("paper")
    run = p.recipes.recipe_run("cocodr-base")
    assert str(p.job("train", {"run": run}).shape) == (
        f"8 GPU(s), 2 node(s), 64 CPUs (8 per GPU), {p.train_job(run).memory} MB, {p.training_runtime} min")
