"""The weak-pair file format (:mod:`zsdr.training.weak`): one JSON object a line, written by
:func:`write_pair` and read back by :func:`read_weak_pairs`, each line checked; :func:`pair_statistics`
is the statistics a writer saves beside its file."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zsdr.io import DataError

METHODS = ("scl", "ict", "qgen")
_FIX = ("regenerate the file with zsdr.training.weak.scl_ict.write_weak_pairs (or "
        "zsdr.training.weak.qgen_pairs.write_qgen_pairs for qgen)")


@dataclass(frozen=True)
class WeakPair:
    """One weak training pair: ``query`` and its pseudo-positive ``{"title", "text"}``, drawn from
    document ``doc_id`` by ``method`` (``scl`` | ``ict`` | ``qgen``). Not hashable (``positive`` is a dict)."""

    id: str
    doc_id: str
    query: str
    positive: dict
    method: str
    negative: dict | None = None   # {"doc_id", "title", "text"}: drawn by the positive's rule, or None


def pair_record(method: str, doc_id: str, k: int, query: str, positive: dict, negative: dict | None = None) -> dict:
    """The JSON object of one weak pair (the format: :mod:`zsdr.training.weak`)."""
    record = {"_id": f"{method}-{doc_id}-{k}", "doc_id": doc_id, "query": query,
              "positive": {"title": positive.get("title") or "", "text": positive["text"]}, "method": method}
    if negative is not None:
        record["negative"] = {"doc_id": negative["doc_id"], "title": negative.get("title") or "",
                              "text": negative["text"]}
    return record


def write_pair(fh, method: str, doc_id: str, k: int, query: str, positive: dict,
               negative: dict | None = None) -> None:
    fh.write(json.dumps(pair_record(method, doc_id, k, query, positive, negative), ensure_ascii=False) + "\n")


def pair_statistics(method: str, target: int | None, documents: int, skipped: int, pairs: int, distinct: int,
                    passes: int, most: int, corpus: int | None = None) -> dict:
    """The statistics of one weak set (:mod:`zsdr.training.weak`: Statistics): ``shortfall`` is how far below ``target`` it ended."""
    return {"method": method, "target": target, "pairs": pairs, "distinct": distinct, "repeats": pairs - distinct,
            "documents": documents, "skipped": skipped, "corpus_documents": corpus, "passes": passes,
            "max_per_document": most,
            "shortfall": None if target is None else max(0, int(target) - pairs)}


def _text(obj: dict, key: str, path: Path, line: int, where: str = "") -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        found = "missing" if key not in obj else f"{type(value).__name__} {value!r}"[:80]
        raise DataError(path, line, f'"{where}{key}" must be a non-empty string, found {found}', _FIX)
    return value


def read_weak_pairs(path: str | os.PathLike) -> list[WeakPair]:
    """The pairs of a weak-pair file, in file order. A line without ``_id``, ``doc_id``, ``query``,
    ``positive.text`` (non-empty strings) or a known ``method``, a ``positive`` that is not an object
    with a string ``title``, a ``negative`` (optional) without ``doc_id`` and ``text``, or a repeated
    ``_id`` raises :class:`DataError` naming the file and line."""
    return list(iter_weak_pairs(path))


def iter_weak_pairs(path: str | os.PathLike) -> Iterator[WeakPair]:
    """:func:`read_weak_pairs` one pair at a time (the ids seen so far are kept, to refuse a repeat)."""
    from zsdr.data.formats import iter_jsonl

    path = Path(path)
    seen: dict[str, int] = {}
    for line, obj in iter_jsonl(path):
        pid = _text(obj, "_id", path, line)
        doc_id = _text(obj, "doc_id", path, line)
        query = _text(obj, "query", path, line)
        positive = obj.get("positive")
        if not isinstance(positive, dict):
            raise DataError(path, line, f'"positive" must be an object {{"title", "text"}}, found '
                            f'{type(positive).__name__}', _FIX)
        text = _text(positive, "text", path, line, "positive.")
        title = positive.get("title", "")
        if not isinstance(title, str):
            raise DataError(path, line, f'"positive.title" must be a string, found {type(title).__name__}', _FIX)
        method = obj.get("method")
        if method not in METHODS:
            raise DataError(path, line, f'"method" {method!r} is not one of {", ".join(METHODS)}', _FIX)
        if pid in seen:
            raise DataError(path, line, f"duplicate _id {pid!r} (first on line {seen[pid]})", _FIX)
        negative = obj.get("negative")
        if negative is not None:
            if not isinstance(negative, dict):
                raise DataError(path, line, f'"negative" must be an object {{"doc_id", "title", "text"}}, found '
                                f'{type(negative).__name__}', _FIX)
            negative = {"doc_id": _text(negative, "doc_id", path, line, "negative."),
                        "title": negative.get("title", ""), "text": _text(negative, "text", path, line, "negative.")}
            if not isinstance(negative["title"], str):
                raise DataError(path, line, '"negative.title" must be a string', _FIX)
        seen[pid] = line
        yield WeakPair(pid, doc_id, query, {"title": title, "text": text}, method, negative)

