"""BERM's auxiliary losses over a passage's sentence units (docs/methods/berm.md#model-and-losses).

Shapes: ``passages`` ``(n, h)`` (the passage vectors ``t_p``), ``units`` ``(n, u, h)`` (the unit
vectors ``e_i``, padded), ``mask`` ``(n, u)`` (True where a unit exists). A passage with no unit
contributes nothing; the means run over the passages that do contribute.

* :func:`unit_balance` (R1, paper eq. 4): ``KL(b || softmax_i <t_p, e_i>)`` with ``b`` uniform over
  the passage's ``n`` units, i.e. ``-log n - (1/n) Σ_i log P_i``; zero exactly when every unit gets
  the same score. ``reduction="sum"`` is that KL (the paper's); ``reduction="mean"`` divides it by
  ``n``, which is what the official code computes (``F.kl_div(..., reduction='mean')`` on one
  passage's ``(1, n)`` row averages the ``n`` pointwise terms). The loss weights 1.0 / 0.1 come
  from that code, so they balance R1 against the task loss only in its form. (The official code
  also sums over the passages it reached and divides by their number + 1, skipping the last passage
  of a batch: a factor ``(B - 1) / B`` on a batch of ``B`` that this mean over passages leaves out.)
* :func:`matching_representation`: ``m = GELU(t_q ⊙ t_p+)``.
* The inputs, shared by the training term (:class:`zsdr.training.berm_term.BermTerm`) and the unit
  analyses (:mod:`zsdr.evaluation.unit_analysis`): :func:`unit_pooling` (each unit's pooling weights
  over the document batch's tokens, the mask and the essential-unit targets), :func:`unit_vectors`
  (``e_i``: the mean of the last-layer token states over exactly the unit's tokens) and
  :func:`scaled` (``t_q`` and ``t_p`` times the square root of the logit scale).
* :func:`unit_extraction` (R2, paper eq. 5): cross-entropy of ``softmax_i <m, e_i>`` against the
  essential unit. ``double_softmax=True`` is the official code's variant (docs/methods/berm.md#r2-essential-unit-extractability ⚠): the
  cross-entropy is applied to the already-softmaxed probabilities, which flattens its gradient.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from zsdr.data.units import tokenize_with_units

# A labelled pair: its units' character spans, the essential unit's index over all of them (-1: none) and,
# from the labelling stage, every unit's matching score h_i (None: a label without scores).
Labelled = tuple[list[tuple[int, int]], int] | tuple[list[tuple[int, int]], int, list[float] | None]


def visible_essential(scores: Sequence[float] | None, essential: int, keep: Sequence[int]) -> int:
    """The essential unit among the units ``keep`` that truncation leaves (BERM's official code takes the
    argmax over the units its truncated input holds): the first highest ``scores[j]`` of ``j`` in ``keep``;
    without scores the labelled ``essential`` where it is kept. -1: no such unit."""
    if not keep:
        return -1
    if scores is None:
        return essential if essential in keep else -1
    return max(keep, key=lambda j: (scores[j], -j))


def unit_pooling(encoder, docs: Sequence[dict], labels: Sequence[Labelled | None], width: int) -> dict:
    """Unit pooling weights ``(n, u, width)``, unit mask ``(n, u)`` and targets ``(n,)`` of ``docs``,
    tokenised by ``encoder`` as its documents are (``width``: the padded length of the document
    batch); ``labels``: each document's labelled units, essential unit and unit scores, or ``None``
    (units segmented on the fly, no target). Units truncation leaves out get no row; the target is
    the essential unit among the units left (:func:`visible_essential`, recomputed for this
    encoder's maximum length), -1 when no unit is left. Also counts, over the labelled documents
    (an essential unit >= 0): ``labelled``, ``no_visible_unit`` (truncation left none of its units)
    and ``moved`` (the visible essential unit is not the full text's)."""
    _, spans = tokenize_with_units(encoder, docs, [k[0] if k else None for k in labels])
    kept = [[j for j, s in enumerate(row) if s is not None] for row in spans]
    n, u = len(docs), max([len(k) for k in kept] + [1])
    weights = torch.zeros(n, u, width)
    mask = torch.zeros(n, u, dtype=torch.bool)
    targets = torch.full((n,), -1, dtype=torch.long)
    labelled = no_visible = moved = 0
    for b, (row, keep) in enumerate(zip(spans, kept)):
        for i, j in enumerate(keep):
            s, e = row[j]
            weights[b, i, s:e] = 1.0 / (e - s)
            mask[b, i] = True
        label = labels[b]
        essential = label[1] if label else -1
        if essential < 0:
            continue
        visible = visible_essential(label[2] if len(label) > 2 else None, essential, keep)
        labelled += 1
        if not keep:
            no_visible += 1
        elif visible != essential:
            moved += 1
        if visible >= 0:
            targets[b] = keep.index(visible)
    return {"weights": weights, "mask": mask, "targets": targets, "labelled": labelled,
            "no_visible_unit": no_visible, "moved": moved}


def unit_vectors(weights: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """``(n, u, h)`` unit vectors: :func:`unit_pooling`'s weights applied to the last-layer states."""
    return torch.einsum("nul,nlh->nuh", weights.to(hidden.device), hidden.float())


def scaled(vectors: torch.Tensor, scale: float) -> torch.Tensor:
    """``sqrt(scale) · vectors``: the vectors whose dot products are the logits ``scale · <a, b>``."""
    return vectors if scale == 1.0 else vectors * math.sqrt(scale)


def unit_scores(vectors: torch.Tensor, units: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``<vectors_b, units_b,i>`` with missing units at -inf: ``(n, u)``."""
    scores = torch.einsum("nh,nuh->nu", vectors.float(), units.float())
    return scores.masked_fill(~mask, float("-inf"))


R1_REDUCTIONS = ("sum", "mean")


def unit_balance(passages: torch.Tensor, units: torch.Tensor, mask: torch.Tensor,
                 reduction: str = "sum") -> torch.Tensor:
    """R1: mean over passages with units of ``KL(uniform || softmax_i <t_p, e_i>)`` (``"sum"``) or
    of that KL divided by the passage's unit count (``"mean"``, the official code's form)."""
    if reduction not in R1_REDUCTIONS:
        raise ValueError(f"berm r1_reduction must be one of {R1_REDUCTIONS}, got {reduction!r}")
    rows = mask.any(dim=1)
    if not bool(rows.any()):
        return passages.sum() * 0.0
    logp = F.log_softmax(unit_scores(passages, units, mask)[rows], dim=1)
    m = mask[rows]
    n = m.sum(dim=1).float()
    kl = -torch.log(n) - logp.masked_fill(~m, 0.0).sum(dim=1) / n
    return (kl / n).mean() if reduction == "mean" else kl.mean()


def matching_representation(queries: torch.Tensor, passages: torch.Tensor) -> torch.Tensor:
    return F.gelu(queries.float() * passages.float())


def unit_extraction(matching: torch.Tensor, units: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor,
                    double_softmax: bool = False) -> torch.Tensor:
    """R2: mean cross-entropy of ``softmax_i <m, e_i>`` against ``targets`` (unit index per passage;
    -1 = no label, skipped)."""
    rows = (targets >= 0) & mask.any(dim=1)
    if not bool(rows.any()):
        return matching.sum() * 0.0
    logits = unit_scores(matching, units, mask)[rows]
    if double_softmax:
        logits = F.softmax(logits, dim=1).masked_fill(~mask[rows], float("-inf"))
    return F.cross_entropy(logits, targets[rows])


def unit_accuracy(matching: torch.Tensor, units: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor) -> float:
    """Share of labelled passages whose highest-scoring unit under ``m`` is the essential one."""
    rows = (targets >= 0) & mask.any(dim=1)
    if not bool(rows.any()):
        return float("nan")
    pred = unit_scores(matching, units, mask)[rows].argmax(dim=1)
    return float((pred == targets[rows]).float().mean())
