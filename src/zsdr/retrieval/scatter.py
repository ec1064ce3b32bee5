"""The exact search scattered over jobs (``cluster.scatter_search``): one job per shard writes its
top-``k``, one job merges them.

:func:`search_shard_topk` writes one shard's top-``k`` (ids and scores) and :func:`merge_shard_topk`
merges those files into the run that :func:`~zsdr.retrieval.exact.search_shards` gives over all the
shards, byte for byte (same blocks, scores and tie rule).
"""

from __future__ import annotations

import json
import logging
import os
import time
import zipfile
import zlib
from pathlib import Path
from typing import Sequence

import numpy as np

from zsdr.io import DataError
from zsdr.retrieval.exact import (NO_KEY, Layout, as_run, check_queries, check_repeated, check_shards, ids_at,
                                  merge_topk, open_shards, search_blocks, warn_settings)

log = logging.getLogger("zsdr.retrieval.search")

TOPK_FORMAT = 1


def search_shard_topk(queries_dir: str | os.PathLike, shard_dir: str | os.PathLike, out: str | os.PathLike,
                      k: int = 1000, gpu: bool | None = None, batch_queries: int = 4096, block_mb: int = 1024,
                      block_rows: int | None = None, show_progress: bool = False) -> Path:
    """Search one shard folder for the queries of an embeddings folder; write its top-``k`` as ``.npz``.

    The scatter half of a scattered search: the blocks, scores and tie rule are those of
    :func:`search_shards` over that shard, so :func:`merge_shard_topk` of every shard's file gives
    the run :func:`search_folders` gives over all of them, byte for byte. ``out`` (written
    atomically) holds ``qids``, ``scores`` and ``rows`` (``len(qids) x min(k, shard size)``, best
    first; rows in the shard, ``-1`` / ``-inf`` past a query's last hit), the shard's ``ids`` of the distinct rows ``id_rows``
    (sorted) and a JSON ``meta`` (``k``, the shard folder's meta). Returns ``out``.
    """
    from zsdr.io import atomic_write
    from zsdr.retrieval.encode import load_embeddings

    shard_dir, out = Path(shard_dir), Path(out)
    q_emb, q_ids, q_meta = load_embeddings(queries_dir)
    warn_settings(q_meta, [shard_dir])
    queries, q_ids = check_queries(q_emb, q_ids, batch_queries, k)
    opened = open_shards([shard_dir], queries.shape[1], (str(queries_dir), q_meta))
    meta = opened[0][1]
    layout = Layout([meta])
    start = time.perf_counter()
    best_s, best_k = search_blocks(queries, opened, layout, k, gpu, batch_queries, block_mb, block_rows, show_progress,
                                   [shard_dir])
    valid = best_k != NO_KEY
    rows = np.full(best_k.shape, -1, dtype=np.int64)
    rows[valid] = layout.locate(best_k[valid])[1]
    width = int(valid.sum(axis=1).max(initial=0))   # min(k, shard size): no all-padding columns
    best_s, rows = best_s[:, :width], rows[:, :width]
    id_rows = np.unique(rows[rows >= 0])
    ids = np.array(ids_at(shard_dir, id_rows, meta["count"], meta), dtype=str)
    queries_record = {key: q_meta.get(key) for key in ("corpus", "model", "model_sha256", "encoder", "dataset", "split")}
    info = {"format_version": TOPK_FORMAT, "kind": "shard_topk", "k": k, "folder": str(shard_dir),
            "queries": str(queries_dir), "queries_meta": queries_record, "shard_meta": meta}
    with atomic_write(out, "wb") as fh:
        np.savez(fh, qids=np.array(q_ids, dtype=str), scores=best_s, rows=rows, id_rows=id_rows, ids=ids,
                 meta=np.array(json.dumps(info)))
    log.info("searched %s (%d docs) for %d queries in %.1f s -> %s", shard_dir, meta["count"], len(q_ids),
             time.perf_counter() - start, out)
    return out


