"""Params that mean results (zsdr.plan.params): a change that cannot alter a number — a description, a provenance
note, a log or checkpoint interval, the batch workers, keeping embeddings — changes nothing Snakemake compares, so
it reruns no job; a real setting changes exactly the jobs that use it."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from zsdr.plan.params import COSMETIC, Labels, Settings, meaningful

ROOT = Path(__file__).resolve().parents[1]


def test_settings_compare_without_cosmetic_keys():
    a = Settings({"lr": 1e-5, "info": {"description": "one", "recipe": "dpr"}, "train": {"log_every": 10}})
    b = Settings({"lr": 1e-5, "info": {"description": "two", "recipe": "dpr"}, "train": {"log_every": 5}})
    assert repr(a) == repr(b) == "{'lr': 1e-05, 'info': {'recipe': 'dpr'}, 'train': {}}"
    assert repr(Settings({**a, "lr": 2e-5})) != repr(a)
    assert a["info"]["description"] == "one"                     # the job still reads every key
    back = pickle.loads(pickle.dumps(a))
    assert type(back) is Settings and back == a
    assert meaningful([Settings({"provenance": "[X]", "k": 1})]) == [{"k": 1}]
    legend = Labels({"dpr": "DPR, in-batch", "ance": "ANCE"})
    assert repr(legend) == repr(Labels({"dpr": "reworded", "ance": "ANCE"})) != repr(Labels({"dpr": "x"}))
    assert type(pickle.loads(pickle.dumps(legend))) is Labels


def compared(tmp_path: Path, overlay: dict | None, scale: str = "mini", target: str | None = None) -> dict[str, list[str]]:
    """``{job: the params Snakemake compares}`` of the plan of ``scale`` (results/all, or ``target``) with ``overlay``
    as a config file."""
    args = [sys.executable, str(ROOT / "tests" / "plan_golden.py"), scale, "--compared"]
    args += ["--target", target] if target else []
    if overlay is not None:
        path = tmp_path / f"overlay-{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(overlay))
        args += ["--configfile", str(path)]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = {}
    for line in proc.stdout.splitlines():
        job = json.loads(line)
        jobs[job["rule"] + " " + json.dumps(job["wildcards"], sort_keys=True)] = job["params"]
    return jobs


COSMETIC_CHANGES = {
    "recipes": {"dpr-berm": {"description": "reworded", "provenance": "[X] reworded"}},
    "training": {"log_every": 5, "save_every": 3, "loader_workers": 2},
    "systems": {"bm25-flat": {"description": "reworded"}},
    "dense": {"keep_embeddings": False},
    "cross_encoders": {"tiny-cross-encoder": {"description": "reworded"}},
    "cocodr": {"pretrained": {"coco": {"description": "reworded"}}},
}


def test_cosmetic_changes_rerun_nothing_and_a_real_one_its_jobs(tmp_path):
    assert {"description", "provenance", "log_every", "save_every"} <= COSMETIC
    base = compared(tmp_path, None)
    cosmetic = compared(tmp_path, COSMETIC_CHANGES)
    assert set(cosmetic) == set(base)
    changed = sorted(job for job in base if base[job] != cosmetic[job])
    assert not changed, f"a cosmetic change would rerun {len(changed)} jobs: {changed[:8]}"
    real = compared(tmp_path, {"recipes": {"dpr-berm": {"train": {"lr": 3e-3}}}})
    changed = sorted(job for job in base if base[job] != real[job])
    # the run itself and the recipes that inherit its lr (`extends`: BERM's ablations and loss-weight grid); the
    # jobs downstream of them rerun because their models are newer (Snakemake's mtime trigger)
    assert changed == [f'train {{"run": "{r}"}}' for r in ("dpr-berm", "dpr-berm-a0.1-b0.1", "dpr-berm-a1-b0.1",
                                                          "dpr-berm-a1-b1", "dpr-berm-r1", "dpr-berm-r2")], changed


# Every setting of how inputs are fetched and where they are kept, none of which can change a byte a job writes: the
# mirror and the download's timeout and retries (the checksum decides what is kept), the folders of the downloads
# and the bring-your-own sets (the files themselves are inputs, compared by date), the threads of a BM25 search
# (each query searched alone: the same hits). Threads of trainings and of Lucene indexing, and the job's resources,
# are not params at all (Snakemake does not compare them); the training's threads are not byte-neutral anyway (BLAS
# reductions split by thread).
FETCH_CHANGES = {
    "mirror": "file:///mnt/elsewhere/mirror",
    "download": {"retries": 0, "timeout": 5},
    "paths": {"downloads": "/mnt/elsewhere/downloads", "byo": "/mnt/elsewhere/byo"},
    "bm25": {"threads": 4},
}


def test_fetch_settings_rerun_nothing(tmp_path):
    # the paper plan of DuReader's BM25 negatives: its download, conversion, index and BM25 search
    target = "paper/data/dureader/negatives/bm25.jsonl"
    base = compared(tmp_path, None, "paper", target)
    assert {job.split()[0] for job in base} >= {"download", "convert", "bm25_negatives"}, sorted(base)
    moved = compared(tmp_path, FETCH_CHANGES, "paper", target)
    assert set(moved) == set(base)
    changed = sorted(job for job in base if base[job] != moved[job])
    assert not changed, f"a mirror, a timeout, a folder of inputs or search threads would rerun {changed}"
    assert not any("retries" in p or "mirror" in p or "downloads" in p for job in base for p in base[job])
