"""Exact inner-product search over embedding shards, the one-shot ``encode-search`` path and its CLI.

:func:`search_shards` scores every document of every shard with faiss ``IndexFlatIP`` (on a GPU
when faiss sees one), one bounded block of one shard at a time (float16 shards are widened to
float32 a block at a time), and keeps a running top-``k`` per query, so the corpus never has to fit
in memory. Ties are broken by corpus position (earlier wins), whatever the sharding: for the range
shards written by :func:`zsdr.retrieval.encode.encode_corpus_shard` the position is ``start + row``
(``row * num_shards + shard`` for the modulo shards of earlier versions); for other folders it is the
concatenation order given.

The same search can be scattered over jobs: :func:`search_shard_topk` writes one shard's top-``k``
(ids and scores) and :func:`merge_shard_topk` merges those files into the run that
:func:`search_shards` gives over all the shards, byte for byte (same blocks, scores and tie rule).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from zsdr.argtypes import UsageError, device, nonnegative_int, positive_int
from zsdr.io import DataError, temp_sibling

log = logging.getLogger(__name__)

GPU_MAX_K = 2048  # faiss GPU k-selection limit
_NO_KEY = np.iinfo(np.int64).max


class _Layout:
    """Maps (shard folder, row) to a corpus-position key and back."""

    def __init__(self, metas: list[dict]):
        shards = [m.get("shard") for m in metas]
        ns = {m.get("num_shards") for m in metas}
        self.kind = "concatenated"
        if (all(m.get("assignment") == "modulo" for m in metas) and len(ns) == 1
                and len(set(shards)) == len(shards)):
            self.kind = "modulo"
            self.n = int(ns.pop())
            self.shard_of = [int(s) for s in shards]
            self.folder_of = np.full(self.n, -1, dtype=np.int64)
            self.folder_of[self.shard_of] = np.arange(len(shards))
            return
        if all(m.get("assignment") == "range" and isinstance(m.get("start"), int) for m in metas):
            self.kind = "range"
            self.offsets = np.array([m["start"] for m in metas], dtype=np.int64)
        else:
            counts = np.array([int(m["count"]) for m in metas], dtype=np.int64)
            self.offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        # locate(): the folders holding rows, by first key (an empty folder holds no key)
        held = [i for i, m in enumerate(metas) if int(m["count"]) > 0]
        held.sort(key=lambda i: self.offsets[i])
        self._held = np.array(held, dtype=np.int64)
        self._starts = self.offsets[self._held] if held else np.zeros(0, dtype=np.int64)

    def keys(self, folder: int, rows: np.ndarray) -> np.ndarray:
        rows = rows.astype(np.int64)
        if self.kind == "modulo":
            return rows * self.n + self.shard_of[folder]
        return rows + self.offsets[folder]

    def locate(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.kind == "modulo":
            return self.folder_of[keys % self.n], keys // self.n
        at = np.searchsorted(self._starts, keys, side="right") - 1
        return self._held[at], keys - self._starts[at]


def _exact_topk(scores: np.ndarray, keys: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best of one row of scores, ties to the smaller key, best first."""
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        cand = np.nonzero(scores >= kth)[0]
    else:
        cand = np.arange(len(scores))
    order = np.lexsort((keys[cand], -scores[cand]))[:k]
    return cand[order]


