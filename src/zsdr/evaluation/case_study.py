"""MoDIR's case study (Table 4 of Xin et al., Findings of ACL 2022): nearest source queries of two
target queries before and after MoDIR training.

Of the target queries both metrics files score, the one whose metric gains most from the
``before`` model to the ``after`` model and the one that loses most (the smallest gain: it can be
positive when no query got worse) are picked; for each, the ``neighbours`` source training queries
(the queries ``qrels/train.tsv`` judges, optionally a seeded sample) nearest to it by the inner
product of query embeddings, under each model. Source queries with the same text count once, so a
neighbour list never repeats a text. Search is exact (numpy).
"""

from __future__ import annotations

import csv
import logging
import os
import random
from pathlib import Path

import numpy as np

from zsdr.data.formats import judged_queries
from zsdr.io import DataError, atomic_write
from zsdr.models.encoder import load_encoder
from zsdr.tables.inputs import metric_scores, read_metrics
from zsdr.tables.render import format_value

log = logging.getLogger(__name__)

CSV_COLUMNS = ["source", "target_query", "qid", "ndcg10_gain", "nearest_source_queries_before",
               "nearest_source_queries_after"]
PUBLISHED_COLUMNS = ["target_query", "ndcg10_gain", "nearest_source_queries_before", "nearest_source_queries_after"]
JOIN = " | "


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


def _nearest(queries: np.ndarray, pool: np.ndarray, k: int) -> list[list[int]]:
    """Indices of the ``k`` rows of ``pool`` with the largest inner product with each query (ties: lower
    index first)."""
    scores = queries.astype(np.float64) @ pool.astype(np.float64).T
    return [list(np.argsort(-row, kind="stable")[:k]) for row in scores]


def case_study(before: str, after: str, options_before: dict, options_after: dict, source: str, target: str,
               target_split: str, metrics_before: str, metrics_after: str, *, metric: str = "ndcg@10",
               neighbours: int = 3, max_source_queries: int | None = None, seed: int = 0, device=None,
               batch_size: int = 64) -> list[dict]:
    """The rows of MoDIR Table 4: ``{"target_query", "qid", "gain", "before", "after", "metric"}`` for the target
    query with the largest ``metric`` gain (after − before) and the one with the largest loss (the
    smallest gain; one row when the target has a single scored query). ``before`` / ``after``: model
    folders loaded with :func:`zsdr.models.encoder.load_encoder` and ``options_before`` /
    ``options_after`` (a system's encoder settings); ``source`` / ``target``: BEIR folders;
    ``metrics_before`` / ``metrics_after``: the two models' metrics files on ``target``'s
    ``target_split``. ``before`` / ``after`` in a row: the ``neighbours`` nearest source query texts
    under each model, nearest first."""
    if neighbours < 1:
        raise ValueError("neighbours must be >= 1")
    per_query = [metric_scores(read_metrics(path), path, metric)[1] for path in (metrics_before, metrics_after)]
    common = sorted(set(per_query[0]) & set(per_query[1]))
    if not common:
        raise DataError(metrics_after, None, f"no query has a per-query {metric!r} in both this file and "
                        f"{metrics_before}", "evaluate both models on the same target split")
    texts = judged_queries(target, target_split)
    unknown = [q for q in common if q not in texts]
    if unknown:
        raise DataError(metrics_after, None, f"{len(unknown)} scored queries are not judged in {target}'s "
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
        lists[side] = [[pool[i] for i in idx] for idx in _nearest(q, s, neighbours)]
        del encoder
    return [{"target_query": texts[qid], "qid": qid, "gain": float(gains[qid]), "before": lists["before"][i],
             "after": lists["after"][i], "metric": metric} for i, qid in enumerate(picked)]


def _read_published(path: str | os.PathLike) -> list[dict]:
    fix = "restore src/zsdr/tables/published/modir_table4.csv"
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in PUBLISHED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise DataError(path, 1, f"no column(s) {', '.join(missing)}", fix)
            return list(reader)
    except FileNotFoundError:
        raise DataError(path, None, "file not found", fix) from None


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_case_study(out_csv: str | os.PathLike, out_md: str | os.PathLike, rows: list[dict], *,
                     published: str | os.PathLike, scale: str = "") -> None:
    """Write :func:`case_study`'s rows and the paper's (``published``: modir_table4.csv) atomically.

    CSV columns: ``source`` (``zsdr`` or ``published``), ``target_query``, ``qid`` (empty for the
    paper's rows), ``ndcg10_gain`` (ours with three decimals; the column keeps the published file's
    name whatever the rows' ``metric``), ``nearest_source_queries_before`` / ``_after`` (texts joined with
    ``" | "``). The Markdown: a title, the scale, our rows and then the paper's, marked (published)."""
    paper = _read_published(published)
    metric = next((r["metric"] for r in rows if r.get("metric")), "ndcg@10")
    shown = "nDCG" + metric[4:] if metric.lower().startswith("ndcg") else metric
    out = [{"source": "zsdr", "target_query": r["target_query"], "qid": r["qid"],
            "ndcg10_gain": format_value(r["gain"], "d3"),
            "nearest_source_queries_before": JOIN.join(r["before"]),
            "nearest_source_queries_after": JOIN.join(r["after"])} for r in rows]
    out += [{"source": "published", "qid": "", **{c: p[c] for c in PUBLISHED_COLUMNS}} for p in paper]
    with atomic_write(out_csv) as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        w.writerows(out)
    lines = ["# MoDIR Table 4: case study", "",
             f"Scale: {scale or 'unspecified'}. The target queries with the largest gain and the largest loss in "
             f"{shown} (after − before MoDIR training) and their nearest source training queries by the inner "
             "product of query embeddings, before and after. The paper's rows (TREC-COVID / MS MARCO, ANCE) "
             f"follow, marked (published){'' if metric == 'ndcg@10' else '; their gains are in nDCG@10'}.", "",
             f"| Target query | {shown} gain | Nearest source queries (before) | Nearest source queries (after) |",
             "|---|---|---|---|"]
    cells = [(f"{_md(r['target_query'])} ({r['qid']})", format_value(r["gain"], "+d3"), r["before"], r["after"])
             for r in rows]
    cells += [(f"{_md(p['target_query'])} *(published)*", p["ndcg10_gain"],
               p["nearest_source_queries_before"].split(JOIN), p["nearest_source_queries_after"].split(JOIN))
              for p in paper]
    for query, gain, before, after in cells:
        lines.append(f"| {query} | {gain} | {'<br>'.join(map(_md, before))} | {'<br>'.join(map(_md, after))} |")
    lines.append("")
    with atomic_write(out_md) as fh:
        fh.write("\n".join(lines))
