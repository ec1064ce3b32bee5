"""The one training loop every recipe runs (Hugging Face Accelerate underneath).

A recipe hands the :class:`Trainer` a *task*: an ``nn.Module`` whose ``forward(batch)`` returns
``(loss, logs)``, with ``make_batch(indices, epoch)`` (build the batch of the given examples),
``num_examples`` and ``save(directory)`` (write the trained model). The trainer owns everything
else:

* one process, multi-GPU DDP or multi-node, as started by ``accelerate launch`` / ``torchrun``;
  each process takes its contiguous slice of every global micro-batch, so the examples of a step
  do not depend on how many processes share it;
* bf16 / fp16 autocast (fp16 with loss scaling); gradient accumulation (DDP sync only on the last
  micro-batch); AdamW or LAMB (``pytorch_optimizer.Lamb``: trust ratio with the weight norm
  clamped at 10, no bias correction, as ANCE's ``utils/lamb.py``); linear or constant schedule
  with warmup; gradient clipping;
* exact checkpoint / resume: model, optimizer, scheduler, loss scaler and every process's RNG
  states (``Accelerator.save_state``) plus the step, written atomically every ``save_every``
  steps. The data position is the step itself: the order of epoch ``e`` is a seeded permutation
  and every example draws its negatives from ``(seed, epoch, index)``, so a resumed run sees the
  batches an uninterrupted one would have seen and ends with bit-identical weights on CPU;
* batches are sampled, tokenised and collated ahead of the step: on a GPU by ``workers`` forked worker
  processes (several batches ahead, in pinned memory, so neither the tokenizer nor the collation
  competes with the step's kernel launches for the interpreter), on the CPU one batch ahead on a
  thread; the step itself never waits on the host (losses and logs stay on the device and are read
  every ``log_every`` steps);
* optionally the task's transformer backbones compiled (``torch.compile``, dynamic shapes): fewer,
  fused kernels for steps bound by kernel launches;
* optional task hooks: ``attach(config, total_steps, device)`` returns stateful objects the
  task trains apart from its parameters (MoDIR's domain classifier, its optimizer and queue),
  which are checkpointed with the model; ``on_step(step, micro, last)`` runs before each
  micro-batch;
* a metrics log (``train_log.jsonl``: step, epoch, loss, learning rate, gradient norm, examples
  per second and every value the task logs, such as its loss terms), a progress line per record on
  the ``zsdr.training.trainer.progress`` logger at INFO (step/total, loss and each logged value,
  learning rate, examples/s, ETA: the job's log file shows them), a loss-curve PNG (total loss and
  each loss term, learning rate on a second axis) and a progress bar;
* optional model snapshots every ``snapshot_every`` steps (a learning curve over training time):
  ``snapshots/step-NNNNNNNNN/`` in the output folder and ``snapshots/snapshots.json``, a list of
  ``{"step", "train_seconds", "path"}`` ending with the finished model (``"path": "."``).
  ``train_seconds`` is the training loop's wall time up to the step, summed over resumed runs
  (time spent writing checkpoints and snapshots left out). Snapshots are staged in
  ``checkpoint_dir/snapshots`` (or beside the output without a checkpoint directory) and moved
  into the output with the final model; a resumed run keeps the ones taken up to its checkpoint.
* stopping on a signal (a SLURM preemption or time limit): while the loop runs, SIGTERM and
  SIGUSR1 (``sbatch --signal=USR1@300``) are only recorded; at the next optimizer-step boundary
  every process stops at the same step (the flag is all-reduced with MAX when there are several),
  a checkpoint of that step is written (snapshot first, as for the periodic ones) and the process
  exits with status 128 + the signal number, so the job fails without its output and its retry
  or requeue resumes from that step. A signal during the last step or the final save lets the
  final model be written and the run end normally.

Checkpoints live in ``checkpoint_dir`` (outside the Snakemake output, so a failed job keeps
them); a checkpoint written for other settings (``fingerprint``) is ignored and removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from zsdr.io import atomic_dir, atomic_write, save_figure, share_tree
from zsdr.training.data import epoch_order

log = logging.getLogger(__name__)
# One line every log_every steps at INFO (a workflow job's log shows them; `zsdr train --log-info`)
progress_log = logging.getLogger(__name__ + ".progress")

OPTIMIZERS = ("adamw", "lamb")
SCHEDULES = ("linear", "constant")
PRECISIONS = ("fp32", "bf16", "fp16", "auto")
STATE_FILE = "trainer_state.json"
LOG_FILE = "train_log.jsonl"
PLOT_FILE = "loss.png"
SNAPSHOT_DIR = "snapshots"
SNAPSHOT_FILE = "snapshots.json"
STOP_SIGNALS = ("SIGTERM", "SIGUSR1")  # recorded while training; the run stops at the next step boundary
BATCH_TIMEOUT = 1800  # seconds a batch worker may take for one batch before the run fails (a hung worker)


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
    max_grad_norm: float | None = 1.0
    precision: str = "fp32"         # fp32 | bf16 | fp16 | auto (bf16 where supported); the CPU runs fp32
    seed: int = 42
    save_every: int = 500
    log_every: int = 10
    snapshot_every: int | None = None  # save the model every N steps (learning curves); null: never
    schedule_steps: int | None = None  # horizon of the linear decay; null: the run's own length
    schedule_offset: int = 0        # the schedule's step at this run's first step (an ANCE episode
                                    # inside one run-wide warmup + decay: episode k starts at (k-1) x steps)

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
        if self.snapshot_every is not None and int(self.snapshot_every) < 1:
            raise ValueError("snapshot_every must be >= 1 (or null for no snapshots)")
        self.betas = tuple(self.betas)

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown training settings {unknown} (known: {', '.join(cls.__dataclass_fields__)})")
        return cls(**data)


def mixed_precision(precision: str, cuda: bool) -> str:
    if not cuda or precision == "fp32":
        return "no"
    if precision == "auto":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return precision


def build_optimizer(params, cfg: TrainConfig, fused: bool = False) -> torch.optim.Optimizer:
    """LAMB or AdamW over the trainable ``params``; ``fused`` (a CUDA run) takes AdamW's fused kernel,
    one launch for every parameter instead of one per tensor group (the same update)."""
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


def lr_factor(cfg: TrainConfig, step: int, total: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based, this run's) as a fraction of ``lr``: Hugging Face's
    linear (warmup, then linear decay to 0 at ``schedule_steps`` or else ``total``) or constant-with-warmup
    schedule, read ``schedule_offset`` steps in. :func:`build_schedule` follows it."""
    warmup = max(int(cfg.warmup_steps), 0)
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

    warmup = max(int(cfg.warmup_steps), 0)
    total = int(cfg.schedule_steps or total)
    offset = int(cfg.schedule_offset)
    if not offset:
        if cfg.schedule == "constant":
            return get_constant_schedule_with_warmup(optimizer, warmup)
        return get_linear_schedule_with_warmup(optimizer, warmup, total)

    return LambdaLR(optimizer, lambda step: lr_factor(cfg, step, total))   # Hugging Face's formulas at step + offset


