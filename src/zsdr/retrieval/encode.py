"""Encode a corpus shard (or a split's queries) into an embeddings folder, in bounded memory.

An embeddings folder (written atomically: it appears complete or not at all)::

    <dir>/embeddings.npy   N x D float16 or float32, rows in corpus order (np.load(mmap_mode="r"))
    <dir>/ids.txt          the N document (or query) ids, one a line, same order
    <dir>/meta.json        {"kind", "count", "dim", "dtype", "precision", "compute_dtype", "model",
                            "encoder", "dataset", "shard", "num_shards", "assignment": "range",
                            "start", "stop", "corpus", "model_sha256", "checksums", ...}

Provenance and integrity (:mod:`zsdr.provenance`): ``corpus`` is the identity of the corpus the rows
belong to (for queries: the corpus of their dataset), ``model_sha256`` the content digest of the model
folder that encoded them (None for a hub id), and ``checksums`` the checksums of ``embeddings.npy``'s rows
(the bytes after its header; the header is checked against ``count`` and ``dim``) and of ``ids.txt``
(:data:`CHECKSUM`; ``algorithm`` names it).
Every reader verifies them: a folder read whole (queries) on opening, a shard while the search reads its
rows (:class:`RowDigest`, the same bytes hashed as they pass; the run is written only once they match),
its ids when they are read. A folder of format version 2 or later without checksums is refused; one
written before them (version 1, or none) is read with a warning.

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

import hashlib
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
FORMAT_VERSION = 2
CHECKSUMS_SINCE = 2   # folders of this format version on carry checksums
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

    def __init__(self, path: str | os.PathLike, dim: int, dtype: str = "float32", name: str | os.PathLike | None = None):
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
        self.path = Path(path)
        self.name = Path(name) if name is not None else self.path   # what a message names (not a temporary)
        self.dim = int(dim)
        self.dtype = np.dtype(dtype)
        self.count = 0
        self.digest = row_hasher()   # of the rows' bytes, as written
        self._fh: IO[bytes] = open(self.path, "wb")
        self._fh.write(_npy_header((0, self.dim), self.dtype))

    def append(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows)
        if rows.ndim != 2 or rows.shape[1] != self.dim:
            raise ValueError(f"expected rows of width {self.dim}, got shape {rows.shape}")
        with np.errstate(over="ignore", invalid="ignore"):
            cast = np.ascontiguousarray(rows, dtype=self.dtype)
        if not np.isfinite(cast).all():
            if np.isfinite(rows).all():
                raise DataError(self.name, None, "embeddings exceed the float16 range",
                                "store float32 (--dtype float32)")
            bad = int((~np.isfinite(np.asarray(rows, dtype=np.float64))).any(axis=1).sum())
            raise DataError(self.name, None, f"the model gave embeddings that are not finite (NaN or inf) for {bad} "
                            f"of {len(rows)} texts", "encode in fp32 (--precision fp32); if the model gives them "
                            "in fp32 too, its weights are damaged: train or copy the model again")
        data = cast.tobytes(order="C")
        self.digest.update(data)
        self._fh.write(data)
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
    if Path(directory).is_file():
        raise DataError(directory, None, "is a file, not an embeddings folder",
                        "pass the folder that holds embeddings.npy, ids.txt and meta.json")
    path = Path(directory) / META
    if not path.is_file():
        raise DataError(path, None, "not an embeddings folder (no meta.json)",
                        "encode it with `zsdr encode` / `zsdr encode-queries`")
    meta = read_json(path, "encode the folder again")
    for key in ("count", "dim", "dtype"):
        if key not in meta:
            raise DataError(path, None, f"missing {key!r}", "encode the folder again")
    return meta


CHECKSUM = "xxh3_128"
"""The checksum embeddings folders record: xxHash's XXH3 (128 bits), ~10x faster than SHA-256 on one core
(a 2.2M x 768 float16 shard, 3.4 GB: 5.0 s on a loaded 2-core machine, under 3% of that shard's search
job there, benchmarks/checksums.py), which matters because a search job reads each shard once and its
checksum is computed from those same bytes. Where the ``xxhash`` package is missing,
SHA-256 is written (the record names its algorithm; readers use the one named)."""


def row_hasher(algorithm: str | None = None):
    """A new hash object of ``algorithm`` (default :data:`CHECKSUM`, else SHA-256 without ``xxhash``)."""
    if algorithm in (None, CHECKSUM):
        try:
            import xxhash

            return xxhash.xxh3_128()
        except ImportError:
            if algorithm == CHECKSUM:
                raise DataError(None, None, f"this folder's checksums are {CHECKSUM}, and the xxhash package is not "
                                "installed", "install the project's requirements (`make install`)") from None
            return hashlib.sha256()
    if algorithm == "sha256":
        return hashlib.sha256()
    raise DataError(None, None, f"unknown checksum algorithm {algorithm!r}", "encode the folder again")


def _algorithm(hasher) -> str:
    return CHECKSUM if hasher.name.startswith("XXH3") or hasher.name == "XXH3_128" else hasher.name


REENCODE = "encode the folder again (remove it and rerun the job that writes it, or `zsdr encode` / `zsdr encode-queries`)"
_WARNED_UNCHECKED: set[str] = set()


def recorded_checksums(directory: str | os.PathLike, meta: dict) -> dict | None:
    """``meta``'s checksums (``{"embeddings.npy", "ids.txt"}``), or None for a folder written before
    checksums (warned once); a folder that should carry them and does not is refused."""
    sums = meta.get("checksums")
    version = meta.get("format_version")
    if isinstance(sums, dict) and all(isinstance(sums.get(n), str) for n in (EMBEDDINGS, IDS)):
        return sums
    if sums is not None or (isinstance(version, int) and version >= CHECKSUMS_SINCE):
        raise DataError(Path(directory) / META, None, "the record has no checksums of embeddings.npy and ids.txt, "
                        "so the files cannot be verified", REENCODE)
    if str(directory) not in _WARNED_UNCHECKED:
        _WARNED_UNCHECKED.add(str(directory))
        log.warning("%s was written before embeddings folders carried checksums: its files are not verified "
                    "(encode it again to have them checked)", directory)
    return None


def checksum_mismatch(path: Path, what: str) -> DataError:
    return DataError(path, None, f"the file changed since it was written: {what} differs from the checksum in "
                     "meta.json", REENCODE)


class RowDigest:
    """The SHA-256 of an embeddings file's rows, fed block by block in row order as a reader reads them
    (:meth:`update`), compared with the record once every row went through (:meth:`check`; rows not fed
    in order are checked by reading the file again)."""

    def __init__(self, directory: str | os.PathLike, meta: dict):
        self.path = Path(directory) / EMBEDDINGS
        sums = recorded_checksums(directory, meta)
        self.expected = None if sums is None else sums[EMBEDDINGS]
        self.algorithm = None if sums is None else sums.get("algorithm", "sha256")
        self.h = row_hasher(self.algorithm) if self.expected else None
        self.next_row = 0
        self.in_order = True

    def update(self, first_row: int, rows: np.ndarray) -> None:
        if self.h is None or not self.in_order:
            return
        if first_row != self.next_row:
            self.in_order = False
            return
        self.h.update(memoryview(np.ascontiguousarray(rows)).cast("B"))
        self.next_row += len(rows)

    def check(self, count: int) -> None:
        if self.expected is None:
            return
        if not self.in_order or self.next_row != count:
            digest = _rows_digest(self.path, self.algorithm)
        else:
            digest = self.h.hexdigest()
        if digest != self.expected:
            raise checksum_mismatch(self.path, "its rows' checksum")


def _rows_digest(path: Path, algorithm: str, block: int = 1 << 24) -> str:
    emb = np.load(path, mmap_mode="r")
    flat = emb.reshape(-1).view(np.uint8) if emb.size else np.zeros(0, dtype=np.uint8)
    h = row_hasher(algorithm)
    for i in range(0, len(flat), block):
        h.update(memoryview(np.ascontiguousarray(flat[i:i + block])))
    return h.hexdigest()


def _load_npy(path: Path) -> np.ndarray:
    """``np.load(path, mmap_mode="r")``, a damaged or cut file a :class:`DataError`."""
    try:
        return np.load(path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise
        raise DataError(path, None, f"not a readable .npy file ({' '.join(str(exc).split())[:120]}): cut short "
                        "or damaged", REENCODE) from None


def open_embeddings(directory: str | os.PathLike, verify: bool = False) -> tuple[np.ndarray, dict]:
    """The memory-mapped ``embeddings.npy`` of a folder and its meta (shapes checked). ``verify``: its rows'
    checksum too (the whole file is read; a search verifies a shard as it reads it, :class:`RowDigest`)."""
    directory = Path(directory)
    if directory.is_file():
        raise DataError(directory, None, "is a file, not an embeddings folder",
                        "pass the folder that holds embeddings.npy, ids.txt and meta.json")
    meta = read_meta(directory)
    path = directory / EMBEDDINGS
    if not path.is_file():
        raise DataError(path, None, "file not found", REENCODE)
    emb = _load_npy(path)
    if emb.ndim != 2 or emb.shape != (meta["count"], meta["dim"]):
        raise DataError(path, None, f"shape {emb.shape} does not match meta.json ({meta['count']}, {meta['dim']})",
                        REENCODE)
    if verify:
        sums = recorded_checksums(directory, meta)
        if sums is not None and _rows_digest(path, sums.get("algorithm", "sha256")) != sums[EMBEDDINGS]:
            raise checksum_mismatch(path, "its rows' checksum")
    return emb, meta


def check_ids_file(directory: str | os.PathLike, meta: dict, data: bytes) -> None:
    """``data`` (the bytes of the folder's ids.txt) against its recorded checksum."""
    sums = recorded_checksums(directory, meta)
    if sums is not None:
        h = row_hasher(sums.get("algorithm", "sha256"))
        h.update(data)
        if h.hexdigest() != sums[IDS]:
            raise checksum_mismatch(Path(directory) / IDS, "its checksum")


def read_ids(directory: str | os.PathLike, meta: dict | None = None) -> list[str]:
    """The ids of a folder, verified against ``meta``'s checksum (read here when not given)."""
    path = Path(directory) / IDS
    if not path.is_file():
        raise DataError(path, None, "file not found", REENCODE)
    data = path.read_bytes()
    check_ids_file(directory, read_meta(directory) if meta is None else meta, data)
    try:
        text = data.decode("utf-8")
        return text[:-1].split("\n") if text.endswith("\n") else text.split("\n") if text else []
    except UnicodeDecodeError:
        raise DataError(path, None, "bytes that are not UTF-8", REENCODE) from None


def load_embeddings(directory: str | os.PathLike) -> tuple[np.ndarray, list[str], dict]:
    """``(embeddings (memmap), ids, meta)`` of a (small) embeddings folder, e.g. queries, every file verified."""
    emb, meta = open_embeddings(directory, verify=True)
    ids = read_ids(directory, meta)
    if len(ids) != len(emb):
        raise DataError(Path(directory) / IDS, None, f"{len(ids)} ids for {len(emb)} embeddings", REENCODE)
    if len(set(ids)) != len(ids):
        raise DataError(Path(directory) / IDS, None, "an id appears twice", REENCODE)
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
    provenance = _provenance(encoder, dataset_dir)
    with atomic_dir(out_dir, kind="embeddings folder") as tmp:
        ids_sha = row_hasher()
        with NpyAppender(tmp / EMBEDDINGS, encoder.dim, dtype, name=out_dir) as emb_out, \
                open(tmp / IDS, "wb") as ids_out:
            try:
                for chunk_ids, emb in _encode_chunks(encoder, _shard_chunks(records, chunk_size), first, given,
                                                     prefetch, batch_size, device, precision):
                    emb_out.append(emb)
                    text = "".join(f"{i}\n" for i in chunk_ids).encode("utf-8")
                    ids_sha.update(text)
                    ids_out.write(text)
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
                **({"donor": {"overlap": str(given.path), "reused": given.reused}} if given else {}),
                **provenance, "checksums": {"algorithm": _algorithm(emb_out.digest),
                                             EMBEDDINGS: emb_out.digest.hexdigest(), IDS: ids_sha.hexdigest()}}
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
    if len(set(map(str, ids))) != len(ids):
        raise ValueError("duplicate query ids")
    with atomic_dir(out_dir, kind="embeddings folder") as tmp:
        with NpyAppender(tmp / EMBEDDINGS, emb.shape[1], "float32", name=out_dir) as w:
            w.append(emb)
        text = "".join(f"{i}\n" for i in ids).encode("utf-8")
        (tmp / IDS).write_bytes(text)
        ids_digest = row_hasher()
        ids_digest.update(text)
        full = {"format_version": FORMAT_VERSION, "kind": "queries", "count": len(ids), "dim": int(emb.shape[1]),
                "dtype": "float32", **meta, "checksums": {"algorithm": _algorithm(w.digest),
                                                          EMBEDDINGS: w.digest.hexdigest(), IDS: ids_digest.hexdigest()}}
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
                                  split=split, seconds=round(time.perf_counter() - start, 3),
                                  **_provenance(encoder, dataset_dir))


def _provenance(encoder: Encoder, dataset_dir: str | os.PathLike) -> dict:
    """What an embeddings folder records of where it comes from (:mod:`zsdr.provenance`): the corpus of
    ``dataset_dir`` and the encoder's model digest."""
    from zsdr.provenance import corpus_identity, model_identity

    try:
        corpus = corpus_identity(dataset_dir)
    except DataError:   # queries of a folder without a corpus: nothing to join them with later
        corpus = None
    return {"corpus": corpus, "model_sha256": model_identity(encoder)["sha256"]}