def _rank(all_s: np.ndarray, all_k: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best columns of each row, ordered by (score desc, key asc)."""
    order = np.argsort(-all_s, axis=1)  # fast and unstable; rows with misordered ties are redone below
    ss = np.take_along_axis(all_s, order, axis=1)
    kk = np.take_along_axis(all_k, order, axis=1)
    bad = np.nonzero(((ss[:, 1:] == ss[:, :-1]) & (kk[:, 1:] < kk[:, :-1])).any(axis=1))[0]
    if len(bad):
        exact = np.lexsort((all_k[bad], -all_s[bad]), axis=-1)
        ss[bad] = np.take_along_axis(all_s[bad], exact, axis=1)
        kk[bad] = np.take_along_axis(all_k[bad], exact, axis=1)
    return ss[:, :k], kk[:, :k]


def _merge(best_s: np.ndarray, best_k: np.ndarray, s: np.ndarray, keys: np.ndarray, k: int):
    """Running top-k (best first) merged with a block's candidates; ties by the smaller key."""
    if s.shape[1] == 0 or (s.max(axis=1) < best_s[:, -1]).all():
        return best_s, best_k
    return _rank(np.concatenate([best_s, s], axis=1), np.concatenate([best_k, keys], axis=1), k)


class _Searcher:
    """Builds a flat IP index for one block on the CPU or the GPU and answers top-k with exact ties."""

    def __init__(self, gpu: bool | None):
        import faiss

        self.faiss = faiss
        available = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
        if gpu and not available:
            raise RuntimeError("gpu=True but faiss sees no GPU (on a CUDA machine run `make install-gpu`)")
        self.gpu = bool(available) if gpu is None else bool(gpu)
        self.res = faiss.StandardGpuResources() if self.gpu else None
        self._warned = False

    def index(self, block: np.ndarray, k: int):
        cpu = self.faiss.IndexFlatIP(block.shape[1])
        cpu.add(block)
        if self.gpu and k <= GPU_MAX_K:
            return self.faiss.index_cpu_to_gpu(self.res, 0, cpu)
        if self.gpu and not self._warned:
            log.warning("k=%d exceeds faiss's GPU limit of %d; searching on the CPU", k, GPU_MAX_K)
            self._warned = True
        return cpu

    @contextlib.contextmanager
    def blas_blocks(self, query_bs: int = 1024, database_bs: int = 16384):
        """Larger database blocks for faiss's CPU BLAS path (about 2x faster than its 1024 default at
        k=1000; the scratch buffer is ``query_bs * database_bs`` floats, 64 MiB); restored after."""
        cvar = getattr(self.faiss, "cvar", None)
        if cvar is None or not hasattr(cvar, "distance_compute_blas_database_bs"):
            yield
            return
        before = cvar.distance_compute_blas_query_bs, cvar.distance_compute_blas_database_bs
        cvar.distance_compute_blas_query_bs, cvar.distance_compute_blas_database_bs = query_bs, database_bs
        try:
            yield
        finally:
            cvar.distance_compute_blas_query_bs, cvar.distance_compute_blas_database_bs = before

    @staticmethod
    def topk(index, queries: np.ndarray, block: np.ndarray, keys: np.ndarray, k: int):
        """Scores and keys of the best ``min(k, n)`` rows of ``block`` per query, ties to smaller keys."""
        n = len(block)
        kb = min(k + 1, n)
        scores, rows = index.search(queries, kb)
        if kb > k:
            # The k-th and (k+1)-th scores are equal: which tied rows make the cut is up to faiss,
            # so such queries are recomputed exactly with the tie rule.
            ambiguous = np.nonzero(scores[:, k - 1] == scores[:, k])[0]
            scores, rows = scores[:, :k].copy(), rows[:, :k].copy()
            for i in ambiguous:
                exact = block @ queries[i]
                pick = _exact_topk(exact, keys, k)
                scores[i], rows[i] = exact[pick], pick
        return scores, keys[rows]


def _queries(query_emb: np.ndarray, query_ids: Sequence[str], batch_queries: int, k: int
             ) -> tuple[np.ndarray, list[str]]:
    if k < 1 or batch_queries < 1:
        raise ValueError("k and batch_queries must be >= 1")
    queries = np.ascontiguousarray(query_emb, dtype=np.float32)
    query_ids = [str(q) for q in query_ids]
    if queries.ndim != 2 or len(queries) != len(query_ids):
        raise ValueError(f"{len(query_ids)} query ids for query embeddings of shape {queries.shape}")
    if len(set(query_ids)) != len(query_ids):
        raise ValueError("duplicate query ids")
    return queries, query_ids


def _open_shards(shard_dirs: Sequence[Path], dim: int) -> list[tuple[np.ndarray, dict]]:
    from zsdr.retrieval.encode import open_embeddings

    if not shard_dirs:
        raise ValueError("no shard folders given")
    opened = [open_embeddings(d) for d in shard_dirs]   # memory-mapped: nothing is read yet
    for d, (_, meta) in zip(shard_dirs, opened):
        if meta["dim"] != dim:
            raise DataError(d / "meta.json", None, f"documents have dimension {meta['dim']}, queries {dim}",
                            "encode queries and documents with the same model")
    return opened


def _search(queries: np.ndarray, opened: list[tuple[np.ndarray, dict]], layout: _Layout, k: int,
            gpu: bool | None, batch_queries: int, block_mb: int, block_rows: int | None,
            show_progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """The running top-``k`` ``(scores, keys)`` of every query over the folders, block by block."""
    from tqdm.auto import tqdm

    searcher = _Searcher(gpu)
    nq, dim = queries.shape
    best_s = np.full((nq, k), -np.inf, dtype=np.float32)
    best_k = np.full((nq, k), _NO_KEY, dtype=np.int64)
    rows_per_block = max(1, block_rows or (block_mb << 20) // (dim * 4))
    total = sum(int(m["count"]) for _, m in opened)
    bar = tqdm(total=total, desc="search", unit="doc", disable=not show_progress)
    with searcher.blas_blocks(), bar:
        for f, (emb, _) in enumerate(opened):
            for r0 in range(0, len(emb), rows_per_block):
                block = np.ascontiguousarray(emb[r0:r0 + rows_per_block], dtype=np.float32)
                keys = layout.keys(f, np.arange(r0, r0 + len(block)))
                index = searcher.index(block, min(k + 1, len(block)))
                for q0 in range(0, nq, batch_queries):
                    q1 = min(q0 + batch_queries, nq)
                    s, kk = searcher.topk(index, queries[q0:q1], block, keys, k)
                    best_s[q0:q1], best_k[q0:q1] = _merge(best_s[q0:q1], best_k[q0:q1], s, kk, k)
                del index, block
                bar.update(len(keys))
    return best_s, best_k


def _ids_at(directory: Path, wanted: np.ndarray, count: int) -> list[str]:
    """The ids on the (sorted, unique) 0-based lines ``wanted`` of a folder's ids.txt, checking its length."""
    from zsdr.retrieval.encode import IDS

    found: list[str] = []
    j, n = 0, 0
    with open(directory / IDS, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if j < len(wanted) and wanted[j] == n - 1:
                found.append(line.rstrip("\n"))
                j += 1
    if n != count:
        raise DataError(directory / IDS, None, f"{n} ids for {count} embeddings", "encode the shard again")
    return found


def _as_run(query_ids: Sequence[str], best_s: np.ndarray, best_k: np.ndarray, names: np.ndarray
            ) -> dict[str, dict[str, float]]:
    valid = best_k != _NO_KEY
    run: dict[str, dict[str, float]] = {}
    for i, qid in enumerate(query_ids):
        n = int(valid[i].sum())
        run[qid] = dict(zip(names[i, :n].tolist(), best_s[i, :n].tolist()))
    return run


def search_shards(query_emb: np.ndarray, query_ids: Sequence[str], shard_dirs: Sequence[str | os.PathLike],
                  k: int = 1000, gpu: bool | None = None, batch_queries: int = 4096, block_mb: int = 1024,
                  block_rows: int | None = None, show_progress: bool = False) -> dict[str, dict[str, float]]:
    """Exact top-``k`` inner-product search of ``query_emb`` over embedding folders.

    Returns ``{qid: {docid: score}}`` with each query's documents best first (ties: earlier in the
    corpus first). ``gpu=None`` uses a GPU when faiss sees one. Memory: the queries, the running
    ``len(queries) x k`` results and one block of at most ``block_mb`` MiB (float32, twice over
    while faiss copies it); ``block_rows`` sets the block size in rows instead.
    """
    queries, query_ids = _queries(query_emb, query_ids, batch_queries, k)
    shard_dirs = [Path(d) for d in shard_dirs]
    opened = _open_shards(shard_dirs, queries.shape[1])
    metas = [meta for _, meta in opened]
    layout = _Layout(metas)
    best_s, best_k = _search(queries, opened, layout, k, gpu, batch_queries, block_mb, block_rows, show_progress)
    # Resolve the ids of the rows that made any top-k, one shard's ids.txt at a time.
    valid = best_k != _NO_KEY
    folders = np.full(best_k.shape, -1, dtype=np.int64)
    rows = np.full(best_k.shape, -1, dtype=np.int64)
    folders[valid], rows[valid] = layout.locate(best_k[valid])
    names = np.empty(best_k.shape, dtype=object)
    for f, d in enumerate(shard_dirs):
        mask = folders == f
        if not mask.any():
            continue
        wanted = np.unique(rows[mask])
        lookup = np.array(_ids_at(d, wanted, metas[f]["count"]), dtype=object)
        names[mask] = lookup[np.searchsorted(wanted, rows[mask])]
    return _as_run(query_ids, best_s, best_k, names)


# --------------------------------------------------------------------------------------------
# Scatter / gather: one job per shard writes its top-k, one job merges them (cluster.scatter_search)

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
    _warn_settings(q_meta, [shard_dir])
    queries, q_ids = _queries(q_emb, q_ids, batch_queries, k)
    opened = _open_shards([shard_dir], queries.shape[1])
    meta = opened[0][1]
    layout = _Layout([meta])
    start = time.perf_counter()
    best_s, best_k = _search(queries, opened, layout, k, gpu, batch_queries, block_mb, block_rows, show_progress)
    valid = best_k != _NO_KEY
    rows = np.full(best_k.shape, -1, dtype=np.int64)
    rows[valid] = layout.locate(best_k[valid])[1]
    width = int(valid.sum(axis=1).max(initial=0))   # min(k, shard size): no all-padding columns
    best_s, rows = best_s[:, :width], rows[:, :width]
    id_rows = np.unique(rows[rows >= 0])
    ids = np.array(_ids_at(shard_dir, id_rows, meta["count"]), dtype=str)
    info = {"format_version": TOPK_FORMAT, "kind": "shard_topk", "k": k, "folder": str(shard_dir),
            "queries": str(queries_dir), "shard_meta": meta}
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
    start = time.perf_counter()
    infos = [_topk_info(p, k) for p in parts]
    layout = _Layout([info["shard_meta"] for info in infos])   # keys of every shard, as search_shards
    query_ids: list[str] | None = None
    lookups = []
    for f, path in enumerate(parts):
        with np.load(path, allow_pickle=False) as z:
            try:
                qids = z["qids"].tolist()
                scores, rows = z["scores"], z["rows"]
                lookups.append((z["id_rows"], z["ids"]))
            except (KeyError, ValueError) as e:
                raise DataError(path, None, f"not a shard top-k file ({e})", "search the shard again") from None
        if query_ids is None:
            query_ids = qids
            best_s = np.full((len(qids), k), -np.inf, dtype=np.float32)
            best_k = np.full((len(qids), k), _NO_KEY, dtype=np.int64)
        elif qids != query_ids:
            raise DataError(path, None, f"other queries than {parts[0]}", "search every shard with the same queries")
        if scores.shape != rows.shape or scores.shape[0] != len(qids):
            raise DataError(path, None, f"scores {scores.shape}, rows {rows.shape}, {len(qids)} queries",
                            "search the shard again")
        valid = rows >= 0
        keys = np.full(rows.shape, _NO_KEY, dtype=np.int64)
        keys[valid] = layout.keys(f, rows[valid])
        best_s, best_k = _merge(best_s, best_k, scores, keys, k)
        del scores, rows, keys
    valid = best_k != _NO_KEY
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
    run = _as_run(query_ids, best_s, best_k, names)
    if out_run is not None:
        write_trec_run(out_run, run, tag=tag, depth=k)
    log.info("merged %d shard top-k files for %d queries in %.1f s", len(parts), len(run), time.perf_counter() - start)
    return run


def _topk_info(path: Path, k: int) -> dict:
    """The checked meta of a shard top-k file holding at least the top-``k`` of its shard."""
    try:
        with np.load(path, allow_pickle=False) as z:
            info = json.loads(str(z["meta"]))
    except (OSError, KeyError, ValueError) as e:
        raise DataError(path, None, f"not a shard top-k file ({e})", "search the shard again") from None
    if info.get("kind") != "shard_topk" or info.get("format_version") != TOPK_FORMAT:
        raise DataError(path, None, "not a shard top-k file of this version", "search the shard again")
    if info["k"] < min(k, int(info["shard_meta"]["count"])):
        raise DataError(path, None, f"the top-{info['k']} of its shard, top-{k} asked",
                        f"search the shard with k >= {k}")
    return info


def _warn_settings(q_meta: dict, shard_dirs: Sequence[str | os.PathLike]) -> None:
    """Warn when a shard was encoded with another model, pooling or similarity than the queries."""
    from zsdr.retrieval.encode import read_meta

    def setting(meta):
        enc = meta.get("encoder") or {}
        return enc.get("model"), enc.get("pooling"), enc.get("similarity")

    for d in shard_dirs:
        meta = read_meta(d)
        if q_meta.get("encoder") and meta.get("encoder") and setting(q_meta) != setting(meta):
            log.warning("%s was encoded with %s, the queries with %s (model, pooling, similarity)", d,
                        setting(meta), setting(q_meta))


def search_folders(queries_dir: str | os.PathLike, shard_dirs: Sequence[str | os.PathLike], out_run: str | os.PathLike,
                   k: int = 1000, tag: str = "dense", gpu: bool | None = None, **kwargs) -> dict:
    """Search an embeddings folder of queries over shard folders; write the TREC run."""
    from zsdr.data.formats import write_trec_run
    from zsdr.retrieval.encode import load_embeddings

    q_emb, q_ids, q_meta = load_embeddings(queries_dir)
    _warn_settings(q_meta, shard_dirs)
    run = search_shards(np.asarray(q_emb), q_ids, shard_dirs, k=k, gpu=gpu, **kwargs)
    write_trec_run(out_run, run, tag=tag, depth=k)
    return run


def _write_run(encoder, out_run, run: dict, k: int, tag: str | None, dataset_dir, split: str, start: float) -> None:
    from zsdr.data.formats import write_trec_run

    name = Path(str(encoder.name_or_path or "model")).name or "model"
    write_trec_run(out_run, run, tag=tag or f"dense-{name}", depth=k)
    log.info("dense search %s on %s/%s: %d queries in %.1f s", name, dataset_dir, split, len(run),
             time.perf_counter() - start)


def search_with_model(model, dataset_dir: str | os.PathLike, split: str, shard_dirs: Sequence[str | os.PathLike],
                      out_run: str | os.PathLike, k: int = 1000, tag: str | None = None, batch_size: int = 64,
                      device: str | None = None, precision: str | None = None, gpu: bool | None = None,
                      show_progress: bool = False, **overrides) -> dict:
    """Encode the judged queries of ``split`` with ``model`` and search corpus shards encoded earlier.

    The workflow's search job: the shards come from :func:`~zsdr.retrieval.encode.encode_corpus_shard`
    jobs run with the same model and ``overrides``. Writes the TREC run; returns it.
    """
    from zsdr.models.encoder import load_encoder
    from zsdr.retrieval.encode import encode_judged_queries

    start = time.perf_counter()
    encoder = load_encoder(model, device=device, precision=precision, **overrides)
    q_ids, q_emb = encode_judged_queries(encoder, dataset_dir, split, batch_size, device, precision, show_progress)
    run = search_shards(q_emb, q_ids, shard_dirs, k=k, gpu=gpu, show_progress=show_progress)
    _write_run(encoder, out_run, run, k, tag, dataset_dir, split, start)
    return run


def encode_search(model, dataset_dir: str | os.PathLike, split: str, out_run: str | os.PathLike,
                  pooling: str | None = None, similarity: str | None = None, max_length: int | None = None,
                  query_max_length: int | None = None, doc_max_length: int | None = None,
                  doc_format: str | None = None, query_prefix: str | None = None, doc_prefix: str | None = None,
                  batch_size: int = 64, k: int = 1000, num_shards: int = 1, work_dir: str | os.PathLike | None = None,
                  tag: str | None = None, device: str | None = None, precision: str | None = None,
                  dtype: str = "float16", gpu: bool | None = None, show_progress: bool = True,
                  trust_remote_code: bool = False) -> dict:
    """Encode the judged queries of ``split`` and the corpus (``num_shards`` shards), search, write a TREC run.

    ``model`` is an HF id, a folder or an :class:`~zsdr.models.encoder.Encoder`. Shards go to
    ``work_dir`` (kept) or to a temporary folder beside ``out_run`` (removed). Returns the run.
    ``trust_remote_code``: as in :meth:`Encoder.from_pretrained <zsdr.models.encoder.Encoder.from_pretrained>`.
    """
    from zsdr.models.encoder import load_encoder
    from zsdr.retrieval.encode import encode_corpus_shard, encode_judged_queries

    overrides = dict(pooling=pooling, similarity=similarity, max_length=max_length, query_max_length=query_max_length,
                     doc_max_length=doc_max_length, doc_format=doc_format, query_prefix=query_prefix,
                     doc_prefix=doc_prefix)
    encoder = load_encoder(model, device=device, precision=precision, trust_remote_code=trust_remote_code,
                           **overrides)
    start = time.perf_counter()
    q_ids, q_emb = encode_judged_queries(encoder, dataset_dir, split, batch_size, device, precision, show_progress)
    out_run = Path(out_run)
    out_run.parent.mkdir(parents=True, exist_ok=True)
    temp = None
    if work_dir is None:
        temp = temp_sibling(out_run, is_dir=True, kind="shards")
    root = Path(work_dir) if work_dir is not None else temp
    try:
        shard_dirs = [encode_corpus_shard(encoder, dataset_dir, root / f"shard-{s}-of-{num_shards}", s, num_shards,
                                          batch_size=batch_size, dtype=dtype, device=device, precision=precision,
                                          show_progress=show_progress)
                      for s in range(num_shards)]
        run = search_shards(q_emb, q_ids, shard_dirs, k=k, gpu=gpu, show_progress=show_progress)
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    _write_run(encoder, out_run, run, k, tag, dataset_dir, split, start)
    return run


def search_datasets(jobs: Sequence[dict], k: int = 1000, tag: str | None = None, batch_size: int = 64,
                    dtype: str = "float16", device: str | None = None, precision: str | None = None,
                    gpu: bool | None = None) -> None:
    """Encode and search several datasets in one process (the workflow's `dense_search_group` job).

    Each job names ``model``, ``options`` (encoder settings), ``dataset``, ``split``, ``embeddings`` (the
    corpus folder written, as one shard) and ``run`` (the TREC run written). A model is loaded once for
    every dataset that uses it with the same settings. Embeddings and runs are those of
    :func:`~zsdr.retrieval.encode.encode_corpus_shard` followed by :func:`search_with_model`.
    """
    from zsdr.models.encoder import load_encoder
    from zsdr.retrieval.encode import encode_corpus_shard

    loaded, encoder = None, None
    for job in jobs:
        key = json.dumps([str(job["model"]), job.get("options") or {}], sort_keys=True, default=str)
        if key != loaded:  # one model in memory at a time
            encoder = None
            encoder = load_encoder(job["model"], device=device, precision=precision, **(job.get("options") or {}))
            loaded = key
        shard = encode_corpus_shard(encoder, job["dataset"], job["embeddings"], 0, 1, batch_size=batch_size,
                                    dtype=dtype, device=device, precision=precision, show_progress=False)
        search_with_model(encoder, job["dataset"], job["split"], [shard], job["run"], k=k, tag=tag,
                          batch_size=batch_size, device=device, precision=precision, gpu=gpu)


# --------------------------------------------------------------------------------------------
# CLI


def _set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)
        try:
            import faiss

            faiss.omp_set_num_threads(threads)
        except (ImportError, AttributeError):  # pragma: no cover
            pass


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="Hugging Face id or model folder")
    p.add_argument("--pooling", choices=["cls", "mean", "cls_linear_ln"], default=None,
                   help="pooling of the last hidden states (default: the checkpoint's zsdr.json or "
                        "sentence-transformers config)")
    p.add_argument("--similarity", choices=["dot", "cosine"], default=None,
                   help="score of a query and a document (default: from the checkpoint, as --pooling)")
    p.add_argument("--max-length", type=positive_int, default=None, help="query and document maximum tokens")
    p.add_argument("--query-max-length", type=positive_int, default=None,
                   help="query maximum tokens (default: --max-length, else the checkpoint's)")
    p.add_argument("--doc-max-length", type=positive_int, default=None,
                   help="document maximum tokens (default: --max-length, else the checkpoint's)")
    p.add_argument("--doc-format", choices=["title_space_text", "title_sep_text", "lower_title_text", "text"],
                   default=None, help="how title and text make the document input (zsdr.models.encoder; "
                                      "default: the checkpoint's, else title_space_text)")
    p.add_argument("--query-prefix", default=None, help="text put before every query (default: the checkpoint's)")
    p.add_argument("--doc-prefix", default=None, help="text put before every document (default: the checkpoint's)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="run the model folder's own code where its config.json asks for it (refused otherwise; "
                        "folders zsdr export wrote need no code run)")
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="texts per batch at the longest length; shorter batches hold as many tokens "
                        "(default: %(default)s)")
    p.add_argument("--device", type=device, default=None, help="cpu, cuda, cuda:1 (default: CUDA when available)")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default=None,
                   help="autocast on CUDA (auto: bf16 where supported); the CPU always runs fp32")
    p.add_argument("--threads", type=positive_int, default=None, help="CPU threads for torch and faiss")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _overrides(args) -> dict:
    """The encoder settings a command was given (and ``trust_remote_code`` where asked for)."""
    return dict(pooling=args.pooling, similarity=args.similarity, max_length=args.max_length,
                query_max_length=args.query_max_length, doc_max_length=args.doc_max_length,
                doc_format=args.doc_format, query_prefix=args.query_prefix, doc_prefix=args.doc_prefix,
                **({"trust_remote_code": True} if args.trust_remote_code else {}))


