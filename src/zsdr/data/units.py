"""BERM's semantic units: sentences of a passage and the tokens each one covers.

A passage is split into sentence *units* (``syntok``; character spans into the passage text).
When the encoder tokenises a document, :func:`tokenize_with_units` maps those character spans onto
token positions of exactly the sequence the encoder sees (title, prefix and special tokens
included), so a unit's embedding is the mean of the last-layer states of precisely its tokens.
Works for any fast tokenizer with offsets (BERT WordPiece, RoBERTa byte-level BPE, ...).

Units are defined in character space so that the labelling stage (which never sees the encoder's
tokenizer) and the training step (which does) agree on them. :func:`read_unit_labels` reads the
labelling stage's output (:mod:`zsdr.training.unit_labels`), for BERM's loss term and its unit
analyses alike.
"""

from __future__ import annotations

import os
from typing import Sequence

from zsdr.data.formats import iter_jsonl
from zsdr.io import DataError


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character ``(start, end)`` of every sentence of ``text`` (syntok), in order, non-empty."""
    from syntok import segmenter

    spans = []
    for paragraph in segmenter.analyze(text):
        for sentence in paragraph:
            tokens = [t for t in sentence if t.value]
            if not tokens:
                continue
            start, end = tokens[0].offset, tokens[-1].offset + len(tokens[-1].value)
            if end > start:
                spans.append((start, end))
    return spans


def sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in sentence_spans(text)]


def _text_position(encoder, doc: dict) -> tuple[int, int]:
    """Where ``Encoder.tokenize_docs`` put ``doc``'s text: (sequence id of the string that holds it, the
    character where the text starts in that string)."""
    cfg = encoder.config
    title, text = doc.get("title") or "", doc.get("text") or ""
    if cfg.doc_format == "title_space_text":
        # where the text's first character landed once "title text" was stripped
        start = len(title.lstrip()) + 1 if title.strip() else -(len(text) - len(text.lstrip()))
        return 0, len(cfg.doc_prefix) + start
    if cfg.doc_format == "text":
        return 0, len(cfg.doc_prefix)
    return 1, 0  # title_sep_text: the text is the second string, as it is


def tokenize_with_units(encoder, docs: Sequence[dict], units: Sequence[Sequence[tuple[int, int]] | None]
                        ) -> tuple[dict[str, list[list[int]]], list[list[tuple[int, int] | None]]]:
    """Tokenise ``docs`` as ``encoder.tokenize_docs`` does and return each document's unit token spans.

    ``units[i]``: character spans into ``docs[i]["text"]`` (``None``: segment it now with syntok).
    Returns ``(features, spans)``: ``features`` equals ``encoder.tokenize_docs(docs)``; ``spans[i][j]``
    is the ``(start, end)`` token positions (end exclusive) of unit ``j`` of document ``i``, or
    ``None`` where truncation removed the unit. One tokenizer call, with offsets (a fast tokenizer).
    """
    tok = encoder.tokenizer
    if not getattr(tok, "is_fast", False):
        raise ValueError(f"BERM units need a fast tokenizer (offsets); {type(tok).__name__} is not one")
    features = encoder.tokenize_docs(list(docs), offsets=True)
    offsets, seq_ids = features.pop("offset_mapping"), features.pop("sequence_ids")
    out = []
    for i, doc in enumerate(docs):
        text_seq, shift = _text_position(encoder, doc)
        spans = units[i] if units[i] is not None else sentence_spans(doc.get("text") or "")
        out.append(char_to_token_spans(offsets[i], seq_ids[i], text_seq, spans, shift))
    return features, out


def char_to_token_spans(offsets: Sequence[tuple[int, int]], seq_ids: Sequence[int | None], text_seq: int,
                        spans: Sequence[tuple[int, int]], shift: int = 0) -> list[tuple[int, int] | None]:
    """Token ``(start, end)`` of each character span (shifted by ``shift`` into the tokenised string):
    the tokens of sequence ``text_seq`` whose characters overlap the span; ``None`` for a span with
    no token left (truncated away)."""
    out = []
    for s, e in spans:
        s, e = s + shift, e + shift
        hit = [j for j, ((a, b), sid) in enumerate(zip(offsets, seq_ids))
               if sid == text_seq and b > a and a < e and b > s]
        out.append((hit[0], hit[-1] + 1) if hit else None)
    return out


def read_unit_labels(path: str | os.PathLike
                     ) -> dict[tuple[str, str], tuple[list[tuple[int, int]], int, list[float] | None]]:
    """``{(qid, pid): (unit character spans, essential index, unit scores or None)}`` from a labels file
    (one JSON line per training pair: ``{"qid", "pid", "units": [[start, end], ...], "essential": k,
    "scores": [h_1, ...], ...}``, ``k`` = -1: no essential unit). ``scores`` (the matching scores the
    essential unit is the argmax of) let training pick the essential unit among the units its maximum
    length keeps (:func:`zsdr.losses.semantic_units.visible_essential`); a file without them keeps ``k``."""
    out = {}
    for line, obj in iter_jsonl(path):
        try:
            spans = [(int(s), int(e)) for s, e in obj["units"]]
            k = int(obj["essential"])
            key = (str(obj["qid"]), str(obj["pid"]))
            scores = None if obj.get("scores") is None else [float(x) for x in obj["scores"]]
        except (KeyError, TypeError, ValueError):
            raise DataError(path, line, 'a label needs "qid", "pid", "units" ([[start, end], ...]) and "essential" '
                            '(and "scores", when given, numbers)', "write the file with the label_units rule") from None
        if not -1 <= k < len(spans):
            raise DataError(path, line, f"essential unit {k} outside the {len(spans)} units",
                            "label the pairs again with the label_units rule")
        if scores is not None and len(scores) != len(spans):
            raise DataError(path, line, f"{len(scores)} scores for {len(spans)} units",
                            "label the pairs again with the label_units rule")
        out[key] = (spans, k, scores)
    return out
