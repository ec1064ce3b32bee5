"""``pairwise_nll``: each query against its own positive and sampled negatives (ANCE's ``rdot_nll``;
DPR warmup, ANCE episodes; :func:`zsdr.losses.contrastive.pairwise_nll`)."""

from __future__ import annotations

import torch

from zsdr.losses.contrastive import pairwise_nll
from zsdr.training.base_losses import BaseLoss, Scores


class PairwiseNll(BaseLoss):
    name = "pairwise_nll"
    summary = "-log softmax of each query's positive among its own positive and sampled negatives (ANCE's rdot_nll)"
    per_query = True
    separable = True

    def loss(self, scores: Scores, batch: dict, reduction: str = "mean") -> torch.Tensor:
        own = scores.own
        return pairwise_nll(self.scale * own[:, 0], self.scale * own[:, 1:], reduction=reduction)
