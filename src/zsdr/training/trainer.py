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

This module is the loop; the settings and schedule are :mod:`zsdr.training.config`, checkpoints and
snapshots :mod:`zsdr.training.checkpoints`, the batches prepared ahead :mod:`zsdr.training.batches`,
the stop signals :mod:`zsdr.training.signals`, the metrics log, progress lines and loss curves
:mod:`zsdr.training.train_log`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from zsdr.batching import to_device
from zsdr.io import atomic_dir
from zsdr.training.batches import Batches
from zsdr.training.checkpoints import (checkpoints, latest_checkpoint, publish_snapshots, resume_snapshots,
                                       save_checkpoint, save_snapshot, snapshot_root)
from zsdr.training.config import TrainConfig, build_optimizer, build_schedule, steps_run, training_steps
from zsdr.training.data import epoch_order_of
from zsdr.training.signals import StopSignals
from zsdr.training.train_log import LOG_FILE, PLOT_FILE, plot_losses, progress_line, read_log

log = logging.getLogger(__name__)
# One line every log_every steps at INFO (a workflow job's log shows them; `zsdr train --log-info`)
progress_log = logging.getLogger(__name__ + ".progress")


def mixed_precision(precision: str, cuda: bool) -> str:
    if not cuda or precision == "fp32":
        return "no"
    if precision == "auto":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return precision


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
        # the schedule's length (warmup, decay, a task's own schedules) and the steps this run takes: the
        # same, or the first `step_limit` of them (a smoke run)
        self.horizon = training_steps(config, n, self.world)
        self.total = steps_run(config, self.horizon)
        self._orders: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------------------------- data
    def indices(self, micro: int) -> tuple[list[int], int]:
        """This process's example indices of global micro-batch ``micro``, and its epoch."""
        epoch, pos = divmod(micro, self.micro_per_epoch)
        if epoch not in self._orders:
            self._orders = {epoch: epoch_order_of(self.task, self.cfg.seed, epoch)}
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

    def _batches(self, fetch, first: int, last: int) -> Batches:
        return Batches(fetch, first, last, self.loader_workers(), pin=self.acc.device.type == "cuda")

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
        scheduler = build_schedule(optimizer, cfg, self.horizon)
        if self.compile and acc.device.type == "cuda":
            compile_backbones(self.task)
        elif self.compile:
            log.info("compile: on the CPU the backbones run uncompiled (compiling pays for kernel launches on a GPU)")
        if acc.device.type == "cpu" and cfg.cpu_chunk_tokens:
            chunked = [m for m in self.task.modules() if hasattr(m, "chunk_tokens")]
            for module in chunked:
                module.chunk_tokens = int(cfg.cpu_chunk_tokens)
            if chunked:
                log.info("CPU batches in chunks of similar lengths, at most %d padded tokens each (cpu_chunk_tokens)",
                         cfg.cpu_chunk_tokens)
        attach = getattr(self.task, "attach", None)  # a task's parts that train apart (MoDIR's classifier)
        extra_state = attach(cfg, self.horizon, acc.device) if attach else []
        model, optimizer = acc.prepare(self.task, optimizer)
        if self.world > 1:   # every process says where it runs: a launch over nodes shows each node's ranks
            log.info("process %d of %d on %s (local process %s): global batch %d", self.rank, self.world,
                     socket.gethostname(), os.environ.get("LOCAL_RANK", "0"), self.global_batch)
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
            found = latest_checkpoint(self.ckpt_dir, self.fingerprint, self.world)
            if found is not None:
                acc.load_state(str(found[0]))
                start, train_seconds = found[1], found[2]
                log.info("resuming from %s (step %d of %d)", found[0], start, self.total)
            elif acc.is_main_process:
                for old in checkpoints(self.ckpt_dir):
                    shutil.rmtree(old, ignore_errors=True)
        if self.ckpt_dir is not None:
            log_path = self.ckpt_dir / LOG_FILE
        else:
            log_path = self.out_dir.parent / f".{self.out_dir.name}.{LOG_FILE}"
            log_path.parent.mkdir(parents=True, exist_ok=True)
        records = read_log(log_path, start) if acc.is_main_process else []
        snapshot_dir = snapshot_root(self.ckpt_dir, self.out_dir)
        snapshots = resume_snapshots(snapshot_dir, cfg.snapshot_every, start) if acc.is_main_process else []
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
                    batch = to_device(raw, acc.device)
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
                        save_snapshot(snapshot_dir, unwrapped, step, train_seconds, snapshots)
                    if ckpt:
                        save_checkpoint(acc, self.ckpt_dir, step, self.fingerprint, self.world, train_seconds)
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
                    publish_snapshots(snapshot_dir, tmp, snapshots, self.total, train_seconds)
            if self.ckpt_dir is not None:
                shutil.rmtree(self.ckpt_dir, ignore_errors=True)
            else:
                if log_path.is_file():
                    log_path.unlink()
                shutil.rmtree(snapshot_dir, ignore_errors=True)
        acc.wait_for_everyone()
        if signals.received:
            log.warning("%s received during the last step or the final save: the model was written",
                        signal.Signals(signals.received).name)
        return self.out_dir


def compile_backbones(task: nn.Module) -> int:
    """Compile (``torch.compile``, dynamic shapes, in place: parameter names and checkpoints unchanged)
    the outermost Hugging Face models of ``task``, except one marked ``zsdr_eager`` (the reason: iDRO's
    one-pass cluster gradients hook its layers); returns how many were compiled."""
    from transformers import PreTrainedModel

    done: list[str] = []
    compiled: list[str] = []
    for name, module in task.named_modules():
        if isinstance(module, PreTrainedModel) and not any(name.startswith(d + ".") for d in done):
            done.append(name)
            eager = getattr(module, "zsdr_eager", None)  # a module whose layers a hook reads stays uncompiled
            if eager:
                log.info("compile: %s runs uncompiled (%s)", name, eager)
                continue
            module.compile(dynamic=True)
            compiled.append(name)
    log.info("compiled %s", ", ".join(compiled) or "nothing (no transformer backbone)")
    return len(compiled)
