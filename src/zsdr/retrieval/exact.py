"""Exact inner-product search over embedding shards: the running top-``k`` and its tie rule.

:func:`search_shards` scores every document of every shard with faiss ``IndexFlatIP`` (on a GPU
when faiss sees one), one bounded block of one shard at a time (float16 shards are widened to
float32 a block at a time), and keeps a running top-``k`` per query, so the corpus never has to fit
in memory. Ties are broken by corpus position (earlier wins), whatever the sharding: for the range
shards written by :func:`zsdr.retrieval.encode.encode_corpus_shard` the position is ``start + row``
(``row * num_shards + shard`` for the modulo shards of earlier versions); for other folders it is the
concatenation order given.

The parts the scattered search (:mod:`zsdr.retrieval.scatter`) shares are public here: the
corpus-position keys (:class:`Layout`), the block search (:func:`search_blocks`), the running merge
(:func:`merge_topk`) and the id lookup (:func:`ids_at`, :func:`as_run`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from zsdr.io import DataError
from zsdr.provenance import check_repeated  # noqa: F401 - re-exported

log = logging.getLogger("zsdr.retrieval.search")

GPU_MAX_K = 2048  # faiss GPU k-selection limit
NO_KEY = np.iinfo(np.int64).max


class Layout:
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


def merge_topk(best_s: np.ndarray, best_k: np.ndarray, s: np.ndarray, keys: np.ndarray, k: int):
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


def check_queries(query_emb: np.ndarray, query_ids: Sequence[str], batch_queries: int, k: int
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


def open_shards(shard_dirs: Sequence[Path], dim: int, queries: tuple[str, dict] | None = None
                ) -> list[tuple[np.ndarray, dict]]:
    """The shard folders memory-mapped (nothing is read yet), checked as one corpus
    (:func:`check_shards`) and, with ``queries`` ``(where, meta)``, against the queries."""
    from zsdr.retrieval.encode import open_embeddings

    if not shard_dirs:
        raise ValueError("no shard folders given")
    check_repeated(shard_dirs, "--shards", "embeddings folder")
    opened = [open_embeddings(d) for d in shard_dirs]
    for d, (_, meta) in zip(shard_dirs, opened):
        if meta["dim"] != dim:
            raise DataError(d / "meta.json", None, f"documents have dimension {meta['dim']}, queries {dim}",
                            "encode queries and documents with the same model")
    check_shards([(str(d), meta) for d, (_, meta) in zip(shard_dirs, opened)], queries)
    from zsdr.retrieval.encode import IDS, check_ids_file

    for d, (_, meta) in zip(shard_dirs, opened):   # before any search: the records and the ids (small)
        path = Path(d) / IDS
        if not path.is_file():
            raise DataError(path, None, "file not found", "encode the folder again")
        check_ids_file(d, meta, path.read_bytes())
    return opened


def check_shards(shards: Sequence[tuple[str, dict]], queries: tuple[str, dict] | None = None) -> None:
    """Refuse shards that cannot make one corpus's search: two corpora, the same rows twice (a copy of a
    shard, overlapping ranges), two models, other encoder settings; and queries of another dataset or
    model than the shards. One line naming both sides."""
    from zsdr.provenance import check_same, describe_model

    fix_corpus = "search the shards of one corpus, with the queries of that dataset"
    items = [(where, meta.get("corpus")) for where, meta in shards]
    if queries is not None:
        items = [(queries[0], queries[1].get("corpus"))] + items
    check_same(items, "another corpus", fix_corpus)
    ranges: dict[tuple, str] = {}
    spans = []
    for where, meta in shards:
        if meta.get("assignment") == "range" and isinstance(meta.get("start"), int):
            spans.append((int(meta["start"]), int(meta.get("stop", meta["start"] + int(meta["count"]))), where))
        elif meta.get("assignment") == "modulo":
            key = (meta.get("shard"), meta.get("num_shards"))
            if key in ranges:
                raise DataError(where, None, f"holds shard {key[0]} of {key[1]}, as {ranges[key]} does",
                                "give every shard of the corpus once")
            ranges[key] = where
    spans.sort()
    for (a0, a1, aw), (b0, b1, bw) in zip(spans, spans[1:]):
        if b0 < a1 and b1 > b0:
            raise DataError(bw, None, f"holds corpus rows {b0}-{b1 - 1}, and {aw} rows {a0}-{a1 - 1}: the same "
                            "documents twice", "give every shard of the corpus once")
    models = [(where, {"model": meta.get("model"), "sha256": meta.get("model_sha256")}) for where, meta in shards]
    if queries is not None:
        models = [(queries[0], {"model": queries[1].get("model"), "sha256": queries[1].get("model_sha256")})] + models
    check_same(models, "encoded by another model", "encode the queries and every shard with the same model",
               describe=describe_model)

    def setting(meta):
        enc = meta.get("encoder") or {}
        return {k: enc.get(k) for k in ("pooling", "similarity", "dim", "normalize") if k in enc}

    both = ([queries] if queries is not None else []) + list(shards)
    first = next(((w, m) for w, m in both if m.get("encoder")), None)
    for where, meta in both:
        if first and meta.get("encoder") and setting(meta) != setting(first[1]):
            raise DataError(where, None, f"encoded with {setting(meta)}, but {first[0]} with {setting(first[1])}",
                            "encode the queries and every shard with the same settings")


def search_blocks(queries: np.ndarray, opened: list[tuple[np.ndarray, dict]], layout: Layout, k: int,
            gpu: bool | None, batch_queries: int, block_mb: int, block_rows: int | None,
            show_progress: bool, folders: Sequence[Path] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The running top-``k`` ``(scores, keys)`` of every query over the folders, block by block; with
    ``folders`` (the folders of ``opened``) each one's rows are verified against its checksum as they are
    read (:class:`~zsdr.retrieval.encode.RowDigest`), before anything is returned."""
    from tqdm.auto import tqdm

    from zsdr.retrieval.encode import RowDigest

    searcher = _Searcher(gpu)
    nq, dim = queries.shape
    best_s = np.full((nq, k), -np.inf, dtype=np.float32)
    best_k = np.full((nq, k), NO_KEY, dtype=np.int64)
    rows_per_block = max(1, block_rows or (block_mb << 20) // (dim * 4))
    total = sum(int(m["count"]) for _, m in opened)
    bar = tqdm(total=total, desc="search", unit="doc", disable=not show_progress)
    digests = [RowDigest(d, meta) for d, (_, meta) in zip(folders, opened)] if folders else [None] * len(opened)
    with searcher.blas_blocks(), bar:
        for f, (emb, _) in enumerate(opened):
            for r0 in range(0, len(emb), rows_per_block):
                raw = emb[r0:r0 + rows_per_block]
                if digests[f] is not None:   # the rows' checksum, from the bytes the search reads anyway
                    digests[f].update(r0, raw)
                block = np.ascontiguousarray(raw, dtype=np.float32)
                keys = layout.keys(f, np.arange(r0, r0 + len(block)))
                index = searcher.index(block, min(k + 1, len(block)))
                for q0 in range(0, nq, batch_queries):
                    q1 = min(q0 + batch_queries, nq)
                    s, kk = searcher.topk(index, queries[q0:q1], block, keys, k)
                    best_s[q0:q1], best_k[q0:q1] = merge_topk(best_s[q0:q1], best_k[q0:q1], s, kk, k)
                del index, block, raw
                bar.update(len(keys))
    for (emb, _), digest in zip(opened, digests):
        if digest is not None:
            digest.check(len(emb))
    return best_s, best_k


def ids_at(directory: Path, wanted: np.ndarray, count: int, meta: dict | None = None) -> list[str]:
    """The ids on the (sorted, unique) 0-based lines ``wanted`` of a folder's ids.txt, checking its length
    and its checksum (``meta``'s; read when not given), streamed (only the wanted ids are kept)."""
    from zsdr.retrieval.encode import IDS, REENCODE, checksum_mismatch, read_meta, recorded_checksums, row_hasher

    meta = read_meta(directory) if meta is None else meta
    sums = recorded_checksums(directory, meta)
    h = row_hasher(sums.get("algorithm", "sha256")) if sums else None
    found: list[str] = []
    j, n = 0, 0
    with open(directory / IDS, "rb") as fh:
        for n, line in enumerate(fh, 1):
            if h is not None:
                h.update(line)
            if j < len(wanted) and wanted[j] == n - 1:
                found.append(line.rstrip(b"\n").decode("utf-8", "replace"))
                j += 1
    if h is not None and h.hexdigest() != sums[IDS]:
        raise checksum_mismatch(directory / IDS, "its checksum")
    if n != count:
        raise DataError(directory / IDS, None, f"{n} ids for {count} embeddings", REENCODE)
    return found


def as_run(query_ids: Sequence[str], best_s: np.ndarray, best_k: np.ndarray, names: np.ndarray
            ) -> dict[str, dict[str, float]]:
    valid = best_k != NO_KEY
    run: dict[str, dict[str, float]] = {}
    for i, qid in enumerate(query_ids):
        n = int(valid[i].sum())
        run[qid] = dict(zip(names[i, :n].tolist(), best_s[i, :n].tolist()))
    return run


def search_shards(query_emb: np.ndarray, query_ids: Sequence[str], shard_dirs: Sequence[str | os.PathLike],
                  k: int = 1000, gpu: bool | None = None, batch_queries: int = 4096, block_mb: int = 1024,
                  block_rows: int | None = None, show_progress: bool = False,
                  queries_meta: tuple[str, dict] | None = None) -> dict[str, dict[str, float]]:
    """Exact top-``k`` inner-product search of ``query_emb`` over embedding folders.

    The folders must make one corpus, encoded by one model (:func:`check_shards`; with ``queries_meta``
    ``(where, meta)`` the queries' dataset and model too), and each one's rows match its checksum (read
    once, as they are searched).

    Returns ``{qid: {docid: score}}`` with each query's documents best first (ties: earlier in the
    corpus first). ``gpu=None`` uses a GPU when faiss sees one. Memory: the queries, the running
    ``len(queries) x k`` results and one block of at most ``block_mb`` MiB (float32, twice over
    while faiss copies it); ``block_rows`` sets the block size in rows instead.
    """
    queries, query_ids = check_queries(query_emb, query_ids, batch_queries, k)
    shard_dirs = [Path(d) for d in shard_dirs]
    opened = open_shards(shard_dirs, queries.shape[1], queries_meta)
    metas = [meta for _, meta in opened]
    layout = Layout(metas)
    best_s, best_k = search_blocks(queries, opened, layout, k, gpu, batch_queries, block_mb, block_rows, show_progress,
                                   shard_dirs)
    # Resolve the ids of the rows that made any top-k, one shard's ids.txt at a time.
    valid = best_k != NO_KEY
    folders = np.full(best_k.shape, -1, dtype=np.int64)
    rows = np.full(best_k.shape, -1, dtype=np.int64)
    folders[valid], rows[valid] = layout.locate(best_k[valid])
    names = np.empty(best_k.shape, dtype=object)
    for f, d in enumerate(shard_dirs):
        mask = folders == f
        if not mask.any():
            continue
        wanted = np.unique(rows[mask])
        lookup = np.array(ids_at(d, wanted, metas[f]["count"], metas[f]), dtype=object)
        names[mask] = lookup[np.searchsorted(wanted, rows[mask])]
    return as_run(query_ids, best_s, best_k, names)


def warn_settings(q_meta: dict, shard_dirs: Sequence[str | os.PathLike]) -> None:
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
