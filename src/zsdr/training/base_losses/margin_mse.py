"""``margin_mse``: Margin-MSE against the teacher's scores of the positive and each negative (KD;
:func:`zsdr.losses.margin_mse.margin_mse`)."""

from __future__ import annotations

from typing import Sequence

import torch

from zsdr.losses.margin_mse import margin_mse
from zsdr.training.base_losses import BaseLoss, Scores


class MarginMse(BaseLoss):
    name = "margin_mse"
    summary = "Margin-MSE: each (positive - negative) score margin against the teacher's (distillation)"
    batch_keys = ("teacher",)

    def check(self, data, negatives: int) -> None:
        super().check(data, negatives)
        if data.teacher is None:
            raise ValueError("margin_mse needs teacher scores")

    def batch_of(self, data, indices: Sequence[int], teacher: Sequence[Sequence[float]]) -> dict:
        return {"teacher": torch.tensor(teacher, dtype=torch.float32)}

    def loss(self, scores: Scores, batch: dict, reduction: str = "mean") -> torch.Tensor:
        self.mean_only(reduction)
        own, t = scores.own, batch["teacher"]
        return margin_mse(self.scale * own[:, 0], self.scale * own[:, 1:], t[:, 0], t[:, 1:])
