"""Produce TREC runs with the in-memory BM25 (:mod:`zsdr.sparse.bm25`)."""

from __future__ import annotations

import logging
import os

from zsdr.data.formats import read_corpus, read_qrels, read_queries, write_trec_run
from zsdr.io import DataError
from zsdr.sparse.bm25 import BM25

log = logging.getLogger("zsdr.sparse")


def judged_queries(dataset: str | os.PathLike, split: str) -> dict[str, str]:
    """The queries of ``split`` (those its qrels judge), id -> text."""
    queries = read_queries(dataset)
    qrels = read_qrels(dataset, split)
    missing = [q for q in qrels if q not in queries]
    if missing:
        raise DataError(dataset, None, f"qrels/{split} names {len(missing)} unknown queries (e.g. {missing[0]!r})",
                        f"run `zsdr validate {dataset}`")
    return {q: queries[q] for q in qrels}


def bm25_inmemory_run(dataset: str | os.PathLike, split: str, out: str | os.PathLike, k1: float = 0.9,
                      b: float = 0.4, depth: int = 1000, tag: str = "bm25-inmemory") -> int:
    """Index ``title + " " + text`` of every document, search the split's queries, write a TREC run."""
    corpus = read_corpus(dataset)
    queries = judged_queries(dataset, split)
    log.info("BM25 over %d documents for %d queries (k1=%s b=%s)", len(corpus), len(queries), k1, b)
    index = BM25([f"{d['title']} {d['text']}".strip() for d in corpus.values()], ids=list(corpus), k1=k1, b=b)
    run = index.search(queries, k=depth)
    write_trec_run(out, run, tag=tag, depth=depth)
    return len(run)
