"""BERM as a loss term of the bi-encoder task (docs/methods/berm.md#model-and-losses).

:class:`BermTerm` adds ``r1_weight · L_R1 + r2_weight · L_R2`` to whatever task loss the base recipe
trains (DPR's pairwise NLL, ANCE's episodes, KD's Margin-MSE): the base recipe is unchanged, the
term only needs each query's positive passage, its sentence units and its essential-unit label.

Labels come from the labelling stage (:mod:`zsdr.training.unit_labels`): one JSON line per
training pair ``{"qid", "pid", "units": [[start, end], ...], "essential": k, ...}`` with character
spans into the passage text. A pair without a label still gets R1 (its units are segmented on the
fly) but no R2. Unit vectors ``e_i`` are the mean of the last-layer token states over exactly the
unit's tokens (:func:`zsdr.losses.semantic_units.unit_pooling`, :func:`zsdr.data.units.tokenize_with_units`),
no projection head; ``t_p`` and
``t_q`` are the vectors whose dot product is the model's relevance logit: the encoder's (pooled,
headed) vectors times ``sqrt(scale)``. With the papers' dot products (``scale`` 1) these are the
encoder's vectors; with cosine similarity and an inverse temperature (the mini recipes: scale 20)
the unit-length vectors would make ``GELU(t_q ⊙ t_p)`` vanish (components ~1/dim) and leave R2
nothing to learn from, so they are scaled as the logit scales them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from zsdr.data.units import read_unit_labels
from zsdr.losses.semantic_units import scaled, unit_pooling, unit_vectors
from zsdr.training.sections import section_from_dict
from zsdr.training.terms import AdditiveTerm, Encoded, Sampled


@dataclass(kw_only=True)
class BermConfig:
    """The ``berm`` section of a recipe. The keys the config schema gives a default (``recipes.<name>.berm``
    in schemas/config.schema.yaml) have none here: the workflow fills them into every spec."""

    labels: str | None = None        # labels file of the training pairs (the labelling stage's output)
    r1_weight: float                 # L_R1, semantic-unit balance (docs/methods/berm.md#loss-weights)
    r2_weight: float                 # L_R2, essential-unit extractability
    double_softmax: bool             # code-faithful R2: cross-entropy on softmaxed scores (docs/methods/berm.md#r2-essential-unit-extractability ⚠)
    r1_reduction: str                # "sum": the paper's KL; "mean": KL / units, the official code's
    scale: float = 1.0               # the recipe's inverse temperature (see the module docstring)

    def __post_init__(self):
        from zsdr.losses.semantic_units import R1_REDUCTIONS

        if self.r1_reduction not in R1_REDUCTIONS:
            raise ValueError(f"berm.r1_reduction: {self.r1_reduction!r} is not one of {', '.join(R1_REDUCTIONS)} "
                             "(sum: the paper's KL; mean: KL / units, the official code's)")

    @classmethod
    def from_dict(cls, data: dict) -> "BermConfig":
        return section_from_dict(cls, data, "berm")


class BermTerm(AdditiveTerm):
    """The R1 / R2 losses of the positives of a batch (see the module docstring): the recipe's
    ``berm`` section, a :class:`~zsdr.training.terms.AdditiveTerm` that needs the documents' token
    states."""

    name = "berm"
    config_class = BermConfig
    summary = "BERM's unit losses"
    needs_token_states = True

    def __init__(self, config: BermConfig):
        self.config = config
        self.labels = read_unit_labels(config.labels) if config.labels else {}

    @classmethod
    def input_files(cls, section: dict) -> list[str]:
        return [section["labels"]] if section.get("labels") else []

    def batch_of(self, sampled: Sampled) -> dict:
        """:meth:`batch` of the batch's positives, padded to the document batch's width."""
        pids = sampled.positives
        return self.batch(sampled.encoder, sampled.qids, pids, [sampled.data.corpus[p] for p in pids],
                          width=sampled.docs["input_ids"].shape[1])

    def loss_of(self, encoded: Encoded, data: dict) -> tuple[torch.Tensor, dict]:
        """:meth:`loss` of the queries, their positives and the positives' token states."""
        return self.loss(encoded.queries, encoded.docs[:, 0], encoded.doc_states[:, 0], data)

    def batch(self, encoder, qids: Sequence[str], pids: Sequence[str], docs: Sequence[dict], width: int) -> dict:
        """Unit pooling weights ``(n, u, width)``, unit mask ``(n, u)`` and targets ``(n,)`` of the positives
        (``width``: the padded length of the document batch)."""
        return unit_pooling(encoder, docs, [self.labels.get((q, p)) for q, p in zip(qids, pids)], width)

    def loss(self, queries: torch.Tensor, passages: torch.Tensor, hidden: torch.Tensor,
             batch: dict) -> tuple[torch.Tensor, dict]:
        """``(r1_weight · R1 + r2_weight · R2, logs)`` for the positives' vectors and token states."""
        from zsdr.losses.semantic_units import matching_representation, unit_accuracy, unit_balance, unit_extraction

        cfg = self.config
        queries, passages = scaled(queries, cfg.scale), scaled(passages, cfg.scale)
        mask, targets = batch["mask"].to(hidden.device), batch["targets"].to(hidden.device)
        units = unit_vectors(batch["weights"], hidden)
        total = passages.sum() * 0.0
        logs = {}
        if cfg.r1_weight:
            r1 = unit_balance(passages, units, mask, cfg.r1_reduction)
            total = total + cfg.r1_weight * r1
            logs["r1"] = r1.detach()
        if batch.get("labelled"):   # positives whose essential unit truncation removed or moved (unit_pooling)
            logs["no_visible_unit"] = batch["no_visible_unit"] / batch["labelled"]
            logs["essential_moved"] = batch["moved"] / batch["labelled"]
        if cfg.r2_weight:
            m = matching_representation(queries, passages)
            r2 = unit_extraction(m, units, mask, targets, cfg.double_softmax)
            total = total + cfg.r2_weight * r2
            logs["r2"] = r2.detach()
            acc = unit_accuracy(m.detach(), units.detach(), mask, targets)
            if acc == acc:  # NaN when no positive of the batch is labelled
                logs["unit_accuracy"] = acc
        return total, logs
