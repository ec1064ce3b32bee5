"""Every abbreviation of README.md and docs/*.md is defined in docs/glossary.md, and every page that uses one
links to the glossary. An abbreviation is a word of the prose (code blocks, inline code and link targets
left out) with two or more capitals in a row (BM25, nDCG, MoDIR, DAMs)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p != GLOSSARY)]
TOKEN = re.compile(r"(?<![\w/.\-])([A-Za-z]*[A-Z]{2,}[A-Za-z0-9]*)(?![\w/])")

# Not abbreviations a reader must look up: units, signal names, file and key names.
ALLOWED = {"GB", "MB", "KB", "TB", "SIGKILL", "SIGTERM", "SIGUSR1", "USR1", "LICENSE", "README", "TAB"}


def prose(text: str) -> str:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    text = re.sub(r"`[^`]*`", "", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)
    return re.sub(r"https?://\S+", "", text)


def abbreviations(text: str) -> set[str]:
    return set(TOKEN.findall(prose(text)))


def defined() -> set[str]:
    """The terms of the glossary's tables (first column; `A / B` defines both, and each word of a term)."""
    terms: set[str] = set()
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| ([^|]+) \|", line)
        if not m or m.group(1).strip() in ("term", "---"):
            continue
        for term in m.group(1).split(" / "):
            term = term.strip()
            terms.add(term)
            terms.update(re.split(r"[\s-]+", term))
    return terms


def undefined(text: str, terms: set[str]) -> list[str]:
    return sorted(a for a in abbreviations(text)
                  if a not in terms and a not in ALLOWED and not (a.endswith("s") and a[:-1] in terms))


def test_every_abbreviation_of_the_docs_is_in_the_glossary():
    terms = defined()
    missing = {page.relative_to(ROOT).as_posix(): undefined(page.read_text(encoding="utf-8"), terms)
               for page in PAGES}
    missing = {page: words for page, words in missing.items() if words}
    assert not missing, f"abbreviations not defined in docs/glossary.md (add a row, or spell them out): {missing}"


def test_every_page_with_abbreviations_links_the_glossary():
    terms = defined()
    unlinked = [page.relative_to(ROOT).as_posix() for page in PAGES
                if abbreviations(page.read_text(encoding="utf-8")) - ALLOWED
                and "glossary.md" not in page.read_text(encoding="utf-8")]
    assert terms and not unlinked, f"pages that use abbreviations without a link to docs/glossary.md: {unlinked}"


def test_the_check_finds_an_undefined_abbreviation():
    terms = defined()
    assert undefined("We train with XYZ and nDCG, in `ABC` blocks; see [x](FOO.md).", terms) == ["XYZ"]
    assert undefined("DAMs and GPUs, BM25 and COCO-DR", terms) == []
