"""Retrieval metrics through ranx, with per-query scores kept for significance tests.

Metric names are ranx's (``ndcg@10``, ``recall@100``, ``mrr@10``, ...). ranx's ``ndcg`` uses
linear gains like ``trec_eval``'s ``ndcg_cut``; queries of the qrels that a run does not answer
score 0 (as in BEIR's evaluation). Relevance threshold 1: grades >= 1 are relevant.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from zsdr.io import atomic_write


def _ensure_numba_cache() -> None:
    # ranx JIT-compiles with numba; a persistent cache turns ~50 s of compilation into ~10 s.
    os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(".cache") / "numba"))


def evaluate_run(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]],
                 metrics: list[str]) -> dict:
    """``{"aggregate": {metric: mean}, "per_query": {qid: {metric: value}}, "queries": n}``."""
    _ensure_numba_cache()
    import warnings

    from numba.core.errors import NumbaTypeSafetyWarning
    from ranx import Qrels, Run, evaluate

    warnings.simplefilter("ignore", NumbaTypeSafetyWarning)  # ranx's own uint64 -> int64 casts

    qrels = {q: docs for q, docs in qrels.items() if any(g > 0 for g in docs.values())}
    full_run = {q: dict(run.get(q, {})) for q in qrels}
    # ranx cannot hold an empty ranking: give unanswered queries a sentinel that is never relevant.
    for q, docs in full_run.items():
        if not docs:
            docs["\x00none"] = 0.0
    ranx_run = Run(full_run)
    aggregate = evaluate(Qrels(qrels), ranx_run, metrics, make_comparable=True)
    if isinstance(aggregate, float) or not isinstance(aggregate, dict):
        aggregate = {metrics[0]: aggregate}
    per_query = {q: {m: float(ranx_run.scores[m][q]) for m in metrics} for q in qrels}
    return {"aggregate": {m: float(v) for m, v in aggregate.items()}, "per_query": per_query, "queries": len(qrels)}


def write_metrics(path: str | os.PathLike, result: dict, **meta) -> None:
    with atomic_write(path) as fh:
        json.dump({**meta, **result}, fh, indent=1, sort_keys=False)
        fh.write("\n")


def evaluate_files(dataset: str | os.PathLike, split: str, run_file: str | os.PathLike, out: str | os.PathLike,
                   metrics: list[str]) -> dict:
    """Evaluate a TREC run file against ``dataset``'s qrels of ``split``; write the metrics JSON."""
    from zsdr.data.formats import read_qrels, read_trec_run

    result = evaluate_run(read_qrels(dataset, split), read_trec_run(run_file), list(metrics))
    write_metrics(out, result, dataset=str(dataset), split=split, run=str(run_file))
    return result
