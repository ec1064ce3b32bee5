"""On-disk text stores: a dataset's corpus and queries, memory-mapped by every reader.

A store is built once per dataset (:func:`build_store`, streaming its ``corpus.jsonl`` and
``queries.jsonl``) into ``<dataset>/store/``:

    corpus.arrow        Arrow IPC file, columns ``id``, ``title``, ``text`` (UTF-8, large strings), rows in
                        file order, record batches of :data:`BATCH_ROWS` rows
    corpus.hash.npy     uint64: the sorted 8-byte BLAKE2b digests of the ids
    corpus.order.npy    int64: the row of each digest (same order)
    queries.arrow, queries.hash.npy, queries.order.npy   the same for the queries (columns ``id``, ``text``)
    store.json          row counts, the source files' sizes and times, and each store file's size,
                        modification time and SHA-256 (``files``)

Opening a store checks its files against ``store.json`` (:func:`verify_store`): a file whose size
differs is refused at once; one whose size and modification time match is taken as built (one ``stat``
per file, whatever the corpus size); any other is read whole and refused unless its checksum matches
(then it gets its recorded time back, so the next open is a ``stat`` again). So bytes changed in place,
a file cut short or swapped for another store's, or a damaged file, are refused, naming the file and
``zsdr store``, before a job reads a wrong text. Hashing every file on every open would cost every job
as much as reading the corpus (SHA-256: ~0.5 GB/s on one core; MS MARCO's store is ~3.4 GB, a 15M-document
corpus's ~5 GB), and every process of a multi-GPU training opens the store. ``zsdr validate DATASET``
checks the checksums of its store in full (a disk that rotted bits without touching the times).

Every process opens the files memory-mapped (:class:`TextStore`): the pages live once in the page
cache, shared by all processes of a job and all jobs on a node, and a process's private memory stays
a few megabytes whatever the corpus size. Rows are read by number (``store[row]``,
:meth:`TextStore.rows`) or by id (``store.row(id)``: a binary search over the digests, the id read back
to rule out a digest collision). A contiguous range of rows (:meth:`TextStore.iter_range`) is what a
shard reads, without parsing the rest of the corpus.

Memory, MS MARCO passages (8,841,823, ~3.0 GB of text): the Arrow file is the text plus 8 bytes of
offset per row and field (~3.2 GB, shared); the id index 16 bytes per row (~141 MB, shared); a dict of
the same corpus costs ~700 bytes per entry in every process (~6.2 GB each).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from zsdr import files as _files
from zsdr.io import DataError, atomic_dir, file_changed, file_digest, file_record

log = logging.getLogger(__name__)

BATCH_ROWS = 65_536
KINDS = {"corpus": ("id", "title", "text"), "queries": ("id", "text")}
STORE_DIR = "store"


def digest(rid: str) -> int:
    """The id's 8-byte BLAKE2b digest as an unsigned integer (the same in every process and run)."""
    return int.from_bytes(hashlib.blake2b(rid.encode("utf-8"), digest_size=8).digest(), "little")


