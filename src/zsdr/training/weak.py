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

Several pairs per document (``pairs_per_document``) are pairwise distinct: pair ``k`` is drawn
from its own stream and redrawn from that stream while it repeats an earlier pair of the document
(ICT: the same query sentence; SCL: the same two spans, in either role). A document gives at most
as many pairs as it has distinct options (ICT: distinct sentences; SCL: unordered pairs of distinct
spans), so fewer than ``pairs_per_document`` and never a duplicate. The first pair is always
``ict_pair`` / ``scl_pair`` of its stream. A document that gives no pair (fewer than two sentences
or spans) is skipped and counted.

File format (JSON lines, one pair a line, ``.gz`` compresses)::

    {"_id": "<method>-<doc_id>-<k>", "doc_id": str, "query": str,
     "positive": {"title": str, "text": str}, "method": "scl" | "ict" | "qgen"}

(``k`` counts the pairs of one document from 0.)

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


def distinct_pairs(draw: Callable[[np.random.Generator], tuple[str, str]], key: Callable[[tuple[str, str]], Hashable],
                   options: int, count: int, seed: int, index: int) -> list[tuple[str, str]]:
    """Up to ``count`` pairwise distinct pairs of one document (``options``: how many distinct keys
    ``draw`` can give). Pair ``k`` comes from :func:`pair_rng` ``(seed, index, k)``, redrawn from that
    stream while its ``key`` repeats an earlier pair's; at most ``options`` pairs are returned."""
    out: list[tuple[str, str]] = []
    seen: set = set()
    for k in range(min(int(count), int(options))):
        rng = pair_rng(seed, index, k)
        pair = draw(rng)
        while key(pair) in seen:  # ends: fewer keys are taken than exist, and each has a positive chance
            pair = draw(rng)
        seen.add(key(pair))
        out.append(pair)
    return out


def ict_pairs(sentences: Sequence[str], count: int, seed: int, index: int,
              keep_probability: float = 0.1) -> list[tuple[str, str]]:
    """Up to ``count`` ICT pairs of one document with distinct query sentences (one per distinct
    sentence at most); none for fewer than two sentences."""
    if len(sentences) < 2:
        return []
    return distinct_pairs(lambda rng: ict_pair(sentences, rng, keep_probability), lambda p: p[0],
                          len(set(sentences)), count, seed, index)