def merge_shard_topk(parts: Sequence[str | os.PathLike], out_run: str | os.PathLike | None = None, k: int = 1000,
                     tag: str = "dense") -> dict[str, dict[str, float]]:
    """Merge the per-shard top-k files of :func:`search_shard_topk` into the exact top-``k`` run.

    The gather half: the same running merge and tie rule (corpus position, from the shards' metas in
    the order given) as :func:`search_shards`, so the run equals the one-job search over the same
    folders. Writes the TREC run when ``out_run`` is given; returns the run. Memory: the merged
    ``len(qids) x k`` lists plus one file's at a time.
    """
    from zsdr.data.formats import write_trec_run

    parts = [Path(p) for p in parts]
    if not parts:
        raise ValueError("no shard top-k files given")
    if k < 1:
        raise ValueError("k must be >= 1")
    check_repeated(parts, "--parts", "shard top-k file")
    start = time.perf_counter()
    infos = [_topk_info(p, k) for p in parts]
    # one corpus (each shard once), one model, the same queries' dataset: as search_shards checks its folders
    first_queries = next((i.get("queries_meta") for i in infos if i.get("queries_meta")), None)
    check_shards([(str(p), info["shard_meta"]) for p, info in zip(parts, infos)],
                 (str(parts[0]) + " (its queries)", first_queries) if first_queries else None)
    layout = Layout([info["shard_meta"] for info in infos])   # keys of every shard, as search_shards
    query_ids: list[str] | None = None
    lookups = []
    for f, path in enumerate(parts):
        try:
            with np.load(path, allow_pickle=False) as z:
                qids = z["qids"].tolist()
                scores, rows = z["scores"], z["rows"]
                lookups.append((z["id_rows"], z["ids"]))
        except (KeyError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
            raise DataError(path, None, f"not a shard top-k file, or one cut short or damaged "
                            f"({e.__class__.__name__})", "search the shard again") from None
        if query_ids is None:
            query_ids = qids
            best_s = np.full((len(qids), k), -np.inf, dtype=np.float32)
            best_k = np.full((len(qids), k), NO_KEY, dtype=np.int64)
        elif qids != query_ids:
            raise DataError(path, None, f"other queries than {parts[0]}", "search every shard with the same queries")
        if scores.shape != rows.shape or scores.shape[0] != len(qids):
            raise DataError(path, None, f"scores {scores.shape}, rows {rows.shape}, {len(qids)} queries",
                            "search the shard again")
        valid = rows >= 0
        keys = np.full(rows.shape, NO_KEY, dtype=np.int64)
        keys[valid] = layout.keys(f, rows[valid])
        best_s, best_k = merge_topk(best_s, best_k, scores, keys, k)
        del scores, rows, keys
    valid = best_k != NO_KEY
    folders = np.full(best_k.shape, -1, dtype=np.int64)
    rows = np.full(best_k.shape, -1, dtype=np.int64)
    folders[valid], rows[valid] = layout.locate(best_k[valid])
    names = np.empty(best_k.shape, dtype=object)
    for f, (id_rows, ids) in enumerate(lookups):
        mask = folders == f
        if not mask.any():
            continue
        pos = np.searchsorted(id_rows, rows[mask])
        if (pos >= len(id_rows)).any() or (id_rows[np.minimum(pos, len(id_rows) - 1)] != rows[mask]).any():
            raise DataError(parts[f], None, "a merged row has no id", "search the shard again")
        names[mask] = ids.astype(object)[pos]
    run = as_run(query_ids, best_s, best_k, names)
    if out_run is not None:
        corpus = next((i["shard_meta"].get("corpus") for i in infos if i["shard_meta"].get("corpus")), None)
        q = first_queries or {}
        write_trec_run(out_run, run, tag=tag, depth=k, provenance={
            "kind": "dense", "corpus": corpus, "model": q.get("model"), "model_sha256": q.get("model_sha256"),
            "queries": {"dataset": q.get("dataset"), "split": q.get("split")}, "shards": [i["folder"] for i in infos]})
    log.info("merged %d shard top-k files for %d queries in %.1f s", len(parts), len(run), time.perf_counter() - start)
    return run


def _topk_info(path: Path, k: int) -> dict:
    """The checked meta of a shard top-k file holding at least the top-``k`` of its shard."""
    if path.is_dir():
        raise DataError(path, None, "is a folder, not a shard top-k file", "pass the .npz files search-shard wrote")
    try:
        with np.load(path, allow_pickle=False) as z:
            info = json.loads(str(z["meta"]))
    except (KeyError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise DataError(path, None, f"not a shard top-k file, or one cut short or damaged ({e.__class__.__name__})",
                        "search the shard again") from None
    if not isinstance(info, dict) or info.get("kind") != "shard_topk" or info.get("format_version") != TOPK_FORMAT \
            or not isinstance(info.get("shard_meta"), dict) or not isinstance(info.get("k"), int):
        raise DataError(path, None, "not a shard top-k file of this version", "search the shard again")
    if info["k"] < min(k, int(info["shard_meta"]["count"])):
        raise DataError(path, None, f"the top-{info['k']} of its shard, top-{k} asked",
                        f"search the shard with k >= {k}")
    return info
