"""One writer per checkpoint: a training holds an exclusive lock in its checkpoint folder while it runs.

Two jobs of the same training run (a restarted controller resubmitting a training whose old SLURM job still
runs, a retry started while its previous attempt is still writing) would otherwise write the same
``models/.checkpoints/<run>`` folder at once. :func:`checkpoint_lock` takes ``fcntl.flock`` on
``<folder>/.lock`` (released by the kernel when the holding process ends, however it ends) and writes who
holds it into the file: host, process id, SLURM job id and since when. A second job waits up to ``wait``
seconds for it, then stops with :class:`CheckpointInUse`, whose message names the holder.

A file system without ``flock`` (some shared file systems mounted without lock support) cannot keep the
rule: the training runs without the lock and says so in its log.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
LOCK_WAIT = 60.0      # seconds: a previous attempt still ending (writing its checkpoint after a signal)
POLL = 0.5
UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


class CheckpointInUse(RuntimeError):
    """Another process holds a training's checkpoint folder."""


def holder(folder: str | os.PathLike) -> dict:
    """Who holds (or last held) ``folder``'s lock, as its lock file says (empty when it says nothing)."""
    try:
        return json.loads((Path(folder) / LOCK_FILE).read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}


def describe(who: dict) -> str:
    if not who:
        return "another process (it wrote no details)"
    job = f"SLURM job {who['job']}" if who.get("job") else "no SLURM job"
    return f"process {who.get('pid')} on {who.get('host')} ({job}, since {who.get('since')})"


@contextlib.contextmanager
def checkpoint_lock(folder: str | os.PathLike | None, wait: float = LOCK_WAIT) -> Iterator[None]:
    """Hold ``folder``'s lock for the block (nothing when ``folder`` is None): wait up to ``wait`` seconds for
    another holder to end, else raise :class:`CheckpointInUse` naming it."""
    if folder is None:
        yield
        return
    path = Path(folder) / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if _acquire(fd, folder, wait):
            me = {"host": socket.gethostname(), "pid": os.getpid(), "job": os.environ.get("SLURM_JOB_ID"),
                  "since": datetime.datetime.now().isoformat(timespec="seconds")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(me) + "\n").encode("utf-8"), 0)
        yield
    finally:
        os.close(fd)


def _acquire(fd: int, folder: str | os.PathLike, wait: float) -> bool:
    """Lock ``fd`` (True), waiting up to ``wait`` seconds; False where the file system cannot lock."""
    deadline = time.monotonic() + max(0.0, float(wait))
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise CheckpointInUse(
                    f"{folder} is in use by {describe(holder(folder))}: another job is training the same run. "
                    f"Let it finish (or cancel it: scancel <job>), then run this job again"
                ) from None
            time.sleep(POLL)
        except OSError as exc:
            if exc.errno not in UNSUPPORTED:
                raise
            log.warning("%s: this file system does not lock files (%s); training without the lock that keeps a "
                        "second job of the same run out", Path(folder) / LOCK_FILE, os.strerror(exc.errno))
            return False
