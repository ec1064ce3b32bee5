"""BERM's essential-unit labelling stage (docs/methods/berm.md#labelling-rule): ``h_i = bm25(q, u_i) + δ · r_i``.

For each labelled (query, passage) pair the passage is split into sentence units
(:func:`zsdr.data.units.sentence_spans`); ``bm25`` is :class:`zsdr.sparse.unit_bm25.UnitBM25` with
collection statistics computed once (:func:`unit_statistics`); ``r_i`` is the largest start-position
probability an extractive reader gives any token of unit ``i`` (0 without a reader, the official
code's setting). The essential unit is ``argmax_i h_i``.

Texts are read by id from the dataset's memory-mapped store (:func:`zsdr.data.store.open_current`).
Which pairs: ``split`` of a BEIR folder, each query with its documents of the highest relevance
grade (the training pairs of the source; for BERM Table 5 the test pairs of a target, sampled to at
most ``max_pairs`` with a seed). Labelling is sharded (``shard`` of ``shards``, pairs dealt
round-robin) because the reader pass is the expensive part at MS MARCO scale; :func:`gather_labels`
joins the shards and reports how often the label agrees with the truth where the dataset has it
(the mini benchmark's ``units.jsonl``).

Output, one JSON line per pair: ``{"qid", "pid", "units": [[start, end], ...] (characters of the
passage text), "bm25": [...], "reader": [...] | null, "scores": [h_i, ...], "essential": k}``
(``k = -1``: no unit). ``k`` is the argmax over all the units of the passage; training takes the
argmax of ``scores`` over the units its maximum length keeps (BERM's official code labels the
truncated input: :func:`zsdr.losses.semantic_units.visible_essential`), so the label follows each recipe's
length and a pair whose units are all truncated away is counted (:func:`visible_label_counts`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterable

import numpy as np

from zsdr.data.formats import iter_jsonl, read_qrels
from zsdr.data.store import ById, open_current
from zsdr.data.units import sentence_spans
from zsdr.io import atomic_write
from zsdr.sparse.unit_bm25 import COLLECTIONS, UnitBM25

log = logging.getLogger(__name__)


def select_pairs(dataset: str | os.PathLike, split: str, max_pairs: int | None = None,
                 seed: int = 0) -> list[tuple[str, str]]:
    """(qid, pid) pairs: every query's documents of its highest grade (>= 1), sorted; a seeded sample
    of ``max_pairs`` when there are more."""
    qrels = read_qrels(dataset, split)
    pairs = []
    for qid in sorted(qrels):
        top = max(qrels[qid].values())
        if top >= 1:
            pairs.extend((qid, pid) for pid in sorted(qrels[qid]) if qrels[qid][pid] == top)
    if max_pairs is not None and len(pairs) > max_pairs:
        rng = np.random.default_rng(seed)
        keep = sorted(rng.choice(len(pairs), size=max_pairs, replace=False).tolist())
        pairs = [pairs[i] for i in keep]
    return pairs


def _units(text: str) -> tuple[list[tuple[int, int]], list[str]]:
    spans = sentence_spans(text)
    return spans, [text[s:e] for s, e in spans]


def unit_statistics(dataset: str | os.PathLike, pairs: Iterable[tuple[str, str]], collection: str,
                    variant: str = "lucene", k1: float = 0.9, b: float = 0.4) -> UnitBM25:
    """BM25 statistics over ``collection`` (see :mod:`zsdr.sparse.unit_bm25`); ``avgdl`` is always the mean
    unit length, since units are what is scored."""
    if collection not in COLLECTIONS:
        raise ValueError(f"unit BM25 collection {collection!r}: expected one of {', '.join(COLLECTIONS)}")
    pairs = list(pairs)
    corpus, queries = (ById(s) for s in open_current(dataset))
    passages = sorted({pid for _, pid in pairs})
    units = [u for pid in passages for u in _units(corpus[pid].get("text") or "")[1]]
    if collection == "units":
        docs = units
    elif collection == "passages":
        docs = [corpus[pid].get("text") or "" for pid in passages]
    else:
        docs = [t for qid, pid in pairs for t in (queries[qid], corpus[pid].get("text") or "")]
    scorer = UnitBM25.count(docs, variant=variant, k1=k1, b=b)
    lengths = [len(scorer.tokenize(u)) for u in units]
    scorer.avgdl = float(np.mean(lengths)) if lengths else 1.0
    return scorer


def essential_of(scores: list[float]) -> int:
    """The essential unit: the first highest score (as ``numpy.argmax``), -1 without units. Rounded as the
    labels file keeps them, so that the argmax over the units a maximum length keeps, taken at training
    from the file's scores, ranks them as this one did."""
    rounded = [round(x, 6) for x in scores]
    return int(np.argmax(rounded)) if rounded else -1


