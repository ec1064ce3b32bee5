"""The base losses of the bi-encoder task: one module each, one class each, one signature.

A base loss is what a recipe's ``loss:`` names (``pairwise_nll``, ``contrastive``, ``margin_mse``);
loss terms (:mod:`zsdr.training.terms`) add to it or reweight it. Each loss is a subclass of
:class:`BaseLoss` in its own module of this package that declares

* ``name``: its ``loss:`` value (the config schema's ``recipes.<name>.loss`` offers every registered name);
* ``summary``: one line saying what it computes (a dry run, the training log and
  :mod:`zsdr.training.loss_registry` print it);
* ``per_query``: whether it has per-query values a reducing term (iDRO, GroupDRO) may weight;
* ``separable``: whether each query's value depends only on its own query, positive and negatives (no
  in-batch negatives): iDRO then takes its cluster gradients from the step's own backward pass
  (:mod:`zsdr.training.idro_onepass`);
* ``needs_negatives``: whether it needs at least one sampled negative per query;
* ``batch_keys``: the entries it adds to a batch (:meth:`BaseLoss.batch_of`), which no loss term may take;

and implements :meth:`BaseLoss.loss` (and, when it needs more than the encoded batch,
:meth:`BaseLoss.check` and :meth:`BaseLoss.batch_of`). :mod:`zsdr.training.loss_registry` finds the
classes by name, reading this package's modules without importing them (so the planner stays
free of torch). Adding a loss is one module here, nothing else (docs/extending.md).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from zsdr.data.training_set import TrainingSet


@dataclass(frozen=True)
class Scores:
    """What a training step has encoded when its base loss is taken: ``queries`` ``(n, dim)``, ``docs``
    ``(n * group, dim)`` (each query's positive, then its sampled negatives, query after query), and
    ``own`` ``(n, group)``: each query's (unscaled) similarity to its own group, positive first."""

    queries: torch.Tensor
    docs: torch.Tensor
    own: torch.Tensor

    @property
    def group(self) -> int:
        return self.own.shape[1]


class BaseLoss(abc.ABC):
    """A base loss of :class:`~zsdr.training.tasks.BiEncoderTask` (the package docstring). ``scale``
    multiplies the similarities into logits (1 for dot products; cosine needs a temperature)."""

    name: ClassVar[str]
    summary: ClassVar[str]
    per_query: ClassVar[bool] = False
    separable: ClassVar[bool] = False
    needs_negatives: ClassVar[bool] = True
    batch_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, scale: float = 1.0):
        self.scale = float(scale)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(scale={self.scale:g})"

    def check(self, data: TrainingSet, negatives: int) -> None:
        """ValueError when ``data`` with ``negatives`` sampled negatives per query cannot train this loss."""
        if self.needs_negatives and negatives < 1:
            raise ValueError(f"loss {self.name} needs at least one negative per query")

    def batch_of(self, data: TrainingSet, indices: Sequence[int], teacher: Sequence[Sequence[float]]) -> dict:
        """The loss's own entries of a batch of examples ``indices`` (``teacher``: each example's teacher
        scores of what it drew, positive first; NaN without a teacher). Made on the batch worker."""
        return {}

    @abc.abstractmethod
    def loss(self, scores: Scores, batch: dict, reduction: str = "mean") -> torch.Tensor:
        """The loss of the step: the mean over the queries, or with ``reduction="none"`` (``per_query``
        losses only) the ``(n,)`` per-query values."""

    def mean_only(self, reduction: str) -> None:
        """ValueError unless ``reduction`` is ``"mean"`` (a loss without per-query values)."""
        if reduction != "mean":
            raise ValueError(f"loss {self.name} has no per-query values (reduction {reduction!r}); a reducing "
                             "term needs a per-query loss")