def scl_pairs(spans: Sequence[str] | None, count: int, seed: int, index: int) -> list[tuple[str, str]]:
    """Up to ``count`` SCL pairs of one document, no two with the same two spans (in either role)."""
    unique = list(dict.fromkeys(spans or ()))
    if len(unique) < 2:
        return []
    return distinct_pairs(lambda rng: scl_pair(unique, rng), frozenset,
                          len(unique) * (len(unique) - 1) // 2, count, seed, index)


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
def pair_record(method: str, doc_id: str, k: int, query: str, positive: dict) -> dict:
    """The JSON object of one weak pair (see the module docstring)."""
    return {"_id": f"{method}-{doc_id}-{k}", "doc_id": doc_id, "query": query,
            "positive": {"title": positive.get("title") or "", "text": positive["text"]}, "method": method}


def write_pair(fh, method: str, doc_id: str, k: int, query: str, positive: dict) -> None:
    fh.write(json.dumps(pair_record(method, doc_id, k, query, positive), ensure_ascii=False) + "\n")


def write_weak_pairs(dataset_dir: str | os.PathLike, out_path: str | os.PathLike, method: str, *, tokenizer=None,
                     max_pairs: int | None = None, pairs_per_document: int = 1, seed: int = 0, max_tokens: int = 30,
                     new_span_probability: float = 0.1, keep_probability: float = 0.1) -> dict:
    """Write the ``scl`` or ``ict`` pairs of the BEIR corpus in ``dataset_dir`` to ``out_path``.

    Documents are visited in the seeded order of :func:`permuted_documents` until ``max_pairs``
    pairs are written (``None``: every document); each gives up to ``pairs_per_document`` distinct
    pairs (see the module docstring), the last one visited possibly fewer to end at ``max_pairs``.
    SCL needs ``tokenizer`` (a Hugging Face tokenizer: it counts span tokens, ``max_tokens`` and
    ``new_span_probability`` as in :func:`zsdr.pretrain.spans.document_spans`); ICT splits the
    document's ``text`` with :func:`zsdr.pretrain.spans.split_sentences`. The file is written
    atomically in visiting order. Returns ``{"documents": visited, "pairs": written, "skipped":
    visited documents that gave no pair}``.
    """
    from zsdr.pretrain.spans import document_spans, split_sentences

    if method not in ("scl", "ict"):
        raise ValueError(f"weak-pair method {method!r}: expected 'scl' or 'ict' (qgen: "
                         "write_qgen_pairs)")
    if method == "scl" and tokenizer is None:
        raise ValueError("scl pairs need the tokenizer that counts span tokens")
    if int(pairs_per_document) < 1:
        raise ValueError(f"pairs_per_document {pairs_per_document} must be >= 1")
    if max_pairs is not None and int(max_pairs) < 0:
        raise ValueError(f"max_pairs {max_pairs} must be >= 0 (or null for every document)")
    if not 0.0 <= keep_probability <= 1.0:
        raise ValueError(f"keep_probability {keep_probability} must lie in [0, 1]")

    def pairs_of(doc: CorpusDocument) -> list[tuple[str, dict]]:
        if method == "scl":
            spans = document_spans(f"{doc.title} {doc.text}".strip(), tokenizer, max_tokens, new_span_probability,
                                   seed, doc.index)
            return [(q, {"title": "", "text": p}) for q, p in scl_pairs(spans, pairs_per_document, seed, doc.index)]
        pairs = ict_pairs(split_sentences(doc.text), pairs_per_document, seed, doc.index, keep_probability)
        return [(q, {"title": doc.title, "text": c}) for q, c in pairs]

    stats = {"documents": 0, "pairs": 0, "skipped": 0}
    with atomic_write(out_path) as fh:
        for doc in selected_documents(dataset_dir, seed, max_pairs, pairs_per_document):
            stats["documents"] += 1
            pairs = pairs_of(doc)
            if max_pairs is not None:
                pairs = pairs[:max_pairs - stats["pairs"]]
            if not pairs:
                stats["skipped"] += 1
            for k, (query, positive) in enumerate(pairs):
                write_pair(fh, method, doc.id, k, query, positive)
            stats["pairs"] += len(pairs)
            if max_pairs is not None and stats["pairs"] >= max_pairs:
                break  # before the next document is fetched: that may read another window of the corpus
    log.info("%s pairs of %s: %d from %d documents (%d skipped)", method, dataset_dir, stats["pairs"],
             stats["documents"], stats["skipped"])
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
                     max_length: int = 64, show_progress: bool = False) -> dict:
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
    with a string ``title``, or a repeated ``_id`` raises :class:`DataError` naming the file and line."""
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
        seen[pid] = line
        yield WeakPair(pid, doc_id, query, {"title": title, "text": text}, method)


# ------------------------------------------------------------------------------ mapped pair tables
# A weak-pair file converted for training: an Arrow IPC file of the same pairs in the same order (large-string
# columns, record batches of TABLE_ROWS pairs), memory-mapped by every process of a job. The pages live once in
# the page cache; a process keeps a few megabytes whatever the number of pairs, where a list of WeakPair costs
# ~1.3 KB a pair in every process (RMSC's weak sets at paper scale: ~0.5M pairs each, per set and process).
TABLE_COLUMNS = ("id", "doc_id", "query", "title", "text", "method")
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
            for c, v in zip(TABLE_COLUMNS, (p.id, p.doc_id, p.query, p.positive["title"], p.positive["text"],
                                            p.method)):
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
        pid, doc_id, query, title, text, method = (col[k][local].as_py() for col in self._chunks)
        return WeakPair(pid, doc_id, query, {"title": title, "text": text}, method)
