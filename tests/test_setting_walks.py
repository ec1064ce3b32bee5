"""docs/extending.md's "Following a setting" walks stay true: each step's file exists and holds the names the
step gives (a function moved or renamed makes the walk wrong, and this test says which step), and each walk's
count is its number of steps."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"
SECTION = "## 6. Following a setting"


def walks() -> dict[str, tuple[int, list[tuple[str, str]]]]:
    """``{setting: (files the heading counts, [(file, step text), ...])}`` of the section."""
    text = GUIDE.read_text(encoding="utf-8")
    assert SECTION in text, f"{GUIDE}: no section {SECTION!r}"
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    out = {}
    for block in re.split(r"\n(?=`[^`]+` \()", body)[1:]:
        head = re.match(r"`([^`]+)` \(.*?\), (\d+) files:", block, re.S)
        assert head, f"{GUIDE}: a walk's first line is '`<key>` (<what>), <n> files:': {block[:80]!r}"
        # a step runs to the next step, or to a paragraph after the list (a blank line, then an unindented line)
        steps = re.findall(r"^\d+\. `([^`]+)`(.*?)(?=^\d+\. |\n\n(?=\S)|\Z)", block, re.S | re.M)
        out[head.group(1)] = (int(head.group(2)), [(path, rest) for path, rest in steps])
    return out


def test_the_walks_name_existing_files_and_what_they_hold():
    found = walks()
    assert set(found) == {"training.loader_workers", "recipes.<name>.dro.rho"}, found.keys()
    for setting, (count, steps) in found.items():
        assert count == len(steps), f"{setting}: the heading says {count} files, the walk lists {len(steps)}"
        assert steps[0][0] == "schemas/config.schema.yaml", f"{setting}: a walk starts at the schema"
        assert setting.split(".")[-1] in (ROOT / steps[0][0]).read_text(encoding="utf-8")
        for path, rest in steps:
            source = ROOT / path
            assert source.is_file(), f"{setting}: step {path} is no file"
            text = source.read_text(encoding="utf-8")
            for name in re.findall(r"`([^`]+)`", rest):
                if name.startswith(("src/", "rules/", "workflow_scripts/")):
                    assert (ROOT / name).is_file(), f"{setting}: {path}: {name} is no file"
                elif re.fullmatch(r"[A-Za-z_][\w.]*(\(\))?", name):
                    word = name.removesuffix("()").split(".")[-1]
                    assert re.search(rf"\b{re.escape(word)}\b", text), f"{setting}: {path} holds no {word!r}"