def fingerprint_of(settings: dict, files: list[str | os.PathLike] = ()) -> str:
    """A digest of the settings and of the inputs' sizes and modification times."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for f in files:
        st = os.stat(f)
        h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


class StopSignals:
    """Records SIGTERM / SIGUSR1 while training runs, instead of dying at once.

    :meth:`install` puts the handlers in place (only in the main thread, the only one that may),
    :meth:`restore` puts the previous ones back. ``received`` is the number of the last signal
    recorded, 0 while none was."""

    def __init__(self, names: tuple[str, ...] = STOP_SIGNALS):
        self.signals = [getattr(signal, n) for n in names if hasattr(signal, n)]
        self.received = 0
        self._previous: dict[int, Any] = {}

    def _record(self, signum, frame) -> None:
        self.received = signum

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.debug("training outside the main thread: SIGTERM / SIGUSR1 keep their handlers")
            return
        for sig in self.signals:
            if sig not in self._previous:
                self._previous[sig] = signal.signal(sig, self._record)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            # None: a handler installed outside Python; the default is the closest we can restore
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()


class Trainer:
    def __init__(self, task: nn.Module, config: TrainConfig, out_dir: str | os.PathLike,
                 checkpoint_dir: str | os.PathLike | None = None, fingerprint: str = "",
                 cpu: bool | None = None, progress: bool = True, stop_after: int | None = None,
                 info: dict | None = None, workers: int | None = None, compile: bool = False):
        from accelerate import Accelerator

        self.task = task
        self.cfg = config
        self.out_dir = Path(out_dir)
        self.ckpt_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.fingerprint = fingerprint
        self.progress = progress
        self.stop_after = stop_after  # testing aid: stop (without saving) after this many steps
        self.info = info or {}
        if workers is not None and int(workers) < 0:
            raise ValueError(f"workers {workers}: give 0 (a thread), a number of processes, or None (automatic)")
        self.workers = workers  # batch-preparing processes; None: loader_workers() decides
        self.compile = bool(compile)
        cuda = torch.cuda.is_available() and not cpu
        logging.getLogger("accelerate").setLevel(logging.WARNING)  # one INFO line per checkpoint file otherwise
        self.acc = Accelerator(mixed_precision=mixed_precision(config.precision, cuda), cpu=not cuda)
        self.world = self.acc.num_processes
        self.rank = self.acc.process_index
        n = task.num_examples
        self.global_batch = config.batch_size * self.world
        self.micro_per_epoch = n // self.global_batch
        if self.micro_per_epoch < 1:
            raise ValueError(f"{n} training examples cannot fill one global batch of {self.global_batch} "
                             f"({config.batch_size} per process x {self.world} processes)")
        self.total = training_steps(config, n, self.world)
        self._orders: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------------------------- data
    def indices(self, micro: int) -> tuple[list[int], int]:
        """This process's example indices of global micro-batch ``micro``, and its epoch."""
        epoch, pos = divmod(micro, self.micro_per_epoch)
        if epoch not in self._orders:
            self._orders = {epoch: epoch_order(self.task.num_examples, self.cfg.seed, epoch)}
        start = pos * self.global_batch + self.rank * self.cfg.batch_size
        return self._orders[epoch][start:start + self.cfg.batch_size].tolist(), epoch

    def loader_workers(self) -> int:
        """Processes preparing batches: as configured, else on a GPU the CPUs this process may use
        beside itself (its share of the job's CPUs when several processes share them), at most 4;
        0 (one thread) on the CPU, where worker processes would take the cores the step computes on."""
        if self.workers is not None:
            return int(self.workers)
        if self.acc.device.type != "cuda":
            return 0
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        return max(0, min(4, len(os.sched_getaffinity(0)) // local - 1))

    def _batches(self, fetch, first: int, last: int) -> "_Batches":
        return _Batches(fetch, first, last, self.loader_workers(), pin=self.acc.device.type == "cuda")

    # ----------------------------------------------------------------------------- signals
    def _stop_signal(self, signals: StopSignals) -> int:
        """The signal that stops the run at this step boundary (0: go on), the same in every process:
        with several processes, the largest number any of them received (one tiny all-reduce)."""
        if self.world == 1:
            return signals.received
        import torch.distributed as dist

        flag = torch.tensor([signals.received], dtype=torch.int32, device=self.acc.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def _exit_on_signal(self, signum: int, step: int) -> None:
        """Log the stop and exit with 128 + the signal number (the checkpoint of ``step`` is written)."""
        name = signal.Signals(signum).name
        if self.ckpt_dir is not None:
            what = "checkpoint written, the next run resumes from it"
        else:
            what = "no checkpoint directory, the next run starts over"
        where = f" [process {self.rank} of {self.world}]" if self.world > 1 else ""
        log.warning("stopped by %s at step %d: %s%s", name, step, what, where)
        raise SystemExit(128 + signum)

    # -------------------------------------------------------------------------- checkpoints
    def _checkpoints(self) -> list[Path]:
        if self.ckpt_dir is None or not self.ckpt_dir.is_dir():
            return []
        return sorted(p for p in self.ckpt_dir.glob("step-*") if (p / STATE_FILE).is_file())

    def _latest(self) -> tuple[Path, int, float] | None:
        for path in reversed(self._checkpoints()):
            state = json.loads((path / STATE_FILE).read_text())
            if state.get("fingerprint") == self.fingerprint and state.get("world") == self.world:
                return path, int(state["step"]), float(state.get("train_seconds", 0.0))
            log.warning("ignoring checkpoint %s: written for other settings", path)
        return None

    def _save_checkpoint(self, step: int, train_seconds: float = 0.0) -> None:
        final = self.ckpt_dir / f"step-{step:09d}"
        tmp = self.ckpt_dir / f".step-{step:09d}.tmp"
        if self.acc.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        self.acc.wait_for_everyone()
        self.acc.save_state(str(tmp), safe_serialization=True)
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            (tmp / STATE_FILE).write_text(json.dumps(
                {"step": step, "fingerprint": self.fingerprint, "world": self.world,
                 "train_seconds": train_seconds}) + "\n")
            share_tree(tmp)  # safetensors writes 0600: the team may read checkpoints like any output
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            for old in self._checkpoints():
                if old != final:
                    shutil.rmtree(old, ignore_errors=True)
        self.acc.wait_for_everyone()

    # ---------------------------------------------------------------------------- snapshots
    def _snapshot_root(self) -> Path:
        """Where snapshots wait for the end of training: in the checkpoint directory (kept when a
        run is killed) or, without one, beside the output like the log file."""
        if self.ckpt_dir is not None:
            return self.ckpt_dir / SNAPSHOT_DIR
        return self.out_dir.parent / f".{self.out_dir.name}.{SNAPSHOT_DIR}"

    def _resume_snapshots(self, start: int) -> list[dict]:
        """The staged snapshots up to step ``start``; the rest (a killed run's after its checkpoint,
        an unfinished one, a stale run's) are removed and will be taken again."""
        root = self._snapshot_root()
        if not self.cfg.snapshot_every or start == 0:
            shutil.rmtree(root, ignore_errors=True)
            return []
        listed = []
        if (root / SNAPSHOT_FILE).is_file():
            listed = json.loads((root / SNAPSHOT_FILE).read_text(encoding="utf-8"))
        kept = [e for e in listed if e["step"] <= start and (root / _snapshot_name(e["step"])).is_dir()]
        expected = set(range(self.cfg.snapshot_every, start + 1, self.cfg.snapshot_every))
        if {e["step"] for e in kept} != expected:
            log.warning("snapshots of steps %s are missing from %s; the curve will lack them",
                        sorted(expected - {e["step"] for e in kept}), root)
        names = {_snapshot_name(e["step"]) for e in kept}
        for p in root.iterdir() if root.is_dir() else ():
            if p.name == SNAPSHOT_FILE or p.name in names:
                continue
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        with atomic_write(root / SNAPSHOT_FILE) as fh:
            fh.write(json.dumps(kept, indent=1) + "\n")
        return kept

    def _save_snapshot(self, model_task: nn.Module, step: int, train_seconds: float, snapshots: list[dict]) -> None:
        root = self._snapshot_root()
        name = _snapshot_name(step)
        tmp = root / f".{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model_task.save(tmp)
        share_tree(tmp)
        shutil.rmtree(root / name, ignore_errors=True)
        os.replace(tmp, root / name)
        snapshots.append({"step": step, "train_seconds": train_seconds, "path": f"{SNAPSHOT_DIR}/{name}"})
        with atomic_write(root / SNAPSHOT_FILE) as fh:
            fh.write(json.dumps(snapshots, indent=1) + "\n")

    def _publish_snapshots(self, out_tmp: Path, snapshots: list[dict], step: int, train_seconds: float) -> None:
        """Move the staged snapshots into the output folder being written and list them with the final model."""
        root, dest = self._snapshot_root(), out_tmp / SNAPSHOT_DIR
        dest.mkdir(parents=True, exist_ok=True)
        for e in snapshots:
            shutil.move(str(root / _snapshot_name(e["step"])), str(dest / _snapshot_name(e["step"])))
        final = [*snapshots, {"step": step, "train_seconds": train_seconds, "path": "."}]
        (dest / SNAPSHOT_FILE).write_text(json.dumps(final, indent=1) + "\n", encoding="utf-8")

    # -------------------------------------------------------------------------------- loop
    def train(self) -> Path | None:
        """Train (resuming from the latest checkpoint) and write the model; ``None`` when stopped early
        by ``stop_after``. Exits the process with 128 + the signal number when SIGTERM or SIGUSR1
        stops it (after writing a checkpoint of the step it stopped at)."""
        signals = StopSignals()
        try:
            return self._train(signals)
        finally:
            signals.restore()

    def _train(self, signals: StopSignals) -> Path | None:
        from accelerate.utils import set_seed
        from tqdm.auto import tqdm

        cfg, acc = self.cfg, self.acc
        set_seed(cfg.seed, device_specific=True)
        optimizer = build_optimizer(self.task.parameters(), cfg, fused=acc.device.type == "cuda")
        scheduler = build_schedule(optimizer, cfg, self.total)
        if self.compile and acc.device.type == "cuda":
            compile_backbones(self.task)
        elif self.compile:
            log.info("compile: on the CPU the backbones run uncompiled (compiling pays for kernel launches on a GPU)")
        attach = getattr(self.task, "attach", None)  # a task's parts that train apart (MoDIR's classifier)
        extra_state = attach(cfg, self.total, acc.device) if attach else []
        model, optimizer = acc.prepare(self.task, optimizer)
        acc.register_for_checkpointing(scheduler)
        for obj in extra_state:
            acc.register_for_checkpointing(obj)
        start, train_seconds = 0, 0.0
        if self.ckpt_dir is not None:
            if acc.is_main_process:
                self.ckpt_dir.mkdir(parents=True, exist_ok=True)
                for stale in self.ckpt_dir.glob(".step-*.tmp"):
                    shutil.rmtree(stale, ignore_errors=True)
            acc.wait_for_everyone()
            found = self._latest()
            if found is not None:
                acc.load_state(str(found[0]))
                start, train_seconds = found[1], found[2]
                log.info("resuming from %s (step %d of %d)", found[0], start, self.total)
            elif acc.is_main_process:
                for old in self._checkpoints():
                    shutil.rmtree(old, ignore_errors=True)
        if self.ckpt_dir is not None:
            log_path = self.ckpt_dir / LOG_FILE
        else:
            log_path = self.out_dir.parent / f".{self.out_dir.name}.{LOG_FILE}"
            log_path.parent.mkdir(parents=True, exist_ok=True)
        records = self._read_log(log_path, start) if acc.is_main_process else []
        snapshots = self._resume_snapshots(start) if acc.is_main_process else []
        bar = tqdm(total=self.total, initial=start, desc=f"train {self.out_dir.name}", unit="step",
                   disable=not (self.progress and acc.is_main_process), dynamic_ncols=True)
        model.train()
        last = run_start = time.perf_counter()
        # the window's losses stay on the device (read every log_every steps: no host sync per step)
        window_loss, window_n, examples = torch.zeros((), dtype=torch.float64, device=acc.device), 0, 0
        step = start
        unwrapped = acc.unwrap_model(model)
        last_micro = self.total * cfg.grad_accum
        on_step = getattr(unwrapped, "on_step", None)

        def fetch(micro: int):
            idx, ep = self.indices(micro)
            return unwrapped.make_batch(idx, ep), ep

        clock = time.perf_counter()  # train_seconds counts from here, pausing while files are written
        signals.install()  # recorded from here to the end of the final save (restored by train())
        # Batches are pure functions of the step, so preparing them ahead changes no result. The
        # workers start after the handlers are installed and ignore the stop signals themselves.
        batches = self._batches(fetch, start * cfg.grad_accum, last_micro)
        try:
            while step < self.total:
                step_loss = torch.zeros((), device=acc.device)
                logs_acc: dict[str, Any] = {}
                epoch = 0
                for m in range(cfg.grad_accum):
                    micro = step * cfg.grad_accum + m
                    raw, epoch = next(batches)
                    batch = _to(raw, acc.device)
                    if on_step is not None:
                        on_step(step, micro, m == cfg.grad_accum - 1)
                    sync = contextlib.nullcontext() if m == cfg.grad_accum - 1 else acc.no_sync(model)
                    with sync:
                        loss, logs = model(batch)
                        acc.backward(loss / cfg.grad_accum)
                    step_loss += loss.detach().float() / cfg.grad_accum
                    for k, v in logs.items():  # floats or 0-d tensors (read at the log step)
                        v = v.detach().float() if isinstance(v, torch.Tensor) else float(v)
                        logs_acc[k] = logs_acc.get(k, 0.0) + v / cfg.grad_accum
                grad_norm = None
                if cfg.max_grad_norm:
                    grad_norm = acc.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                examples += self.global_batch * cfg.grad_accum
                window_loss += step_loss.double()
                window_n += 1
                bar.update(1)
                if step % cfg.log_every == 0 or step == self.total:
                    # the mean over processes of the window's per-step losses (one collective per record)
                    losses = acc.reduce(torch.stack([window_loss, step_loss.double()]), reduction="mean").tolist()
                    now = time.perf_counter()
                    rec = {"step": step, "epoch": epoch, "loss": losses[0] / window_n, "last_loss": losses[1],
                           "lr": scheduler.get_last_lr()[0],
                           "grad_norm": None if grad_norm is None else float(grad_norm),
                           "examples_per_s": examples / max(now - last, 1e-9),
                           **{k: float(v) for k, v in logs_acc.items()}}
                    if acc.is_main_process:
                        records.append(rec)
                        with open(log_path, "a", encoding="utf-8") as fh:
                            fh.write(json.dumps(rec) + "\n")
                        bar.set_postfix(loss=f"{rec['loss']:.4f}", lr=f"{rec['lr']:.2e}")
                        progress_log.info("%s", progress_line(self.out_dir.name, rec, self.total, start,
                                                              now - run_start))
                    window_loss.zero_()
                    window_n, examples, last = 0, 0, now
                # A recorded SIGTERM / SIGUSR1 stops every process here, after a checkpoint of this
                # step; after the last step the final model is written instead.
                stop = self._stop_signal(signals) if step < self.total else 0
                snap = bool(cfg.snapshot_every) and step % cfg.snapshot_every == 0 and step < self.total
                ckpt = (self.ckpt_dir is not None and (step % cfg.save_every == 0 or stop > 0)
                        and step < self.total)
                if snap or ckpt:
                    if snap:
                        batches.settle()  # no tokenising on the thread while the task saves its tokenizer
                    train_seconds += time.perf_counter() - clock
                    # The snapshot first: a checkpoint at this step then implies its snapshot exists.
                    if snap and acc.is_main_process:
                        self._save_snapshot(unwrapped, step, train_seconds, snapshots)
                    if ckpt:
                        self._save_checkpoint(step, train_seconds)
                        if not stop:  # a signal during the save: the checkpoint just written serves
                            stop = self._stop_signal(signals)
                    clock = time.perf_counter()
                if stop:
                    self._exit_on_signal(stop, step)
                if self.stop_after is not None and step >= self.stop_after:
                    return None
        finally:
            bar.close()
            batches.close()
        train_seconds += time.perf_counter() - clock
        acc.wait_for_everyone()
        if acc.is_main_process:
            with atomic_dir(self.out_dir) as tmp:
                unwrapped.save(tmp)
                if log_path.is_file():
                    shutil.copyfile(log_path, tmp / LOG_FILE)
                plot_losses(records, tmp / PLOT_FILE, title=self.out_dir.name)
                (tmp / "training.json").write_text(json.dumps(
                    {"steps": self.total, "processes": self.world, "global_batch": self.global_batch * cfg.grad_accum,
                     "examples": self.task.num_examples, "train": asdict(cfg), **self.info},
                    indent=1, default=str) + "\n")
                if cfg.snapshot_every:
                    self._publish_snapshots(tmp, snapshots, self.total, train_seconds)
            if self.ckpt_dir is not None:
                shutil.rmtree(self.ckpt_dir, ignore_errors=True)
            else:
                if log_path.is_file():
                    log_path.unlink()
                shutil.rmtree(self._snapshot_root(), ignore_errors=True)
        acc.wait_for_everyone()
        if signals.received:
            log.warning("%s received during the last step or the final save: the model was written",
                        signal.Signals(signals.received).name)
        return self.out_dir

    @staticmethod
    def _read_log(path: Path, start: int) -> list[dict]:
        """The records up to ``start`` (a resumed run drops what the killed one logged after its checkpoint)."""
        if not path.is_file():
            return []
        kept = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut off by the kill
            if rec.get("step", 0) <= start:
                kept.append(rec)
        with atomic_write(path) as fh:
            fh.writelines(json.dumps(r) + "\n" for r in kept)
        return kept


class _MicroBatches(torch.utils.data.Dataset):
    """Micro-batch number -> ``(batch, epoch)``, for the worker processes."""

    def __init__(self, fetch):
        self.fetch = fetch

    def __getitem__(self, micro: int):
        return self.fetch(micro)


def _quiet_worker(_: int) -> None:
    """A batch worker leaves SIGTERM / SIGUSR1 / SIGINT to the training process, which stops at a
    step boundary and then ends its workers; its tokenizers run on its own thread (the Rust thread pool
    a forked process inherits has no threads: with parallelism on, it would wait forever)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    for name in (*STOP_SIGNALS, "SIGINT"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


class _Batches:
    """The micro-batches ``first`` .. ``last - 1`` in order, prepared ahead: by ``workers`` forked
    processes (up to ``4 x workers`` batches ahead, pinned when ``pin``), or with ``workers == 0`` one
    batch ahead on a thread."""

    def __init__(self, fetch, first: int, last: int, workers: int, pin: bool):
        self.workers = workers
        self._loader = self._pool = self._pending = None
        self._next, self._last, self._fetch = first, last, fetch
        if first >= last:
            return
        if workers > 0:
            import multiprocessing

            # workers fork a process holding the task (no pickling); they never touch the GPU, and the
            # Rust tokenizer's own threads are off in them (set before the fork, so it is not warned about)
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            loader = torch.utils.data.DataLoader(
                _MicroBatches(fetch), batch_size=None, sampler=range(first, last), num_workers=workers,
                pin_memory=pin, prefetch_factor=4, worker_init_fn=_quiet_worker, timeout=BATCH_TIMEOUT,
                multiprocessing_context=multiprocessing.get_context("fork"))
            self._loader = iter(loader)
        else:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zsdr-batches")
            self._pending = self._pool.submit(fetch, first)

    def __next__(self):
        if self._loader is not None:
            return next(self._loader)
        if self._pending is None:
            raise StopIteration
        out = self._pending.result()
        self._next += 1
        self._pending = self._pool.submit(self._fetch, self._next) if self._next < self._last else None
        return out

    def settle(self) -> None:
        """Wait until no batch is being prepared in this process (the thread's)."""
        if self._pending is not None:
            self._pending.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._loader is not None:
            self._loader._shutdown_workers()
            self._loader = None


def compile_backbones(task: nn.Module) -> int:
    """Compile (``torch.compile``, dynamic shapes, in place: parameter names and checkpoints unchanged)
    the outermost Hugging Face models of ``task``; returns how many."""
    from transformers import PreTrainedModel

    done: list[str] = []
    for name, module in task.named_modules():
        if isinstance(module, PreTrainedModel) and not any(name.startswith(d + ".") for d in done):
            module.compile(dynamic=True)
            done.append(name)
    log.info("compiled %s", ", ".join(done) or "nothing (no transformer backbone)")
    return len(done)


def _snapshot_name(step: int) -> str:
    return f"step-{step:09d}"


def _to(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        if device.type == "cuda" and batch.device.type == "cpu":  # pinned: the copy does not wait
            return batch.pin_memory().to(device, non_blocking=True)
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], torch.Tensor):
        return type(batch)(_to(v, device) for v in batch)
    return batch


# Keys of a train_log.jsonl record that the trainer writes itself (not logged by the task).
RECORD_KEYS = ("step", "epoch", "loss", "last_loss", "lr", "grad_norm", "examples_per_s")
# A logged value whose name has one of these words (split at "_") is not a loss term: accuracies,
# counts, weights, a schedule's lambda.
NOT_LOSS_WORDS = {"accuracy", "acc", "tokens", "lambda", "weight", "entropy", "clusters"}


def logged_values(records: list[dict]) -> list[str]:
    """The task's logged values across ``records``, in the order they first appear."""
    return list(dict.fromkeys(k for r in records for k in r if k not in RECORD_KEYS))


def loss_terms(records: list[dict]) -> list[str]:
    """The logged values that are loss terms (``task_loss``, BERM's ``r1`` / ``r2``, MoDIR's
    ``adversarial_loss``, COCO's ``mlm_head`` ..., RMSC's ``loss_<group>``), not accuracies or counts."""
    return [k for k in logged_values(records) if not NOT_LOSS_WORDS & set(k.lower().split("_"))]


def _duration(seconds: float) -> str:
    seconds = int(round(max(seconds, 0.0)))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def progress_line(name: str, rec: dict, total: int, start: int, elapsed: float) -> str:
    """``train dpr-berm: step 20/100 (20%), loss 0.6931 (r1 0.04, r2 0.4, task_loss 0.65), accuracy 0.5,
    lr 2.00e-05, 812.3 examples/s, ETA 0:01:05`` (the loss: the mean over the log window; the logged
    values: the record's step's; the ETA: this run's pace since ``start``; ``done in`` at the end)."""
    step = rec["step"]
    terms, values = loss_terms([rec]), logged_values([rec])
    parts = [f"train {name}: step {step}/{total} ({100 * step / max(total, 1):.0f}%)",
             f"loss {rec['loss']:.4f}" + (f" ({', '.join(f'{k} {rec[k]:.4g}' for k in terms)})" if terms else "")]
    parts += [f"{k} {rec[k]:.4g}" for k in values if k not in terms]
    parts.append(f"lr {rec['lr']:.2e}")
    parts.append(f"{rec['examples_per_s']:.1f} examples/s")
    done = step - start
    if step < total and done > 0:
        parts.append(f"ETA {_duration(elapsed / done * (total - step))}")
    elif step >= total:
        parts.append(f"done in {_duration(elapsed)}")
    return ", ".join(parts)


def plot_losses(records: list[dict], out: str | os.PathLike, title: str = "") -> None:
    """:func:`loss_figure` as a PNG, with no date or version in the file (:func:`zsdr.io.save_figure`):
    the same records give the same bytes."""
    save_figure(loss_figure(records, title), out)


def loss_figure(records: list[dict], title: str = ""):
    """The run's loss curves: the total loss (mean over each log window) and each loss term the task
    logged (:func:`loss_terms`, at the logged step) against the step, the learning rate dotted on a
    labelled second axis, one legend for all lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    if records:
        steps = [r["step"] for r in records]
        ax.plot(steps, [r["loss"] for r in records], color="black", lw=1.6, label="loss (total)")
        for k, term in enumerate(loss_terms(records)):
            points = [(r["step"], r[term]) for r in records if r.get(term) is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], lw=1.0, color=plt.get_cmap("tab10")(k % 10),
                    label=term)
        ax2 = ax.twinx()
        ax2.plot(steps, [r["lr"] for r in records], color="tab:gray", linestyle=":", label="learning rate")
        ax2.set_ylabel("learning rate")
        ax2.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
        handles, labels = ax.get_legend_handles_labels()
        more, more_labels = ax2.get_legend_handles_labels()
        ax.legend(handles + more, labels + more_labels, fontsize=7, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no steps logged", ha="center", va="center", transform=ax.transAxes, color="tab:gray")
    ax.set_title(title)
    fig.tight_layout()
    return fig
