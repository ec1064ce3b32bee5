"""Documents cut into short spans of consecutive sentences, for span-level contrastive pretraining.

COCO-DR's continuous contrastive pretraining (``create_train_co_short.py`` of the official code)
draws two spans of one document as a positive pair. A document (``title + " " + text``, stripped)
is split into sentences (syntok; the official code uses NLTK's punkt, which is not available
offline) and consecutive sentences are packed greedily into spans of at most ``max_tokens``
word-piece tokens, counted with the model's tokenizer without special tokens. Before each
sentence after the first of a span a uniform number is drawn; a new span starts when it falls
below ``new_span_probability`` (10 %: some spans end early, so span lengths vary) or when the
sentence would take the span past ``max_tokens``. A single sentence longer than the limit is a span
of its own (truncated later, at tokenisation, by the task's ``max_length``). A document with fewer
than two spans, or whose first span has at most two tokens, yields no pair and is dropped.

Sentences are counted one by one and a span's text is its sentences joined by a space. For
WordPiece (BERT) the count of the joined text is the sum of the counts; for byte-level BPE
(RoBERTa), where a word after a space is encoded with that space, it may differ by a token here
and there, which the limit tolerates.

The random draws of a document come from ``numpy.random.default_rng([seed, index])`` (``index``:
its position in the corpus file), so the spans do not depend on which other documents are read.

A large corpus is written in shards (``rows``: contiguous positions read from the dataset's store, each
shard a job), merged in order into its span file (:func:`merge_span_files`): the same documents and
spans as one pass over the corpus.

Span files. :func:`write_spans` writes the kept documents, in corpus order, to an Arrow IPC file
(:class:`SpanWriter`): columns ``id`` (large string) and ``spans`` (large list of large strings),
record batches of :data:`BATCH_ROWS` documents. :mod:`zsdr.data.spans` reads them:
:func:`~zsdr.data.spans.read_spans` maps one (:class:`~zsdr.data.spans.SpanFile`),
:func:`~zsdr.data.spans.open_spans` several, concatenated: ``documents[i]`` is document ``i``'s list
of spans, read from the mapped file when asked for. The pages live once in the page cache,
shared by every process of a pretraining job, and a process's private memory stays a few megabytes
(the record batches' first rows) whatever the corpora's size; Python lists of the same spans cost
~1 KB a document in every process.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from zsdr.data.spans import SpanFile, span_schema
from zsdr.io import atomic_write

log = logging.getLogger(__name__)

MIN_FIRST_SPAN_TOKENS = 3  # a first span of <= 2 tokens drops the document (official: ``len(spans[0]) <= 2``)
_CHUNK = 256               # documents per tokenizer call in write_spans
BATCH_ROWS = 65_536        # documents per record batch of a span file


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text`` (syntok's segmenter; paragraphs are split at blank lines), each
    stripped, empty ones left out."""
    import syntok.segmenter as segmenter

    out = []
    for paragraph in segmenter.analyze(text):
        for sentence in paragraph:
            s = "".join(token.spacing + token.value for token in sentence).strip()
            if s:
                out.append(s)
    return out


def _pack(sentences: Sequence[str], token_counts: Sequence[int], max_tokens: int,
          new_span_probability: float, rng: np.random.Generator) -> list[tuple[str, int]]:
    """``(span text, token count)`` of each span (see :func:`pack_spans`)."""
    if len(sentences) != len(token_counts):
        raise ValueError(f"{len(sentences)} sentences but {len(token_counts)} token counts")
    if max_tokens < 1:
        raise ValueError(f"max_tokens {max_tokens} must be >= 1")
    if not 0.0 <= new_span_probability <= 1.0:
        raise ValueError(f"new_span_probability {new_span_probability} must lie in [0, 1]")
    spans: list[tuple[str, int]] = []
    current: list[str] = []
    size = 0
    for sentence, count in zip(sentences, token_counts):
        count = int(count)
        if current:
            # The draw comes first, for every sentence after the first of a span, whatever the sizes.
            early = rng.random() < new_span_probability
            if early or size + count > max_tokens:
                spans.append((" ".join(current), size))
                current, size = [], 0
        current.append(sentence)
        size += count
    if current:
        spans.append((" ".join(current), size))
    return spans


def pack_spans(sentences: Sequence[str], token_counts: Sequence[int], max_tokens: int,
               new_span_probability: float, rng: np.random.Generator) -> list[str]:
    """Consecutive ``sentences`` (of ``token_counts`` tokens each) packed greedily into spans.

    A span takes sentences while it stays within ``max_tokens``; before each sentence after the
    first of a span one ``rng.random()`` is drawn and a value below ``new_span_probability`` starts
    a new span early. A sentence longer than ``max_tokens`` makes a span of its own. Returns each
    span's sentences joined by a space.
    """
    return [text for text, _ in _pack(sentences, token_counts, max_tokens, new_span_probability, rng)]


