"""COCO-DR's span-contrastive loss (continuous contrastive pretraining, coCondenser's loss).

The batch holds two spans of each document, rows ordered ``x1_0, x2_0, x1_1, x2_1, ...``. Each
span's vector (the last layer's [CLS] state) is scored by dot product, without a temperature,
against the spans of every process; its own row is masked out, the other span of its document is
the target, and every other span is a negative: ``mean_i -log softmax(h_i · H^T)[partner(i)]``
over the local rows. Official code: ``compute_contrastive_loss`` of coCondenser / COCO-DR
(``similarities.fill_diagonal_(float('-inf'))``, targets ``[1, 0, 3, 2, ...]``).

:func:`contrastive_of_vectors` is the same loss measured on fixed vectors, batch by batch (the
contrastive loss of a pretrained model on a corpus's spans, COCO-DR's Fig. 5).
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F

from zsdr.distributed import gather_with_grad, rank_offset


def span_logits(local: torch.Tensor, gather: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, targets)`` of :func:`span_contrastive`: ``(2B, 2B·world)`` float32 dot products with
    each row's own column set to ``-inf``, and the global row of each local row's partner."""
    if local.dim() != 2 or local.shape[0] % 2:
        raise ValueError(f"span_contrastive: expected (2B, dim) span vectors ordered x1_0, x2_0, x1_1, ..., "
                         f"got shape {tuple(local.shape)}")
    n = local.shape[0]
    everything = gather_with_grad(local) if gather else local
    offset = rank_offset(n) if gather else 0
    logits = local.float() @ everything.float().T
    rows = torch.arange(n, device=local.device)
    own = torch.zeros_like(logits, dtype=torch.bool)
    own[rows, offset + rows] = True
    logits = logits.masked_fill(own, float("-inf"))
    return logits, offset + (rows ^ 1)


def span_contrastive(local: torch.Tensor, gather: bool = True) -> torch.Tensor:
    """Mean cross-entropy of each local span against its partner, with every span of every process
    (``gather``: all-gathered with gradients; ``False``: the local rows only) as the candidates.

    ``local``: ``(2B, dim)`` rows ordered ``x1_0, x2_0, x1_1, x2_1, ...`` (the two spans of a
    document side by side). No temperature; the self-similarity is excluded (``-inf``).

    The official code multiplies this loss by the world size: its gather puts the local tensor
    back into the gathered list but does not route the gradients of the other processes' copies
    home, so each process sees only its own share of the gradient of its rows.
    :func:`~zsdr.distributed.gather_with_grad` sums those gradients over processes in its
    backward (an all-reduce), so with DDP averaging the per-process means the update already
    equals the one of a single process holding the global batch, and no scale is needed (the
    two-process test of ``tests/test_coco.py`` checks the equality of losses and gradients).
    """
    logits, targets = span_logits(local, gather)
    return F.cross_entropy(logits, targets)


def contrastive_of_vectors(vectors: torch.Tensor, batch_size: int, where: str | os.PathLike = "spans") -> dict:
    """The in-batch span-contrastive loss of span-pair vectors (rows ``x1_0, x2_0, x1_1, ...``), in
    consecutive batches of ``batch_size`` documents (a last, smaller batch is left out: the loss depends
    on the batch size; fewer documents than ``batch_size`` make one batch): ``{"contrastive_loss",
    "contrastive_accuracy", "documents", "batch_size"}``, means over the batches. ``where`` names the
    vectors' source in errors."""
    n = len(vectors) // 2
    size = min(int(batch_size), n)
    if size < 2:
        raise ValueError(f"{where}: {n} document(s) with batch_size={batch_size}; the in-batch loss needs at "
                         "least two documents per batch")
    used = (n // size) * size
    losses, accuracies = [], []
    for start in range(0, used, size):
        logits, partners = span_logits(vectors[2 * start:2 * (start + size)], gather=False)
        losses.append(float(F.cross_entropy(logits, partners)))
        accuracies.append(float((logits.argmax(dim=1) == partners).float().mean()))
    return {"contrastive_loss": float(np.mean(losses)), "contrastive_accuracy": float(np.mean(accuracies)),
            "documents": used, "batch_size": size}
