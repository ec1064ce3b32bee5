"""A training run's optimisation settings (:class:`TrainConfig`, a recipe's ``train`` section) and what
follows from them alone: the optimizer (AdamW or ANCE's LAMB), the number of optimizer steps a run
takes (:func:`training_steps`) and its learning-rate schedule (:func:`lr_factor`, :func:`build_schedule`).
The planner's hyperparameter card reads the same functions as the trainer, so the two cannot drift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # torch is imported where a model trains, not where a plan reads these settings
    import torch

OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "constant")
PRECISIONS = ("fp32", "bf16", "fp16", "auto")


@dataclass
class TrainConfig:
    """Optimisation settings (one config section per recipe; see config.yaml ``recipes``)."""

    batch_size: int = 32            # examples (queries) per process per micro-batch
    grad_accum: int = 1
    max_steps: int | None = None    # optimizer steps; when null, ``epochs`` over the examples
    epochs: float | None = None
    epoch_size: int | None = None   # the examples an epoch counts for ``epochs`` (the official code's own
                                    # figure, e.g. ANCE's expected_train_size); null: the training set's
    lr: float = 2e-5
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    adam_eps: float = 1e-8
    betas: tuple[float, float] = (0.9, 0.999)
    schedule: str = "linear"
    warmup_steps: int = 0
    warmup_ratio: float | None = None  # warmup as this fraction of the schedule's horizon, rounded up (Hugging Face's
                                    # --warmup_ratio, e.g. COCO's pretraining command); exclusive with warmup_steps
    max_grad_norm: float | None = 1.0
    precision: str = "fp32"         # fp32 | bf16 | fp16 | auto (bf16 where supported); the CPU runs fp32
    seed: int = 42
    save_every: int = 500
    log_every: int = 10
    snapshot_every: int | None = None  # save the model every N steps (learning curves); null: never
    schedule_steps: int | None = None  # horizon of the linear decay; null: the run's own length
    schedule_offset: int = 0        # the schedule's step at this run's first step (an ANCE episode
                                    # inside one run-wide warmup + decay: episode k starts at (k-1) x steps)
    step_limit: int | None = None   # a smoke run: stop after this many steps of the full run's schedule
                                    # (its prefix: warmup and decay as the whole run's); null: the whole run
    cpu_chunk_tokens: int | None = None  # on the CPU, bi-/cross-encoder batches run in chunks of similar lengths
                                    # of at most this many padded tokens (Encoder.chunk_tokens); null: whole

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer {self.optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r}: expected one of {', '.join(SCHEDULES)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision {self.precision!r}: expected one of {', '.join(PRECISIONS)}")
        if self.max_steps is None and self.epochs is None:
            raise ValueError("give max_steps or epochs (max_steps wins when both are set)")
        for name in ("batch_size", "grad_accum", "save_every", "log_every"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.epoch_size is not None and int(self.epoch_size) < 1:
            raise ValueError("epoch_size must be >= 1 (or null for the training set's own size)")
        if self.schedule_steps is not None and int(self.schedule_steps) < 1:
            raise ValueError("schedule_steps must be >= 1 (or null for the run's own length)")
        if int(self.schedule_offset) < 0:
            raise ValueError("schedule_offset must be >= 0")
        if self.cpu_chunk_tokens is not None and int(self.cpu_chunk_tokens) < 1:
            raise ValueError("cpu_chunk_tokens must be >= 1 (or null for whole batches)")
        if self.step_limit is not None and int(self.step_limit) < 1:
            raise ValueError("step_limit must be >= 1 (or null for the whole run)")
        if self.warmup_ratio is not None:
            if not 0.0 <= float(self.warmup_ratio) < 1.0:
                raise ValueError(f"warmup_ratio {self.warmup_ratio!r}: expected a fraction in [0, 1) of the run's steps")
            if int(self.warmup_steps) > 0:
                raise ValueError("give warmup_steps or warmup_ratio, not both (the ratio sets the steps from the run's length)")
        if self.snapshot_every is not None and int(self.snapshot_every) < 1:
            raise ValueError("snapshot_every must be >= 1 (or null for no snapshots)")
        self.betas = tuple(self.betas)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown training settings {unknown} (known: {', '.join(cls.__dataclass_fields__)})")
        return cls(**data)


def build_optimizer(params, cfg: TrainConfig, fused: bool = False) -> torch.optim.Optimizer:
    """LAMB or AdamW over the trainable ``params``; ``fused`` (a CUDA run) takes AdamW's fused kernel,
    one launch for every parameter instead of one per tensor group (the same update)."""
    import torch

    params = [p for p in params if p.requires_grad]
    if cfg.optimizer == "lamb":
        from pytorch_optimizer import Lamb

        # ANCE's LAMB: trust ratio, weight norm clamped at 10, no bias correction; clipping is
        # the trainer's (max_grad_norm=0 turns Lamb's own global-norm pre-scaling off).
        return Lamb(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay,
                    max_grad_norm=0.0, foreach=False)
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay,
                             fused=True if fused else None)


def training_steps(cfg: TrainConfig, examples: int, world: int = 1) -> int:
    """The optimizer steps a run takes: ``max_steps``, else ``epochs`` x the global micro-batches of an epoch of
    ``examples`` (``epoch_size`` where set) / ``grad_accum``, as the ANCE family's ``t_total`` counts them
    (``examples // (batch x processes x grad_accum) x epochs`` for a whole number of epochs and grad_accum 1)."""
    if cfg.max_steps is not None:
        return int(cfg.max_steps)
    n = int(cfg.epoch_size) if cfg.epoch_size is not None else int(examples)
    per_epoch = n // (int(cfg.batch_size) * int(world))
    return max(1, math.floor(cfg.epochs * per_epoch / cfg.grad_accum))


def steps_run(cfg: TrainConfig, total: int) -> int:
    """The steps a run of ``total`` scheduled steps takes: all of them, or the first ``step_limit``."""
    return min(int(total), int(cfg.step_limit)) if cfg.step_limit is not None else int(total)


def warmup_steps(cfg: TrainConfig, total: int) -> int:
    """The warmup steps of a run of ``total`` scheduled steps: ``warmup_steps``, or with ``warmup_ratio`` that
    fraction of the schedule's horizon (``schedule_steps`` or else ``total``) rounded up, as Hugging Face's
    ``TrainingArguments.get_warmup_steps`` counts it."""
    if cfg.warmup_ratio is not None:
        return math.ceil(int(cfg.schedule_steps or total) * float(cfg.warmup_ratio))
    return max(int(cfg.warmup_steps), 0)


def lr_factor(cfg: TrainConfig, step: int, total: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based, this run's) as a fraction of ``lr``: Hugging Face's
    linear (warmup, then linear decay to 0 at ``schedule_steps`` or else ``total``) or constant-with-warmup
    schedule, read ``schedule_offset`` steps in. :func:`build_schedule` follows it."""
    warmup = warmup_steps(cfg, total)
    horizon = int(cfg.schedule_steps or total)
    s = int(step) + int(cfg.schedule_offset)
    if s < warmup:
        return float(s) / float(max(1, warmup))
    if cfg.schedule == "constant":
        return 1.0
    return max(0.0, float(horizon - s) / float(max(1, horizon - warmup)))


def build_schedule(optimizer, cfg: TrainConfig, total: int):
    """Hugging Face's linear (warmup, then linear decay to 0 at ``schedule_steps`` or else ``total``)
    or constant-with-warmup schedule. A fixed ``schedule_steps`` makes a short run the exact prefix
    of a longer one (MoDIR evaluates its 10k-step model inside a longer run). ``schedule_offset``
    starts the run ``offset`` steps into that schedule (the same factors, shifted), so consecutive
    runs of ``S`` steps at offsets 0, S, 2S, ... follow one schedule (ANCE's episodes)."""
    from torch.optim.lr_scheduler import LambdaLR
    from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

    warmup = warmup_steps(cfg, total)
    total = int(cfg.schedule_steps or total)
    offset = int(cfg.schedule_offset)
    if not offset:
        if cfg.schedule == "constant":
            return get_constant_schedule_with_warmup(optimizer, warmup)
        return get_linear_schedule_with_warmup(optimizer, warmup, total)

    return LambdaLR(optimizer, lambda step: lr_factor(cfg, step, total))   # Hugging Face's formulas at step + offset