def _keep(spans: list[tuple[str, int]]) -> list[str] | None:
    """The spans of a document that yields pairs, ``None`` for a dropped one."""
    if len(spans) < 2 or spans[0][1] < MIN_FIRST_SPAN_TOKENS:
        return None
    return [text for text, _ in spans]


def _token_counts(tokenizer, sentences: list[str]) -> list[int]:
    if not sentences:
        return []
    ids = tokenizer(sentences, add_special_tokens=False, return_attention_mask=False,
                    return_token_type_ids=False)["input_ids"]
    return [len(x) for x in ids]


def _document_spans(sentences: list[str], counts: list[int], max_tokens: int, new_span_probability: float,
                    seed: int, index: int) -> list[str] | None:
    kept = [(s, c) for s, c in zip(sentences, counts) if c > 0]  # nothing the tokenizer can see
    rng = np.random.default_rng([int(seed), int(index)])
    return _keep(_pack([s for s, _ in kept], [c for _, c in kept], max_tokens, new_span_probability, rng))


def document_spans(text: str, tokenizer, max_tokens: int = 30, new_span_probability: float = 0.1,
                   seed: int = 0, index: int = 0) -> list[str] | None:
    """The spans of one document (``None``: dropped, fewer than two spans or a first span of at
    most two tokens). ``index`` is the document's position in its corpus; with ``seed`` it seeds
    the early span ends. ``tokenizer`` is called as a Hugging Face tokenizer on a list of texts
    with ``add_special_tokens=False`` and must return ``{"input_ids": [[...], ...]}``."""
    sentences = split_sentences(text.strip())
    return _document_spans(sentences, _token_counts(tokenizer, sentences), max_tokens, new_span_probability,
                           seed, index)


def corpus_documents(dataset_dir: str | os.PathLike, max_docs: int | None = None,
                     rows: tuple[int, int] | None = None) -> Iterable[tuple[int, str, str]]:
    """``(index, id, title + " " + text)`` of a BEIR corpus in file order (``max_docs``: the first N).
    ``rows`` ``(start, stop)``: only the documents at those positions (a shard), read from the dataset's
    store (:func:`zsdr.data.store.open_current`), never parsing the rest of ``corpus.jsonl``."""
    if rows is not None:
        from zsdr.data.store import open_current

        corpus = open_current(dataset_dir)[0]
        start, stop = int(rows[0]), min(int(rows[1]), len(corpus), len(corpus) if max_docs is None else int(max_docs))
        for index, (rid, doc) in enumerate(corpus.iter_range(start, max(start, stop)), start):
            yield index, rid, f"{doc['title']} {doc['text']}".strip()
        return
    from zsdr.data.formats import find_file, iter_records

    path = find_file(Path(dataset_dir), "corpus.jsonl")
    for index, (_, rid, obj) in enumerate(iter_records(path, "corpus")):
        if max_docs is not None and index >= max_docs:
            return
        yield index, rid, f"{obj.get('title') or ''} {obj['text']}".strip()


def write_spans(dataset_dir: str | os.PathLike, out_path: str | os.PathLike, tokenizer, max_tokens: int = 30,
                new_span_probability: float = 0.1, seed: int = 0, max_docs: int | None = None,
                rows: tuple[int, int] | None = None) -> dict:
    """Write the spans of every kept document of the BEIR corpus in ``dataset_dir`` to the span file
    ``out_path`` (:class:`SpanWriter`: ids and span lists in corpus order, written atomically). Document
    ``i`` (0-based position in ``corpus.jsonl``) gives ``document_spans(text, tokenizer, max_tokens,
    new_span_probability, seed, i)``; the tokenizer counts the sentences of 256 documents per call.
    ``rows``: only the documents at positions ``[start, stop)`` (a shard of the corpus, read from its
    store); the shards' files, merged in order (:func:`merge_span_files`), are the corpus's span file.
    Returns ``{"documents", "kept", "dropped", "spans"}``."""
    stats = {"documents": 0, "kept": 0, "dropped": 0, "spans": 0}

    def flush(writer: SpanWriter, chunk: list[tuple[int, str, list[str]]]) -> None:
        flat = [s for _, _, sentences in chunk for s in sentences]
        counts = _token_counts(tokenizer, flat)
        pos = 0
        for index, rid, sentences in chunk:
            spans = _document_spans(sentences, counts[pos:pos + len(sentences)], max_tokens,
                                    new_span_probability, seed, index)
            pos += len(sentences)
            stats["documents"] += 1
            if spans is None:
                stats["dropped"] += 1
                continue
            stats["kept"] += 1
            stats["spans"] += len(spans)
            writer.add(rid, spans)

    with SpanWriter(out_path) as writer:
        chunk: list[tuple[int, str, list[str]]] = []
        for index, rid, text in corpus_documents(dataset_dir, max_docs, rows):
            chunk.append((index, rid, split_sentences(text)))
            if len(chunk) == _CHUNK:
                flush(writer, chunk)
                chunk = []
                if stats["documents"] % (_CHUNK * 400) == 0:
                    log.info("spans: %d documents read, %d kept", stats["documents"], stats["kept"])
        if chunk:
            flush(writer, chunk)
    log.info("spans of %s: %d documents, %d kept (%d spans), %d dropped", dataset_dir, stats["documents"],
             stats["kept"], stats["spans"], stats["dropped"])
    return stats


