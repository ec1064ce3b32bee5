"""Which documents of a corpus the weak-pair writers visit (:mod:`zsdr.training.weak`: Selection): a seeded
permutation of ``corpus.jsonl``, read a window at a time."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from zsdr.io import DataError

_ORDER_STREAM = 2  # fourth seed word of the document permutation (see zsdr.training.weak)


@dataclass(frozen=True)
class CorpusDocument:
    """One document of a BEIR corpus; ``index`` is its 0-based position in ``corpus.jsonl``."""

    index: int
    id: str
    title: str
    text: str



def corpus_records(dataset_dir: str | os.PathLike) -> Iterator[CorpusDocument]:
    """The documents of a BEIR corpus in file order (title ``""`` when missing)."""
    from zsdr.data.formats import find_file, iter_records

    path = find_file(Path(dataset_dir), "corpus.jsonl")
    for index, (_, rid, obj) in enumerate(iter_records(path, "corpus")):
        yield CorpusDocument(index, rid, obj.get("title") or "", obj["text"])


def document_order(n: int, seed: int) -> np.ndarray:
    """The order in which the ``n`` documents of a corpus are visited: a seeded permutation."""
    return np.random.default_rng([int(seed), 0, 0, _ORDER_STREAM]).permutation(int(n))


def first_window(max_pairs: int | None, per_document: int) -> int | None:
    """How many documents :func:`permuted_documents` reads on its first pass when at most
    ``max_pairs`` pairs of up to ``per_document`` each are wanted (``None``: the whole corpus)."""
    if max_pairs is None:
        return None
    return 2 * math.ceil(int(max_pairs) / max(int(per_document), 1)) + 64


def permuted_documents(dataset_dir: str | os.PathLike, seed: int = 0,
                       window: int | None = None) -> Iterator[CorpusDocument]:
    """The documents of a BEIR corpus in the order :func:`document_order` ``(n, seed)``.

    The corpus is read once to count it, then once per window of positions in that order (the
    first ``window`` documents, then twice as many each time; ``None``: one window for the whole
    corpus), holding one window's documents in memory. Stop iterating when enough are read.
    """
    n = sum(1 for _ in corpus_records(dataset_dir))
    rank = np.empty(n, dtype=np.int64)
    rank[document_order(n, seed)] = np.arange(n)
    lo, size = 0, n if window is None else max(1, int(window))
    while lo < n:
        hi = min(n, lo + size)
        docs: list[CorpusDocument | None] = [None] * (hi - lo)
        for doc in corpus_records(dataset_dir):
            if doc.index >= n:
                break
            r = int(rank[doc.index])
            if lo <= r < hi:
                docs[r - lo] = doc
        if any(d is None for d in docs):
            raise DataError(Path(dataset_dir) / "corpus.jsonl", None, "the corpus changed while it was being read",
                            "do not rewrite a corpus while pairs are drawn from it; run again")
        yield from docs
        lo, size = hi, 2 * size


def selected_documents(dataset_dir: str | os.PathLike, seed: int, max_pairs: int | None,
                       per_document: int) -> Iterator[CorpusDocument]:
    """The documents a writer of at most ``max_pairs`` pairs (up to ``per_document`` each) visits, in
    the order of :func:`permuted_documents`; nothing for ``max_pairs`` 0. The writer stops iterating
    once it has written ``max_pairs`` pairs."""
    if max_pairs is not None and int(max_pairs) <= 0:
        return iter(())
    return permuted_documents(dataset_dir, seed, first_window(max_pairs, per_document))
