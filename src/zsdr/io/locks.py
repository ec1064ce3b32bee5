"""An exclusive lock on a file's ``.lock`` sibling, held across processes of the machine."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import time
from pathlib import Path
from typing import Iterator

from zsdr.io.errors import DataError

log = logging.getLogger("zsdr.io")


@contextlib.contextmanager


def file_lock(path: str | os.PathLike, what: str | None = None, wait: bool = True) -> Iterator[Path]:
    """Hold an exclusive lock on ``<path>.lock`` for the block (``fcntl.flock``: released when the process
    ends, even by SIGKILL). A second holder waits (logging who holds it) or, with ``wait=False``, fails
    with :class:`DataError`. The holder removes the lock file when done; a waiter that then holds the
    lock of a removed file tries again, so two processes never hold two different lock files."""
    path = Path(path)
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    waited = None
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
            if not wait:
                os.close(fd)
                raise DataError(path, None, f"{what or 'this file'} is in progress in {holder} (lock {lock})",
                                "wait for it to finish, then run again") from None
            if waited is None:
                log.warning("waiting for %s to finish %s (lock %s)", holder, what or f"writing {path}", lock)
                waited = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed this file after we opened it: lock the new one
    if waited is not None:
        log.info("got the lock on %s after %.1f s", path, time.monotonic() - waited)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield lock
    finally:
        lock.unlink(missing_ok=True)  # while still holding it
        os.close(fd)
