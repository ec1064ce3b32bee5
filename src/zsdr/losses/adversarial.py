"""MoDIR's adversarial losses (docs/methods/modir.md#components-and-losses), on the logits of the domain classifier.

The domain labels are the classifier's classes (``source`` and ``target``), given by the caller
(MoDIR's classifier, :class:`zsdr.models.heads.DomainClassifier`, numbers them 0 and 1).

* :func:`classifier_loss`: the classifier's own objective, cross-entropy against the true domain
  (paper eq. 6-7: ``-log f(e)`` for source, ``-log(1 - f(e))`` for target).
* :func:`confusion_loss`: ``½ (CE(logits, source) + CE(logits, target))``, the mean over the
  embeddings; minimal (``log 2``) exactly where the classifier says 50/50 (paper eq. 8).
* :func:`minimax_loss`: ``-CE(logits, true domain)`` (Table 2's "Minimax").
* :func:`gan_loss`: ``CE(logits, source)`` on target embeddings only, the inverted label
  (Table 2's "GAN").
* :func:`adversarial_loss`: one of the three summed over the embedding sets of a step (source
  queries, source documents, target queries, target documents).
* :func:`lambda_at`: the weight ``λ_t = λ_0 · 2^(-t / half_life)`` (App. B; code:
  ``lamb_reduce_to_half_steps``).
"""

from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F

ADVERSARIAL_LOSSES = ("confusion", "minimax", "gan")


def _labels(logits: torch.Tensor, label: int) -> torch.Tensor:
    return torch.full((logits.shape[0],), label, dtype=torch.long, device=logits.device)


def classifier_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels)


def confusion_loss(logits: torch.Tensor, source: int, target: int) -> torch.Tensor:
    logits = logits.float()
    return 0.5 * (F.cross_entropy(logits, _labels(logits, source)) + F.cross_entropy(logits, _labels(logits, target)))


def minimax_loss(logits: torch.Tensor, label: int) -> torch.Tensor:
    return -F.cross_entropy(logits.float(), _labels(logits, label))


def gan_loss(logits: torch.Tensor, source: int) -> torch.Tensor:
    return F.cross_entropy(logits.float(), _labels(logits, source))


def adversarial_loss(kind: str, logits: Mapping[str, torch.Tensor], domains: Mapping[str, int], *, source: int,
                     target: int) -> torch.Tensor:
    """The encoder's adversarial loss over the sets ``logits`` (``{name: (n, 2)}``), each of domain
    ``domains[name]`` (the label ``source`` or ``target``): confusion and minimax sum over every set,
    GAN over the target sets."""
    if kind not in ADVERSARIAL_LOSSES:
        raise ValueError(f"adversarial loss {kind!r}: expected one of {', '.join(ADVERSARIAL_LOSSES)}")
    terms = []
    for name, z in logits.items():
        if domains[name] not in (source, target):
            raise ValueError(f"set {name!r}: domain label {domains[name]!r} is neither source ({source}) nor "
                             f"target ({target})")
        if kind == "confusion":
            terms.append(confusion_loss(z, source, target))
        elif kind == "minimax":
            terms.append(minimax_loss(z, domains[name]))
        elif domains[name] == target:
            terms.append(gan_loss(z, source))
    return torch.stack(terms).sum()


def lambda_at(step: int, lambda0: float, half_life: float | None) -> float:
    """``λ_0 · 2^(-step / half_life)``; a constant ``λ_0`` without a half-life."""
    if not half_life:
        return float(lambda0)
    return float(lambda0) * 2.0 ** (-float(step) / float(half_life))
