"""Loss terms of the bi-encoder task (:class:`~zsdr.training.tasks.BiEncoderTask`), and their registry.

A term is one class in one module: a subclass of :class:`AdditiveTerm` or :class:`ReducingTerm`
that declares

* ``name``: its recipe section (``berm:``, ``modir:``, ``dro:``), which is also the key of the
  training spec that carries the section;
* ``config_class``: the dataclass of that section (its fields are the section's keys, with their
  defaults; an unknown key is an error naming the section);
* ``from_spec(section, encoder)``: the term built from the section (by default ``cls(config)``),
  and ``input_files(section)``: the files whose change makes a checkpoint stale (none by default).

:data:`TERMS` maps each section name to its class as ``"module:Class"``; the order of the table is
the order the terms' batches and losses are computed in. :func:`build_terms` builds every term a
spec has a (non-empty) section for. A new term is its module plus one line in
:mod:`zsdr.training.term_registry`: the config schema accepts its section from the term's dataclass and
the planner copies the section into the training spec (docs/extending.md walks one through).

Two kinds of terms:

* an :class:`AdditiveTerm` adds ``loss_of(encoded, data)`` to the task's loss (BERM's R1 / R2,
  MoDIR's adversarial loss);
* a :class:`ReducingTerm` replaces the mean over the per-query losses by ``reduce(per_query,
  encoded, data)`` (COCO-DR's iDRO, GroupDRO); a task takes at most one, and only with a loss that
  has per-query values.

Every term may also take part in the step's data (``batch_of``: its part of the batch, made on the
batch worker and moved to the device with the rest) and in the trainer's hooks: ``attach`` (once,
before training: optimisers of its own, the device), ``on_step`` (before each micro-batch),
``state_dict`` / ``load_state_dict`` (checkpointed with the model when ``checkpointed``), and
``trained_modules`` (modules whose parameters train with the encoder, by the encoder's optimiser).
"""

from __future__ import annotations

import abc
import contextlib
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from zsdr.training.sections import section_from_dict
from zsdr.training.term_registry import TERMS  # noqa: F401 (section name -> "module:Class")

if TYPE_CHECKING:
    from zsdr.models.encoder import Encoder
    from zsdr.data.training_set import TrainingSet
    from zsdr.training.config import TrainConfig



@dataclass(frozen=True)
class Sampled:
    """What the task has sampled for a batch when it asks the terms for their parts (``make_batch``)."""

    encoder: Encoder
    data: TrainingSet
    indices: list[int]              # the examples of this process's micro-batch
    epoch: int
    qids: list[str]                 # each example's query
    doc_ids: list[str]              # per query: its positive, then its sampled negatives
    group: int                      # documents per query (1 + negatives)
    docs: dict[str, torch.Tensor]   # the collated document batch (``input_ids``, ``attention_mask``, ...)

    @property
    def positives(self) -> list[str]:
        """Each query's positive document."""
        return self.doc_ids[::self.group]


@dataclass(frozen=True)
class Encoded:
    """What a training step has computed when the terms' losses are taken (``forward``)."""

    encoder: Encoder
    queries: torch.Tensor               # (n, dim): the query vectors
    docs: torch.Tensor                  # (n, group, dim): each query's positive, then its negatives
    doc_states: torch.Tensor | None     # (n, group, length, hidden): last-layer token states of the
                                        # documents, when a term ``needs_token_states``; else None
    update: bool                        # a training forward with gradients: state that moves per step may move


