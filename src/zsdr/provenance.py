"""Where an artifact comes from, checked wherever two artifacts meet.

Every artifact a dense or sparse system makes records what it was made from:

* the **corpus** (:func:`corpus_identity`): the dataset's name, its document count and the SHA-256 of
  its corpus file (``corpus.jsonl`` or ``.gz``). The digest is computed once per process and file
  (memoised by path, size and modification time); a current store records it (``store.json``'s
  ``corpus_sha256``), so a job that finds one reads no corpus to learn it.
* the **model** (:func:`model_identity`): its name and, for a folder zsdr wrote, the digest of its files
  recorded in its output marker (checked against the files whenever the model is loaded,
  :func:`zsdr.io.verify_model_contents`).

An embeddings folder records both in ``meta.json`` (``corpus``: the corpus its rows, or the queries'
dataset, belong to; ``model_sha256``). A TREC run keeps its plain six columns, which trec_eval, ranx and
every other reader take as they are; what it was made from is written beside it, in
``<run>.provenance.json`` (:func:`write_run_provenance`), with the run's own SHA-256, so a sidecar left
beside a run that was written again by another program is recognised as stale and not believed.

The joins refuse a mix with one line naming both sides (:func:`check_same`): search and merge refuse
shards of two corpora, queries of another dataset, and queries and documents encoded by two models;
evaluate refuses a run made for another corpus than the qrels' dataset. Whatever the records say, a run's
document ids are counted against the dataset's corpus (:func:`check_known_ids`): more than
:data:`UNKNOWN_IDS_MAX` of them unknown is refused, not scored as misses.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterable, Mapping

from zsdr.io import DataError, atomic_write, file_digest
from zsdr.data.trec_runs import (RUN_SIDECAR_SUFFIX, cached_digest, read_run_provenance,  # noqa: F401
                                 remove_run_provenance, run_sidecar, write_run_provenance)

log = logging.getLogger(__name__)

UNKNOWN_IDS_MAX = 0.01
"""The largest fraction of a run's distinct document ids that may be missing from the corpus (BEIR runs of
some public systems name a handful of documents removed from a later corpus release); above it the run
was made for another corpus."""


def _dataset_name(dataset: Path) -> str:
    try:
        name = json.loads((dataset / "dataset.json").read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError, AttributeError):
        name = None
    return name if isinstance(name, str) and name else dataset.resolve().name


def corpus_identity(dataset: str | os.PathLike) -> dict:
    """``{"dataset", "docs", "sha256"}`` of ``dataset``'s corpus (see the module notes); ``docs`` from
    ``dataset.json`` (None without one)."""
    from zsdr.data.formats import find_file

    dataset = Path(dataset)
    corpus = find_file(dataset, "corpus.jsonl")
    sha = None
    store_meta = dataset / "store" / "store.json"
    if store_meta.is_file():
        from zsdr.data.store import store_dir, store_is_current

        try:
            recorded = json.loads(store_meta.read_text(encoding="utf-8")).get("corpus_sha256")
        except (OSError, ValueError, AttributeError):
            recorded = None
        if isinstance(recorded, str) and store_is_current(store_dir(dataset), dataset):
            sha = recorded
    docs = None
    try:
        docs = int(json.loads((dataset / "dataset.json").read_text(encoding="utf-8"))["docs"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return {"dataset": _dataset_name(dataset), "docs": docs, "sha256": sha or cached_digest(corpus)}


def model_identity(model) -> dict:
    """``{"model", "sha256"}``: the model's name or folder and, for a folder zsdr wrote, the digest of its
    files its output marker records (:func:`zsdr.io.verify_model_contents`; None for a hub id or a folder
    saved by other code)."""
    from zsdr.io import OUTPUT_MARKER

    name = str(getattr(model, "name_or_path", model))
    sha = None
    marker = Path(name) / OUTPUT_MARKER
    if marker.is_file():
        try:
            data = json.loads(marker.read_text(encoding="utf-8"))
            sha = data.get("contents_sha256") if data.get("kind") == "model" else None
        except (OSError, ValueError, AttributeError):
            sha = None
    return {"model": name, "sha256": sha if isinstance(sha, str) else None}


def describe_corpus(identity: Mapping | None) -> str:
    if not identity:
        return "an unrecorded corpus"
    sha = str(identity.get("sha256") or "")[:12]
    return f"the corpus of {identity.get('dataset')} ({identity.get('docs')} docs, sha256 {sha}...)"


def same_corpus(a: Mapping | None, b: Mapping | None) -> bool | None:
    """Whether two corpus identities name the same corpus (None when either is unrecorded)."""
    if not a or not b or not a.get("sha256") or not b.get("sha256"):
        return None
    return a["sha256"] == b["sha256"]


def check_same(items: Iterable[tuple[str, Mapping | None]], what: str, fix: str, describe=describe_corpus) -> None:
    """Refuse (:class:`DataError`, one line naming both sides) ``(where, identity)`` pairs of which two
    recorded identities differ (compared by ``sha256``); unrecorded ones pass."""
    first: tuple[str, Mapping] | None = None
    for where, identity in items:
        if not identity or not identity.get("sha256"):
            continue
        if first is None:
            first = (where, identity)
        elif identity["sha256"] != first[1]["sha256"]:
            raise DataError(where, None, f"{what} than {first[0]}: {describe(identity)} here, "
                            f"{describe(first[1])} there", fix)


def describe_model(identity: Mapping | None) -> str:
    if not identity:
        return "an unrecorded model"
    return f"model {identity.get('model')} (contents sha256 {str(identity.get('sha256'))[:12]}...)"


def check_repeated(paths: Sequence[str | os.PathLike], flag: str, what: str) -> None:
    """Refuse a file or folder given twice (the same path, or two names of one file)."""
    seen: dict[str, str] = {}
    for p in paths:
        key = os.path.realpath(p)
        if key in seen:
            raise DataError(p, None, f"given twice to {flag} (as {seen[key]} and {p}): every {what} is read once",
                            "give each one once")
        seen[key] = str(p)


# ------------------------------------------------------------------------------------------------
# Runs


# ------------------------------------------------------------------------------------------------
# Ids


def corpus_contains(dataset: str | os.PathLike, ids: list[str]):
    """A boolean array: which of ``ids`` are documents of ``dataset``'s corpus (the current store's id
    index when there is one, else the ids of ``corpus.jsonl``)."""
    import numpy as np

    from zsdr.data.store import open_current, store_dir, store_is_current

    dataset = Path(dataset)
    if store_is_current(store_dir(dataset), dataset):
        store, _ = open_current(dataset)
        rows = store.find_rows(ids)
        return np.asarray(rows) >= 0
    from zsdr.data.formats import find_file, iter_records

    known = {rid for _, rid, _ in iter_records(find_file(dataset, "corpus.jsonl"), "corpus")}
    return np.array([i in known for i in ids], dtype=bool)


def check_known_ids(ids: Iterable[str], dataset: str | os.PathLike, where: str | os.PathLike, what: str,
                    fix: str, max_fraction: float = UNKNOWN_IDS_MAX) -> int:
    """Count the distinct ``ids`` that ``dataset``'s corpus lacks; refuse (:class:`DataError` naming
    ``where`` and the dataset) more than ``max_fraction`` of them; a few are logged. Returns the count."""
    distinct = sorted(set(ids))
    if not distinct:
        return 0
    found = corpus_contains(dataset, distinct)
    unknown = int(len(distinct) - found.sum())
    if not unknown:
        return 0
    example = next(i for i, ok in zip(distinct, found.tolist()) if not ok)
    share = unknown / len(distinct)
    if share > max_fraction:
        raise DataError(where, None, f"{unknown} of the {len(distinct)} document ids of the {what} ({share:.1%}, "
                        f"more than the {max_fraction:.0%} allowed) are not in the corpus of {dataset} "
                        f"(e.g. {example!r})", fix)
    log.warning("%s: %d of the %d document ids of the %s are not in the corpus of %s (e.g. %r); they count as "
                "non-relevant", where, unknown, len(distinct), what, dataset, example)
    return unknown
