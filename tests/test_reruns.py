"""Reruns stay correct after a run is cut between jobs (issue: a retrained model whose evaluation was
interrupted kept the old model's scores in table 1).

Snakemake removes the outputs of the jobs an interruption stops (the new model's runs), then, on the next
run, compares what is left by modification time, except that an input which is newer but has the checksum
Snakemake recorded when the job last ran does not count. A model's declared output is its config.json,
which retraining rewrites byte for byte: without the digest :func:`zsdr.io.stamp_model_contents` adds, the
scores of the old model stood and "Nothing to be done" followed.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.test_workflow import snakemake
from zsdr.io import MODEL_STAMP_KEY, atomic_dir, stamp_model_contents

# A training writes its model folder as every zsdr model writer does (zsdr.io.atomic_dir); a search job
# reads the folder's config.json, as the workflow's dense jobs do; an evaluation reads the run.
WORKFLOW = textwrap.dedent('''
    from zsdr.io import atomic_dir

    rule evaluate:
        input: "runs/run.trec"
        output: "metrics/run.json"
        shell: "cp {input} {output}"

    rule search:
        input: "model/config.json"
        output: "runs/run.trec"
        shell: "cat model/weights.bin > {output}"

    rule train:
        output: "model/config.json"
        params: lr=config["lr"]
        run:
            with atomic_dir("model") as tmp:
                (tmp / "config.json").write_text('{"hidden_size": 2}\\n')
                (tmp / "weights.bin").write_text(f"weights trained at lr {params.lr}\\n")
''')


def smk(workdir: Path, *args: str) -> str:
    proc = snakemake("--cores", "1", "--snakefile", "Snakefile", *args, cwd=workdir, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_a_run_cut_after_a_retraining_reruns_its_evaluation(tmp_path):
    (tmp_path / "Snakefile").write_text(WORKFLOW)
    smk(tmp_path, "metrics/run.json", "--config", "lr=1")
    assert "lr 1" in (tmp_path / "metrics" / "run.json").read_text()
    # A changed learning rate: the training reruns; the run is cut right after it, and Snakemake removes the
    # search's incomplete output (here: the search never started, its old output is gone just the same).
    smk(tmp_path, "model/config.json", "--config", "lr=2")
    (tmp_path / "runs" / "run.trec").unlink()
    plan = smk(tmp_path, "-n", "metrics/run.json", "--config", "lr=2")
    assert "Nothing to be done" not in plan and "search" in plan and "evaluate" in plan, plan
    smk(tmp_path, "metrics/run.json", "--config", "lr=2")
    assert "lr 2" in (tmp_path / "metrics" / "run.json").read_text()


def test_the_model_stamp_follows_the_contents_only(tmp_path):
    def write(folder: Path, weights: str, snapshot: str = "") -> dict:
        with atomic_dir(folder) as tmp:
            (tmp / "config.json").write_text('{"hidden_size": 2}\n')
            (tmp / "model.safetensors").write_text(weights)
            if snapshot:   # a nested model folder (a training's snapshot) keeps its own stamp
                (tmp / "snapshots" / "step-1").mkdir(parents=True)
                (tmp / "snapshots" / "step-1" / "config.json").write_text("{}")
                (tmp / "snapshots" / "step-1" / "model.safetensors").write_text(snapshot)
        return json.loads((folder / "config.json").read_text())

    first = write(tmp_path / "a", "w1")
    assert first["hidden_size"] == 2 and len(first[MODEL_STAMP_KEY]) == 64
    assert write(tmp_path / "b", "w1") == first                     # the same weights: the same file
    assert write(tmp_path / "c", "w2")[MODEL_STAMP_KEY] != first[MODEL_STAMP_KEY]
    assert write(tmp_path / "d", "w1", snapshot="s1") == write(tmp_path / "e", "w1", snapshot="s2")
    assert stamp_model_contents(tmp_path / "a") == first[MODEL_STAMP_KEY]      # stamping again changes nothing
    empty = tmp_path / "no-config"
    empty.mkdir()
    assert stamp_model_contents(empty) is None
