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
* :func:`unit_extraction` (R2, paper eq. 5): cross-entropy of ``softmax_i <m, e_i>`` against the
  essential unit. ``double_softmax=True`` is the official code's variant (docs/methods/berm.md#r2-essential-unit-extractability ⚠): the
  cross-entropy is applied to the already-softmaxed probabilities, which flattens its gradient.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


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
