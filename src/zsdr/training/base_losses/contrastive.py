"""``contrastive``: each query against every positive and negative of the global batch (gathered with
gradients across processes), other documents labelled relevant to the query masked (DDR's REM / DR
loss; :func:`zsdr.losses.contrastive.contrastive`)."""

from __future__ import annotations

from typing import Sequence

import torch

from zsdr.distributed import gather_objects, gather_with_grad, rank_offset
from zsdr.losses.contrastive import contrastive, relevance_mask
from zsdr.training.base_losses import BaseLoss, Scores


class Contrastive(BaseLoss):
    name = "contrastive"
    summary = ("in-batch contrastive: each query against every document of the global batch, the other "
               "documents labelled relevant to it masked")
    needs_negatives = False
    batch_keys = ("relevant",)

    def batch_of(self, data, indices: Sequence[int], teacher: Sequence[Sequence[float]]) -> dict:
        return {"relevant": [data.relevant_ids(i) for i in indices]}

    def loss(self, scores: Scores, batch: dict, reduction: str = "mean") -> torch.Tensor:
        self.mean_only(reduction)
        q, d = scores.queries, scores.docs
        all_d = gather_with_grad(d)
        all_ids = gather_objects(batch["doc_ids"])
        offset = rank_offset(d.shape[0])
        targets = offset + torch.arange(q.shape[0], device=q.device) * scores.group
        mask = relevance_mask(batch["relevant"], all_ids).to(q.device)
        return contrastive(q, all_d, targets, mask, self.scale)
