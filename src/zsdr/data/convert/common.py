"""What every converter of :mod:`zsdr.data.convert` shares: finding the expected files in an
extracted download (naming what the folder holds when one is missing), reading ``id<TAB>text`` and
other tab-separated files line by line (a Git LFS pointer reported as such), content-hash ids, and
the writers that keep a query's text and a judgement's grade from being given twice.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Iterable, Iterator

from zsdr.data.formats import BeirCounts, BeirWriter
from zsdr.io import DataError, open_lines

log = logging.getLogger("zsdr.convert")

LFS_POINTER = "version https://git-lfs.github.com/spec/"


def collapse(text: str) -> str:
    """Collapse every run of whitespace to one blank and strip the ends."""
    return " ".join(text.split())


def text_id(text: str, prefix: str = "", length: int = 32) -> str:
    """A stable content id: ``prefix`` + the first ``length`` hex digits of md5(UTF-8 text)."""
    return prefix + hashlib.md5(text.encode("utf-8")).hexdigest()[:length]


def listing(folder: Path, limit: int = 12) -> str:
    if not folder.is_dir():
        return f"{folder} does not exist"
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return f"{folder} holds: {', '.join(names[:limit]) or 'nothing'}{more}"


def find_file(folder: Path, *names: str, what: str) -> Path:
    """The first of ``names`` (relative to ``folder``; ``NAME.gz`` accepted too) that exists."""
    for name in names:
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise DataError(folder / names[0], None, f"{what} not found",
                    f"expected {' or '.join(names)} in the extracted download; {listing(folder)}")


def find_dir(raw: Path, candidates: Iterable[str], marker: str, what: str) -> Path:
    """The first ``raw/<candidate>`` folder that holds ``marker`` (or ``marker.gz``)."""
    tried = []
    for rel in candidates:
        folder = raw / rel if rel else raw
        tried.append(str(folder))
        if (folder / marker).is_file() or (folder / f"{marker}.gz").is_file():
            return folder
    raise DataError(raw, None, f"{what} not found (looked for {marker} in {', '.join(tried)})",
                    f"point raw at the extracted download; {listing(raw)}")


def check_lfs(path: Path, lineno: int, text: str) -> None:
    if lineno == 1 and text.startswith(LFS_POINTER):
        raise DataError(path, 1, "this is a Git LFS pointer file, not the data",
                        "download the real file (git lfs pull, or the repository's 'Download raw file' link)")


def iter_tsv(path: Path, ncols: int, layout: str, maxsplit: bool = True) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line, columns)`` for the non-blank lines of a tab-separated file.

    With ``maxsplit`` the line is split into at most ``ncols`` columns (the last one keeps any further
    tabs); otherwise exactly ``ncols`` tab-separated columns are required.
    """
    with open_lines(path) as lines:
        for text in lines:
            check_lfs(path, lines.lineno, text)
            if not text.strip():
                continue
            cols = text.split("\t", ncols - 1) if maxsplit else text.split("\t")
            if len(cols) != ncols:
                raise DataError(path, lines.lineno,
                                f"expected {ncols} tab-separated columns ({layout}), found {len(cols)}",
                                f"every line must read {layout}")
            yield lines.lineno, cols


def check_id(value: str, path: Path, line: int, what: str) -> str:
    value = value.strip()
    if not value:
        raise DataError(path, line, f"empty {what}", f"every line needs a non-empty {what}")
    return value


def iter_id_text(path: str | os.PathLike, what: str = "id", strip: bool = True) -> Iterator[tuple[int, str, str]]:
    """Yield ``(line, id, text)`` from an ``id<TAB>text`` file (MS MARCO, LoTTE, Multi-CPR layout)."""
    path = Path(path)
    for line, (rid, text) in iter_tsv(path, 2, f"{what}<TAB>text"):
        yield line, check_id(rid, path, line, what), text.strip() if strip else text


class Queries:
    """Writes queries once; a repeated id with another text is a DataError naming both places."""

    def __init__(self, writer: BeirWriter):
        self.writer = writer
        self.seen: dict[str, tuple[int, str, int]] = {}
        self._paths: dict[str, str] = {}

    def __contains__(self, qid: str) -> bool:
        return qid in self.seen

    def add(self, qid: str, text: str, path: Path | str, line: int) -> bool:
        digest = hash(text)
        first = self.seen.get(qid)
        if first is not None:
            if first[0] == digest:
                return False
            raise DataError(path, line, f"query id {qid!r} was given another text before ({first[1]}:{first[2]})",
                            "query ids must be unique; fix or drop one of the two lines")
        name = str(path)
        self.seen[qid] = (digest, self._paths.setdefault(name, name), line)
        self.writer.add_query(qid, text)
        return True


class Qrels:
    """Writes each ``(split, query, doc)`` judgement once (the first grade wins). A source that grades
    one pair twice differently is named in a warning (its first such line), not passed over silently."""

    def __init__(self, writer: BeirWriter):
        self.writer = writer
        self.seen: dict[tuple[str, str, str], tuple[int, str | None]] = {}
        self.repeats = 0
        self.conflicts = 0
        self.first_conflict: str | None = None

    def add(self, split: str, qid: str, did: str, score: int, path=None, line: int | None = None) -> bool:
        key = (split, qid, did)
        where = f"{path}:{line}" if path is not None and line else (str(path) if path is not None else None)
        old = self.seen.get(key)
        if old is not None:
            self.repeats += 1
            if old[0] != score:
                self.conflicts += 1
                if self.first_conflict is None:
                    self.first_conflict = (f"{where or split}: query {qid!r}, document {did!r} graded {score}, "
                                           f"first graded {old[0]}" + (f" at {old[1]}" if old[1] else ""))
            return False
        self.seen[key] = (score, where)
        self.writer.add_qrel(split, qid, did, score)
        return True


def finish(name: str, writer: BeirWriter, qrels: Qrels | None = None) -> BeirCounts:
    """The counts a converter returns, logged with its repeated and conflicting judgements."""
    if qrels is not None and qrels.conflicts:
        log.warning("%s: %d judgements repeat a (query, document) pair with another grade; the first grade is kept "
                    "(first: %s)", name, qrels.conflicts, qrels.first_conflict)
    if qrels is not None and qrels.repeats:
        log.info("%s: %d repeated judgements written once", name, qrels.repeats)
    log.info("%s: %s", name, writer.counts.as_dict() if writer.counts else "not validated")
    return writer.counts
