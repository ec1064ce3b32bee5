"""MoDIR's case study (Table 4 of Xin et al., Findings of ACL 2022): nearest source queries of two
target queries before and after MoDIR training.

Of the target queries both score sets cover (per-query values of one metric, e.g. from the two
models' metrics files), the one whose metric gains most from the
``before`` model to the ``after`` model and the one that loses most (the smallest gain: it can be
positive when no query got worse) are picked; for each, the ``neighbours`` source training queries
(the queries ``qrels/train.tsv`` judges, optionally a seeded sample) nearest to it by the inner
product of query embeddings, under each model. Source queries with the same text count once, so a
neighbour list never repeats a text. Search is exact (numpy).
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from typing import Mapping

import numpy as np

from zsdr.data.formats import judged_queries
from zsdr.io import DataError
from zsdr.models.encoder import load_encoder

log = logging.getLogger(__name__)

def source_queries(source: str | os.PathLike, max_queries: int | None = None, seed: int = 0) -> list[str]:
    """The distinct texts of the source's training queries (``qrels/train.tsv``), in qrels order; a
    seeded sample of at most ``max_queries`` of them when set (the order kept)."""
    texts = list(dict.fromkeys(judged_queries(source, "train").values()))
    if max_queries is not None:
        if max_queries < 1:
            raise ValueError("max_source_queries must be >= 1")
        if len(texts) > max_queries:
            keep = sorted(random.Random(seed).sample(range(len(texts)), max_queries))
            texts = [texts[i] for i in keep]
    return texts


def nearest_rows(queries: np.ndarray, pool: np.ndarray, k: int) -> list[list[int]]:
    """Indices of the ``k`` rows of ``pool`` with the largest inner product with each query (ties: lower
    index first)."""
    scores = queries.astype(np.float64) @ pool.astype(np.float64).T
    return [list(np.argsort(-row, kind="stable")[:k]) for row in scores]


def case_study(before: str, after: str, options_before: dict, options_after: dict, source: str, target: str,
               target_split: str, scores_before: Mapping[str, float], scores_after: Mapping[str, float], *,
               metric: str = "ndcg@10",
               neighbours: int = 3, max_source_queries: int | None = None, seed: int = 0, device=None,
               batch_size: int = 64) -> list[dict]:
    """The rows of MoDIR Table 4: ``{"target_query", "qid", "gain", "before", "after", "metric"}`` for the target
    query with the largest ``metric`` gain (after − before) and the one with the largest loss (the
    smallest gain; one row when the target has a single scored query). ``before`` / ``after``: model
    folders loaded with :func:`zsdr.models.encoder.load_encoder` and ``options_before`` /
    ``options_after`` (a system's encoder settings); ``source`` / ``target``: BEIR folders;
    ``scores_before`` / ``scores_after``: the two models' per-query ``metric`` on ``target``'s
    ``target_split``. ``before`` / ``after`` in a row: the ``neighbours`` nearest source query texts
    under each model, nearest first."""
    if neighbours < 1:
        raise ValueError("neighbours must be >= 1")
    per_query = [scores_before, scores_after]
    common = sorted(set(per_query[0]) & set(per_query[1]))
    if not common:
        raise ValueError(f"the two models' per-query {metric!r} share no query: evaluate both on the same "
                         "target split")
    texts = judged_queries(target, target_split)
    unknown = [q for q in common if q not in texts]
    if unknown:
        raise DataError(Path(target) / "qrels", None, f"{len(unknown)} scored queries are not judged in the "
                        f"{target_split!r} split (first: {unknown[0]!r})",
                        "pass the split the metrics files were computed on")
    gains = {q: per_query[1][q] - per_query[0][q] for q in common}
    best = max(common, key=lambda q: (gains[q], q))
    worst = min(common, key=lambda q: (gains[q], q))
    picked = list(dict.fromkeys([best, worst]))
    pool = source_queries(source, max_source_queries, seed)
    if len(pool) < neighbours:
        raise DataError(Path(source) / "qrels", None, f"{len(pool)} distinct training queries, fewer than the "
                        f"{neighbours} neighbours asked for", "lower neighbours or raise max_source_queries")
    log.info("case study on %s: %d scored target queries, %d source queries; gain %+.3f (%s), loss %+.3f (%s)",
             Path(target).name, len(common), len(pool), gains[best], best, gains[worst], worst)
    lists = {}
    for side, model, options in (("before", before, options_before), ("after", after, options_after)):
        encoder = load_encoder(model, device=device, **(options or {}))
        q = encoder.encode_queries([texts[qid] for qid in picked], batch_size=batch_size, device=device)
        s = encoder.encode_queries(pool, batch_size=batch_size, device=device)
        lists[side] = [[pool[i] for i in idx] for idx in nearest_rows(q, s, neighbours)]
        del encoder
    return [{"target_query": texts[qid], "qid": qid, "gain": float(gains[qid]), "before": lists["before"][i],
             "after": lists["after"][i], "metric": metric} for i, qid in enumerate(picked)]