# ------------------------------------------------------------------------------------ span files
class SpanWriter:
    """Write a span file (see the module doc) atomically: ``with SpanWriter(path) as w: w.add(id, spans)``.
    The file appears once the block succeeds; memory: one record batch of documents."""

    def __init__(self, path: str | os.PathLike, batch_rows: int = BATCH_ROWS):
        self.path = Path(path)
        self.batch_rows = int(batch_rows)
        self.documents = 0
        self._ids: list[str] = []
        self._spans: list[list[str]] = []

    def __enter__(self) -> "SpanWriter":
        import pyarrow as pa

        self._context = atomic_write(self.path, "wb")
        self._fh = self._context.__enter__()
        self._sink = pa.PythonFile(self._fh, mode="w")
        self._writer = pa.ipc.new_file(self._sink, span_schema())
        return self

    def add(self, rid: str, spans: Sequence[str]) -> None:
        """Append document ``rid``'s spans (at least two non-empty strings)."""
        if len(spans) < 2 or not all(isinstance(x, str) and x.strip() for x in spans):
            raise ValueError(f"document {rid!r}: a document needs at least two non-empty spans, got {list(spans)!r:.200}")
        self._ids.append(str(rid))
        self._spans.append(list(spans))
        if len(self._ids) == self.batch_rows:
            self._flush()

    def add_file(self, span_file: SpanFile) -> None:
        """Append every document of a span file (its record batches, as they are)."""
        self._flush()
        for batch in span_file.record_batches():
            self._writer.write_batch(batch)
            self.documents += batch.num_rows

    def _flush(self) -> None:
        import pyarrow as pa

        if self._ids:
            self._writer.write_batch(pa.record_batch(
                [pa.array(self._ids, pa.large_string()), pa.array(self._spans, pa.large_list(pa.large_string()))],
                schema=span_schema()))
            self.documents += len(self._ids)
            self._ids, self._spans = [], []

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self._flush()
            self._writer.close()
            self._sink.close()
        finally:
            out = self._context.__exit__(exc_type, exc, tb)
        return bool(out)


def merge_span_files(parts: Sequence[str | os.PathLike], out_path: str | os.PathLike) -> int:
    """Write the documents of the span files ``parts`` (a corpus's shards), in this order, as one span file
    (record batches copied as they are: no text is parsed); returns how many documents."""
    with SpanWriter(out_path) as writer:
        for part in parts:
            writer.add_file(SpanFile(part))
    return writer.documents


def write_span_documents(path: str | os.PathLike, documents: Iterable[tuple[str, Sequence[str]]]) -> int:
    """Write ``(id, spans)`` documents as a span file (:class:`SpanWriter`); returns how many."""
    with SpanWriter(path) as writer:
        for rid, spans in documents:
            writer.add(rid, spans)
    return writer.documents


def write_corpus_spans(dataset_dir: str | os.PathLike, out_path: str | os.PathLike, *, tokenizer: str,
                       spans: dict, seed: int, parts: Sequence[str | os.PathLike] = (),
                       shard: tuple[int, int] | None = None) -> dict:
    """One corpus's span file (rule `coco_spans`): the span files ``parts`` of its shards merged in order
    (:func:`merge_span_files`), or, without parts, its documents cut into spans (:func:`write_spans`) with the
    word pieces of ``tokenizer`` (a model folder or Hugging Face id) by config `cocodr.spans` ``spans``
    (``max_tokens``, ``new_span_probability``, ``max_docs``); ``shard`` ``(i, n)``: only the i-th of n contiguous
    row ranges of the dataset's store (a `coco_spans_shard` job). Returns the counts it logs."""
    if parts:
        if shard is not None:
            raise ValueError("write_corpus_spans: a shard is written from the corpus, not merged from parts")
        stats = {"documents": merge_span_files(parts, out_path), "parts": len(parts)}
        log.info("%s: %d documents from %d shard span files", dataset_dir, stats["documents"], len(parts))
        return stats
    from transformers import AutoTokenizer

    rows = None
    if shard is not None:
        from zsdr.data.store import open_current, shard_range

        rows = shard_range(len(open_current(dataset_dir)[0]), *shard)
    stats = write_spans(dataset_dir, out_path, AutoTokenizer.from_pretrained(tokenizer, use_fast=True),
                        max_tokens=spans["max_tokens"], new_span_probability=spans["new_span_probability"],
                        seed=seed, max_docs=spans["max_docs"], rows=rows)
    log.info("%s%s: %s", dataset_dir, "" if rows is None else f" rows {rows[0]}..{rows[1] - 1}", stats)
    return stats
