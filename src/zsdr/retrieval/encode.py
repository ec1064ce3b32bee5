"""Encode a corpus shard (or a split's queries) into an embeddings folder, in bounded memory.

An embeddings folder (written atomically: it appears complete or not at all)::

    <dir>/embeddings.npy   N x D float16 or float32, rows in corpus order (np.load(mmap_mode="r"))
    <dir>/ids.txt          the N document (or query) ids, one a line, same order
    <dir>/meta.json        {"kind", "count", "dim", "dtype", "precision", "compute_dtype", "model",
                            "encoder", "dataset", "shard", "num_shards", "assignment": "range",
                            "start", "stop", ...}

``precision`` is the requested inference precision (``dense.precision``: fp32, fp16, bf16 or auto)
and ``compute_dtype`` what the encoder ran in (on a GPU the half dtype its weights were cast to;
float32 on the CPU).
bf16 keeps 8 mantissa bits to fp16's 11, enough to reorder near-tied documents, which is why the
small and paper configs encode in fp16 (the papers' inference precision).

Shard ``s`` of ``n`` holds the contiguous rows ``[s * N // n, (s + 1) * N // n)`` of the ``N``
documents in ``corpus.jsonl`` order (:func:`shard_range`): every document lands in exactly one shard,
whatever ``n``, and shard sizes differ by at most one document. A corpus in one shard is streamed from
``corpus.jsonl``; a shard of several reads only its own rows from the dataset's memory-mapped store
(:mod:`zsdr.data.store`, the workflow's ``text_store`` rule), so no shard job parses the whole corpus
(MS MARCO in 16 shards: each job reads ~190 MB of text instead of 3 GB of JSON). Folders written by
earlier versions (``"assignment": "modulo"``: position ``s`` modulo ``n``) still search correctly.
Either way ``chunk_size`` documents at a time are tokenised, length-bucketed, encoded and appended to
``embeddings.npy``, so memory does not grow with the corpus. ``batch_size`` is a token budget
(:meth:`Encoder.encode_tokenized`); on a GPU the next chunk is read and tokenised in a worker thread
while the current one is encoded.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
from pathlib import Path
from typing import IO, Iterator, Sequence

import numpy as np

from zsdr.data.formats import find_file, iter_records, judged_queries
from zsdr.data.store import shard_range
from zsdr.io import DataError, atomic_dir, read_json
from zsdr.models.encoder import Encoder, Packed, load_encoder, prefetched

log = logging.getLogger(__name__)

EMBEDDINGS = "embeddings.npy"
IDS = "ids.txt"
META = "meta.json"
DTYPES = ("float16", "float32")
FORMAT_VERSION = 1
_NPY_HEADER_BYTES = 128  # fixed, so the final shape can be written over the placeholder


def _npy_header(shape: tuple[int, int], dtype: np.dtype) -> bytes:
    """A version 1.0 ``.npy`` header of exactly ``_NPY_HEADER_BYTES`` bytes."""
    body = "{'descr': %r, 'fortran_order': False, 'shape': (%d, %d), }" % (
        np.lib.format.dtype_to_descr(dtype), shape[0], shape[1])
    pad = _NPY_HEADER_BYTES - 10 - len(body) - 1
    if pad < 0:
        raise ValueError(f"shape {shape} too large for the fixed .npy header")
    body = body + " " * pad + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body.encode("latin1")


class NpyAppender:
    """Append rows to an ``.npy`` file whose row count is unknown in advance (header fixed on close)."""

    def __init__(self, path: str | os.PathLike, dim: int, dtype: str = "float32"):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
        self.path = Path(path)
        self.dim = int(dim)
        self.dtype = np.dtype(dtype)
        self.count = 0
        self._fh: IO[bytes] = open(self.path, "wb")
        self._fh.write(_npy_header((0, self.dim), self.dtype))

    def append(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows)
        if rows.ndim != 2 or rows.shape[1] != self.dim:
            raise ValueError(f"expected rows of width {self.dim}, got shape {rows.shape}")
        with np.errstate(over="ignore", invalid="ignore"):
            cast = np.ascontiguousarray(rows, dtype=self.dtype)
        if not np.isfinite(cast).all():
            what = "exceed the float16 range" if np.isfinite(rows).all() else "are not finite (NaN or inf)"
            raise DataError(self.path, None, f"embeddings {what}",
                            "store float32 (--dtype float32) or encode in fp32 (--precision fp32)")
        self._fh.write(cast.tobytes(order="C"))
        self.count += len(cast)

    def close(self) -> None:
        if self._fh.closed:
            return
        self._fh.seek(0)
        self._fh.write(_npy_header((self.count, self.dim), self.dtype))
        self._fh.close()

    def __enter__(self) -> "NpyAppender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_meta(directory: str | os.PathLike) -> dict:
    path = Path(directory) / META
    if not path.is_file():
        raise DataError(path, None, "not an embeddings folder (no meta.json)",
                        "encode it with `zsdr encode` / `zsdr encode-queries`")
    meta = read_json(path, "encode the folder again")
    for key in ("count", "dim", "dtype"):
        if key not in meta:
            raise DataError(path, None, f"missing {key!r}", "encode the folder again")
    return meta


def open_embeddings(directory: str | os.PathLike) -> tuple[np.ndarray, dict]:
    """The memory-mapped ``embeddings.npy`` of a folder and its meta (shapes checked)."""
    directory = Path(directory)
    meta = read_meta(directory)
    path = directory / EMBEDDINGS
    if not path.is_file():
        raise DataError(path, None, "file not found", "encode the folder again")
    emb = np.load(path, mmap_mode="r")
    if emb.ndim != 2 or emb.shape != (meta["count"], meta["dim"]):
        raise DataError(path, None, f"shape {emb.shape} does not match meta.json ({meta['count']}, {meta['dim']})",
                        "encode the folder again")
    return emb, meta


def read_ids(directory: str | os.PathLike) -> list[str]:
    path = Path(directory) / IDS
    if not path.is_file():
        raise DataError(path, None, "file not found", "encode the folder again")
    with open(path, encoding="utf-8") as fh:
        return [line.rstrip("\n") for line in fh]


def load_embeddings(directory: str | os.PathLike) -> tuple[np.ndarray, list[str], dict]:
    """``(embeddings (memmap), ids, meta)`` of a (small) embeddings folder, e.g. queries."""
    emb, meta = open_embeddings(directory)
    ids = read_ids(directory)
    if len(ids) != len(emb):
        raise DataError(Path(directory) / IDS, None, f"{len(ids)} ids for {len(emb)} embeddings",
                        "encode the folder again")
    return emb, ids, meta


_WARNED: set[str] = set()   # datasets whose missing store was reported


def _shard_records(dataset_dir: Path, corpus: Path, shard: int,
                   num_shards: int) -> tuple[int, Iterator[tuple[str, dict]]]:
    """The shard's first row and its ``(id, record)`` pairs in corpus order: the whole ``corpus.jsonl`` read
    once for one shard (no store needed), else the shard's rows of the dataset's store."""
    if num_shards == 1:
        return 0, ((rid, obj) for _, rid, obj in iter_records(corpus, "corpus"))
    from zsdr.data.store import open_current, store_dir, store_is_current

    if not store_is_current(store_dir(dataset_dir), dataset_dir) and str(dataset_dir) not in _WARNED:
        _WARNED.add(str(dataset_dir))
        log.warning("%s has no current store: a temporary one is built from the whole corpus for this "
                    "process (build it once for every shard job with `zsdr store %s`)", dataset_dir, dataset_dir)
    store, _ = open_current(dataset_dir)
    start, stop = shard_range(len(store), shard, num_shards)
    return start, store.iter_range(start, stop)


def _shard_chunks(records: Iterator[tuple[str, dict]], chunk_size: int) -> Iterator[tuple[list, list]]:
    """``(ids, docs)`` lists of up to ``chunk_size`` of ``records``, in their order."""
    ids: list[str] = []
    docs: list[dict] = []
    for rid, obj in records:
        ids.append(rid)
        docs.append({"title": obj.get("title") or "", "text": obj["text"]})
        if len(docs) >= chunk_size:
            yield ids, docs
            ids, docs = [], []
    if docs:
        yield ids, docs


def _shard_total(dataset_dir: Path, shard: int, num_shards: int) -> int | None:
    """Documents in this shard according to ``dataset.json`` (progress bar only)."""
    manifest = dataset_dir / "dataset.json"
    try:
        docs = int(json.loads(manifest.read_text(encoding="utf-8"))["docs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    start, stop = shard_range(docs, shard, num_shards)
    return stop - start


class _Donor:
    """Embeddings another dataset's encode jobs wrote for the documents this corpus shares with it (the same
    id, title and text: :func:`zsdr.data.store.corpus_overlap`), read instead of encoding them again: the
    donor's range shards, memory-mapped, and the overlap map (per row of this corpus, the donor's row or -1)."""

    def __init__(self, shard_dirs: Sequence[str | os.PathLike], overlap: str | os.PathLike, encoder: Encoder,
                 dtype: str):
        opened = sorted((open_embeddings(d) + (Path(d),) for d in shard_dirs), key=lambda x: x[1].get("start", 0))
        for emb, meta, folder in opened:
            if meta.get("assignment") != "range":
                raise DataError(folder / META, None, "not a range shard (encoded before contiguous shards)",
                                "encode the donor dataset again")
            if meta.get("encoder") != json.loads(json.dumps(encoder.describe())) or meta["dim"] != encoder.dim \
                    or meta["dtype"] != dtype:
                raise DataError(folder / META, None, "encoded with other settings than this corpus "
                                f"({meta.get('encoder')}, {meta['dtype']}; here {encoder.describe()}, {dtype})",
                                "share embeddings only between datasets a system encodes alike "
                                "(datasets.shared_corpus)")
        bounds = [(meta["start"], meta["stop"]) for _, meta, _ in opened]
        if [b[0] for b in bounds] != [0] + [b[1] for b in bounds[:-1]]:
            raise DataError(opened[0][2].parent, None, f"the donor's shards {bounds} do not cover its corpus "
                            "contiguously from row 0", "give every shard folder of the donor")
        self.arrays = [emb for emb, _, _ in opened]
        self.starts = np.array([b[0] for b in bounds] + [bounds[-1][1]], dtype=np.int64)
        self.map = np.load(overlap, mmap_mode="r")
        self.path = Path(overlap)
        self.reused = 0

    def rows(self, first: int, count: int) -> np.ndarray:
        if first + count > len(self.map):
            raise DataError(self.path, None, f"maps {len(self.map)} documents, the corpus has more",
                            "write the overlap map again from the current stores")
        return np.asarray(self.map[first:first + count])

    def vectors(self, donor_rows: np.ndarray) -> np.ndarray:
        """The donor's embeddings of ``donor_rows``, in their order."""
        part = np.searchsorted(self.starts, donor_rows, side="right") - 1
        out = np.empty((len(donor_rows), self.arrays[0].shape[1]), dtype=self.arrays[0].dtype)
        for k in np.unique(part).tolist():
            at = np.flatnonzero(part == k)
            out[at] = self.arrays[k][donor_rows[at] - self.starts[k]]
        self.reused += len(donor_rows)
        return out


