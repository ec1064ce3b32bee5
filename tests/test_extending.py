"""docs/extending.md, performed: its code blocks are written into a copy of the workflow, its `TERMS` line
registered, its config additions laid over the configs; the term's own test passes, and the plan (built as
`zsdr check-config` and the Snakefile build it) trains the new recipe with the term, evaluates its system
and gives it a row of table 1. No training runs: the plan only."""

from __future__ import annotations

import ast
import importlib
import re
import shutil
import sys
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