def _gpu_flag(value: str) -> bool | None:
    """``--gpu`` as ``search_shards``' ``gpu``; ``yes`` where faiss sees no GPU is a usage error at once
    (before any encoding), naming the fix."""
    if value == "yes":
        import faiss

        if not (faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0):
            raise UsageError("argument --gpu: yes, but faiss sees no GPU (fix: --gpu auto or no; on a CUDA machine "
                             "`make install-gpu` installs faiss-gpu)")
    return {"auto": None, "yes": True, "no": False}[value]


def cmd_encode_search(args) -> int:
    _set_threads(args.threads)
    start = time.perf_counter()
    run = encode_search(args.model, args.dataset, args.split, args.out, batch_size=args.batch_size, k=args.depth,
                        num_shards=args.shards, work_dir=args.work_dir, tag=args.tag, device=args.device,
                        precision=args.precision, dtype=args.dtype, gpu=_gpu_flag(args.gpu),
                        show_progress=not args.quiet, **_overrides(args))
    print(json.dumps({"run": str(args.out), "queries": len(run), "seconds": round(time.perf_counter() - start, 1)}))
    return 0


def _check_shard(args) -> None:
    """``zsdr encode``'s usage check (run by zsdr.cli before the model is looked at)."""
    if args.shard >= args.num_shards:
        raise UsageError(f"argument --shard: shard {args.shard} does not exist among --num-shards {args.num_shards} "
                         f"(fix: pass --shard 0 to {args.num_shards - 1})")


