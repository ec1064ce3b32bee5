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
:func:`write_spans` writes one JSON line ``{"_id": ..., "spans": [...]}`` per kept document;
:func:`read_spans` reads them back.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from zsdr.io import DataError, atomic_write

log = logging.getLogger(__name__)

MIN_FIRST_SPAN_TOKENS = 3  # a first span of <= 2 tokens drops the document (official: ``len(spans[0]) <= 2``)
_CHUNK = 256               # documents per tokenizer call in write_spans
_FIX = "regenerate the file with zsdr.pretrain.spans.write_spans"


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


def corpus_documents(dataset_dir: str | os.PathLike, max_docs: int | None = None) -> Iterable[tuple[int, str, str]]:
    """``(index, id, title + " " + text)`` of a BEIR corpus in file order (``max_docs``: the first N)."""
    from zsdr.data.formats import find_file, iter_records

    path = find_file(Path(dataset_dir), "corpus.jsonl")
    for index, (_, rid, obj) in enumerate(iter_records(path, "corpus")):
        if max_docs is not None and index >= max_docs:
            return
        yield index, rid, f"{obj.get('title') or ''} {obj['text']}".strip()


def write_spans(dataset_dir: str | os.PathLike, out_path: str | os.PathLike, tokenizer, max_tokens: int = 30,
                new_span_probability: float = 0.1, seed: int = 0, max_docs: int | None = None) -> dict:
    """Write the spans of every kept document of the BEIR corpus in ``dataset_dir`` to ``out_path``
    (JSON lines ``{"_id": ..., "spans": [...]}`` in corpus order, written atomically; ``.gz``
    compresses). Document ``i`` (0-based position in ``corpus.jsonl``) gives
    ``document_spans(text, tokenizer, max_tokens, new_span_probability, seed, i)``; the tokenizer
    counts the sentences of 256 documents per call. Returns
    ``{"documents", "kept", "dropped", "spans"}``."""
    stats = {"documents": 0, "kept": 0, "dropped": 0, "spans": 0}

    def flush(fh, chunk: list[tuple[int, str, list[str]]]) -> None:
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
            fh.write(json.dumps({"_id": rid, "spans": spans}, ensure_ascii=False) + "\n")

    with atomic_write(out_path) as fh:
        chunk: list[tuple[int, str, list[str]]] = []
        for index, rid, text in corpus_documents(dataset_dir, max_docs):
            chunk.append((index, rid, split_sentences(text)))
            if len(chunk) == _CHUNK:
                flush(fh, chunk)
                chunk = []
                if stats["documents"] % (_CHUNK * 400) == 0:
                    log.info("spans: %d documents read, %d kept", stats["documents"], stats["kept"])
        if chunk:
            flush(fh, chunk)
    log.info("spans of %s: %d documents, %d kept (%d spans), %d dropped", dataset_dir, stats["documents"],
             stats["kept"], stats["spans"], stats["dropped"])
    return stats


def read_spans(path: str | os.PathLike) -> list[list[str]]:
    """The span lists of a file written by :func:`write_spans`, in file order. A line that is not a
    JSON object whose ``"spans"`` holds at least two non-empty strings raises :class:`DataError`
    naming the file and line."""
    from zsdr.data.formats import iter_jsonl

    path = Path(path)
    out = []
    for line, obj in iter_jsonl(path):
        spans = obj.get("spans")
        if not isinstance(spans, list):
            raise DataError(path, line, f'expected a "spans" list, got {type(spans).__name__}', _FIX)
        if len(spans) < 2:
            raise DataError(path, line, f"{len(spans)} span(s): a document needs at least two to give a pair", _FIX)
        bad = [s for s in spans if not isinstance(s, str) or not s.strip()]
        if bad:
            raise DataError(path, line, f"every span must be a non-empty string, found {bad[0]!r}", _FIX)
        out.append(spans)
    return out