class Term(abc.ABC):
    """What every loss term declares and the hooks it may override (see the module docstring)."""

    name: ClassVar[str]                 # the recipe / spec section
    config_class: ClassVar[type]        # the section's dataclass
    summary: ClassVar[str] = ""         # a few words for error messages
    needs_token_states: ClassVar[bool] = False  # the documents' token states are encoded for it
    checkpointed: ClassVar[bool] = False        # its state_dict is saved with every checkpoint
    batch_key: ClassVar[str | None] = None      # its part of the batch is batch[key] (default: name)

    @classmethod
    def config_from(cls, section: dict) -> Any:
        """The section's dataclass (an unknown key is an error naming the section and the known keys)."""
        return section_from_dict(cls.config_class, dict(section), cls.name)

    @classmethod
    def from_spec(cls, section: dict, encoder: Encoder) -> "Term":
        """The term a spec's section asks for; ``encoder`` is the model the task trains."""
        return cls(cls.config_from(section))

    @classmethod
    def input_files(cls, section: dict) -> list[str]:
        """Files the section names whose change invalidates a checkpoint (the training fingerprint)."""
        return []

    @property
    def key(self) -> str:
        """Where the term's part of the batch lives."""
        return self.batch_key or self.name

    def batch_of(self, sampled: Sampled) -> Any:
        """The term's part of the batch (tensors, or dicts / lists of them); ``None``: it has none."""
        return None

    def attach(self, train_config: TrainConfig, total_steps: int, device: torch.device) -> None:
        """Once before training: build what trains apart from the encoder and move state to ``device``."""

    def on_step(self, step: int, micro: int, last: bool) -> None:
        """Before each micro-batch: the optimizer step it belongs to, its index, and whether it ends the step."""

    def state_dict(self) -> dict:
        """The state a resumed run needs (only asked for when ``checkpointed``)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s state."""

    def trained_modules(self) -> list[nn.Module]:
        """Modules whose parameters train with the encoder (its optimiser, DDP, the model checkpoint)."""
        return []


class AdditiveTerm(Term):
    """A term whose loss is added to the task's loss."""

    @abc.abstractmethod
    def loss_of(self, encoded: Encoded, data: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """``(loss, logs)``: the scalar added to the task's loss, and values for the training log.
        ``data`` is the term's part of the batch (:meth:`batch_of`), on the step's device."""


class ReducingTerm(Term):
    """A term that turns the per-query losses into the batch loss, in place of their mean.

    Besides :meth:`reduce`, the task tells it what else shapes the step's gradient (:meth:`bind_task`, once)
    and around which encoder calls a training forward runs (:meth:`begin`, then :meth:`encoding` around each
    call): COCO-DR's iDRO takes its cluster gradients from the step's own backward pass where that is exact."""

    def bind_task(self, loss: Any, additive: list) -> None:
        """Once, from the task: its base loss and its additive terms."""

    def begin(self, data: Any, update: bool) -> None:
        """A task's forward begins (``data``: the term's part of the batch; ``update``: a training forward
        with gradients)."""

    def encoding(self, rows_per_query: int) -> Any:
        """A context manager around one encoder call of the batch, whose texts are ``rows_per_query``
        per query, query after query (1: the queries; ``1 + negatives``: the documents)."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def reduce(self, per_query: torch.Tensor, encoded: Encoded, data: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """``(loss, logs)`` of the per-query losses ``(n,)``; ``data`` is the term's part of the batch."""


def term_class(name: str) -> type[Term]:
    """The class :data:`TERMS` registers for section ``name`` (imported on first use)."""
    if name not in TERMS:
        raise KeyError(f"no loss term {name!r}; registered: {', '.join(TERMS)}")
    where = TERMS[name]
    module, _, attr = where.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"loss term {name!r}: cannot load {where!r} ({exc})") from exc
    if not (isinstance(cls, type) and issubclass(cls, (AdditiveTerm, ReducingTerm))):
        raise TypeError(f"loss term {name!r}: {where} is not an AdditiveTerm or ReducingTerm subclass")
    if cls.name != name:
        raise ValueError(f"loss term {name!r}: {where} declares the section {cls.name!r}")
    return cls


def term_sections(spec: dict) -> list[str]:
    """The registered term sections ``spec`` carries (non-empty), in :data:`TERMS` order."""
    return [name for name in TERMS if spec.get(name)]


def build_terms(spec: dict, encoder: Encoder) -> list[Term]:
    """Every term ``spec`` has a section for, in :data:`TERMS` order."""
    return [term_class(name).from_spec(spec[name], encoder) for name in term_sections(spec)]


def term_input_files(spec: dict) -> list[str]:
    """The input files of every term section of ``spec`` (for the training fingerprint)."""
    return [f for name in term_sections(spec) for f in term_class(name).input_files(spec[name])]