def _encode_chunks(encoder: Encoder, chunks: Iterator[tuple[list, list]], first: int, donor: _Donor | None,
                   prefetch: bool, batch_size: int, device: str | None,
                   precision: str | None) -> Iterator[tuple[list, np.ndarray]]:
    """``(ids, embeddings)`` per chunk, in corpus order: the documents a donor holds are read from it, the
    others encoded."""
    def encode(features: Packed) -> np.ndarray:
        return encoder.encode_tokenized(features, batch_size=batch_size, device=device, precision=precision,
                                        desc="docs")

    if donor is None:
        for ids, features in _tokenized(encoder, chunks, prefetch):
            yield ids, encode(features)
        return
    row = first
    for ids, docs in chunks:
        held = donor.rows(row, len(ids))
        row += len(ids)
        known = held >= 0
        emb = np.empty((len(ids), encoder.dim), dtype=np.float32)
        if known.any():
            emb[known] = donor.vectors(held[known])
        todo = np.flatnonzero(~known).tolist()
        if todo:
            emb[todo] = encode(Packed.of(encoder.tokenize_docs([docs[i] for i in todo])))
        yield ids, emb


def _tokenized(encoder: Encoder, chunks: Iterator[tuple[list, list]], prefetch: bool) -> Iterator[tuple[list, Packed]]:
    """``(ids, packed token ids)`` per chunk; with ``prefetch`` the next chunk is read, tokenised and
    packed in a worker thread while this one is encoded."""
    def prepare(item: tuple[list, list]) -> tuple[list, Packed]:
        return item[0], Packed.of(encoder.tokenize_docs(item[1]))

    if not prefetch:
        for item in chunks:
            yield prepare(item)
            del item  # not alive while the next chunk is read
        return
    yield from prefetched(map(prepare, chunks))


