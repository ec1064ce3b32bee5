"""BERM's unit-level analyses (docs/methods/berm.md#unit-statistics-tables-5-and-6, BERM Tables 5 and 6) of one trained encoder.

On the labelled test pairs of a dataset (the labelling stage's ``labels.jsonl``: one line per
``(qid, pid)`` with the passage's sentence units and its essential unit, see
:mod:`zsdr.training.unit_labels`) the encoder embeds the query (``t_q``), the passage (``t_p``) and
every unit of the passage (``e_i``: the mean of the last-layer token states over exactly the unit's
tokens, pooled by :func:`zsdr.losses.semantic_units.unit_pooling`, as in training; ``t_q`` and ``t_p`` times
the square root of the system's inverse temperature, as the loss term scales them). Per pair:

* ``unit_variance`` (Table 5, R1 balance; lower = more balanced): the population variance over the
  passage's units of ``<t_p, e_i>``; pairs whose passage keeps at least two units.
* ``unit_accuracy`` (Table 5, R2 extractability): 1 when ``argmax_i <m, e_i>`` with
  ``m = GELU(t_q ⊙ t_p)`` is the labelled essential unit, else 0; pairs whose essential unit survives
  truncation (a passage with one unit counts, as in the training log's ``unit_accuracy``).
* ``unit_similarity`` (Table 6, unit-to-unit relationship; the paper's statistic is not recoverable,
  this is the project's choice, docs/methods/berm.md#unit-statistics-tables-5-and-6): the mean cosine similarity over the pairs ``i < j`` of the
  passage's unit vectors; pairs whose passage keeps at least two units.

"Keeps" means after the encoder's ``doc_max_length`` truncation; a measure that does not apply to a
pair is ``null`` there. Aggregates are means over the pairs a measure applies to (``null`` when none).

The output file reads like a metrics file (:mod:`zsdr.tables.inputs`), so paper tables with
``source: units`` render it: ``{"aggregate": {measure: mean}, "per_query": {"<qid>\\t<pid>":
{measure: value or null, "units": kept units}}, "counts": {measure: pairs measured}, "pairs": n, ...}``
(``per_query`` holds one entry per pair). The forward passes run in fp32 (no autocast), in eval mode,
without gradients and in label-file order, so a CPU run is reproducible to the bit.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from zsdr.batching import to_device
from zsdr.data.formats import find_file, iter_records, read_queries
from zsdr.data.units import read_unit_labels
from zsdr.io import DataError, atomic_write
from zsdr.losses.semantic_units import matching_representation, scaled, unit_pooling, unit_scores, unit_vectors
from zsdr.models.encoder import Encoder, load_encoder, resolve_device

log = logging.getLogger(__name__)

MEASURES = ("unit_variance", "unit_accuracy", "unit_similarity")


def unit_measures(queries: torch.Tensor, passages: torch.Tensor, units: torch.Tensor, mask: torch.Tensor,
                  targets: torch.Tensor) -> dict[str, list[float | None]]:
    """The three measures of each row (``None`` where one does not apply), from the vectors ``t_q``
    ``(n, h)``, ``t_p`` ``(n, h)``, the unit vectors ``e_i`` ``(n, u, h)``, the unit mask ``(n, u)`` and
    the essential unit's index per row (``-1``: none)."""
    mask = mask.to(units.device)
    targets = targets.to(units.device)
    n_units = mask.sum(dim=1)
    scores = unit_scores(passages, units, mask).double().masked_fill(~mask, 0.0)
    mean = scores.sum(dim=1) / n_units.clamp(min=1)
    variance = ((scores - mean[:, None]) ** 2).masked_fill(~mask, 0.0).sum(dim=1) / n_units.clamp(min=1)
    hits = unit_scores(matching_representation(queries, passages), units, mask).argmax(dim=1) == targets
    normed = F.normalize(units.double(), dim=-1).masked_fill(~mask[..., None], 0.0)
    gram = torch.einsum("nuh,nvh->nuv", normed, normed)
    off_diagonal = gram.sum(dim=(1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(dim=1)
    similarity = off_diagonal / (n_units * (n_units - 1)).clamp(min=1)
    several, labelled = (n_units >= 2).tolist(), (targets >= 0).tolist()
    return {
        "unit_variance": [float(v) if ok else None for v, ok in zip(variance.tolist(), several)],
        "unit_accuracy": [float(h) if ok else None for h, ok in zip(hits.tolist(), labelled)],
        "unit_similarity": [float(s) if ok else None for s, ok in zip(similarity.tolist(), several)],
    }


def _passages(dataset: Path, pids: set[str]) -> dict[str, dict]:
    """The corpus records of ``pids`` only (the corpus is streamed, never loaded whole)."""
    out = {}
    for _, rid, obj in iter_records(find_file(dataset, "corpus.jsonl"), "corpus"):
        if rid in pids:
            out[rid] = {"title": obj.get("title", "") or "", "text": obj["text"]}
    return out


def unit_analysis(model: str | os.PathLike | Encoder, dataset: str | os.PathLike, labels: str | os.PathLike, *,
                  batch_size: int = 64, device: str | None = "auto", scale: float = 1.0, **encoder_options) -> dict:
    """The per-pair measures and their aggregates (the module docstring's layout) of ``model`` on the
    labelled pairs ``labels`` of ``dataset`` (a BEIR folder). ``model``: a model folder or HF id, whose
    :class:`zsdr.models.encoder.EncoderConfig` ``encoder_options`` override (a system's settings, as the
    encode jobs pass them), or an :class:`zsdr.models.encoder.Encoder` (no options). ``scale``: the
    inverse temperature the model was trained with; ``t_q`` and ``t_p`` are scaled by its square root
    as BERM's loss term scales them (:func:`zsdr.losses.semantic_units.scaled`)."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    dataset = Path(dataset)
    labelled = read_unit_labels(labels)
    pairs = list(labelled)
    queries = read_queries(dataset)
    docs = _passages(dataset, {pid for _, pid in pairs})
    for qid, pid in pairs:
        if qid not in queries or pid not in docs:
            what = f"query {qid!r}" if qid not in queries else f"passage {pid!r}"
            raise DataError(labels, None, f"{what} of the pair ({qid!r}, {pid!r}) is not in {dataset}",
                            "label the pairs of this dataset again with the label_units rule")
    encoder = load_encoder(model, device=device, **encoder_options).to(resolve_device(device))
    was_training = encoder.training
    encoder.eval()
    target = encoder.device
    per_pair: dict[str, dict] = {}
    try:
        with torch.no_grad():
            for start in range(0, len(pairs), batch_size):
                chunk = pairs[start:start + batch_size]
                qids, pids = [q for q, _ in chunk], [p for _, p in chunk]
                texts = [docs[p] for p in pids]
                q_batch = encoder.collate(encoder.tokenize_queries([queries[q] for q in qids]))
                d_batch = encoder.collate(encoder.tokenize_docs(texts))
                units = unit_pooling(encoder, texts, [labelled[pair] for pair in chunk], d_batch["input_ids"].shape[1])
                t_q = encoder(**to_device(q_batch, target))
                t_p, hidden = encoder(**to_device(d_batch, target), return_hidden=True)
                e = unit_vectors(units["weights"], hidden)
                measures = unit_measures(scaled(t_q, scale), scaled(t_p, scale), e, units["mask"], units["targets"])
                kept = units["mask"].sum(dim=1).tolist()
                for j, (qid, pid) in enumerate(chunk):
                    per_pair[f"{qid}\t{pid}"] = {**{m: measures[m][j] for m in MEASURES}, "units": int(kept[j])}
    finally:
        encoder.train(was_training)
    counts, aggregate = {}, {}
    for m in MEASURES:
        values = [r[m] for r in per_pair.values() if r[m] is not None]
        counts[m] = len(values)
        aggregate[m] = sum(values) / len(values) if values else None
    log.info("%s on %s: %d pairs, %s (pairs measured: %s)", encoder.name_or_path, dataset.name, len(pairs),
             aggregate, counts)
    return {"aggregate": aggregate, "counts": counts, "pairs": len(pairs), "per_query": per_pair}


def write_unit_analysis(model: str | os.PathLike, dataset: str | os.PathLike, labels: str | os.PathLike,
                        out: str | os.PathLike, *, meta: dict | None = None, batch_size: int = 64,
                        device: str | None = "auto", scale: float = 1.0, **encoder_options) -> dict:
    """The ``berm_unit_analysis`` job: :func:`unit_analysis` written to ``out`` (atomically) with the
    inputs it came from and ``meta`` (dataset and system names); returns what was written."""
    result = unit_analysis(model, dataset, labels, batch_size=batch_size, device=device, scale=scale,
                           **encoder_options)
    data = {**(meta or {}), "model": str(model), "labels": str(labels), "encoder": encoder_options, "scale": scale,
            **result}
    with atomic_write(out) as fh:
        json.dump(data, fh, indent=1)
    return data
