"""Heads on top of an encoder's embeddings.

:class:`AnceHead` is ANCE's projection of the pooled vector, ``LayerNorm(W h + b)`` (an encoder's
``cls_linear_ln`` pooling).

:class:`DomainClassifier` is MoDIR's domain classifier ``f(e) = softmax(W_f e)`` (docs/methods/modir.md#domain-classifier;
official code ``model/domain_classifier.py`` with ``dc_layers=1``): one linear map to two classes
(0 = source, 1 = target) without a bias, its logits clipped to ``[-clip, clip]`` before any softmax
or cross-entropy, randomly initialised.
"""

from __future__ import annotations

import torch
from torch import nn

SOURCE, TARGET = 0, 1


class AnceHead(nn.Module):
    """ANCE's projection: ``LayerNorm(W h + b)`` with a square ``W``."""

    def __init__(self, dim: int, seed: int = 0, init_std: float = 0.02, eps: float = 1e-5):
        super().__init__()
        self.linear = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=eps)
        generator = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(dim, dim, generator=generator) * init_std)
            self.linear.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


class DomainClassifier(nn.Module):
    def __init__(self, dim: int, clip: float | None = 5.0, seed: int | None = None):
        super().__init__()
        self.linear = nn.Linear(dim, 2, bias=False)
        self.clip = clip
        if seed is not None:  # a seeded init that leaves the global RNG untouched
            gen = torch.Generator().manual_seed(int(seed))
            bound = 1.0 / dim ** 0.5  # nn.Linear's default (Kaiming-uniform with a = sqrt(5))
            with torch.no_grad():
                self.linear.weight.copy_(torch.empty(2, dim).uniform_(-bound, bound, generator=gen))

    def forward(self, emb: torch.Tensor) -> torch.Tensor:
        logits = self.linear(emb.to(self.linear.weight.dtype))
        return logits if self.clip is None else logits.clamp(-self.clip, self.clip)

    @staticmethod
    def logits_with(weight: torch.Tensor, emb: torch.Tensor, clip: float | None) -> torch.Tensor:
        """The logits of a frozen copy: ``weight`` (detached by the caller) applied to ``emb``."""
        logits = emb.float() @ weight.float().T
        return logits if clip is None else logits.clamp(-clip, clip)
