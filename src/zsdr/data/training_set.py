"""The training set of a bi-encoder: examples (query, positives, negative pool), teacher scores, seeded sampling.

Training reads it (:mod:`zsdr.training`), and so do the analyses that score a model on its training
examples (:mod:`zsdr.evaluation.cocodr`) and the mining that writes an ANCE episode's negatives
(:mod:`zsdr.retrieval.mine`): it sits below all three.

Files read
* Negatives in the shape of sentence-transformers' ``msmarco-hard-negatives.jsonl(.gz)``: one JSON
  object per line, ``{"qid": ..., "pos": [pid, ...], "neg": {system: [pid, ...], ...}}``. The pool
  of a query is the union over the chosen systems (all by default) in file order, minus its
  positives (DDR's ``prepare_marco_hardneg.py``). The same shape carries MS MARCO text triples
  (system ``triples``, :func:`zsdr.data.convert.msmarco.convert_msmarco_triples`), BM25 negatives
  (``bm25``) and the negatives an ANCE episode mines (``ance``).
* Teacher scores: the ``{qid: {pid: score}}`` pickle of sentence-transformers
  (``cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz``) or JSON lines
  ``{"qid": ..., "scores": {pid: score}}`` as :func:`write_teacher_scores` writes them.

Sampling is a pure function of ``(seed, epoch, example index)``: the same example draws the same
positive and negatives whichever process, batch size or resumed run handles it.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
from array import array
from collections import abc
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from zsdr.data.formats import iter_jsonl, qrels_files, read_qrels
from zsdr.data.store import ById, TextStore, build_store, store_dir, store_is_current
from zsdr.io import DataError, atomic_dir, atomic_write, open_raw


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
    out = list(iter_negatives(path, systems))
    if not out:
        raise DataError(path, None, "no training examples", "the file is empty")
    return out


def iter_negatives(path: str | os.PathLike, systems: Sequence[str] | None = None) -> Iterator[Example]:
    """:func:`read_negatives`, one example at a time (an empty file yields nothing)."""
    path = Path(path)
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
        yield Example(str(obj["qid"]), tuple(pos), tuple(d for d in pool if d not in positives))


def write_negatives(path: str | os.PathLike, examples: Sequence[Example], system: str) -> None:
    with atomic_write(path) as fh:
        for ex in examples:
            fh.write(json.dumps({"qid": ex.qid, "pos": list(ex.positives), "neg": {system: list(ex.negatives)}}) + "\n")


def read_teacher_scores(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """``{qid: {pid: score}}`` from a pickle (``.pkl``/``.pkl.gz``) or JSON lines (``.jsonl``/``.jsonl.gz``)."""
    path = Path(path)
    name = path.name.removesuffix(".gz")
    if name.endswith(".pkl"):
        raw = _unpickle_teacher(path)
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


def _unpickle_teacher(path: Path) -> dict:
    with open_raw(path) as fh:
        try:
            raw = pickle.load(fh)  # noqa: S301 - a file the user chose to train from
        except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
            raise DataError(path, None, f"cannot read the teacher-score pickle ({exc})",
                            "download cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz again") from None
    if not isinstance(raw, dict) or not all(isinstance(row, dict) for row in raw.values()):
        raise DataError(path, None, "expected a {qid: {pid: score}} dict", "use the sentence-transformers file")
    return raw


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


# What one training example is: a query (with its positives and its pool of negatives), or one (query,
# negative) pair of the pool: in a shuffled order of the pairs (``triples``: MS MARCO's triples, as the
# official warmups count and read them), or with each query's pairs one after another (``query_triples``: the
# official ANCE-family loaders, which expand each mined line into one triple per negative, in the line's
# order; zsdr.training.data.epoch_order_of).
EXAMPLE_UNITS = ("queries", "triples", "query_triples")
PAIR_UNITS = ("triples", "query_triples")
ARRAYS = ("qrow", "pos_ptr", "pos", "pos_score", "neg_ptr", "neg", "neg_score", "rel_ptr", "rel")
ARRAYS_FORMAT = 1


def build_training_arrays(dataset: str | os.PathLike, negatives: str | os.PathLike, out: str | os.PathLike, *,
                          systems: Sequence[str] | None = None, teacher: str | os.PathLike | None = None,
                          split: str = "train", max_examples: int | None = None,
                          store: str | os.PathLike | None = None) -> Path:
    """Convert a negatives file (and teacher scores) into the arrays :class:`TrainingSet` maps, in ``out``.

    One pass over the negatives file, stopping at ``max_examples`` kept examples; ids become rows of the
    dataset's store (``store``, default ``<dataset>/store``). Per kept example (in file order): its
    query's row (``qrow``, int32), its positives and its negative pool as CSR rows (``pos_ptr`` / ``pos``,
    ``neg_ptr`` / ``neg``: int64 offsets, int32 rows), their teacher scores aligned with them
    (``pos_score`` / ``neg_score``, float32; NaN without a teacher) and the documents relevant to its
    query (``rel_ptr`` / ``rel``: the split's qrels and every positive of the query, in the corpus).
    With a teacher, an example keeps its scored positives and every other document the teacher scored
    for its query as negatives (DDR's KD set, :func:`with_teacher`). Memory: the store's id -> row dicts
    (~100 bytes per document, this process only) and the teacher's scores (8 bytes each); the pickle
    format of sentence-transformers is unpickled here, once, and never again by the training processes.
    """
    dataset, negatives = Path(dataset), Path(negatives)
    sdir = Path(store) if store else store_dir(dataset)
    corpus, queries = TextStore(sdir, "corpus"), TextStore(sdir, "queries")
    doc_row, q_row = corpus.id_to_row(), queries.id_to_row()
    scored = _teacher_rows(teacher, doc_row) if teacher else None
    qrels = read_qrels(dataset, split) if split in qrels_files(dataset) else {}
    # growing columns at 4 bytes an item (MS MARCO's ~150M negative ids: ~600 MB while converting)
    rows = {k: array("f" if k.endswith("_score") else "i") for k in ARRAYS if not k.endswith("_ptr")}
    ptr = {"pos": array("q", [0]), "neg": array("q", [0]), "rel": array("q", [0])}
    relevant: dict[str, set[int]] = {}
    kept_qids: list[str] = []
    seen_examples = seen_scored = False
    for ex in iter_negatives(negatives, systems):
        seen_examples = True
        pos = [doc_row.get(p, -1) for p in ex.positives]
        if scored is not None:
            t_rows, t_scores = scored.get(ex.qid, _NO_SCORES)
            by_doc = dict(zip(t_rows.tolist(), t_scores.tolist()))  # the teacher's documents in the corpus
            pos_set = set(pos)
            pos = [r for r in pos if r in by_doc]
            neg = [r for r in by_doc if r not in pos_set]
            if not (pos and neg):
                continue
            seen_scored = True
            pos_s, neg_s = [by_doc[r] for r in pos], [by_doc[r] for r in neg]
        else:
            neg = [doc_row.get(d, -1) for d in ex.negatives]
            pos_s, neg_s = None, None
        if ex.qid not in q_row:
            raise DataError(negatives, None, f"query {ex.qid!r} is not in {dataset / 'queries.jsonl'}",
                            "train with the dataset the negatives were mined from")
        pk = [i for i, r in enumerate(pos) if r >= 0]
        nk = [i for i, r in enumerate(neg) if r >= 0]
        relevant.setdefault(ex.qid, set()).update(pos[i] for i in pk)
        if not (pk and nk) or (max_examples and len(kept_qids) >= max_examples):
            continue  # past max_examples the file is still read: later lines add to kept queries' relevant documents
        kept_qids.append(ex.qid)
        rows["qrow"].append(q_row[ex.qid])
        rows["pos"].extend(pos[i] for i in pk)
        rows["neg"].extend(neg[i] for i in nk)
        rows["pos_score"].extend((pos_s[i] for i in pk) if pos_s else [math.nan] * len(pk))
        rows["neg_score"].extend((neg_s[i] for i in nk) if neg_s else [math.nan] * len(nk))
        ptr["pos"].append(len(rows["pos"]))
        ptr["neg"].append(len(rows["neg"]))
    if not seen_examples:
        raise DataError(negatives, None, "no training examples", "the file is empty")
    if scored is not None and not seen_scored:
        raise DataError(teacher, None, "no query has a scored positive and a scored negative",
                        "score the training pairs with the teacher first (or check the ids match)")
    if not kept_qids:
        raise DataError(negatives, None, "no example has a positive and a negative in the corpus",
                        f"check that the ids match {dataset / 'corpus.jsonl'}")
    for qid in kept_qids:
        rel = relevant.get(qid, set()) | {doc_row[d] for d, g in qrels.get(qid, {}).items() if g > 0 and d in doc_row}
        rows["rel"].extend(sorted(rel))
        ptr["rel"].append(len(rows["rel"]))
    dtypes = {"qrow": np.int32, "pos": np.int32, "neg": np.int32, "rel": np.int32,
              "pos_score": np.float32, "neg_score": np.float32}
    with atomic_dir(out, kind="training arrays folder") as tmp:
        for k, v in rows.items():
            np.save(tmp / f"{k}.npy", np.asarray(v, dtype=dtypes[k]))
        for k, v in ptr.items():
            np.save(tmp / f"{k}_ptr.npy", np.asarray(v, dtype=np.int64))
        (tmp / "arrays.json").write_text(json.dumps(
            {"format": ARRAYS_FORMAT, "examples": len(kept_qids), "store": str(sdir), "teacher": bool(teacher),
             "bytes": {f"{k}.npy": (tmp / f"{k}.npy").stat().st_size for k in ARRAYS}}, indent=1) + "\n")
    return Path(out)


_NO_SCORES = (np.zeros(0, np.int32), np.zeros(0, np.float32))


def _teacher_rows(path, doc_row: dict[str, int]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``qid -> (corpus rows, scores)`` of a teacher file, in the file's order per query, documents the
    corpus lacks left out (a repeated document keeps its first place and its last score, as a dict
    update would). A pickle is converted query by query while its dict is emptied, so memory peaks at
    the unpickled file (~87 bytes a score) plus 8 bytes a score."""
    def pack(row: dict) -> tuple[np.ndarray, np.ndarray]:
        pairs = [(doc_row[str(p)], float(v)) for p, v in row.items() if str(p) in doc_row]
        return (np.fromiter((r for r, _ in pairs), np.int32, len(pairs)),
                np.fromiter((v for _, v in pairs), np.float32, len(pairs)))

    path = Path(path)
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if path.name.removesuffix(".gz").endswith(".pkl"):
        raw = _unpickle_teacher(path)
        while raw:
            q, row = raw.popitem()
            out[str(q)] = pack(row)
        return dict(reversed(out.items()))
    merged: dict[str, dict] = {}
    for line, obj in iter_jsonl(path):
        if "qid" not in obj or not isinstance(obj.get("scores"), dict):
            raise DataError(path, line, 'a line needs "qid" and a "scores" object', 'write {"qid": "1", "scores": {"7": 3.2}}')
        q = str(obj["qid"])
        try:
            row = {str(p): float(v) for p, v in obj["scores"].items()}
        except (TypeError, ValueError):
            raise DataError(path, line, "teacher scores must be numbers", "write each score as a JSON number") from None
        if q in out:  # a query on several lines: merge as a dict would (rare)
            merged.setdefault(q, {}).update(row)
        else:
            out[q] = pack(row)
            merged.pop(q, None)
    for q in list(merged):
        first = {r: v for r, v in zip(out[q][0].tolist(), out[q][1].tolist())}
        later = {doc_row[p]: v for p, v in merged[q].items() if p in doc_row}
        first.update(later)
        out[q] = (np.fromiter(first, np.int32, len(first)), np.fromiter(first.values(), np.float32, len(first)))
    return out


class ExampleRef:
    """Example ``index`` of a :class:`TrainingSet`: its ``qid``; ``positives`` / ``negatives`` (ids) on request."""

    __slots__ = ("data", "index", "qid")

    def __init__(self, data: "TrainingSet", index: int):
        self.data, self.index = data, index
        self.qid = data.queries_store.id(data.qrow(index))

    def __eq__(self, other) -> bool:
        return isinstance(other, ExampleRef) and other.data is self.data and other.index == self.index

    def __hash__(self) -> int:
        return hash((id(self.data), self.index))

    def __repr__(self) -> str:
        return f"ExampleRef({self.index}, qid={self.qid!r})"

    @property
    def positives(self) -> tuple[str, ...]:
        return tuple(self.data.corpus_store.ids(self.data.pos_rows(self.index)))

    @property
    def negatives(self) -> tuple[str, ...]:
        return tuple(self.data.corpus_store.ids(self.data.neg_rows(self.index)))


class _Examples(abc.Sequence):
    def __init__(self, data: "TrainingSet"):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return ExampleRef(self.data, i % len(self))


class _building:
    """An exclusive lock (``flock``) on ``<folder>.lock`` beside ``folder`` while it is built."""

    def __init__(self, folder: Path):
        self.path = folder.parent / f".{folder.name}.lock"

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "a")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        import fcntl

        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()
        return False


class TrainingSet:
    """Texts (a BEIR folder's store), examples (a negatives file) and, for distillation, teacher scores,
    all memory-mapped: the corpus and queries from ``<dataset>/store`` (:mod:`zsdr.data.store`), the
    examples from the arrays :func:`build_training_arrays` writes (``arrays``: built there when missing;
    without it, in a temporary folder). Every process of a job maps the same files.

    A store missing or older than the dataset's files is built beside the arrays (or temporarily).
    ``corpus`` and ``queries`` read like the dicts of ``read_corpus`` / ``read_queries``; ``relevant_ids(i)``
    gives the documents relevant to example ``i``'s query (the split's qrels and its positives), which
    the contrastive loss masks.
    """

    def __init__(self, dataset: str | os.PathLike, negatives: str | os.PathLike, *, systems: Sequence[str] | None = None,
                 teacher: str | os.PathLike | None = None, split: str = "train", max_examples: int | None = None,
                 arrays: str | os.PathLike | None = None, unit: str = "queries"):
        import tempfile
        import weakref

        if unit not in EXAMPLE_UNITS:
            raise ValueError(f"examples {unit!r}: expected one of {', '.join(EXAMPLE_UNITS)}")
        self.dataset = Path(dataset)
        self.unit = unit
        self.teacher = teacher
        sdir = store_dir(self.dataset)
        if arrays is None:
            tmp = tempfile.mkdtemp(prefix="zsdr-training-")
            weakref.finalize(self, shutil.rmtree, tmp, True)
            arrays = Path(tmp) / "arrays"
        arrays = Path(arrays)
        # Processes started together (torchrun without the workflow's launcher, which builds first) take
        # turns: the first builds, the others find the arrays done and map them.
        with _building(arrays):
            if not store_is_current(sdir, self.dataset):
                sdir = arrays.parent / f"{arrays.name}.store"
                if not store_is_current(sdir, self.dataset):
                    build_store(self.dataset, sdir)
            if not (arrays / "arrays.json").is_file():
                build_training_arrays(self.dataset, negatives, arrays, systems=systems, teacher=teacher,
                                      split=split, max_examples=max_examples, store=sdir)
        # plain arrays over the mapped files (a np.memmap's slices pay for the subclass)
        self.arrays = {k: np.asarray(np.load(arrays / f"{k}.npy", mmap_mode="r")) for k in ARRAYS}
        self.corpus_store, self.queries_store = TextStore(sdir, "corpus"), TextStore(sdir, "queries")
        self.corpus, self.queries = ById(self.corpus_store), ById(self.queries_store)
        self.examples = _Examples(self)

    def __len__(self) -> int:
        """The examples an epoch visits: the queries, or (``unit`` ``triples`` / ``query_triples``) every (query,
        negative) pair of the negatives file, as the official warmups iterate the lines of MS MARCO's triples
        file and the official ANCE loaders the negatives of each mined line."""
        if self.unit in PAIR_UNITS:
            return int(self.arrays["neg_ptr"][-1])
        return len(self.arrays["qrow"])

    def query_of(self, index: int) -> int:
        """The query example (row of the arrays) that example ``index`` belongs to: itself, or for a
        (query, negative) pair the query whose negatives hold it (its pool's CSR offsets, binary search)."""
        if self.unit in PAIR_UNITS:
            return int(np.searchsorted(self.arrays["neg_ptr"], index, side="right")) - 1
        return int(index)

    def qrow(self, index: int) -> int:
        """The queries-store row of example ``index``'s query."""
        return int(self.arrays["qrow"][self.query_of(index)])

    def _span(self, name: str, index: int) -> tuple[int, int]:
        p = self.arrays[f"{name}_ptr"]
        q = self.query_of(index)
        return int(p[q]), int(p[q + 1])

    def pos_rows(self, index: int) -> np.ndarray:
        a, b = self._span("pos", index)
        return self.arrays["pos"][a:b]

    def neg_rows(self, index: int) -> np.ndarray:
        a, b = self._span("neg", index)
        return self.arrays["neg"][a:b]

    def qid(self, index: int) -> str:
        return self.queries_store.id(self.qrow(index))

    def relevant_ids(self, index: int) -> set[str]:
        a, b = self._span("rel", index)
        return set(self.corpus_store.ids(self.arrays["rel"][a:b]))

    def sample_slots(self, index: int, epoch: int, seed: int, negatives: int) -> tuple[int, np.ndarray]:
        """The positive's and the negatives' positions in example ``index``'s lists in ``epoch`` (pure function).
        A (query, negative) pair (``unit`` ``triples`` / ``query_triples``) keeps its own negative; it has one."""
        rng = np.random.default_rng([seed, epoch, index])
        n_pos = self._span("pos", index)
        n_pos = n_pos[1] - n_pos[0]
        pos = int(rng.integers(n_pos)) if n_pos > 1 else 0
        if negatives <= 0:
            return pos, np.zeros(0, dtype=np.int64)
        a, b = self._span("neg", index)
        if self.unit in PAIR_UNITS:
            if negatives != 1:
                raise ValueError(f"a (query, negative) pair has one negative, not {negatives} "
                                 "(set negatives_per_query: 1, or examples: queries)")
            return pos, np.array([int(index) - a], dtype=np.int64)
        return pos, rng.choice(b - a, size=negatives, replace=(b - a) < negatives)

    def draw(self, index: int, epoch: int, seed: int, negatives: int) -> tuple[list[int], list[float]]:
        """The corpus rows of the positive and the ``negatives`` negatives example ``index`` draws in
        ``epoch``, and their teacher scores (NaN without a teacher), positive first."""
        pos, negs = self.sample_slots(index, epoch, seed, negatives)
        a, c = self._span("pos", index)[0] + pos, self._span("neg", index)[0] + negs
        rows = [int(self.arrays["pos"][a]), *self.arrays["neg"][c].tolist()]
        return rows, [float(self.arrays["pos_score"][a]), *self.arrays["neg_score"][c].tolist()]

    def sample_rows(self, index: int, epoch: int, seed: int, negatives: int) -> tuple[int, list[int]]:
        """The corpus rows of the positive and the ``negatives`` negatives example ``index`` draws."""
        rows, _ = self.draw(index, epoch, seed, negatives)
        return rows[0], rows[1:]

    def sample_scores(self, index: int, epoch: int, seed: int, negatives: int) -> list[float]:
        """The teacher's scores of what :meth:`sample_rows` draws (positive first)."""
        return self.draw(index, epoch, seed, negatives)[1]

    def sample(self, index: int, epoch: int, seed: int, negatives: int) -> tuple[ExampleRef, str, list[str]]:
        """The positive and ``negatives`` negatives (ids) example ``index`` draws in ``epoch`` (pure function)."""
        pos, negs = self.sample_rows(index, epoch, seed, negatives)
        ids = self.corpus_store.ids([pos, *negs])
        return ExampleRef(self, index), ids[0], ids[1:]