def precision_meta(encoder: Encoder, device: str | None, precision: str | None) -> dict:
    """What an embeddings folder records about the arithmetic that made it: the requested
    ``precision`` (``dense.precision``) and the ``compute_dtype`` it ran in (the weights' half dtype
    on a GPU; float32 on the CPU, whatever was asked)."""
    import torch

    from zsdr.models.encoder import autocast_dtype

    asked = precision or encoder.precision
    amp = autocast_dtype(encoder._target_device(device), asked)
    return {"precision": asked, "compute_dtype": str(amp or torch.float32).removeprefix("torch.")}


def encode_corpus_shard(model_dir_or_encoder: str | os.PathLike | Encoder, dataset_dir: str | os.PathLike,
                        out_dir: str | os.PathLike, shard: int = 0, num_shards: int = 1, batch_size: int = 64,
                        dtype: str = "float16", device: str | None = None, precision: str | None = None,
                        chunk_size: int = 10_000, show_progress: bool = True,
                        donor: tuple[Sequence[str | os.PathLike], str | os.PathLike] | None = None,
                        **encoder_overrides) -> Path:
    """Encode shard ``shard`` of ``num_shards`` of ``dataset_dir``'s corpus (:func:`shard_range`: contiguous
    rows in ``corpus.jsonl`` order; several shards read the dataset's store) into ``out_dir``.

    ``donor`` ``(shard folders, overlap map)``: another dataset's embeddings by the same encoder, and the map
    of the documents this corpus shares with it (:func:`zsdr.data.store.write_corpus_overlap`): those are
    read from its folders, only the others are encoded (FEVER's and Climate-FEVER's 5.4M Wikipedia abstracts
    are encoded once).

    ``model_dir_or_encoder`` is an HF id, a model folder or a loaded :class:`Encoder`;
    ``encoder_overrides`` (pooling, similarity, max_length, doc_format, ...) apply when loading.
    Returns ``out_dir``; on any error nothing is left there.
    """
    from tqdm.auto import tqdm

    if num_shards < 1 or not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} of {num_shards}: need 0 <= shard < num_shards")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    dataset_dir, out_dir = Path(dataset_dir), Path(out_dir)
    corpus = find_file(dataset_dir, "corpus.jsonl")
    encoder = load_encoder(model_dir_or_encoder, device=device, precision=precision, **encoder_overrides)
    start = time.perf_counter()
    bar = tqdm(total=_shard_total(dataset_dir, shard, num_shards), desc=f"encode shard {shard}/{num_shards}",
               unit="doc", disable=not show_progress, smoothing=0.05)
    # On a GPU the next chunk is read and tokenised in a thread while this one is encoded.
    prefetch = encoder._target_device(device).type == "cuda"
    first, records = _shard_records(dataset_dir, corpus, shard, num_shards)
    given = _Donor(*donor, encoder, dtype) if donor else None
    with atomic_dir(out_dir, kind="embeddings folder") as tmp:
        with NpyAppender(tmp / EMBEDDINGS, encoder.dim, dtype) as emb_out, \
                open(tmp / IDS, "w", encoding="utf-8", newline="\n") as ids_out:
            try:
                for chunk_ids, emb in _encode_chunks(encoder, _shard_chunks(records, chunk_size), first, given,
                                                     prefetch, batch_size, device, precision):
                    emb_out.append(emb)
                    ids_out.write("".join(f"{i}\n" for i in chunk_ids))
                    bar.update(len(chunk_ids))
                    del chunk_ids, emb  # one chunk in memory at a time (two with prefetch)
            finally:
                bar.close()
        seconds = time.perf_counter() - start
        meta = {"format_version": FORMAT_VERSION, "kind": "corpus", "count": emb_out.count, "dim": encoder.dim,
                "dtype": dtype, **precision_meta(encoder, device, precision), "model": encoder.name_or_path,
                "encoder": encoder.describe(), "dataset": str(dataset_dir), "corpus_file": corpus.name,
                "shard": shard, "num_shards": num_shards, "assignment": "range", "start": first,
                "stop": first + emb_out.count, "seconds": round(seconds, 3),
                "docs_per_second": round(emb_out.count / seconds, 2) if seconds > 0 else None,
                **({"donor": {"overlap": str(given.path), "reused": given.reused}} if given else {})}
        (tmp / META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    log.info("shard %d/%d of %s: %d docs in %.1f s -> %s", shard, num_shards, dataset_dir, meta["count"], seconds,
             out_dir)
    return out_dir


def write_query_embeddings(out_dir: str | os.PathLike, ids: Sequence[str], emb: np.ndarray, **meta) -> Path:
    """Write query embeddings (float32) as an embeddings folder, atomically."""
    out_dir = Path(out_dir)
    emb = np.asarray(emb, dtype=np.float32)
    if len(ids) != len(emb):
        raise ValueError(f"{len(ids)} ids for {len(emb)} embeddings")
    with atomic_dir(out_dir, kind="embeddings folder") as tmp:
        with NpyAppender(tmp / EMBEDDINGS, emb.shape[1], "float32") as w:
            w.append(emb)
        (tmp / IDS).write_text("".join(f"{i}\n" for i in ids), encoding="utf-8")
        full = {"format_version": FORMAT_VERSION, "kind": "queries", "count": len(ids), "dim": int(emb.shape[1]),
                "dtype": "float32", **meta}
        (tmp / META).write_text(json.dumps(full, indent=1) + "\n", encoding="utf-8")
    return out_dir


def encode_judged_queries(encoder: Encoder, dataset_dir: str | os.PathLike, split: str, batch_size: int = 64,
                          device: str | None = None, precision: str | None = None,
                          show_progress: bool = False, qrels: dict | None = None) -> tuple[list[str], np.ndarray]:
    """``(ids, embeddings)`` of the judged queries of ``split`` (``qrels``: that split, when already read)."""
    queries = judged_queries(dataset_dir, split, qrels)
    emb = encoder.encode_queries(list(queries.values()), batch_size=batch_size, device=device,
                                 show_progress=show_progress, precision=precision)
    return list(queries), np.asarray(emb)


def encode_queries_file(model_dir_or_encoder: str | os.PathLike | Encoder, dataset_dir: str | os.PathLike,
                        split: str, out_dir: str | os.PathLike, batch_size: int = 64, device: str | None = None,
                        precision: str | None = None, show_progress: bool = False, **encoder_overrides) -> Path:
    """Encode the judged queries of ``split`` (``qrels/<split>.tsv`` order) into an embeddings folder."""
    encoder = load_encoder(model_dir_or_encoder, device=device, precision=precision, **encoder_overrides)
    start = time.perf_counter()
    ids, emb = encode_judged_queries(encoder, dataset_dir, split, batch_size, device, precision, show_progress)
    return write_query_embeddings(out_dir, ids, emb, model=encoder.name_or_path, encoder=encoder.describe(),
                                  **precision_meta(encoder, device, precision), dataset=str(dataset_dir),
                                  split=split, seconds=round(time.perf_counter() - start, 3))