def shard_range(docs: int, shard: int, num_shards: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of shard ``shard`` of ``num_shards`` over ``docs`` documents: contiguous,
    in corpus order, sizes differing by at most one (what an encode or span shard reads of the store)."""
    return shard * docs // num_shards, (shard + 1) * docs // num_shards


def store_dir(dataset: str | os.PathLike) -> Path:
    return Path(dataset) / STORE_DIR


def _write_kind(records: Iterator[tuple[str, dict]], kind: str, out: Path, source: Path) -> int:
    import pyarrow as pa

    fields = KINDS[kind]
    schema = pa.schema([(f, pa.large_string()) for f in fields])
    digests: list[np.ndarray] = []
    rows = 0
    with pa.OSFile(str(out / f"{kind}.arrow"), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        cols: dict[str, list[str]] = {f: [] for f in fields}

        def flush():
            nonlocal rows
            if cols["id"]:
                writer.write_batch(pa.record_batch([pa.array(cols[f], pa.large_string()) for f in fields],
                                                   schema=schema))
                digests.append(np.fromiter((digest(r) for r in cols["id"]), dtype=np.uint64, count=len(cols["id"])))
                rows += len(cols["id"])
                for f in fields:
                    cols[f].clear()

        for rid, obj in records:
            cols["id"].append(rid)
            if kind == "corpus":
                cols["title"].append(obj.get("title", "") or "")
            cols["text"].append(obj["text"])
            if len(cols["id"]) == BATCH_ROWS:
                flush()
        flush()
    h = np.concatenate(digests) if digests else np.zeros(0, np.uint64)
    order = np.argsort(h, kind="stable")
    sorted_h = h[order]
    same = np.flatnonzero(sorted_h[1:] == sorted_h[:-1])
    if same.size:  # equal digests: the same id twice (a collision of distinct ids is checked on lookup)
        store = TextStore.__new__(TextStore)
        store._open_table(out, kind)
        a, b = int(order[same[0]]), int(order[same[0] + 1])
        if store.id(a) == store.id(b):
            raise DataError(source, None, f"id {store.id(a)!r} appears twice (rows {a + 1} and {b + 1})",
                            "give every record its own id (validate the dataset first: zsdr validate)")
    np.save(out / f"{kind}.hash.npy", sorted_h)
    np.save(out / f"{kind}.order.npy", order.astype(np.int64))
    return rows


def build_store(dataset: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Write ``dataset``'s store (``<dataset>/store`` unless ``out``), streaming the corpus and queries
    files (memory: one record batch and the digests, 8 bytes per row)."""
    from zsdr.data.formats import find_file, iter_records

    dataset = Path(dataset)
    out = Path(out) if out else store_dir(dataset)
    counts = {}
    start = time.perf_counter()
    with atomic_dir(out, kind="store") as tmp:
        for kind in KINDS:
            path = find_file(dataset, f"{kind}.jsonl")
            counts[kind] = _write_kind(((rid, obj) for _, rid, obj in iter_records(path, kind)), kind, tmp, path)
        (tmp / "store.json").write_text(json.dumps(
            {"rows": counts, "sources": _sources(dataset),
             "corpus_sha256": file_digest(find_file(dataset, "corpus.jsonl")),
             "bytes": {p.name: p.stat().st_size for p in sorted(tmp.iterdir())},
             "files": {p.name: file_record(p) for p in sorted(tmp.iterdir())}}, indent=1) + "\n")
        size = sum(p.stat().st_size for p in tmp.iterdir())
    log.info("store of %s: %d documents, %d queries, %.1f MB, %.1f s", dataset, counts["corpus"], counts["queries"],
             size / 1e6, time.perf_counter() - start)
    return out


def _sources(dataset: Path) -> dict[str, list[int]]:
    from zsdr.data.formats import find_file

    out = {}
    for kind in KINDS:
        st = find_file(dataset, f"{kind}.jsonl").stat()
        out[kind] = [st.st_size, st.st_mtime_ns]
    return out


def store_is_current(directory: str | os.PathLike, dataset: str | os.PathLike) -> bool:
    """Whether ``directory`` holds a store built from ``dataset``'s files as they are now (sizes and
    modification times) that records its own files (a store of an earlier zsdr does not: it is rebuilt)."""
    meta = Path(directory) / "store.json"
    if not meta.is_file():
        return False
    try:
        recorded = json.loads(meta.read_text())
        return recorded.get("sources") == _sources(Path(dataset)) and isinstance(recorded.get("files"), dict)
    except (OSError, ValueError, DataError, AttributeError):
        return False


def _rebuild(directory: Path) -> str:
    """The fix for a damaged store at ``directory``."""
    dataset = directory.parent if directory.name == STORE_DIR else "DATASET"
    out = "" if directory.name == STORE_DIR else f" --out {directory}"
    return f"rebuild the store: zsdr store {dataset}{out}"


def _store_files(directory: Path) -> dict:
    """``store.json``'s record of the store's files (``{}`` for a store of an earlier zsdr)."""
    meta = directory / "store.json"
    if not meta.is_file():
        return {}
    try:
        files = json.loads(meta.read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, AttributeError) as exc:
        raise DataError(meta, None, f"the store's record is not readable ({exc.__class__.__name__})",
                        _rebuild(directory)) from None
    if not isinstance(files, dict):
        raise DataError(meta, None, "the store's record of its files is not a mapping", _rebuild(directory))
    return files


FULL_CHECK_BYTES = 256 << 20
"""A store file up to this size is checked in full (its SHA-256) whenever a process opens it: ~0.5 s of one
core at most, and a file changed with its modification time kept is refused. A larger one is checked by
its size and time (module notes), once per process; ``zsdr validate`` checks every file in full."""

_CHECKED: set[tuple] = set()


def verify_store(directory: str | os.PathLike, kinds: Sequence[str] = tuple(KINDS), full: bool = False) -> None:
    """Check the store files of ``kinds`` against ``store.json`` (see the module notes and
    :data:`FULL_CHECK_BYTES`; ``full``: every checksum, whatever the sizes and times say); raise
    :class:`DataError` naming the first file that differs, or whose record (or checksum) is missing."""
    directory = Path(directory)
    files = _store_files(directory)
    if not files:   # a store of an earlier zsdr (jobs rebuild it: store_is_current); validate refuses it
        if full and (directory / "store.json").is_file():
            raise DataError(directory / "store.json", None, "the store's record has no checksums of its files, so "
                            "they cannot be verified", _rebuild(directory))
        return
    for kind in kinds:
        for name in (f"{kind}.arrow", f"{kind}.hash.npy", f"{kind}.order.npy"):
            record = files.get(name)
            path = directory / name
            if not isinstance(record, dict) or not isinstance(record.get("sha256"), str) \
                    or not isinstance(record.get("bytes"), int):
                raise DataError(directory / "store.json", None, f"the store's record has no checksum of {name}, so "
                                "it cannot be verified", _rebuild(directory))
            size = path.stat().st_size if path.is_file() else None
            key = (os.path.realpath(path), record["sha256"])
            if (full or (size is not None and size <= FULL_CHECK_BYTES)) and size == record["bytes"]:
                st = path.stat()
                if not full and key + (st.st_mtime_ns, st.st_ino) in _CHECKED:
                    continue
                problem = None if _files.file_digest(path) == record["sha256"] else \
                    "its bytes differ from those recorded (the checksum differs)"
                if problem is None:
                    if isinstance(record.get("mtime_ns"), int) and st.st_mtime_ns != record["mtime_ns"]:
                        try:   # a copy that did not keep the times: the next open is a stat again
                            os.utime(path, ns=(st.st_atime_ns, record["mtime_ns"]))
                            st = path.stat()
                        except OSError:
                            pass
                    _CHECKED.add(key + (st.st_mtime_ns, st.st_ino))
            else:
                problem = file_changed(path, record, restore_mtime=True)
            if problem:
                raise DataError(path, None, f"the store file is not the one built: {problem}", _rebuild(directory))


class TextStore:
    """One kind (``corpus`` or ``queries``) of a store, memory-mapped. ``store[row]`` is a corpus
    document ``{"title", "text"}`` or a query's text; ``store.row(id)`` its row."""

    def __init__(self, directory: str | os.PathLike, kind: str):
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r}: expected one of {', '.join(KINDS)}")
        directory = Path(directory)
        if not (directory / f"{kind}.arrow").is_file():
            raise DataError(directory / f"{kind}.arrow", None, "no such store file",
                            "build the dataset's store first (zsdr store DATASET, or the workflow's store rule)")
        verify_store(directory, [kind])
        self._open_table(directory, kind)
        path = directory / f"{kind}.hash.npy"
        try:
            self._hash = np.load(path, mmap_mode="r")
            self._order = np.load(path := directory / f"{kind}.order.npy", mmap_mode="r")
        except (OSError, ValueError, EOFError) as exc:
            raise DataError(path, None, f"the store file is missing or damaged ({exc.__class__.__name__}: {exc})",
                            _rebuild(directory)) from None
        if self._hash.shape != (self._n,) or self._order.shape != (self._n,):
            raise DataError(directory, None, f"the store's id index has {len(self._hash)} entries for {self._n} rows",
                            _rebuild(directory))

    def _open_table(self, directory: Path, kind: str) -> None:
        import pyarrow as pa

        self.directory, self.kind = directory, kind
        path = directory / f"{kind}.arrow"
        try:
            self._table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
            self._cols = {f: self._table.column(f) for f in KINDS[kind]}
        except (pa.ArrowException, OSError, ValueError, KeyError, SystemError) as exc:
            raise DataError(path, None, f"the store file is damaged ({exc.__class__.__name__}: {exc})",
                            _rebuild(directory)) from None
        self._n = self._table.num_rows
        # the first row of each record batch (chunks of every column share the writer's batches)
        self._starts = np.cumsum([0] + [len(c) for c in self._cols["id"].chunks])
        self._chunks = {f: col.chunks for f, col in self._cols.items()}

    def __len__(self) -> int:
        return self._n

    def _value(self, field: str, row: int) -> str:
        chunk = int(np.searchsorted(self._starts, row, side="right")) - 1
        return self._chunks[field][chunk][row - int(self._starts[chunk])].as_py()

    def _values(self, field: str, rows: Sequence[int]) -> list[str]:
        """``field`` of ``rows``, read row by row from their record batches (an Arrow take over the
        whole chunked column would first concatenate it: the corpus copied for every batch)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size and (rows.min() < 0 or rows.max() >= self._n):
            raise IndexError(f"rows outside 0..{self._n - 1} of {self.directory / self.kind}")
        chunks = np.searchsorted(self._starts, rows, side="right") - 1
        local = rows - self._starts[chunks]
        col = self._chunks[field]
        return [col[c][a].as_py() for c, a in zip(chunks.tolist(), local.tolist())]

    def id(self, row: int) -> str:
        return self._value("id", int(row))

    def chunks(self, field: str) -> list:
        """``field``'s column as the store's record batches (Arrow arrays over the mapped file, no copy)."""
        return self._chunks[field]

    def __getitem__(self, row: int):
        row = int(row)
        if not 0 <= row < self._n:
            raise IndexError(f"row {row} of {self._n} in {self.directory / self.kind}")
        if self.kind == "corpus":
            return {"title": self._value("title", row), "text": self._value("text", row)}
        return self._value("text", row)

    def rows(self, rows: Sequence[int]) -> list:
        """The records of ``rows``, in their order."""
        if self.kind == "corpus":
            return [{"title": t, "text": x} for t, x in zip(self._values("title", rows), self._values("text", rows))]
        return self._values("text", rows)

    def ids(self, rows: Sequence[int] | None = None) -> list[str]:
        return self._cols["id"].to_pylist() if rows is None else self._values("id", rows)

    def find(self, rid: str) -> int | None:
        """The row of id ``rid``, or None."""
        h = np.uint64(digest(rid))
        i = int(np.searchsorted(self._hash, h))
        while i < len(self._hash) and self._hash[i] == h:
            row = int(self._order[i])
            if self.id(row) == rid:
                return row
            i += 1
        return None

    def find_rows(self, rids: Sequence[str]) -> np.ndarray:
        """The rows of ``rids`` (int64, -1 where an id is not in the store): :meth:`find` for many ids at
        once, one binary search over the digests for all of them."""
        rids = list(rids)
        if not rids:
            return np.zeros(0, dtype=np.int64)
        h = np.fromiter((digest(r) for r in rids), dtype=np.uint64, count=len(rids))
        at = np.minimum(np.searchsorted(self._hash, h), max(len(self._hash) - 1, 0))
        out = np.full(len(rids), -1, dtype=np.int64)
        if not len(self._hash):
            return out
        hit = np.flatnonzero(self._hash[at] == h)
        rows = np.asarray(self._order[at[hit]], dtype=np.int64)
        for i, row, found in zip(hit.tolist(), rows.tolist(), self.ids(rows)):
            if found == rids[i]:
                out[i] = row
            else:  # a digest collision: walk the equal digests
                other = self.find(rids[i])
                out[i] = -1 if other is None else other
        return out

    def row(self, rid: str) -> int:
        row = self.find(rid)
        if row is None:
            raise KeyError(rid)
        return row

    def __contains__(self, rid: str) -> bool:
        return self.find(rid) is not None

    def get(self, rid: str, default=None):
        row = self.find(rid)
        return default if row is None else self[row]

    def iter_range(self, start: int, stop: int) -> Iterator[tuple[str, object]]:
        """``(id, record)`` of rows ``start`` .. ``stop - 1`` (a shard's part of the corpus), in order."""
        for lo in range(start, stop, BATCH_ROWS):
            part = self._table.slice(lo, min(BATCH_ROWS, stop - lo))
            ids = part.column("id").to_pylist()
            if self.kind == "corpus":
                yield from zip(ids, ({"title": t, "text": x} for t, x in zip(part.column("title").to_pylist(),
                                                                           part.column("text").to_pylist())))
            else:
                yield from zip(ids, part.column("text").to_pylist())

    def rows_in_id_order(self) -> np.ndarray:
        """Every row, ordered by its id as Python's ``sorted`` orders strings (code points: the UTF-8 bytes
        compared, no Python string made); int32 (int64 past 2**31 rows), private to the caller."""
        import pyarrow.compute as pc

        order = pc.sort_indices(self._cols["id"]).to_numpy()
        return order.astype(np.int32 if self._n < 2 ** 31 else np.int64)

    def id_to_row(self) -> dict[str, int]:
        """A dict of every id to its row (for a one-off conversion job; ~100 bytes per id, private)."""
        return {rid: i for i, rid in enumerate(self._cols["id"].to_pylist())}


class ById:
    """A read-only mapping id -> record over a :class:`TextStore` (what ``read_corpus`` /
    ``read_queries`` return as dicts)."""

    def __init__(self, store: TextStore):
        self.store = store

    def __getitem__(self, rid: str):
        return self.store[self.store.row(rid)]

    def __contains__(self, rid: str) -> bool:
        return rid in self.store

    def get(self, rid: str, default=None):
        return self.store.get(rid, default)

    def __len__(self) -> int:
        return len(self.store)


def corpus_overlap(dataset: str | os.PathLike, donor: str | os.PathLike) -> tuple[np.ndarray, dict]:
    """For every document of ``dataset``'s corpus (in row order), the row of the same document in ``donor``'s
    corpus: the same id with the same title and text; -1 where the donor has no such id or its text differs.
    Returns ``(rows, counts)``, ``rows`` int64, ``counts`` ``{"documents", "shared", "other_text", "absent"}``.
    Both corpora are read from their stores, a record batch at a time."""
    mine, theirs = open_current(dataset)[0], open_current(donor)[0]
    out = np.full(len(mine), -1, dtype=np.int64)
    other_text = absent = 0
    for lo in range(0, len(mine), BATCH_ROWS):
        rows = np.arange(lo, min(len(mine), lo + BATCH_ROWS))
        found = theirs.find_rows(mine.ids(rows))
        hit = np.flatnonzero(found >= 0)
        absent += len(rows) - len(hit)
        same = [a == b for a, b in zip(mine.rows(rows[hit]), theirs.rows(found[hit]))]
        other_text += same.count(False)
        keep = hit[np.asarray(same, dtype=bool)]
        out[rows[keep]] = found[keep]
    counts = {"documents": len(mine), "shared": int((out >= 0).sum()), "other_text": other_text, "absent": absent}
    return out, counts


def write_corpus_overlap(dataset: str | os.PathLike, donor: str | os.PathLike, out: str | os.PathLike) -> dict:
    """:func:`corpus_overlap` saved as ``out`` (a ``.npy`` of the rows) with its counts in ``<out>.json``
    beside it (both written atomically); returns the counts."""
    from zsdr.io import atomic_write

    rows, counts = corpus_overlap(dataset, donor)
    out = Path(out)
    with atomic_write(out, "wb") as fh:
        np.save(fh, rows)
    with atomic_write(out.with_suffix(".json")) as fh:
        fh.write(json.dumps({"dataset": str(dataset), "donor": str(donor), **counts}, indent=1) + "\n")
    log.info("%s shares %d of its %d documents with %s (%d with another text, %d absent there)", dataset,
             counts["shared"], counts["documents"], donor, counts["other_text"], counts["absent"])
    return counts


def open_store(dataset: str | os.PathLike) -> tuple[TextStore, TextStore]:
    """The corpus and queries stores of ``dataset`` (``<dataset>/store``)."""
    d = store_dir(dataset)
    return TextStore(d, "corpus"), TextStore(d, "queries")


_TEMPORARY: dict[tuple[str, str], tuple[TextStore, TextStore]] = {}


def open_current(dataset: str | os.PathLike) -> tuple[TextStore, TextStore]:
    """The corpus and queries of ``dataset``, memory-mapped, as they are now: its store
    (``<dataset>/store``, the workflow's ``text_store`` rule) when that was built from the dataset's files
    as they are, else a store built for this process in a temporary folder (logged; the folder is removed
    once its files are mapped, and a later call for the same unchanged files maps the same store).
    Every job that reads a dataset's texts by id reads them here, never as dicts."""
    dataset = Path(dataset)
    if store_is_current(store_dir(dataset), dataset):
        return open_store(dataset)
    key = (str(dataset.resolve()), json.dumps(_sources(dataset)))
    if key not in _TEMPORARY:
        import shutil
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix="zsdr-store-"))
        try:
            log.info("%s has no current store (%s): building one for this process "
                     "(build it once for every job with `zsdr store %s`)", dataset, store_dir(dataset), dataset)
            out = build_store(dataset, tmp / STORE_DIR)
            # mapped files stay readable after their names are removed (POSIX)
            _TEMPORARY[key] = (TextStore(out, "corpus"), TextStore(out, "queries"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return _TEMPORARY[key]


def cmd_store(args) -> int:
    out = build_store(args.dataset, args.out)
    print(out)
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("store", help="build a dataset's memory-mapped corpus / queries store (training reads it)")
    p.add_argument("dataset", help="a BEIR folder (corpus.jsonl, queries.jsonl)")
    p.add_argument("--out", default=None, help="where to write it (default: DATASET/store)")
    p.set_defaults(func=cmd_store)
