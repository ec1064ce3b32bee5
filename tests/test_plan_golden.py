"""Golden plans: the full `--forceall` job list of `results/all` at every scale (rule, wildcards,
params, resources, inputs, outputs, threads, priority) is what tests/golden/ records.

A change that moves planning code must leave these lists unchanged; a change that means to alter the
plan regenerates them (`python tests/plan_golden.py <scale> --write`) and says why in its commit.
"""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from plan_golden import golden_path  # noqa: E402


def _job_key(line: str) -> str:
    job = json.loads(line)
    return job["rule"] + " " + json.dumps(job["wildcards"], sort_keys=True) + " " + " ".join(job["output"])


@pytest.mark.parametrize("scale", ["mini", "small", "paper"])
def test_plan_matches_the_golden_job_list(scale):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "plan_golden.py"), scale],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = proc.stdout.splitlines()
    with gzip.open(golden_path(scale), "rt", encoding="utf-8") as f:
        want = f.read().splitlines()
    if got == want:
        return
    got_by, want_by = {_job_key(l): l for l in got}, {_job_key(l): l for l in want}
    report = [f"{len(got)} jobs planned, {len(want)} in the golden list"]
    report += [f"new job: {k}" for k in sorted(got_by.keys() - want_by.keys())[:10]]
    report += [f"job gone: {k}" for k in sorted(want_by.keys() - got_by.keys())[:10]]
    for k in sorted(got_by.keys() & want_by.keys()):
        if got_by[k] != want_by[k]:
            g, w = json.loads(got_by[k]), json.loads(want_by[k])
            fields = [f for f in g if g[f] != w[f]]
            report.append(f"changed: {k}: " + "; ".join(f"{f}: {w[f]} -> {g[f]}" for f in fields))
            if len(report) > 25:
                break
    pytest.fail("\n".join(report))


def test_paper_job_shapes_fit_a_slurm_site():
    """Every GPU job of the paper plan (the golden list the test above proves current): CPUs for data loading
    beside each rank (site.cpus_per_gpu >= 2), and the training families' GPU counts of the papers: COCO-DR
    (and RMSC, which trains on it) 8, DDR (its DAMs and REMs) 4, every other training and the retrieval jobs
    1. A job names nodes only where it spans several: the 8-GPU trainings, on the paper config's nodes of 4
    GPUs, as 2 nodes of 4. Fewer, fuller retrieval jobs: a grouped job per table-1 dense system."""
    import re

    with gzip.open(golden_path("paper"), "rt", encoding="utf-8") as f:
        jobs = [json.loads(line) for line in f]
    site = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())["site"]
    gpu_jobs = [j for j in jobs if j["resources"].get("gpu")]
    assert gpu_jobs and all(j["resources"]["cpus_per_gpu"] >= 2 for j in gpu_jobs)
    spanning = [j for j in jobs if "nodes" in j["resources"]]
    assert spanning and all(j["resources"]["nodes"] > 1 for j in spanning)
    assert all(j["resources"]["gpu"] // j["resources"]["nodes"] <= site["gpus_per_node"] for j in gpu_jobs
               if "nodes" in j["resources"])
    assert all(j["resources"]["gpu"] <= site["gpus_per_node"] for j in gpu_jobs if "nodes" not in j["resources"])
    family = {8: re.compile(r"^(coco|condenser|cocondenser|cocodr|rmsc|qgen)"), 4: re.compile(r"^(ddr|bert-base)")}
    trainings = [j for j in jobs if j["rule"] in ("train", "pretrain_coco", "train_dam", "train_cross_encoder")]
    assert len(trainings) > 250
    for job in trainings:
        name = next(iter(job["wildcards"].values()))
        want = next((n for n, pattern in family.items() if pattern.match(name)), 1)
        assert job["resources"]["gpu"] == want, (name, job["resources"])
        assert job["resources"].get("nodes", 1) == -(-want // site["gpus_per_node"])
    counts = {}
    for job in gpu_jobs:
        counts[job["rule"]] = counts.get(job["rule"], 0) + 1
    assert counts["dense_search_group"] >= 10 and sum(counts.values()) < 12_600, counts
    # every job within the paper config's runtime cap (site.max_runtime), trainings at it
    cap = site["max_runtime"]
    assert cap and all(0 < j["resources"]["runtime"] <= cap for j in jobs)
    assert {j["resources"]["runtime"] for j in trainings} == {cap}
