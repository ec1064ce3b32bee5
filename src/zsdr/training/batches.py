"""The training batches, prepared ahead of the step: on a GPU by forked worker processes (several batches
ahead, in pinned memory), on the CPU one batch ahead on a thread; the trainer moves each to its device with
:func:`zsdr.batching.to_device` (without waiting on the host). Batches are pure functions of the step, so
preparing them ahead changes no result.
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor

import torch

from zsdr.training.signals import STOP_SIGNALS

BATCH_TIMEOUT = 1800  # seconds a batch worker may take for one batch before the run fails (a hung worker)


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


class Batches:
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
