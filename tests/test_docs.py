"""docs/configuration.md is generated from the config schema (``python -m zsdr.docs``) and kept current."""

import subprocess
import sys
from pathlib import Path

import yaml

from zsdr.docs import COMMAND, render, render_file

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "config.schema.yaml"
REFERENCE = ROOT / "docs" / "configuration.md"


def test_configuration_reference_is_current():
    assert REFERENCE.is_file(), f"{REFERENCE.relative_to(ROOT)} is missing (fix: run `{COMMAND}`)"
    assert REFERENCE.read_text(encoding="utf-8") == render_file(SCHEMA), (
        f"docs/configuration.md is out of date with schemas/config.schema.yaml (fix: run `{COMMAND}`)")


def test_reference_lists_every_key_with_type_default_and_description():
    text = render_file(SCHEMA)
    schema = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))
    for key in schema["properties"]:
        assert f"`{key}`" in text, key
    # a nested key, a map entry's key, an item's key and a shared definition, each on its own row
    assert "| `bm25.rm3.fb_terms` | integer | `10` |" in text
    assert "| `systems.<name>.kind` |" in text
    assert "| `mini.domains[].role` | `\"source\"` \\| `\"target\"` |" in text
    assert "| `training.sources.<name>.teacher_scores` | string or null | `null` |" in text
    assert "## Shared definitions" in text and "### train" in text and "| `train.lr` | number | required |" in text


def test_reference_follows_a_changed_description():
    schema = {"description": "d", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "integer", "default": 3, "minimum": 1, "description": "first | wording"}}}}}
    before = render(schema)
    assert "| `a.b` | integer | `3` | first \\| wording (>= 1) |" in before
    schema["properties"]["a"]["properties"]["b"]["description"] = "second wording"
    assert render(schema) != before and "second wording" in render(schema)


def test_check_mode_names_the_command_when_out_of_date(tmp_path):
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n")
    args = [sys.executable, "-m", "zsdr.docs", "--schema", str(SCHEMA), "--out", str(stale)]
    proc = subprocess.run([*args, "--check"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and f"run `{COMMAND}`" in proc.stderr and str(stale) in proc.stderr
    assert subprocess.run(args, capture_output=True, text=True, cwd=ROOT).returncode == 0
    assert stale.read_text() == render_file(SCHEMA)
    assert subprocess.run([*args, "--check"], capture_output=True, text=True, cwd=ROOT).returncode == 0
    missing = subprocess.run([sys.executable, "-m", "zsdr.docs", "--schema", str(tmp_path / "none.yaml"), "--check"],
                             capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 2 and "none.yaml" in missing.stderr and missing.stderr.count("\n") == 1
