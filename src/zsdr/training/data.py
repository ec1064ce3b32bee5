"""Training data: examples (query, positives, negative pool), teacher scores, seeded sampling, batches.

Files read
* Negatives in the shape of sentence-transformers' ``msmarco-hard-negatives.jsonl(.gz)``: one JSON
  object per line, ``{"qid": ..., "pos": [pid, ...], "neg": {system: [pid, ...], ...}}``. The pool
  of a query is the union over the chosen systems (all by default) in file order, minus its
  positives (DDR's ``prepare_marco_hardneg.py``). The same shape carries MS MARCO text triples
  (system ``triples``, :func:`zsdr.data.convert.convert_msmarco_triples`), BM25 negatives
  (``bm25``) and the negatives an ANCE episode mines (``ance``).
* Teacher scores: the ``{qid: {pid: score}}`` pickle of sentence-transformers
  (``cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz``) or JSON lines
  ``{"qid": ..., "scores": {pid: score}}`` as :func:`write_teacher_scores` writes them.
* Answer spans for an extractive reader (``units.jsonl`` of the mini benchmark: the answer of each
  (query, positive) pair and its character offset in the passage text), :func:`reader_examples`.

Sampling is a pure function of ``(seed, epoch, example index)``: the same example draws the same
positive and negatives whichever process, batch size or resumed run handles it.
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from zsdr.data.formats import iter_jsonl, qrels_files, read_corpus, read_qrels, read_queries
from zsdr.io import DataError, atomic_write, open_raw


@dataclass(frozen=True)
class Example:
    qid: str
    positives: tuple[str, ...]
    negatives: tuple[str, ...]


def _ids(value, path: Path, line: int, what: str) -> list[str]:
    if not isinstance(value, list):
        raise DataError(path, line, f'"{what}" must be a list of ids', 'write e.g. {"qid": "1", "pos": ["7"], '
                        '"neg": {"bm25": ["3", "9"]}}')
    return [str(v) for v in value]


def read_negatives(path: str | os.PathLike, systems: Sequence[str] | None = None) -> list[Example]:
    """Examples from a hard-negatives JSON-lines file (see the module doc); ``systems=None`` takes all."""
    path = Path(path)
    out = []
    for line, obj in iter_jsonl(path):
        if "qid" not in obj or "pos" not in obj:
            raise DataError(path, line, 'a line needs "qid" and "pos"',
                            'write {"qid": ..., "pos": [...], "neg": {"<system>": [...]}}')
        pos = _ids(obj["pos"], path, line, "pos")
        neg = obj.get("neg", {})
        if isinstance(neg, list):  # a bare list: one unnamed system
            neg = {"negatives": neg}
        if not isinstance(neg, dict):
            raise DataError(path, line, '"neg" must map system names to id lists', 'e.g. "neg": {"bm25": ["3"]}')
        pool: dict[str, None] = {}
        for system, ids in neg.items():
            if systems is None or system in systems:
                pool.update(dict.fromkeys(_ids(ids, path, line, f"neg.{system}")))
        positives = set(pos)
        out.append(Example(str(obj["qid"]), tuple(pos), tuple(d for d in pool if d not in positives)))
    if not out:
        raise DataError(path, None, "no training examples", "the file is empty")
    return out


def write_negatives(path: str | os.PathLike, examples: Sequence[Example], system: str) -> None:
    with atomic_write(path) as fh:
        for ex in examples:
            fh.write(json.dumps({"qid": ex.qid, "pos": list(ex.positives), "neg": {system: list(ex.negatives)}}) + "\n")


def read_teacher_scores(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """``{qid: {pid: score}}`` from a pickle (``.pkl``/``.pkl.gz``) or JSON lines (``.jsonl``/``.jsonl.gz``)."""
    path = Path(path)
    name = path.name.removesuffix(".gz")
    if name.endswith(".pkl"):
        with open_raw(path) as fh:
            try:
                raw = pickle.load(fh)  # noqa: S301 - a file the user chose to train from
            except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
                raise DataError(path, None, f"cannot read the teacher-score pickle ({exc})",
                                "download cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz again") from None
        if not isinstance(raw, dict):
            raise DataError(path, None, "expected a {qid: {pid: score}} dict", "use the sentence-transformers file")
        return {str(q): {str(p): float(s) for p, s in d.items()} for q, d in raw.items()}
    out: dict[str, dict[str, float]] = {}
    for line, obj in iter_jsonl(path):
        if "qid" not in obj or not isinstance(obj.get("scores"), dict):
            raise DataError(path, line, 'a line needs "qid" and a "scores" object', 'write {"qid": "1", "scores": {"7": 3.2}}')
        try:
            out.setdefault(str(obj["qid"]), {}).update({str(p): float(s) for p, s in obj["scores"].items()})
        except (TypeError, ValueError):
            raise DataError(path, line, "teacher scores must be numbers", "write each score as a JSON number") from None
    return out


def write_teacher_scores(path: str | os.PathLike, scores: dict[str, dict[str, float]]) -> None:
    with atomic_write(path) as fh:
        for qid, row in scores.items():
            fh.write(json.dumps({"qid": qid, "scores": row}) + "\n")


def with_teacher(examples: Sequence[Example], teacher: dict[str, dict[str, float]]) -> list[Example]:
    """Keep the scored part of each example: positives and negatives the teacher scored (DDR's KD set).

    Examples with no scored positive or no scored negative are dropped.
    """
    out = []
    for ex in examples:
        row = teacher.get(ex.qid, {})
        pos = tuple(p for p in ex.positives if p in row)
        neg = tuple(d for d in row if d not in set(ex.positives)) if row else ()
        if pos and neg:
            out.append(Example(ex.qid, pos, neg))
    return out


class TrainingSet:
    """Texts (a BEIR folder), examples (a negatives file) and, for distillation, teacher scores.

    ``relevant`` (query -> every document labelled relevant) comes from the folder's qrels split
    when it has one, plus each example's positives; the contrastive loss masks these.
    """

    def __init__(self, dataset: str | os.PathLike, negatives: str | os.PathLike, *, systems: Sequence[str] | None = None,
                 teacher: str | os.PathLike | None = None, split: str = "train", max_examples: int | None = None):
        self.dataset = Path(dataset)
        examples = read_negatives(negatives, systems)
        self.teacher = read_teacher_scores(teacher) if teacher else None
        if self.teacher is not None:
            examples = with_teacher(examples, self.teacher)
            if not examples:
                raise DataError(teacher, None, "no query has a scored positive and a scored negative",
                                "score the training pairs with the teacher first (or check the ids match)")
        self.queries = read_queries(self.dataset)
        self.corpus = read_corpus(self.dataset)
        qrels = read_qrels(self.dataset, split) if split in qrels_files(self.dataset) else {}
        self.relevant = {q: {d for d, g in row.items() if g > 0} for q, row in qrels.items()}
        kept = []
        for ex in examples:
            if ex.qid not in self.queries:
                raise DataError(negatives, None, f"query {ex.qid!r} is not in {self.dataset / 'queries.jsonl'}",
                                "train with the dataset the negatives were mined from")
            ex = Example(ex.qid, tuple(p for p in ex.positives if p in self.corpus),
                         tuple(d for d in ex.negatives if d in self.corpus))
            if ex.positives and ex.negatives:
                kept.append(ex)
            self.relevant.setdefault(ex.qid, set()).update(ex.positives)
        if not kept:
            raise DataError(negatives, None, "no example has a positive and a negative in the corpus",
                            f"check that the ids match {self.dataset / 'corpus.jsonl'}")
        self.examples = kept[:max_examples] if max_examples else kept

    def __len__(self) -> int:
        return len(self.examples)

    def sample(self, index: int, epoch: int, seed: int, negatives: int) -> tuple[Example, str, list[str]]:
        """The positive and ``negatives`` negatives example ``index`` draws in ``epoch`` (pure function)."""
        ex = self.examples[index]
        rng = np.random.default_rng([seed, epoch, index])
        pos = ex.positives[int(rng.integers(len(ex.positives)))] if len(ex.positives) > 1 else ex.positives[0]
        pool = ex.negatives
        if negatives <= 0:
            return ex, pos, []
        picks = rng.choice(len(pool), size=negatives, replace=len(pool) < negatives)
        return ex, pos, [pool[int(i)] for i in picks]


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The example order of an epoch: a seeded permutation."""
    return np.random.default_rng([seed, 1_000_003, epoch]).permutation(n)


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
    the BEIR folder ``dataset`` (its qrels decide, so dev and test pairs never train a reader)."""
    queries, corpus = read_queries(dataset), read_corpus(dataset)
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
