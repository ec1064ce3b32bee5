"""COCO-DR's span files, read: documents cut into short spans, memory-mapped, and the seeded pair of each.

A span file (written by :func:`zsdr.pretrain.spans.write_spans`, where its spans are cut) is an
Arrow IPC file with columns ``id`` (large string) and ``spans`` (large list of large strings), one
row per document, every document with at least two spans. :func:`read_spans` maps one
(:class:`SpanFile`), :func:`open_spans` several, concatenated (:class:`SpanDocuments`):
``documents[i]`` is document ``i``'s list of spans, read from the mapped file when asked for. The
pages live once in the page cache, shared by every process of a pretraining job.

:func:`sample_pair` is the pair of spans document ``i`` contributes in an epoch (COCO pretraining
draws it; the analyses of a pretrained model take epoch 0's, :func:`span_pair_texts`).
"""

from __future__ import annotations

import os
from collections import abc
from pathlib import Path
from typing import Sequence

import numpy as np

from zsdr.io import DataError, locate_item

SPANS_FIX = "write the spans again with the coco_spans rule (zsdr.pretrain.spans.write_spans)"


def span_schema():
    """The Arrow schema of a span file: ``id`` (large string), ``spans`` (large list of large strings)."""
    import pyarrow as pa

    return pa.schema([("id", pa.large_string()), ("spans", pa.large_list(pa.large_string()))])


class SpanFile(abc.Sequence):
    """A span file, memory-mapped: ``spans_file[i]`` is document ``i``'s list of spans (read from the
    mapped pages when asked for), :meth:`id` its id. Opening checks the schema and that every document
    has at least two spans (from the list offsets alone: the text is not read); a file that is not a
    span file raises :class:`DataError` naming it."""

    def __init__(self, path: str | os.PathLike):
        import pyarrow as pa
        import pyarrow.compute as pc

        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(self.path, None, "no such span file", SPANS_FIX)
        try:
            table = pa.ipc.open_file(pa.memory_map(str(self.path), "r")).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise DataError(self.path, None, f"not an Arrow span file ({str(exc).splitlines()[0][:120]})",
                            SPANS_FIX) from None
        if not table.schema.equals(span_schema()):
            raise DataError(self.path, None, f"expected columns id (large_string) and spans (large_list of "
                            f"large_string), found {', '.join(f'{f.name} ({f.type})' for f in table.schema)}", SPANS_FIX)
        self._ids, self._spans = table.column("id").chunks, table.column("spans").chunks
        self._starts = np.cumsum([0] + [len(c) for c in self._spans])
        for k, chunk in enumerate(self._spans):
            if len(chunk) and pc.min(pc.list_value_length(chunk)).as_py() < 2:
                local = int(np.argmax(pc.less(pc.list_value_length(chunk), 2).to_numpy(zero_copy_only=False)))
                n = len(chunk[local])
                raise DataError(self.path, None, f"document {self._ids[k][local].as_py()!r} (row "
                                f"{int(self._starts[k]) + local}) has {n} span(s): a document needs at least two "
                                "to give a pair", SPANS_FIX)
        self._table = table

    def __len__(self) -> int:
        return int(self._starts[-1])

    def record_batches(self) -> list:
        """The file's record batches (mapped: no copy)."""
        return self._table.to_batches()

    def _locate(self, i: int) -> tuple[int, int]:
        return locate_item(self._starts, i, f" in {self.path}")

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        k, local = self._locate(i)
        return self._spans[k][local].as_py()

    def id(self, i: int) -> str:
        k, local = self._locate(i)
        return self._ids[k][local].as_py()


class SpanDocuments(abc.Sequence):
    """The documents of several span files in order, the first ``limit`` of each (all: ``None``);
    ``documents[i]`` is a list of spans, read from the mapped file when asked for."""

    def __init__(self, files: Sequence[SpanFile], limit: int | None = None):
        self.files = list(files)
        self.sizes = [len(f) if limit is None else min(len(f), int(limit)) for f in self.files]
        self._starts = np.cumsum([0] + self.sizes)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        k, local = locate_item(self._starts, i)
        return self.files[k][local]


def read_spans(path: str | os.PathLike) -> SpanFile:
    """The documents of a span file written by :func:`zsdr.pretrain.spans.write_spans`, in file order,
    memory-mapped."""
    return SpanFile(path)


def open_spans(paths: Sequence[str | os.PathLike], limit: int | None = None) -> SpanDocuments:
    """The documents of several span files, concatenated in this order (the first ``limit`` of each)."""
    return SpanDocuments([SpanFile(p) for p in paths], limit)


def sample_pair(n_spans: int, seed: int, epoch: int, index: int) -> tuple[int, int]:
    """Two distinct span positions of document ``index`` in ``epoch``: ``default_rng([seed, epoch, index])``."""
    if n_spans < 2:
        raise ValueError(f"document {index} has {n_spans} span(s); a pair needs two")
    a, b = np.random.default_rng([int(seed), int(epoch), int(index)]).choice(n_spans, 2, replace=False)
    return int(a), int(b)


def span_pair_texts(path: str | os.PathLike, docs: int, seed: int = 0) -> list[str]:
    """The texts ``x1_0, x2_0, x1_1, ...``: the two spans of epoch 0 (:func:`sample_pair` with ``seed``)
    of the first ``docs`` documents of a permutation seeded by ``seed`` (all of them when the file
    has fewer)."""
    documents = read_spans(path)
    order = np.random.default_rng(int(seed)).permutation(len(documents))[:int(docs)].tolist()
    return [documents[i][p] for i in order for p in sample_pair(len(documents[i]), seed, 0, i)]
