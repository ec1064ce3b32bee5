"""docs/extending.md, performed: its code blocks are written into a copy of the workflow, its `TERMS` line
registered, its config additions laid over the configs; the term's own test passes, and the plan (built as
`zsdr check-config` and the Snakefile build it) trains the new recipe with the term, evaluates its system
and gives it a row of table 1. No training runs: the plan only."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import zsdr.training
from zsdr.plan.code import stamp_files
from zsdr.plan.core import load_plan
from zsdr.training import term_registry
from zsdr.workflow import read_config

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


def guide_blocks() -> list[tuple[str, str, str]]:
    """``(kind, where, body)`` of each code block that starts with ``# file: PATH`` or ``# add to: PATH``."""
    found = []
    for _, text in BLOCK.findall(GUIDE.read_text(encoding="utf-8")):
        first, _, body = text.partition("\n")
        m = re.match(r"# (file|add to): (\S+)", first)
        if m:
            found.append((m.group(1), m.group(2), body))
    return found


@pytest.fixture()
def extended(tmp_path, monkeypatch):
    """A copy of the workflow with the guide's steps done: ``(tree, overlay config file)``."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("config.yaml", "configs", "schemas", "src", "workflow_scripts"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tree / name, *(
            [shutil.ignore_patterns("__pycache__")] if src.is_dir() else []))
    overlay: dict = {}
    blocks = guide_blocks()
    kinds = [(kind, where) for kind, where, _ in blocks]
    assert ("file", "src/zsdr/training/uniformity.py") in kinds and ("file", "tests/test_uniformity.py") in kinds
    assert ("add to", "src/zsdr/training/term_registry.py") in kinds, kinds
    for kind, where, body in blocks:
        if kind == "file":
            (tree / where).parent.mkdir(parents=True, exist_ok=True)
            (tree / where).write_text(body, encoding="utf-8")
        elif where.endswith("term_registry.py"):
            # the one TERMS line: "name": "module:Class",
            entry = ast.literal_eval("{" + body.strip() + "}")
            for name, target in entry.items():
                monkeypatch.setitem(term_registry.TERMS, name, target)
        else:
            add = yaml.safe_load(body)
            systems = (add.get("table1") or {}).get("systems")
            if systems and systems[0] == "...":   # `...`: the systems config.yaml lists already
                add["table1"]["systems"] = read_config(ROOT)["table1"]["systems"] + systems[1:]
            for key, value in add.items():
                overlay.setdefault(key, {}).update(value)
    # the package the copy's new module lives in: the imported zsdr.training, with the copy's folder beside it
    monkeypatch.setattr(zsdr.training, "__path__", [*zsdr.training.__path__, str(tree / "src" / "zsdr" / "training")])
    monkeypatch.syspath_prepend(str(tree))
    config = tree / "extending.yaml"
    config.write_text(yaml.safe_dump(overlay), encoding="utf-8")
    yield tree, config
    for name in [m for m in sys.modules if m in ("zsdr.training.uniformity", "tests.test_uniformity")]:
        del sys.modules[name]


def test_the_guides_term_recipe_system_and_row(extended):
    tree, config = extended
    # step 1: the term's own test, as the guide writes it
    spec = importlib.util.spec_from_file_location("guide_test_uniformity", tree / "tests" / "test_uniformity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = [getattr(module, n) for n in dir(module) if n.startswith("test_")]
    assert len(tests) >= 2
    for test in tests:
        test()
    # steps 2-4: the plan of the extended config, checked as `zsdr check-config` checks it
    plan = load_plan(tree, config)
    assert plan.recipes.runs["dpr-uniform"] == ("dpr-uniform", 1)
    train = plan.trainings.train_spec("dpr-uniform")
    assert train["uniformity"] == {"weight": 0.1, "t": 2.0} and train["loss"] == "pairwise_nll"
    assert "uniformity" not in plan.trainings.train_spec("dpr")
    assert "src/zsdr/training/uniformity.py" in stamp_files(tree / plan.trainings.recipe_code("dpr-uniform"))
    # the system: the recipe's trained model, evaluated on every dataset of table 1
    assert plan.systems.dense_model("dpr-uniform", "mini-alpha").endswith("models/trained/dpr-uniform")
    assert "dpr-uniform" in plan.evaluation.eval_systems
    # the table: its last row
    assert plan.tables.table1_systems[-1] == "dpr-uniform"
    assert plan.tables.table1_systems[:-1] == read_config(ROOT)["table1"]["systems"]


def test_a_typo_in_the_guides_section_is_named(extended):
    from zsdr.workflow import ConfigError

    tree, config = extended
    over = yaml.safe_load(config.read_text())
    over["recipes"]["dpr-uniform"]["uniformity"] = {"wieght": 0.1}
    config.write_text(yaml.safe_dump(over))
    with pytest.raises(ConfigError, match=r"recipes.dpr-uniform.uniformity.wieght: unknown key \(did you mean "
                                          r"'weight'\? allowed at recipes.dpr-uniform.uniformity: t, weight\)"):
        load_plan(tree, config)


def finish(workflow: Path, target: str) -> None:
    """Leave ``workflow`` as a finished run of ``target`` leaves it: every planned output present (empty), all of
    one time, later than the code stamps and files they were planned from."""
    script = ("import json, sys; from pathlib import Path; from tests.plan_golden import planned_outputs; "
              "w = Path(sys.argv[1]); print(json.dumps(planned_outputs(w / 'Snakefile', w, sys.argv[2])))")
    proc = subprocess.run([sys.executable, "-c", script, str(workflow), target], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    outputs = json.loads(proc.stdout.strip().splitlines()[-1])
    done = time.time()
    for path, is_folder in outputs:
        where = workflow / path
        if is_folder:
            where.mkdir(parents=True, exist_ok=True)
        else:
            where.parent.mkdir(parents=True, exist_ok=True)
            where.touch()
    for path, _ in outputs:
        os.utime(workflow / path, (done, done))


def follow_the_guide(workflow: Path) -> None:
    """docs/extending.md's steps as a user does them, in the files the page names: its files written, the `TERMS`
    line added to the registry, its recipe added to configs/papers/baselines.yaml and its system to table 1."""
    for kind, where, body in guide_blocks():
        path = workflow / where
        if kind == "file":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
        elif where.endswith("term_registry.py"):
            text = path.read_text(encoding="utf-8")
            start = text.index("TERMS: dict[str, str] = {")
            end = text.index("\n}\n", start)
            path.write_text(text[:end] + "\n" + body.rstrip("\n") + text[end:], encoding="utf-8")
        else:
            config = yaml.safe_load(path.read_text(encoding="utf-8"))
            for key, value in yaml.safe_load(body).items():
                for name, item in value.items():
                    if isinstance(item, list) and item[:1] == ["..."]:   # `...`: what the file lists already
                        item = config[key][name] + item[1:]
                    config.setdefault(key, {})[name] = item
            path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def test_after_a_finished_run_the_guide_plans_only_the_new_recipes_jobs(tmp_path):
    """A finished run, then the page's steps: the dry run plans the new recipe's training and the jobs of its row
    (the page's list), and no other training; the registry line changes no other job's code stamp."""
    from tests.test_readme import workflow_copy
    from tests.test_workflow import planned_jobs, snakemake, training_plan

    workflow = workflow_copy(tmp_path / "wf")
    finish(workflow, "results/table1.csv")
    assert "Nothing to be done" in snakemake("-n", "results/table1.csv", cwd=workflow).stdout
    follow_the_guide(workflow)
    assert '"uniformity": "zsdr.training.uniformity:UniformityTerm"' in (
        workflow / "src" / "zsdr" / "training" / "term_registry.py").read_text()
    proc = snakemake("-n", "results/table1.csv", cwd=workflow)
    out = proc.stdout + proc.stderr
    assert planned_jobs(proc.stdout) == {"train": 1, "dense_search_group": 1, "evaluate_table1": 3, "model_cards": 1,
                                 "table1": 1}, out[-3000:]
    assert list(training_plan(out)) == ["dpr-uniform"], out[-3000:]


def guide_section(title: str) -> dict[str, str]:
    """``{name: body}`` of the blocks of the guide's section ``title`` that start ``# your config|file: NAME``."""
    text = GUIDE.read_text(encoding="utf-8").split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    found = {}
    for _, block in BLOCK.findall(text):
        first, _, body = block.partition("\n")
        m = re.match(r"# your (?:config|file): (\S+)", first)
        if m:
            found[m.group(1)] = body
    return found


def test_the_guides_dataset_model_and_published_value(tmp_path, monkeypatch):
    """Section 5: a local BEIR folder, a model folder and two published values, by config and a CSV file only."""
    blocks = guide_section("5. A dataset, a model and a published value")
    assert set(blocks) == {"my-lab.yaml", "my-published.csv"}, blocks
    for name, body in blocks.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    folder = tmp_path / "my-collection"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "a passage"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "a query"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    monkeypatch.chdir(tmp_path)
    plan = load_plan(ROOT, tmp_path / "my-lab.yaml")
    assert plan.datasets.dataset("my-collection").splits == ("test",) and plan.datasets.language("my-collection") == "en"

    class WC:
        dataset = "my-collection"

    assert plan.datasets.convert_inputs(WC) == [f"my-collection/{f}" for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")]
    rows = {(r["system"], r["dataset"]): r for r in plan.regressions.rows}
    assert rows["bm25-flat", "my-collection"]["metrics"] == "metrics/regressions/my-collection/bm25-flat.json"
    assert rows["bm25-flat", "my-collection"]["value"] == 0.412
    assert "my-encoder" in rows["my-encoder", "my-collection"]["reason"]
    assert ("my-collection", "bm25-flat") in plan.regressions.pairs
    assert not any(s == "my-encoder" for _, s in plan.regressions.pairs)
