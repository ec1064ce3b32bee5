"""Stopping on a signal: while a run trains, SIGTERM and SIGUSR1 (a SLURM preemption or time limit) are
only recorded by :class:`StopSignals`; the trainer stops every process at the next step boundary, after
a checkpoint (:mod:`zsdr.training.trainer`).
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

# The trainer's logger: what happens to a run's signals belongs to its training log.
log = logging.getLogger("zsdr.training.trainer")

STOP_SIGNALS = ("SIGTERM", "SIGUSR1")  # recorded while training; the run stops at the next step boundary


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
