"""Lucene BM25 (``zsdr.sparse.lucene``, Anserini in-process) against the in-memory BM25 (``zsdr.data.bm25``).

Both index ``title + " " + text`` of every document with k1=0.9, b=0.4 and return the top 1000 for
the judged queries of the split, dropping a hit whose id is the query id (BEIR's convention). Lucene
analyses with Anserini's English analyzer (Porter stemming, stopwords); the in-memory index splits
on ``\\w+`` and lower-cases. Timings are index + search, best of ``--repeat`` runs, in this process;
the JVM start is timed once on its own. nDCG@10 comes from pytrec_eval over the qrels queries.

    .venv/bin/python benchmarks/bm25_lucene_vs_inmemory.py [DATASET_DIR] [--split test] [--repeat 3]

DATASET_DIR defaults to the BEIR SciFact copy in ../shared/data (or $ZSDR_SHARED_DATA).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pytrec_eval

from zsdr.data.bm25 import BM25
from zsdr.data.formats import judged_queries, read_corpus, read_qrels
from zsdr.sparse import lucene

DEPTH = 1000


def default_dataset() -> Path:
    root = os.environ.get("ZSDR_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
    return Path(root) / "beir" / "scifact"


def ndcg10(qrels: dict, run: dict) -> float:
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
    return sum(s["ndcg_cut_10"] for s in scores.values()) / len(qrels)


def lucene_bm25(dataset: Path, queries: dict[str, str]) -> tuple[dict, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        index = lucene.build_index(dataset, Path(tmp) / "index")
        built = time.perf_counter()
        run = lucene.search(index, queries, depth=DEPTH)
        return run, built - start, time.perf_counter() - built


def inmemory_bm25(dataset: Path, queries: dict[str, str]) -> tuple[dict, float, float]:
    start = time.perf_counter()
    corpus = read_corpus(dataset)
    index = BM25([f"{d['title']} {d['text']}" for d in corpus.values()], ids=list(corpus), k1=0.9, b=0.4)
    built = time.perf_counter()
    hits = index.search(queries, k=DEPTH + 1)
    run = {q: dict([(d, s) for d, s in ranked.items() if d != q][:DEPTH]) for q, ranked in hits.items()}
    return run, built - start, time.perf_counter() - built


def best_of(fn, dataset: Path, queries: dict[str, str], repeat: int) -> tuple[dict, float, float]:
    best = None
    for _ in range(repeat):
        run, t_index, t_search = fn(dataset, queries)
        if best is None or t_index + t_search < best[1] + best[2]:
            best = (run, t_index, t_search)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", type=Path, default=default_dataset())
    parser.add_argument("--split", default="test")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if not any((args.dataset / name).is_file() for name in ("corpus.jsonl", "corpus.jsonl.gz")):
        print(f"{args.dataset}: no corpus.jsonl (pass a BEIR-layout folder)", file=sys.stderr)
        return 2
    queries = judged_queries(args.dataset, args.split)
    qrels = read_qrels(args.dataset, args.split)
    start = time.perf_counter()
    lucene.start_jvm()
    t_jvm = time.perf_counter() - start
    run_l, index_l, search_l = best_of(lucene_bm25, args.dataset, queries, args.repeat)
    run_m, index_m, search_m = best_of(inmemory_bm25, args.dataset, queries, args.repeat)
    total_l, total_m = index_l + search_l, index_m + search_m
    print(f"dataset   {args.dataset.name} ({args.split}): {len(queries)} queries, top {DEPTH}")
    print(f"lucene    index {index_l:.2f} s + search {search_l:.2f} s = {total_l:.2f} s  "
          f"(JVM start {t_jvm:.2f} s, once)  nDCG@10 {ndcg10(qrels, run_l):.4f}")
    print(f"in-memory index {index_m:.2f} s + search {search_m:.2f} s = {total_m:.2f} s  "
          f"nDCG@10 {ndcg10(qrels, run_m):.4f}")
    print(f"ratio     lucene / in-memory = {total_l / total_m:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