def label_pairs(dataset: str | os.PathLike, pairs: list[tuple[str, str]], scorer: UnitBM25, out: str | os.PathLike,
                *, reader=None, delta: float = 0.1, batch_size: int = 64, show_progress: bool = False) -> int:
    """Label ``pairs`` and write them to ``out`` (atomic); returns the number written.

    The reader reads ``batch_size`` pairs at a time; on a GPU it is handed ``64 * batch_size`` pairs
    at once, which it sorts by length into batches (:meth:`~zsdr.models.reader.Reader.start_probabilities`)."""
    import torch
    from tqdm.auto import tqdm

    corpus, queries = (ById(s) for s in open_current(dataset))
    params = getattr(reader, "parameters", None)  # any object with start_probabilities reads too
    on_gpu = params is not None and next(iter(params()), torch.empty(0)).device.type == "cuda"
    step = batch_size * (64 if on_gpu else 1)
    bar = tqdm(total=len(pairs), desc="label units", unit="pair", disable=not show_progress)
    with bar, atomic_write(out) as fh:
        for start in range(0, len(pairs), step):
            chunk = pairs[start:start + step]
            bar.update(len(chunk))
            texts = [corpus[pid].get("text") or "" for _, pid in chunk]
            probs = (reader.start_probabilities([queries[q] for q, _ in chunk], texts, batch_size=batch_size)
                     if reader is not None else [None] * len(chunk))
            for (qid, pid), text, tokens in zip(chunk, texts, probs):
                spans, units = _units(text)
                bm25 = scorer.score(queries[qid], units)
                r = None if tokens is None else [max([p for a, _, p in tokens if s <= a < e], default=0.0)
                                                 for s, e in spans]
                h = [x + delta * y for x, y in zip(bm25, r if r is not None else [0.0] * len(bm25))]
                fh.write(json.dumps({"qid": qid, "pid": pid, "units": [list(s) for s in spans],
                                     "bm25": [round(x, 5) for x in bm25],
                                     "reader": None if r is None else [round(x, 5) for x in r],
                                     "scores": [round(x, 6) for x in h],
                                     "essential": essential_of(h)}) + "\n")
    return len(pairs)


def visible_label_counts(dataset: str | os.PathLike, labels: str | os.PathLike, encoder,
                         batch_size: int = 256) -> dict:
    """How the labels of ``labels`` (pairs of ``dataset``) fare at ``encoder``'s document length: of the
    pairs with an essential unit, how many keep no unit after truncation (``no_visible_unit``) and how many
    have another essential unit among the units kept than over the full text (``moved``), with shares.
    The same rule as training (:func:`zsdr.losses.semantic_units.unit_pooling`); no model is run."""
    from zsdr.data.units import read_unit_labels
    from zsdr.losses.semantic_units import unit_pooling

    corpus = ById(open_current(dataset)[0])
    labelled = read_unit_labels(labels)
    pairs = list(labelled)
    counts = {"pairs": len(pairs), "labelled": 0, "no_visible_unit": 0, "moved": 0}
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        docs = [corpus[pid] for _, pid in chunk]
        out = unit_pooling(encoder, docs, [labelled[p] for p in chunk], 1)
        for key in ("labelled", "no_visible_unit", "moved"):
            counts[key] += out[key]
    n = max(counts["labelled"], 1)
    return {**counts, "doc_max_length": getattr(getattr(encoder, "config", None), "doc_max_length", None),
            "share_no_visible_unit": counts["no_visible_unit"] / n, "share_moved": counts["moved"] / n}


