"""The workflow run from another directory (`snakemake -s CHECKOUT/Snakefile --directory DIR`) and as a
module of another workflow plans the jobs it plans in its own folder; a config.yaml in the working
directory, or a module's `config:`, is laid over the workflow's config (docs/module.md)."""

import gzip
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from plan_golden import golden_path, plan  # noqa: E402
from test_workflow import planned_jobs, snakemake  # noqa: E402

from tests.test_readme import workflow_copy  # noqa: E402
from tests.warm_jobs import warm_log  # noqa: E402
from zsdr.plan.code import STAMPS, code_stamp, stamp_files  # noqa: E402
from zsdr.workflow import add_paper_configs, load_yaml, update_config, workdir_overlays  # noqa: E402

MODULE = """\
configfile: "zsdr.yaml"


module zsdr:
    snakefile:
        "{snakefile}"
    config:
        config{skip}


use rule * from zsdr
"""

# table 1 of BM25 alone: a plan a tenth the size of the default one, with no training in it
BM25_ONLY = {"table1": {"systems": ["bm25-flat"], "baselines": ["bm25-flat"]}}


def _golden(scale: str) -> list[str]:
    with gzip.open(golden_path(scale), "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def _snakemake(*args, cwd):
    return snakemake(*args, cwd=cwd, check=False)


def _module(folder: Path, settings: dict, skip_validation: bool = False) -> Path:
    (folder / "zsdr.yaml").write_text(yaml.safe_dump(settings))
    snakefile = folder / "Snakefile"
    skip = "\n    skip_validation:\n        True" if skip_validation else ""
    snakefile.write_text(MODULE.format(snakefile=ROOT / "Snakefile", skip=skip))
    return snakefile


def test_plan_from_another_directory_is_the_golden_plan(tmp_path):
    """Every job of `results/all` (rule, wildcards, inputs, outputs, params, resources) as planned in the
    checkout; the code stamps land in the working directory and list the checkout's files."""
    assert plan("mini", workdir=tmp_path) == _golden("mini")
    stamps = sorted((tmp_path / STAMPS).glob("*.sha256"))
    assert stamps
    files = stamp_files(stamps[0])
    assert files and all(Path(f).is_absolute() and Path(f).is_file() for f in files)
    assert all(Path(f).resolve().is_relative_to(ROOT) for f in files)


@pytest.mark.parametrize("skip_validation", [False, True], ids=["validated", "skip_validation"])
def test_plan_as_a_module_of_another_workflow_is_the_golden_plan(tmp_path, monkeypatch, skip_validation):
    """... also imported with `skip_validation: True` (which skips Snakemake's validate() calls, not the
    schema's defaults the plan reads); and planning in this process leaves its environment as it was: the
    Snakefile sets ZSDR_DEBUG and the offline switches for its jobs, which a later `zsdr` call in this process
    must not inherit."""
    monkeypatch.delenv("ZSDR_DEBUG", raising=False)
    before = dict(os.environ)
    snakefile = _module(tmp_path, {}, skip_validation)
    assert plan("mini", snakefile=snakefile, workdir=tmp_path) == _golden("mini")
    assert dict(os.environ) == before


def test_the_command_line_from_another_directory(tmp_path):
    """The user's command: `snakemake -s CHECKOUT/Snakefile --directory DIR -n results/table1.csv`, run
    from a third folder, plans the jobs the same command plans in the checkout; a config.yaml in DIR
    changes the plan as a --configfile would (and the same settings given to the workflow imported as a
    module plan the same jobs); --config still overrides it."""
    elsewhere, cwd = tmp_path / "run", tmp_path / "cwd"
    elsewhere.mkdir(), cwd.mkdir()
    args = ["-s", str(ROOT / "Snakefile"), "--directory", str(elsewhere), "-n", "results/table1.csv"]
    here = _snakemake("-n", "results/table1.csv", cwd=ROOT)
    there = _snakemake(*args, cwd=cwd)
    assert here.returncode == 0 and there.returncode == 0, there.stderr[-3000:]
    assert planned_jobs(there.stdout) == planned_jobs(here.stdout) and "train" in planned_jobs(here.stdout)

    (elsewhere / "config.yaml").write_text(yaml.safe_dump(BM25_ONLY))
    overlaid = _snakemake(*args, cwd=cwd)
    assert overlaid.returncode == 0, overlaid.stderr[-3000:]
    small = planned_jobs(overlaid.stdout)
    assert "train" not in small and small["bm25"] == 3 and sum(small.values()) < 20, small

    module = tmp_path / "module"
    module.mkdir()
    _module(module, BM25_ONLY)
    imported = _snakemake("-n", "results/table1.csv", cwd=module)
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert planned_jobs(imported.stdout) == small

    rm3 = _snakemake(*args, "--config", "table1={systems: [bm25-rm3], baselines: [bm25-rm3]}", cwd=cwd)
    assert rm3.returncode == 0, rm3.stderr[-3000:]
    assert planned_jobs(rm3.stdout).get("lucene_index") == planned_jobs(overlaid.stdout)["lucene_index"]
    assert "Job stats" in rm3.stdout and "bm25-rm3" in rm3.stdout and "bm25-flat.trec" not in rm3.stdout


def test_a_mistake_in_the_working_directorys_config_names_that_file(tmp_path):
    (tmp_path / "config.yaml").write_text("table1:\n  sytems: [bm25-flat]\n")
    proc = _snakemake("-s", str(ROOT / "Snakefile"), "-n", "results/table1.csv", cwd=tmp_path)
    assert proc.returncode != 0
    line = next(l for l in (proc.stdout + proc.stderr).splitlines() if "sytems" in l)
    assert "did you mean 'systems'" in line and f"{(tmp_path / 'config.yaml').resolve()}" in line, line


def test_working_directory_config_is_an_overlay_between_the_paper_files_and_the_command_line(tmp_path):
    assert workdir_overlays(ROOT, ROOT) == []              # the workflow's own config.yaml is the base
    assert workdir_overlays(ROOT, tmp_path) == []          # no config.yaml there: nothing to lay over
    (tmp_path / "config.yaml").write_text("seed: 5\nscale: paper\nbm25: {k1: 1.5}\n")
    overlays = workdir_overlays(ROOT, tmp_path)
    assert [settings for _, settings in overlays] == [{"seed": 5, "scale": "paper", "bm25": {"k1": 1.5}}]
    config = load_yaml(ROOT / "config.yaml")
    sources = add_paper_configs(config, ROOT, {"seed": 7}, overlays=overlays)
    assert config["seed"] == 7 and sources[("seed",)] == "--configfile/--config"
    assert config["bm25"]["k1"] == 1.5 and "working directory" in sources[("bm25", "k1")]
    paper = update_config(load_yaml(ROOT / "config.yaml"), {"scale": "paper"})
    add_paper_configs(paper, ROOT, {"scale": "paper"})
    # its `scale` picks the paper files' by_scale sections, as a --configfile's does
    assert config["recipes"]["dpr"]["train"] == paper["recipes"]["dpr"]["train"] != load_yaml(
        ROOT / "configs" / "papers" / "baselines.yaml")["recipes"]["dpr"]["train"]


def test_a_code_stamp_made_elsewhere_is_checked_by_sha256sum_there(tmp_path):
    root, work = tmp_path / "checkout", tmp_path / "work"
    (root / "pkg").mkdir(parents=True)
    work.mkdir()
    (root / "pkg" / "a.py").write_text("x = 1\n")
    rel = code_stamp(["pkg/a.py"], root, "job", work)
    assert rel == code_stamp(["pkg/a.py"], root, "job") and (work / rel).is_file()
    assert stamp_files(work / rel) == [str(root.resolve() / "pkg" / "a.py")]
    assert stamp_files(root / rel) == ["pkg/a.py"]           # in the workflow folder: relative paths
    if os.path.exists("/usr/bin/sha256sum"):
        ok = subprocess.run(["sha256sum", "-c", rel], cwd=work, capture_output=True, text=True)
        assert ok.returncode == 0, ok.stdout + ok.stderr
    (root / "pkg" / "a.py").write_text("x = 2\n")
    before = (work / rel).read_text()
    assert code_stamp(["pkg/a.py"], root, "job", work) == rel and (work / rel).read_text() != before


@pytest.mark.parametrize("rule_file", sorted((ROOT / "rules").glob("*.smk")))
def test_rules_name_no_checkout_file_relative_to_the_working_directory(rule_file):
    """An input naming a file of the checkout by a relative path would be looked for in the working
    directory: such inputs go through PLAN.code_plan.source_file (or PLAN.code for code)."""
    import re

    text = rule_file.read_text()
    bare = re.findall(r'^\s+\w+=\s*"((?:src|configs|schemas|workflow_scripts|report)/[^"]*)"', text, re.M)
    assert not bare, f"{rule_file.name}: {bare} (wrap them in PLAN.code_plan.source_file)"


def test_a_copy_of_the_workflow_plans_with_its_own_library_where_another_is_loaded(tmp_path):
    """A copy of the workflow plans with its own src/ even in a process that has the checkout's zsdr loaded:
    the tests' Snakemake forks from a server that imported it (tests/warm_jobs.py), and the Snakefile forgets
    a copy of the library that is not its own. The copy's edited planning code is the code that runs."""
    copy = workflow_copy(tmp_path / "copy")
    scales = copy / "src" / "zsdr" / "plan" / "scales.py"
    scales.write_text(scales.read_text().replace("writes its outputs under", "(this copy) writes its outputs under"))
    proc = _snakemake("-n", "--cores", "1", "results/table1.csv", "--configfile", "configs/small.yaml", cwd=copy)
    assert proc.returncode != 0
    assert "the small scale (this copy) writes its outputs under small/" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    deadline = time.time() + 10                 # forked from the server (which logs a job as it reaps it)
    while "-m snakemake (pid " not in warm_log() and time.time() < deadline:
        time.sleep(0.05)
    assert "-m snakemake (pid " in warm_log()