def _check_gpu(args) -> None:
    """The usage check of the commands with ``--gpu`` (run by zsdr.cli before the model is looked at)."""
    _gpu_flag(args.gpu)


def cmd_encode(args) -> int:
    from zsdr.retrieval.encode import encode_corpus_shard, read_meta

    _check_shard(args)
    _set_threads(args.threads)
    out = encode_corpus_shard(args.model, args.dataset, args.out, args.shard, args.num_shards,
                              batch_size=args.batch_size, dtype=args.dtype, device=args.device,
                              precision=args.precision, chunk_size=args.chunk_size, show_progress=not args.quiet,
                              **_overrides(args))
    meta = read_meta(out)
    print(json.dumps({"out": str(out), "count": meta["count"], "dim": meta["dim"], "seconds": meta["seconds"]}))
    return 0


def cmd_encode_queries(args) -> int:
    from zsdr.retrieval.encode import encode_queries_file, read_meta

    _set_threads(args.threads)
    out = encode_queries_file(args.model, args.dataset, args.split, args.out, batch_size=args.batch_size,
                              device=args.device, precision=args.precision, show_progress=not args.quiet,
                              **_overrides(args))
    meta = read_meta(out)
    print(json.dumps({"out": str(out), "count": meta["count"], "dim": meta["dim"]}))
    return 0


