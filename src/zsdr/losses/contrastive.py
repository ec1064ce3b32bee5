"""Contrastive ranking losses of dense retrievers.

* :func:`pairwise_nll`: ``-log softmax([s(q,d+), s(q,d-)])[0]`` over each query's own candidates
  only (the ANCE-family ``rdot_nll`` loss: one positive and one or more negatives, no in-batch
  negatives; docs/methods/baselines.md#pairwise-nll-loss).
* :func:`contrastive`: every query against every document of the (global) batch, its own
  positive as the target, with an inverse temperature and a mask that removes the other
  documents labelled relevant to the query (DDR's REM loss, docs/methods/ddr.md#contrastive-rem-loss).

Both return the *mean* over the queries they are given; under data parallelism each process
passes its own queries (and, for :func:`contrastive`, the documents gathered from all
processes), and the gradient average of DDP turns the per-process means into the global mean.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MASKED = -10000.0  # the logit a masked document gets (DDR's value); finite, so a fully masked row stays finite


def pairwise_nll(pos_scores: torch.Tensor, neg_scores: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Mean of ``-log( e^{s+} / (e^{s+} + Σ_k e^{s-_k}) )`` per query.

    ``pos_scores``: ``(n,)``; ``neg_scores``: ``(n,)`` (one negative each) or ``(n, k)``;
    ``reduction="none"`` returns the ``(n,)`` per-query losses instead (COCO-DR's iDRO weights them).
    """
    if reduction not in ("mean", "none"):
        raise ValueError(f"pairwise_nll: reduction {reduction!r}: expected 'mean' or 'none'")
    if neg_scores.dim() == 1:
        neg_scores = neg_scores[:, None]
    if pos_scores.dim() != 1 or neg_scores.shape[0] != pos_scores.shape[0]:
        raise ValueError(f"pairwise_nll: scores of shape {tuple(pos_scores.shape)} and {tuple(neg_scores.shape)} "
                         "do not pair up (expected (n,) and (n,) or (n, k))")
    logits = torch.cat([pos_scores[:, None], neg_scores], dim=1).float()
    per_query = -F.log_softmax(logits, dim=1)[:, 0]
    return per_query if reduction == "none" else per_query.mean()


def contrastive(queries: torch.Tensor, docs: torch.Tensor, targets: torch.Tensor,
                mask: torch.Tensor | None = None, scale: float = 1.0) -> torch.Tensor:
    """In-batch contrastive loss with hard negatives.

    ``queries``: ``(n, dim)``; ``docs``: ``(m, dim)``, every document of the batch (positives and
    hard negatives, across devices); ``targets``: ``(n,)``, the row of each query's positive in
    ``docs``; ``mask``: optional ``(n, m)`` bool, True where a document must not count as a negative
    (it is labelled relevant to the query but is not its target); ``scale``: the inverse
    temperature τ multiplying the scores (1 for dot product, 20 for cosine in DDR).
    Returns ``mean_i -log softmax(τ · q_i · Dᵀ)[targets_i]``.
    """
    logits = scale * (queries.float() @ docs.float().T)
    if mask is not None:
        keep_target = torch.zeros_like(mask)
        keep_target[torch.arange(len(targets), device=mask.device), targets] = True
        logits = logits.masked_fill(mask & ~keep_target, MASKED)
    return F.cross_entropy(logits, targets)


def relevance_mask(query_positives: list[set[str]], doc_ids: list[str]) -> torch.Tensor:
    """``(n, m)`` bool: True where document ``j`` is labelled relevant to query ``i``."""
    index: dict[str, list[int]] = {}
    for j, did in enumerate(doc_ids):
        index.setdefault(did, []).append(j)
    mask = torch.zeros((len(query_positives), len(doc_ids)), dtype=torch.bool)
    for i, positives in enumerate(query_positives):
        for did in positives:
            for j in index.get(did, ()):
                mask[i, j] = True
    return mask
