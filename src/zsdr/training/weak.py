"""Weak supervision for RMSC: (pseudo-query, pseudo-positive) pairs drawn from a corpus.

RMSC (Fang et al., AAAI 2024) trains a dense retriever on the labelled MS MARCO pairs plus weak
pairs extracted from the source and target corpora by three methods:

* ``scl`` (span-level contrastive learning): two spans of one document are query and positive.
  The spans are COCO-DR's (:func:`zsdr.pretrain.spans.document_spans`: sentences of
  ``title + " " + text`` packed into spans of at most ``max_tokens`` tokens); the positive is
  ``{"title": "", "text": span}``.
* ``ict`` (inverse cloze task, Lee et al. 2019): one sentence of the document's ``text`` is the
  query, the other sentences in order, joined by a space, are the positive (titled with the
  document's title); with probability ``keep_probability`` (10 % in Lee et al.) the sentence is
  left in the context, so the model also learns to match words.
* ``qgen``: a seq2seq query generator writes queries for the document, which is the positive
  (:func:`write_qgen_pairs`; BEIR's QGen setup).

Selection. :func:`permuted_documents` visits the documents of ``corpus.jsonl`` in a permutation
seeded by ``seed`` (not in file order), so ``max_pairs`` takes a random subset of documents, and
the pairs written for a smaller ``max_pairs`` are a prefix of those written for a larger one.
The corpus is read once to count it, then once per window of positions in the permutation: the
first window holds the documents ``max_pairs`` should need (twice the expected count), each
further window twice as many; without ``max_pairs`` one window holds the whole corpus.

Randomness. Pair ``k`` of the document at position ``index`` of ``corpus.jsonl`` is drawn from
``numpy.random.default_rng([seed, index, k, 1])`` alone (:func:`pair_rng`), so a document's pairs
do not depend on which other documents are read. The fourth word keeps these streams apart from
the span packer's ``default_rng([seed, index])``: numpy pads a seed with zeros, so
``[seed, index, 0]`` would *be* that stream. The permutation comes from
``default_rng([seed, 0, 0, 2])``.

Size. RMSC controls each weak set's size to be "comparable to" the labelled set's: ``max_pairs`` is
that size, and the writer draws in passes over the documents (in the seeded order): pass 0 gives each
document its pair 0, pass ``k`` its pair ``k``, until ``max_pairs`` pairs are written, every document
has given all the distinct pairs it has, or ``pairs_per_document`` passes are done (``None``: no
limit). A large corpus stops within pass 0 (one pair per document, a random subset of documents); a
small one gives several pairs per document, as evenly as its documents allow. The pairs of a smaller
``max_pairs`` are a prefix of those of a larger one.

Distinct pairs. The pairs of a document are pairwise distinct: pair ``k`` is drawn from its own
stream and redrawn from that stream while it repeats an earlier pair of the document (ICT: the same
query sentence; SCL: the same two spans, in either role: one encoder reads both sides, so a swapped
pair is the same example). A document gives at most as many pairs as it has distinct options (ICT:
distinct sentences; SCL: unordered pairs of distinct spans), never a duplicate; a corpus whose
documents have fewer options than ``max_pairs`` needs gives fewer pairs, and the statistics say so.
The first pair is always ``ict_pair`` / ``scl_pair`` of its stream. A document that gives no pair
(fewer than two sentences or spans) is skipped and counted.

Negatives. Each SCL / ICT pair carries one negative drawn by the positive's own rule from another
document ``j`` of the corpus (uniform over the documents that give pairs, the pair's own excluded):
SCL a span of ``j``'s spans (the spans ``j``'s own pairs are drawn from), title ``""``; ICT ``j``'s
context (its text less one sentence, kept with ``keep_probability``) under ``j``'s title. The
positive and the negative thus differ in relevance only, not in length or title (a whole titled
document beside an untitled 30-token span would tell them apart). Drawn from
``default_rng([seed, index, k, 4])``.

Statistics (:func:`pair_statistics`): the writer returns, and the workflow saves beside the file,
the target, the pairs written, how many are distinct (query, positive) texts and how many repeat one
(0 for SCL and ICT: a pair whose texts another document already gave, as a corpus holding duplicate
documents does, is left out and counted in ``duplicates_left_out``), the passes, the largest number
of pairs of one document and the shortfall below the target.

File format (JSON lines, one pair a line, ``.gz`` compresses)::

    {"_id": "<method>-<doc_id>-<k>", "doc_id": str, "query": str,
     "positive": {"title": str, "text": str}, "method": "scl" | "ict" | "qgen",
     "negative": {"doc_id": str, "title": str, "text": str}}

(``k`` counts the pairs of one document from 0; ``negative`` is optional: QGen pairs, whose positive
is a whole document, have none.)

:func:`write_weak_pairs` writes SCL and ICT files, :func:`write_qgen_pairs` QGen files with a
:class:`~zsdr.models.generator.QueryGenerator`, :func:`read_weak_pairs` reads any of them back.
This module does not import torch (a QGen writer's generator brings it).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Hashable, Iterator

import numpy as np

from zsdr.io import DataError, atomic_write, locate_item

if TYPE_CHECKING:
    from zsdr.models.generator import QueryGenerator

log = logging.getLogger(__name__)

METHODS = ("scl", "ict", "qgen")
_PAIR_STREAM = 1   # fourth seed word of the pair generators (see the module docstring)
_ORDER_STREAM = 2  # fourth seed word of the document permutation
_NEGATIVE_STREAM = 4  # fourth seed word of a pair's negative
NEGATIVE_DRAWS = 1000  # documents tried for a negative before the corpus is declared unable to give one
_FIX = "regenerate the file with zsdr.training.weak.write_weak_pairs (or write_qgen_pairs for qgen)"
GPU_POOL = 16  # batches of documents length-sorted together on a GPU (write_qgen_pairs)


@dataclass(frozen=True)
class CorpusDocument:
    """One document of a BEIR corpus; ``index`` is its 0-based position in ``corpus.jsonl``."""

    index: int
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class WeakPair:
    """One weak training pair: ``query`` and its pseudo-positive ``{"title", "text"}``, drawn from
    document ``doc_id`` by ``method`` (``scl`` | ``ict`` | ``qgen``). Not hashable (``positive`` is a dict)."""

    id: str
    doc_id: str
    query: str
    positive: dict
    method: str
    negative: dict | None = None   # {"doc_id", "title", "text"}: drawn by the positive's rule, or None


# ------------------------------------------------------------------------------------ pair draws
def pair_rng(seed: int, index: int, k: int) -> np.random.Generator:
    """The generator of pair ``k`` of the document at position ``index``."""
    return np.random.default_rng([int(seed), int(index), int(k), _PAIR_STREAM])


def ict_pair(sentences: Sequence[str], rng: np.random.Generator,
             keep_probability: float = 0.1) -> tuple[str, str] | None:
    """``(query, context)`` of the inverse cloze task, ``None`` for fewer than two sentences.

    The query is a sentence picked uniformly (``rng.integers``); the context is the other sentences
    in order, joined by a space, or with probability ``keep_probability`` (one ``rng.random()``,
    always drawn) all the sentences, the query left in place.
    """
    if not 0.0 <= keep_probability <= 1.0:
        raise ValueError(f"keep_probability {keep_probability} must lie in [0, 1]")
    if len(sentences) < 2:
        return None
    i = int(rng.integers(len(sentences)))
    keep = rng.random() < keep_probability
    context = list(sentences) if keep else [*sentences[:i], *sentences[i + 1:]]
    return sentences[i], " ".join(context)


def scl_pair(spans: Sequence[str], rng: np.random.Generator) -> tuple[str, str] | None:
    """``(query, positive)``: two distinct spans (distinct texts; repeated spans count once) drawn
    without replacement, ``None`` when there are fewer than two."""
    unique = list(dict.fromkeys(spans))
    if len(unique) < 2:
        return None
    a, b = rng.choice(len(unique), size=2, replace=False)
    return unique[int(a)], unique[int(b)]


class DocumentDraws:
    """The distinct pairs of one document, drawn one at a time: :meth:`next` gives pair ``k`` (``k`` = the
    pairs given so far) from :func:`pair_rng` ``(seed, index, k)``, redrawn from that stream while its key
    repeats an earlier pair's, or ``None`` once the document has no distinct pair left. ``draw``: one
    pair from a generator; ``key``: what makes two pairs the same; ``options``: how many keys exist."""

    def __init__(self, draw: Callable[[np.random.Generator], tuple[str, str]],
                 key: Callable[[tuple[str, str]], Hashable], options: int, seed: int, index: int):
        self.draw, self.key, self.options = draw, key, int(options)
        self.seed, self.index = int(seed), int(index)
        self.seen: set = set()

    @property
    def given(self) -> int:
        return len(self.seen)

    @property
    def exhausted(self) -> bool:
        return len(self.seen) >= self.options

    def next(self) -> tuple[str, str] | None:
        if self.exhausted:
            return None
        rng = pair_rng(self.seed, self.index, len(self.seen))
        pair = self.draw(rng)
        while self.key(pair) in self.seen:  # ends: fewer keys are taken than exist, each has a positive chance
            pair = self.draw(rng)
        self.seen.add(self.key(pair))
        return pair


def ict_draws(sentences: Sequence[str], seed: int, index: int, keep_probability: float = 0.1) -> DocumentDraws:
    """The ICT pairs of one document with distinct query sentences (none for fewer than two sentences)."""
    sentences = list(sentences)
    options = len(set(sentences)) if len(sentences) >= 2 else 0
    return DocumentDraws(lambda rng: ict_pair(sentences, rng, keep_probability), lambda p: p[0], options, seed, index)


def scl_draws(spans: Sequence[str] | None, seed: int, index: int) -> DocumentDraws:
    """The SCL pairs of one document, no two with the same two spans in either role (none for fewer than
    two distinct spans)."""
    unique = list(dict.fromkeys(spans or ()))
    options = len(unique) * (len(unique) - 1) // 2
    return DocumentDraws(lambda rng: scl_pair(unique, rng), frozenset, options, seed, index)


def _take(draws: DocumentDraws, count: int) -> list[tuple[str, str]]:
    out = []
    while len(out) < int(count) and (pair := draws.next()) is not None:
        out.append(pair)
    return out


def ict_pairs(sentences: Sequence[str], count: int, seed: int, index: int,
              keep_probability: float = 0.1) -> list[tuple[str, str]]:
    """Up to ``count`` ICT pairs of one document with distinct query sentences (one per distinct
    sentence at most); none for fewer than two sentences."""
    return _take(ict_draws(sentences, seed, index, keep_probability), count)


def scl_pairs(spans: Sequence[str] | None, count: int, seed: int, index: int) -> list[tuple[str, str]]:
    """Up to ``count`` SCL pairs of one document, no two with the same two spans (in either role)."""
    return _take(scl_draws(spans, seed, index), count)


# ---------------------------------------------------------------------------- document selection
def corpus_records(dataset_dir: str | os.PathLike) -> Iterator[CorpusDocument]:
    """The documents of a BEIR corpus in file order (title ``""`` when missing)."""
    from zsdr.data.formats import find_file, iter_records

    path = find_file(Path(dataset_dir), "corpus.jsonl")
    for index, (_, rid, obj) in enumerate(iter_records(path, "corpus")):
        yield CorpusDocument(index, rid, obj.get("title") or "", obj["text"])


def document_order(n: int, seed: int) -> np.ndarray:
    """The order in which the ``n`` documents of a corpus are visited: a seeded permutation."""
    return np.random.default_rng([int(seed), 0, 0, _ORDER_STREAM]).permutation(int(n))


def first_window(max_pairs: int | None, per_document: int) -> int | None:
    """How many documents :func:`permuted_documents` reads on its first pass when at most
    ``max_pairs`` pairs of up to ``per_document`` each are wanted (``None``: the whole corpus)."""
    if max_pairs is None:
        return None
    return 2 * math.ceil(int(max_pairs) / max(int(per_document), 1)) + 64


def permuted_documents(dataset_dir: str | os.PathLike, seed: int = 0,
                       window: int | None = None) -> Iterator[CorpusDocument]:
    """The documents of a BEIR corpus in the order :func:`document_order` ``(n, seed)``.

    The corpus is read once to count it, then once per window of positions in that order (the
    first ``window`` documents, then twice as many each time; ``None``: one window for the whole
    corpus), holding one window's documents in memory. Stop iterating when enough are read.
    """
    n = sum(1 for _ in corpus_records(dataset_dir))
    rank = np.empty(n, dtype=np.int64)
    rank[document_order(n, seed)] = np.arange(n)
    lo, size = 0, n if window is None else max(1, int(window))
    while lo < n:
        hi = min(n, lo + size)
        docs: list[CorpusDocument | None] = [None] * (hi - lo)
        for doc in corpus_records(dataset_dir):
            if doc.index >= n:
                break
            r = int(rank[doc.index])
            if lo <= r < hi:
                docs[r - lo] = doc
        if any(d is None for d in docs):
            raise DataError(Path(dataset_dir) / "corpus.jsonl", None, "the corpus changed while it was being read",
                            "do not rewrite a corpus while pairs are drawn from it; run again")
        yield from docs
        lo, size = hi, 2 * size


def selected_documents(dataset_dir: str | os.PathLike, seed: int, max_pairs: int | None,
                       per_document: int) -> Iterator[CorpusDocument]:
    """The documents a writer of at most ``max_pairs`` pairs (up to ``per_document`` each) visits, in
    the order of :func:`permuted_documents`; nothing for ``max_pairs`` 0. The writer stops iterating
    once it has written ``max_pairs`` pairs."""
    if max_pairs is not None and int(max_pairs) <= 0:
        return iter(())
    return permuted_documents(dataset_dir, seed, first_window(max_pairs, per_document))


# ------------------------------------------------------------------------------------- writing
def pair_record(method: str, doc_id: str, k: int, query: str, positive: dict, negative: dict | None = None) -> dict:
    """The JSON object of one weak pair (see the module docstring)."""
    record = {"_id": f"{method}-{doc_id}-{k}", "doc_id": doc_id, "query": query,
              "positive": {"title": positive.get("title") or "", "text": positive["text"]}, "method": method}
    if negative is not None:
        record["negative"] = {"doc_id": negative["doc_id"], "title": negative.get("title") or "",
                              "text": negative["text"]}
    return record


def write_pair(fh, method: str, doc_id: str, k: int, query: str, positive: dict,
               negative: dict | None = None) -> None:
    fh.write(json.dumps(pair_record(method, doc_id, k, query, positive, negative), ensure_ascii=False) + "\n")


class PairRule:
    """How ``scl`` or ``ict`` pairs are made from a document (module docstring): :meth:`draws` gives a
    document's :class:`DocumentDraws`, :meth:`negative_of` a negative in the positive's format."""

    def __init__(self, method: str, *, tokenizer=None, seed: int = 0, max_tokens: int = 30,
                 new_span_probability: float = 0.1, keep_probability: float = 0.1):
        if method not in ("scl", "ict"):
            raise ValueError(f"weak-pair method {method!r}: expected 'scl' or 'ict' (qgen: write_qgen_pairs)")
        if method == "scl" and tokenizer is None:
            raise ValueError("scl pairs need the tokenizer that counts span tokens")
        if not 0.0 <= keep_probability <= 1.0:
            raise ValueError(f"keep_probability {keep_probability} must lie in [0, 1]")
        self.method, self.tokenizer, self.seed = method, tokenizer, int(seed)
        self.max_tokens, self.new_span_probability = int(max_tokens), float(new_span_probability)
        self.keep_probability = float(keep_probability)

    def _spans(self, title: str, text: str, index: int) -> list[str]:
        from zsdr.pretrain.spans import document_spans

        spans = document_spans(f"{title} {text}".strip(), self.tokenizer, self.max_tokens,
                               self.new_span_probability, self.seed, index)
        return list(dict.fromkeys(spans or ()))

    def draws(self, doc: CorpusDocument) -> DocumentDraws:
        from zsdr.pretrain.spans import split_sentences

        if self.method == "scl":
            return scl_draws(self._spans(doc.title, doc.text, doc.index), self.seed, doc.index)
        return ict_draws(split_sentences(doc.text), self.seed, doc.index, self.keep_probability)

    def positive(self, doc: CorpusDocument, part: str) -> dict:
        """The positive ``{"title", "text"}`` of a pair whose drawn second part is ``part``."""
        return {"title": "" if self.method == "scl" else doc.title, "text": part}

    def negative_of(self, title: str, text: str, index: int, rng: np.random.Generator) -> dict | None:
        """A negative drawn from document ``index`` as its own positives are (``None``: it gives no pair)."""
        from zsdr.pretrain.spans import split_sentences

        if self.method == "scl":
            spans = self._spans(title, text, index)
            if len(spans) < 2:
                return None
            return {"title": "", "text": spans[int(rng.integers(len(spans)))]}
        pair = ict_pair(split_sentences(text), rng, self.keep_probability)
        return None if pair is None else {"title": title, "text": pair[1]}


class CorpusNegatives:
    """Negatives for the pairs of one corpus, drawn by a :class:`PairRule` from another of its documents,
    read by row from the dataset's memory-mapped store (its rows are the documents of ``corpus.jsonl`` in
    file order)."""

    def __init__(self, dataset_dir: str | os.PathLike, rule: PairRule):
        from zsdr.data.store import open_current

        self.rule, self.dataset_dir = rule, Path(dataset_dir)
        self.store = open_current(dataset_dir)[0]
        self.n = len(self.store)

    def draw(self, index: int, k: int) -> dict:
        """The negative of pair ``k`` of the document at position ``index``."""
        rng = np.random.default_rng([self.rule.seed, int(index), int(k), _NEGATIVE_STREAM])
        for _ in range(NEGATIVE_DRAWS):
            j = int(rng.integers(self.n))
            if j == index:
                continue
            doc = self.store[j]
            negative = self.rule.negative_of(doc.get("title") or "", doc.get("text") or "", j, rng)
            if negative is not None:
                return {"doc_id": self.store.id(j), **negative}
        raise DataError(self.dataset_dir / "corpus.jsonl", None,
                        f"no other document of the corpus gives a {self.rule.method} negative in {NEGATIVE_DRAWS} draws",
                        "weak pairs need a corpus with several documents that give pairs")


def pair_statistics(method: str, target: int | None, documents: int, skipped: int, pairs: int, distinct: int,
                    passes: int, most: int, corpus: int | None = None) -> dict:
    """The statistics of one weak set (module docstring): ``shortfall`` is how far below ``target`` it ended."""
    return {"method": method, "target": target, "pairs": pairs, "distinct": distinct, "repeats": pairs - distinct,
            "documents": documents, "skipped": skipped, "corpus_documents": corpus, "passes": passes,
            "max_per_document": most,
            "shortfall": None if target is None else max(0, int(target) - pairs)}


def write_weak_pairs(dataset_dir: str | os.PathLike, out_path: str | os.PathLike, method: str, *, tokenizer=None,
                     max_pairs: int | None = None, pairs_per_document: int | None = 1, seed: int = 0,
                     max_tokens: int = 30, new_span_probability: float = 0.1, keep_probability: float = 0.1,
                     negatives: bool = True, statistics: str | os.PathLike | None = None) -> dict:
    """Write the ``scl`` or ``ict`` pairs of the BEIR corpus in ``dataset_dir`` to ``out_path``.

    Documents are visited in the seeded order of :func:`permuted_documents`, in passes (module
    docstring: pass ``k`` gives each document with a distinct pair left its pair ``k``) until
    ``max_pairs`` pairs are written (``None``: every document's pairs), no document has one left, or
    ``pairs_per_document`` passes are done (``None``: no limit, which needs ``max_pairs``). SCL needs
    ``tokenizer`` (a Hugging Face tokenizer: it counts span tokens, ``max_tokens`` and
    ``new_span_probability`` as in :func:`zsdr.pretrain.spans.document_spans`); ICT splits the
    document's ``text`` with :func:`zsdr.pretrain.spans.split_sentences`. ``negatives``: each pair
    carries a negative drawn by the positive's rule (:class:`CorpusNegatives`). The file is written
    atomically, pass by pass; ``statistics`` (a path) also gets :func:`pair_statistics` as JSON,
    which is returned.
    """
    import hashlib

    rule = PairRule(method, tokenizer=tokenizer, seed=seed, max_tokens=max_tokens,
                    new_span_probability=new_span_probability, keep_probability=keep_probability)
    if pairs_per_document is not None and int(pairs_per_document) < 1:
        raise ValueError(f"pairs_per_document {pairs_per_document} must be >= 1 (or null: as many passes as "
                         "max_pairs needs)")
    if max_pairs is not None and int(max_pairs) < 0:
        raise ValueError(f"max_pairs {max_pairs} must be >= 0 (or null for every document)")
    if pairs_per_document is None and max_pairs is None:
        raise ValueError("pairs_per_document null (as many pairs per document as max_pairs needs) needs max_pairs")
    passes = None if pairs_per_document is None else int(pairs_per_document)
    negative_source = CorpusNegatives(dataset_dir, rule) if negatives else None
    n = {"documents": 0, "pairs": 0, "skipped": 0, "passes": 0, "most": 0, "duplicates": 0}
    seen: set[bytes] = set()

    def full() -> bool:
        return max_pairs is not None and n["pairs"] >= int(max_pairs)

    def emit(fh, doc: CorpusDocument, k: int, pair: tuple[str, str]) -> None:
        query, part = pair
        positive = rule.positive(doc, part)
        key = hashlib.blake2b(json.dumps([query, positive["title"], positive["text"]]).encode(), digest_size=16)
        if key.digest() in seen:   # the same texts from another document (a corpus with duplicates): not again
            n["duplicates"] += 1
            return
        seen.add(key.digest())
        negative = negative_source.draw(doc.index, k) if negative_source is not None else None
        write_pair(fh, method, doc.id, k, query, positive, negative)
        n["pairs"] += 1
        n["most"] = max(n["most"], k + 1)
        n["passes"] = max(n["passes"], k + 1)

    active: list[tuple[CorpusDocument, DocumentDraws]] = []
    with atomic_write(out_path) as fh:
        if not full():
            for doc in selected_documents(dataset_dir, seed, max_pairs, 1):
                n["documents"] += 1
                draws = rule.draws(doc)
                pair = draws.next()
                if pair is None:
                    n["skipped"] += 1
                    continue
                emit(fh, doc, 0, pair)
                if full():
                    break  # before the next document is fetched: that may read another window of the corpus
                if (passes is None or passes > 1) and not draws.exhausted:
                    active.append((doc, draws))
        k = 1
        while active and not full() and (passes is None or k < passes):
            left = []
            for doc, draws in active:
                pair = draws.next()
                if pair is None:
                    continue
                emit(fh, doc, k, pair)
                if full():
                    break
                if not draws.exhausted:
                    left.append((doc, draws))
            active, k = left, k + 1
    stats = pair_statistics(method, max_pairs, n["documents"], n["skipped"], n["pairs"], len(seen), n["passes"],
                            n["most"], negative_source.n if negative_source is not None else None)
    stats["duplicates_left_out"] = n["duplicates"]
    if statistics is not None:
        with atomic_write(statistics) as fh:
            json.dump(stats, fh, indent=1)
    log.info("%s pairs of %s: %d (%d distinct) from %d documents (%d skipped) in %d passes, target %s",
             method, dataset_dir, stats["pairs"], stats["distinct"], stats["documents"], stats["skipped"],
             stats["passes"], max_pairs)
    return stats


def _generate_sorted(generator: QueryGenerator, passages: list[str], n: int, pool: int, seed: int, batch_size: int,
                     **sampling) -> list[list[str]]:
    """:meth:`QueryGenerator.generate` over ``passages`` in batches of similar token length (longest
    first), batch ``b`` seeded from ``(seed, pool, b)``; results in the order of ``passages``."""
    lengths = [len(ids) for ids in generator.tokenizer(passages, max_length=generator.max_length, truncation=True,
                                                       return_token_type_ids=False,
                                                       return_attention_mask=False)["input_ids"]]
    order = sorted(range(len(passages)), key=lambda i: -lengths[i])
    out: list[list[str]] = [[] for _ in passages]
    for b, start in enumerate(range(0, len(order), batch_size)):
        rows = order[start:start + batch_size]
        texts = generator.generate([passages[i] for i in rows], n, batch_size=batch_size, seed=[seed, pool, b],
                                   **sampling)
        for i, queries in zip(rows, texts):
            out[i] = queries
    return out


def write_qgen_pairs(generator: QueryGenerator, dataset_dir: str | os.PathLike, out_path: str | os.PathLike, *,
                     queries_per_document: int = 3, max_pairs: int | None = None, seed: int = 0,
                     batch_size: int = 32, device=None, top_k: int = 25, top_p: float = 0.95,
                     max_length: int = 64, show_progress: bool = False,
                     statistics: str | os.PathLike | None = None) -> dict:
    """Write ``qgen`` weak pairs of the BEIR corpus in ``dataset_dir`` to ``out_path``.

    Documents are visited in the seeded order of :func:`permuted_documents` (the selection rule of
    :func:`write_weak_pairs`) in chunks of ``batch_size``; chunk ``c`` is generated with seed
    ``(seed, c)`` (:meth:`QueryGenerator.generate`, ``queries_per_document`` per document). A document's
    distinct non-empty queries become pairs ``qgen-<doc_id>-<k>`` whose positive is the whole
    document ``{"title", "text"}``; a document without one is skipped and counted. Writing stops at
    ``max_pairs`` pairs. Returns ``{"documents", "pairs", "skipped"}``.

    On a GPU the documents are taken ``GPU_POOL * batch_size`` at a time, sorted by passage length
    and generated in batches of ``batch_size`` similar lengths (batch ``b`` of pool ``c`` seeded from
    ``(seed, c, b)``), then written in the selection order; the CPU keeps the chunks above.
    ``statistics``: a path that also gets the set's :func:`pair_statistics` (its ``passes``: 1), as JSON.
    """
    from tqdm.auto import tqdm

    from zsdr.models.generator import passage_of

    if int(queries_per_document) < 1:
        raise ValueError(f"queries_per_document {queries_per_document} must be >= 1")
    if max_pairs is not None and int(max_pairs) < 0:
        raise ValueError(f"max_pairs {max_pairs} must be >= 0 (or null for every document)")
    stats = {"documents": 0, "pairs": 0, "skipped": 0}
    docs = selected_documents(dataset_dir, seed, max_pairs, queries_per_document)
    if device is not None:
        generator.model.to(device)
    on_gpu = next(generator.model.parameters()).device.type == "cuda"
    pool_size = batch_size * (GPU_POOL if on_gpu else 1)
    bar = tqdm(desc="qgen", unit="doc", disable=not show_progress)
    with bar, atomic_write(out_path) as fh:
        for chunk_index in itertools.count():
            chunk = list(itertools.islice(docs, pool_size))
            if not chunk:
                break
            passages = [passage_of({"title": d.title, "text": d.text}) for d in chunk]
            if on_gpu:
                generated = _generate_sorted(generator, passages, queries_per_document, chunk_index, seed,
                                             batch_size, top_k=top_k, top_p=top_p, max_length=max_length)
            else:
                generated = generator.generate(passages, queries_per_document, top_k=top_k, top_p=top_p,
                                               max_length=max_length, batch_size=batch_size,
                                               seed=[seed, chunk_index])
            bar.update(len(chunk))
            for doc, queries in zip(chunk, generated):
                stats["documents"] += 1
                queries = list(dict.fromkeys(queries))
                if max_pairs is not None:
                    queries = queries[:max_pairs - stats["pairs"]]
                if not queries:
                    stats["skipped"] += 1
                for k, query in enumerate(queries):
                    write_pair(fh, "qgen", doc.id, k, query, {"title": doc.title, "text": doc.text})
                stats["pairs"] += len(queries)
                if max_pairs is not None and stats["pairs"] >= max_pairs:
                    break
            if max_pairs is not None and stats["pairs"] >= max_pairs:
                break
    log.info("qgen pairs of %s: %d from %d documents (%d skipped)", dataset_dir, stats["pairs"],
             stats["documents"], stats["skipped"])
    if statistics is not None:
        distinct, most = set(), {}
        for p in iter_weak_pairs(out_path):
            distinct.add((p.query, p.doc_id))
            most[p.doc_id] = most.get(p.doc_id, 0) + 1
        with atomic_write(statistics) as fh:
            json.dump(pair_statistics("qgen", max_pairs, stats["documents"], stats["skipped"], stats["pairs"],
                                      len(distinct), 1 if stats["pairs"] else 0, max(most.values(), default=0)),
                      fh, indent=1)
    return stats


# ------------------------------------------------------------------------------------- reading
def _text(obj: dict, key: str, path: Path, line: int, where: str = "") -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        found = "missing" if key not in obj else f"{type(value).__name__} {value!r}"[:80]
        raise DataError(path, line, f'"{where}{key}" must be a non-empty string, found {found}', _FIX)
    return value


def read_weak_pairs(path: str | os.PathLike) -> list[WeakPair]:
    """The pairs of a weak-pair file, in file order. A line without ``_id``, ``doc_id``, ``query``,
    ``positive.text`` (non-empty strings) or a known ``method``, a ``positive`` that is not an object
    with a string ``title``, a ``negative`` (optional) without ``doc_id`` and ``text``, or a repeated
    ``_id`` raises :class:`DataError` naming the file and line."""
    return list(iter_weak_pairs(path))


def iter_weak_pairs(path: str | os.PathLike) -> Iterator[WeakPair]:
    """:func:`read_weak_pairs` one pair at a time (the ids seen so far are kept, to refuse a repeat)."""
    from zsdr.data.formats import iter_jsonl

    path = Path(path)
    seen: dict[str, int] = {}
    for line, obj in iter_jsonl(path):
        pid = _text(obj, "_id", path, line)
        doc_id = _text(obj, "doc_id", path, line)
        query = _text(obj, "query", path, line)
        positive = obj.get("positive")
        if not isinstance(positive, dict):
            raise DataError(path, line, f'"positive" must be an object {{"title", "text"}}, found '
                            f'{type(positive).__name__}', _FIX)
        text = _text(positive, "text", path, line, "positive.")
        title = positive.get("title", "")
        if not isinstance(title, str):
            raise DataError(path, line, f'"positive.title" must be a string, found {type(title).__name__}', _FIX)
        method = obj.get("method")
        if method not in METHODS:
            raise DataError(path, line, f'"method" {method!r} is not one of {", ".join(METHODS)}', _FIX)
        if pid in seen:
            raise DataError(path, line, f"duplicate _id {pid!r} (first on line {seen[pid]})", _FIX)
        negative = obj.get("negative")
        if negative is not None:
            if not isinstance(negative, dict):
                raise DataError(path, line, f'"negative" must be an object {{"doc_id", "title", "text"}}, found '
                                f'{type(negative).__name__}', _FIX)
            negative = {"doc_id": _text(negative, "doc_id", path, line, "negative."),
                        "title": negative.get("title", ""), "text": _text(negative, "text", path, line, "negative.")}
            if not isinstance(negative["title"], str):
                raise DataError(path, line, '"negative.title" must be a string', _FIX)
        seen[pid] = line
        yield WeakPair(pid, doc_id, query, {"title": title, "text": text}, method, negative)


# ------------------------------------------------------------------------------ mapped pair tables
# A weak-pair file converted for training: an Arrow IPC file of the same pairs in the same order (large-string
# columns, record batches of TABLE_ROWS pairs), memory-mapped by every process of a job. The pages live once in
# the page cache; a process keeps a few megabytes whatever the number of pairs, where a list of WeakPair costs
# ~1.3 KB a pair in every process (RMSC's weak sets at paper scale: ~0.5M pairs each, per set and process).
TABLE_COLUMNS = ("id", "doc_id", "query", "title", "text", "method", "negative_doc_id", "negative_title",
                 "negative_text")   # a pair without a negative has "" in the negative_* columns
TABLE_ROWS = 65_536


def write_pairs_table(path: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Convert the weak-pair file ``path`` (validated as :func:`read_weak_pairs` does) into the mapped table
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