def cmd_search(args) -> int:
    _set_threads(args.threads)
    start = time.perf_counter()
    run = search_folders(args.queries, args.shards, args.out, k=args.depth, tag=args.tag, gpu=_gpu_flag(args.gpu),
                         show_progress=not args.quiet)
    print(json.dumps({"run": str(args.out), "queries": len(run), "seconds": round(time.perf_counter() - start, 1)}))
    return 0


def cmd_search_shard(args) -> int:
    _set_threads(args.threads)
    start = time.perf_counter()
    out = search_shard_topk(args.queries, args.shard, args.out, k=args.depth, gpu=_gpu_flag(args.gpu),
                            show_progress=not args.quiet)
    print(json.dumps({"out": str(out), "seconds": round(time.perf_counter() - start, 1)}))
    return 0


def cmd_merge_shards(args) -> int:
    run = merge_shard_topk(args.parts, args.out, k=args.depth, tag=args.tag)
    print(json.dumps({"run": str(args.out), "queries": len(run)}))
    return 0


def register_cli(subparsers) -> None:
    """Add ``encode-search``, ``encode``, ``encode-queries``, ``search``, ``search-shard`` and ``merge-shards``
    to a ``zsdr`` subparsers object."""
    p = subparsers.add_parser("encode-search", help="dense retrieval in one go: encode queries and corpus, search")
    _add_model_args(p)
    p.add_argument("--dataset", required=True, help="BEIR-layout folder")
    p.add_argument("--split", default="test", help="qrels split whose judged queries are searched (default: test)")
    p.add_argument("--out", required=True, help="TREC run to write")
    p.add_argument("--shards", type=positive_int, default=1, help="encode the corpus in this many shards")
    p.add_argument("--depth", type=positive_int, default=1000, help="documents per query")
    p.add_argument("--dtype", choices=["float16", "float32"], default="float16", help="stored document embeddings")
    p.add_argument("--work-dir", default=None, help="keep the shard folders here (default: temporary)")
    p.add_argument("--tag", default=None, help="run tag, the TREC run's last column (default: dense-<model name>)")
    p.add_argument("--gpu", choices=["auto", "yes", "no"], default="auto", help="faiss on the GPU")
    p.set_defaults(func=cmd_encode_search, check_usage=_check_gpu)

    p = subparsers.add_parser("encode", help="encode one shard of a corpus into an embeddings folder")
    _add_model_args(p)
    p.add_argument("--dataset", required=True, help="BEIR-layout folder")
    p.add_argument("--out", required=True, help="embeddings folder to write")
    p.add_argument("--shard", type=nonnegative_int, default=0, help="which shard to encode, from 0 (default: 0)")
    p.add_argument("--num-shards", type=positive_int, default=1,
                   help="contiguous corpus shards of nearly equal size (default: 1, the whole corpus)")
    p.add_argument("--dtype", choices=["float16", "float32"], default="float16",
                   help="stored document embeddings (default: float16)")
    p.add_argument("--chunk-size", type=positive_int, default=10_000,
                   help="documents read, encoded and written at a time")
    p.set_defaults(func=cmd_encode, check_usage=_check_shard)

    p = subparsers.add_parser("encode-queries", help="encode the judged queries of a split into an embeddings folder")
    _add_model_args(p)
    p.add_argument("--dataset", required=True, help="BEIR-layout folder")
    p.add_argument("--split", default="test", help="qrels split whose judged queries are encoded (default: test)")
    p.add_argument("--out", required=True, help="embeddings folder to write")
    p.set_defaults(func=cmd_encode_queries)

    p = subparsers.add_parser("search", help="exact inner-product search of query embeddings over corpus shards")
    p.add_argument("--queries", required=True, help="embeddings folder of the queries")
    p.add_argument("--shards", required=True, nargs="+", help="embeddings folders of the corpus")
    p.add_argument("--out", required=True, help="TREC run to write")
    p.add_argument("--depth", type=positive_int, default=1000, help="documents per query (default: 1000)")
    p.add_argument("--tag", default="dense", help="run tag, the TREC run's last column (default: dense)")
    p.add_argument("--gpu", choices=["auto", "yes", "no"], default="auto",
                   help="faiss on the GPU (auto: when one is visible)")
    p.add_argument("--threads", type=positive_int, default=None, help="CPU threads for torch and faiss")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_search, check_usage=_check_gpu)

    p = subparsers.add_parser("search-shard", help="one shard's exact top-k for query embeddings (scattered search)")
    p.add_argument("--queries", required=True, help="embeddings folder of the queries")
    p.add_argument("--shard", required=True, help="embeddings folder of one corpus shard")
    p.add_argument("--out", required=True, help=".npz of the shard's top-k to write")
    p.add_argument("--depth", type=positive_int, default=1000, help="documents kept per query (default: 1000)")
    p.add_argument("--gpu", choices=["auto", "yes", "no"], default="auto",
                   help="faiss on the GPU (auto: when one is visible)")
    p.add_argument("--threads", type=positive_int, default=None, help="CPU threads for torch and faiss")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_search_shard, check_usage=_check_gpu)

    p = subparsers.add_parser("merge-shards", help="merge per-shard top-k files (search-shard) into a TREC run")
    p.add_argument("--parts", required=True, nargs="+", help="the shards' .npz files, in shard order")
    p.add_argument("--out", required=True, help="TREC run to write")
    p.add_argument("--depth", type=positive_int, default=1000, help="documents per query (default: 1000)")
    p.add_argument("--tag", default="dense", help="run tag, the TREC run's last column (default: dense)")
    p.set_defaults(func=cmd_merge_shards)
