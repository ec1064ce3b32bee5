"""Each scale writes its own output folders (paths.root): a small or paper run in a checkout that holds a mini
run overwrites nothing of it, a target typed for another scale's folders stops with one line, and folders that
hold one scale's outputs are refused to another."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from zsdr.plan.datasets import Paths, build_paths
from zsdr.plan.scales import SCALE_MARK, check_scale_folders, mark_scale_folders, misplaced_targets
from zsdr.workflow import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DEFAULTS = {k: k for k in ("downloads", "byo", "data", "models", "indexes", "embeddings", "runs", "metrics",
                           "stats", "results", "logs")}


def outputs(scale: str) -> set[str]:
    with gzip.open(ROOT / "tests" / "golden" / f"plan-{scale}.jsonl.gz", "rt", encoding="utf-8") as f:
        return {o for line in f for o in json.loads(line)["output"]}


def test_the_scales_plans_write_disjoint_folders():
    """The golden plans (tests/test_plan_golden.py keeps them equal to the live plans): no file the small or paper
    plan writes is one the mini plan writes, and each writes under its own root (the downloads, shared inputs,
    aside)."""
    mini, small, paper = outputs("mini"), outputs("small"), outputs("paper")
    assert not (mini & small) and not (mini & paper) and not (small & paper - {o for o in small if o.startswith("downloads/")})
    for scale, files in (("small", small), ("paper", paper)):
        stray = sorted(o for o in files if not o.startswith((f"{scale}/", "downloads/")))
        assert not stray, f"{scale} writes outside {scale}/: {stray[:5]}"
    assert "results/table1.csv" in mini and "small/results/table1.csv" in small and "paper/results/all" in paper


def test_paths_lie_in_the_root_unless_absolute():
    p = build_paths({**DEFAULTS, "root": "paper", "models": "/scratch/models"})
    assert p.results == "paper/results" and p.logs == "paper/logs" and p.models == "/scratch/models"
    assert p.downloads == "downloads" and p.byo == "byo"            # inputs every scale shares
    assert build_paths({**DEFAULTS, "root": ""}) == Paths(**DEFAULTS)


def test_a_folder_holding_another_scales_outputs_is_refused(tmp_path):
    mini = build_paths({**DEFAULTS, "root": ""})
    mark_scale_folders(mini, "mini", tmp_path)
    assert (tmp_path / "results" / SCALE_MARK).read_text() == "mini\n" and (tmp_path / "logs" / SCALE_MARK).is_file()
    check_scale_folders(mini, "mini", tmp_path)                     # the same scale: fine
    with pytest.raises(ConfigError, match=r"config key paths\.data: data holds the outputs of the mini scale "
                                          r"\(data/\.zsdr-scale\), not of the small scale"):
        check_scale_folders(mini, "small", tmp_path)
    check_scale_folders(build_paths({**DEFAULTS, "root": "small"}), "small", tmp_path)   # its own folders: fine


def test_a_target_in_another_scales_folders_is_named_with_its_place():
    paper = build_paths({**DEFAULTS, "root": "paper"})
    assert misplaced_targets(["results/all", "paper/results/all", "tables", "data", "downloads/x"], paper, {}) == [
        ("results/all", "paper/results/all")]
    assert misplaced_targets(["results/table1.csv"], build_paths({**DEFAULTS, "root": ""}), {}) == []
    custom = build_paths({**DEFAULTS, "root": "", "results": "out"})
    assert misplaced_targets(["results/table1.csv"], custom, {}) == [("results/table1.csv", "out/table1.csv")]


@pytest.mark.parametrize("program", [[str(Path(sys.executable).parent / "snakemake")], [sys.executable, "-m", "snakemake"]],
                         ids=["snakemake", "python -m snakemake"])
def test_the_command_line_names_the_scales_own_target(program):
    proc = subprocess.run([*program, "-n", "--cores", "1", "results/table1.csv", "--configfile", "configs/small.yaml"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0
    assert ("target results/table1.csv: the small scale writes its outputs under small/ (paths.root); ask for "
            "small/results/table1.csv") in proc.stdout + proc.stderr