def gather_labels(shards: list[str | os.PathLike], out: str | os.PathLike, summary: str | os.PathLike,
                  dataset: str | os.PathLike, info: dict | None = None) -> dict:
    """Join the shard files into ``out``; ``summary`` counts pairs and units and, where the dataset has
    ``units.jsonl`` (the mini benchmark's truth), how often the label — and BM25 alone — is right."""
    truth = {}
    units_file = Path(dataset) / "units.jsonl"
    if units_file.exists():
        truth = {(o["query-id"], o["corpus-id"]): o["essential"] for _, o in iter_jsonl(units_file)}
    n = with_units = n_units = judged = right = right_bm25 = 0
    with atomic_write(out) as fh:
        for shard in shards:
            for _, obj in iter_jsonl(shard):
                fh.write(json.dumps(obj) + "\n")
                n += 1
                n_units += len(obj["units"])
                with_units += obj["essential"] >= 0
                key = (obj["qid"], obj["pid"])
                if key in truth:
                    judged += 1
                    right += obj["essential"] == truth[key]
                    right_bm25 += bool(obj["bm25"]) and int(np.argmax(obj["bm25"])) == truth[key]
    report = {"pairs": n, "pairs_with_units": with_units, "mean_units": n_units / max(n, 1), **(info or {})}
    if judged:
        report.update(judged=judged, agreement=right / judged, agreement_bm25_only=right_bm25 / judged)
    with atomic_write(summary) as fh:
        json.dump(report, fh, indent=1)
    log.info("labels: %s", report)
    return report


def write_statistics(dataset: str | os.PathLike, split: str, out: str | os.PathLike, *, collection: str = "units",
                     variant: str = "lucene", k1: float = 0.9, b: float = 0.4, max_pairs: int | None = None,
                     seed: int = 0) -> None:
    """The ``unit_stats`` job: statistics of ``collection`` for the pairs of ``split``, saved as JSON."""
    pairs = select_pairs(dataset, split, max_pairs, seed)
    scorer = unit_statistics(dataset, pairs, collection, variant, k1, b)
    scorer.save(out, collection=collection, split=split, pairs=len(pairs))


def label_shard(dataset: str | os.PathLike, split: str, statistics: str | os.PathLike, out: str | os.PathLike, *,
                shard: int, shards: int, reader: str | None = None, delta: float = 0.1, variant: str = "lucene",
                k1: float = 0.9, b: float = 0.4, max_pairs: int | None = None, seed: int = 0,
                batch_size: int = 64, device: str | None = None, precision: str = "auto",
                show_progress: bool = False) -> int:
    """The ``label_units_shard`` job: pairs ``shard, shard + shards, ...`` of ``split``, labelled with the
    saved statistics and, when ``reader`` names a model, its start probabilities (the reader runs on
    ``device``, default CUDA when available, in ``precision`` there: :meth:`Reader.for_inference`)."""
    pairs = select_pairs(dataset, split, max_pairs, seed)[shard::shards]
    scorer = UnitBM25.load(statistics, variant=variant, k1=k1, b=b)
    model = None
    if reader:
        import torch

        from zsdr.models.reader import Reader

        torch.manual_seed(seed)
        model = Reader.from_pretrained(reader).for_inference(device, precision)
    return label_pairs(dataset, pairs, scorer, out, reader=model, delta=delta, batch_size=batch_size,
                       show_progress=show_progress)
