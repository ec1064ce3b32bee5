"""A weak-pair file converted for training (:func:`write_pairs_table`) and read by row (:class:`PairsTable`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from zsdr.io import DataError, atomic_write, locate_item
from zsdr.training.weak.format import WeakPair, iter_weak_pairs

# A weak-pair file converted for training: an Arrow IPC file of the same pairs in the same order (large-string
# columns, record batches of TABLE_ROWS pairs), memory-mapped by every process of a job. The pages live once in
# the page cache; a process keeps a few megabytes whatever the number of pairs, where a list of WeakPair costs
# ~1.3 KB a pair in every process (RMSC's weak sets at paper scale: ~0.5M pairs each, per set and process).
TABLE_COLUMNS = ("id", "doc_id", "query", "title", "text", "method", "negative_doc_id", "negative_title",
                 "negative_text")   # a pair without a negative has "" in the negative_* columns
TABLE_ROWS = 65_536


def write_pairs_table(path: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Convert the weak-pair file ``path`` (validated as :func:`~zsdr.training.weak.format.read_weak_pairs` does) into the mapped table
    ``out``, streaming (one record batch in memory), written atomically. Returns ``out``."""
    import pyarrow as pa

    out = Path(out)
    schema = pa.schema([(c, pa.large_string()) for c in TABLE_COLUMNS])
    with atomic_write(out, "wb") as fh, pa.PythonFile(fh, mode="w") as sink, pa.ipc.new_file(sink, schema) as writer:
        rows: dict[str, list[str]] = {c: [] for c in TABLE_COLUMNS}

        def flush() -> None:
            writer.write_batch(pa.record_batch([pa.array(rows[c], pa.large_string()) for c in TABLE_COLUMNS],
                                               schema=schema))
            for c in TABLE_COLUMNS:
                rows[c].clear()

        for p in iter_weak_pairs(path):
            neg = p.negative or {"doc_id": "", "title": "", "text": ""}
            for c, v in zip(TABLE_COLUMNS, (p.id, p.doc_id, p.query, p.positive["title"], p.positive["text"],
                                            p.method, neg["doc_id"], neg["title"], neg["text"])):
                rows[c].append(v)
            if len(rows["id"]) == TABLE_ROWS:
                flush()
        if rows["id"]:
            flush()
    return out


class PairsTable(Sequence):
    """A mapped pairs table (:func:`write_pairs_table`): ``table[i]`` is pair ``i`` as a :class:`WeakPair`,
    read from the mapped pages when asked for."""

    def __init__(self, path: str | os.PathLike):
        import pyarrow as pa

        self.path = Path(path)
        try:
            table = pa.ipc.open_file(pa.memory_map(str(self.path), "r")).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(self.path, None, f"not a weak-pairs table ({str(exc).splitlines()[0][:120]})",
                            "remove it: it is converted again from its weak-pair file") from None
        if table.schema.names != list(TABLE_COLUMNS):
            raise DataError(self.path, None, f"expected the columns {', '.join(TABLE_COLUMNS)}, found "
                            f"{', '.join(table.schema.names)}", "remove it: it is converted again from its weak-pair file")
        self._chunks = [table.column(c).chunks for c in TABLE_COLUMNS]
        self._starts = np.cumsum([0] + [len(c) for c in self._chunks[0]])
        self._table = table

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        k, local = locate_item(self._starts, i, f" in {self.path}", "pair")
        pid, doc_id, query, title, text, method, neg_id, neg_title, neg_text = (
            col[k][local].as_py() for col in self._chunks)
        negative = {"doc_id": neg_id, "title": neg_title, "text": neg_text} if neg_text else None
        return WeakPair(pid, doc_id, query, {"title": title, "text": text}, method, negative)
