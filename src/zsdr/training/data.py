"""Training data beside the bi-encoder's training set: the order of an epoch's examples and an extractive
reader's answer spans.

The bi-encoder's examples, negatives, teacher scores and seeded sampling live below training, in
:mod:`zsdr.data.training_set`, since evaluation and mining read them too.

* :func:`epoch_order`: the seeded permutation of an epoch's examples; :func:`grouped_epoch_order` the
  seeded permutation of groups of consecutive examples (each query's (query, negative) pairs);
  :func:`epoch_order_of` the one a task's training set asks for.
* Answer spans for an extractive reader (``units.jsonl`` of the mini benchmark: the answer of each
  (query, positive) pair and its character offset in the passage text), :func:`reader_examples`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zsdr.data.formats import iter_jsonl, read_qrels
from zsdr.data.store import ById, open_current
from zsdr.io import DataError


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The example order of an epoch: a seeded permutation, as 32-bit integers where they hold ``n`` (4 bytes
    an example: 159 MB for MS MARCO's 39.8M triples; the order is ``Generator.permutation(n)``'s, which
    shuffles ``arange(n)`` the same way whatever its integer type)."""
    order = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    np.random.default_rng([seed, 1_000_003, epoch]).shuffle(order)
    return order


def grouped_epoch_order(ptr: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """The example order of an epoch whose examples come in groups, group ``g`` being examples ``ptr[g]`` to
    ``ptr[g + 1] - 1`` (CSR offsets): the groups in a seeded permutation, each group's examples one after
    another in their own order. This is how the official ANCE-family loaders (ANCE, COCO-DR, BERM) read an
    episode's training file: its lines (one query each) shuffled once, each line expanded into one
    (query, positive, negative) triple per negative, emitted consecutively, so a batch of 64 triples holds
    2-3 queries with 30 negatives each (COCO-DR's ``utils/util.py`` ``StreamingDataset``,
    ``data/msmarco_data.py`` ``GetTripletTrainingDataProcessingFn``)."""
    ptr = np.asarray(ptr, dtype=np.int64)
    groups = epoch_order(len(ptr) - 1, seed, epoch)
    sizes = (ptr[1:] - ptr[:-1])[groups]
    n = int(ptr[-1])
    dtype = np.int32 if n < 2**31 else np.int64
    # each group's start repeated over its size, plus the position within the group
    starts = np.repeat(ptr[:-1][groups], sizes)
    within = np.arange(n, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return (starts + within).astype(dtype)


def epoch_order_of(task, seed: int, epoch: int) -> np.ndarray:
    """The example order of ``task``'s epoch: each query's (query, negative) pairs consecutive where its
    training set's examples are ``query_triples`` (:func:`grouped_epoch_order` over the negative pools),
    else :func:`epoch_order`."""
    data = getattr(task, "data", None)
    if getattr(data, "unit", None) == "query_triples":
        return grouped_epoch_order(data.arrays["neg_ptr"], seed, epoch)
    return epoch_order(task.num_examples, seed, epoch)


@dataclass(frozen=True)
class Unit:
    """The answer of one (query, positive) pair of a ``units.jsonl`` file (``line``: where it is)."""

    qid: str
    doc_id: str
    answer: str
    answer_start: int
    line: int


@dataclass(frozen=True)
class ReaderExample:
    question: str
    passage: str
    answer_start: int
    answer: str


def read_units(path: str | os.PathLike) -> list[Unit]:
    """The answers of a ``units.jsonl`` file (:mod:`zsdr.data.mini` writes one line per (query,
    positive): ``query-id``, ``corpus-id``, ``answer`` and ``answer_start``, the answer's character
    offset in the passage text; sentence fields are not read here)."""
    path = Path(path)
    fix = 'write {"query-id": "q1", "corpus-id": "d7", "answer": "blue", "answer_start": 42, ...}'
    out = []
    for line, obj in iter_jsonl(path):
        missing = [k for k in ("query-id", "corpus-id", "answer", "answer_start") if k not in obj]
        if missing:
            raise DataError(path, line, f"missing {', '.join(repr(k) for k in missing)}", fix)
        answer, start = obj["answer"], obj["answer_start"]
        if not isinstance(answer, str) or not answer:
            raise DataError(path, line, '"answer" must be a non-empty string', fix)
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise DataError(path, line, f'"answer_start" must be a character offset >= 0, got {start!r}', fix)
        out.append(Unit(str(obj["query-id"]), str(obj["corpus-id"]), answer, start, line))
    if not out:
        raise DataError(path, None, "no units", "the file is empty")
    return out


def reader_examples(dataset: str | os.PathLike, units: str | os.PathLike, split: str = "train",
                    max_examples: int | None = None) -> list[ReaderExample]:
    """(question, passage text, answer) of the ``units`` pairs whose query belongs to ``split`` of
    the BEIR folder ``dataset`` (its qrels decide, so dev and test pairs never train a reader); the
    texts come from the dataset's store (:func:`zsdr.data.store.open_current`)."""
    corpus, queries = (ById(s) for s in open_current(dataset))
    split_queries = set(read_qrels(dataset, split))
    out = []
    for u in read_units(units):
        if u.qid not in split_queries:
            continue
        if u.qid not in queries or u.doc_id not in corpus:
            raise DataError(units, u.line, f"pair ({u.qid!r}, {u.doc_id!r}) is not in {dataset}",
                            "train with the dataset the units were written for")
        text = corpus[u.doc_id]["text"]
        if text[u.answer_start:u.answer_start + len(u.answer)] != u.answer:
            raise DataError(units, u.line, f"answer {u.answer!r} is not at character {u.answer_start} of the text "
                            f"of {u.doc_id!r}", "answer_start counts characters of the corpus `text` field")
        out.append(ReaderExample(queries[u.qid], text, u.answer_start, u.answer))
    if not out:
        raise DataError(units, None, f"no unit belongs to a {split} query of {dataset}",
                        f"check the query ids against {Path(dataset) / 'qrels' / f'{split}.tsv'}")
    return out[:max_examples] if max_examples else out
