"""Citations of the method notes (docs/methods/) point at files and headings that exist.

Configs, the schema, rules and source code cite the notes as ``docs/methods/<note>.md#<anchor>``; a
citation may name further anchors of the same note after it (``docs/methods/ddr.md#losses,
#dr-baselines`` or ``... #architecture to #training-procedure``). Anchors are GitHub's heading
slugs. Links between the notes (``[text](other.md#anchor)``) are checked the same way.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "docs" / "methods"

# Where citations live: the project's own text files (not data, outputs or the virtual environment).
SCANNED_DIRS = ("src", "configs", "schemas", "rules", "workflow_scripts", "tests", "docs", "benchmarks",
                "profiles", "envs")
SCANNED_FILES = ("Snakefile", "README.md", "config.yaml", "pyproject.toml", "Makefile")
TEXT_SUFFIXES = {".py", ".yaml", ".yml", ".smk", ".md", ".toml", ".txt", ".cfg", ".csv", ".json", ""}

CITATION = re.compile(r"docs/methods/([A-Za-z0-9_.-]+\.md)((?:#[\w-]+)?(?:(?:,\s*|\s+to\s+|\s+and\s+)#[\w-]+)*)")
NOTE_LINK = re.compile(r"\]\(([A-Za-z0-9_.-]+\.md)(#[\w-]+)?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, spaces,
    hyphens and underscores kept), each space a hyphen."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip()).lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(note: Path) -> set[str]:
    """Every heading anchor of a Markdown file (repeated headings get -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in note.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if not m:
            continue
        slug = github_slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def citations(text: str) -> list[tuple[str, list[str]]]:
    """``[(note file name, [anchors])]`` of every docs/methods citation in ``text``."""
    return [(m.group(1), re.findall(r"#([\w-]+)", m.group(2))) for m in CITATION.finditer(text)]


def dangling(text: str, notes_dir: Path = NOTES) -> list[str]:
    """The citations in ``text`` whose note or anchor does not exist, as ``note#anchor``."""
    out = []
    for name, cited in citations(text):
        note = notes_dir / name
        if not note.is_file():
            out.append(name)
            continue
        have = anchors(note)
        out += [f"{name}#{a}" for a in cited if a not in have]
    return out


def scanned_files() -> list[Path]:
    files = [ROOT / f for f in SCANNED_FILES if (ROOT / f).is_file()]
    for d in SCANNED_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if p.is_file() and p.suffix in TEXT_SUFFIXES and "golden" not in p.parts and "__pycache__" not in p.parts:
                files.append(p)
    return [p for p in files if p != Path(__file__).resolve()]   # this file's examples dangle on purpose


@pytest.mark.parametrize("heading, slug", [
    ("R2: essential-unit extractability", "r2-essential-unit-extractability"),
    ("Unit statistics (Tables 5 and 6)", "unit-statistics-tables-5-and-6"),
    ("DPR plus MoDIR", "dpr-plus-modir"),
    ("iDRO", "idro"),
    ("Re-trained baselines", "re-trained-baselines"),
    ("The `mine` key", "the-mine-key"),
])
def test_slugs_follow_github(heading, slug):
    assert github_slug(heading) == slug


def test_dangling_citations_are_found(tmp_path):
    (tmp_path / "a.md").write_text("# A note\n\n## Loss weights\n\n```\n## not a heading\n```\n## Loss weights\n")
    assert anchors(tmp_path / "a.md") == {"a-note", "loss-weights", "loss-weights-1"}
    text = ("see docs/methods/a.md#loss-weights, #a-note and docs/methods/a.md#not-a-heading; "
            "docs/methods/a.md#loss-weights to #missing; docs/methods/b.md#x")
    assert dangling(text, tmp_path) == ["a.md#not-a-heading", "a.md#missing", "b.md"]


def test_every_cited_note_and_anchor_exists():
    found, bad = 0, []
    for path in scanned_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        found += len(citations(text))
        bad += [f"{path.relative_to(ROOT)}: {d}" for d in dangling(text)]
    assert not bad, "dangling docs/methods citations (fix the anchor or the note's heading):\n" + "\n".join(bad)
    assert found > 100, f"only {found} docs/methods citations found: is the scan looking in the right places?"


def test_links_between_notes_resolve():
    bad = []
    for note in sorted(NOTES.glob("*.md")):
        for target, anchor in NOTE_LINK.findall(note.read_text(encoding="utf-8")):
            path = NOTES / target
            if not path.is_file():
                bad.append(f"{note.name} -> {target}")
            elif anchor and anchor[1:] not in anchors(path):
                bad.append(f"{note.name} -> {target}{anchor}")
    assert not bad, "broken links between the method notes:\n" + "\n".join(bad)


def test_index_lists_every_note():
    index = (NOTES / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"\]\(([a-z-]+\.md)\)", index))
    assert listed == {p.name for p in NOTES.glob("*.md")} - {"README.md"}
