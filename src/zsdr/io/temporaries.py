"""Temporaries beside an output and the permissions they get.

A temporary is named ``.<output>.<kind>.<host>.<pid>.<random>.tmp``; creating one for an output first removes
that output's temporaries left by processes of this host that no longer exist (a job killed with SIGKILL),
never those of a live process or of another host. What is created gets the permissions of any file the
process creates (``0o666`` / ``0o777`` less the umask), not ``tempfile``'s owner-only ``0o600`` / ``0o700``."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Iterator

log = logging.getLogger("zsdr.io")


def current_umask() -> int:
    """The process umask, read without changing it (``/proc/self/status``; elsewhere set and restored)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def default_mode(is_dir: bool) -> int:
    """The mode ``open()`` / ``mkdir()`` would give a new file or folder under the current umask."""
    return (0o777 if is_dir else 0o666) & ~current_umask()


def share_tree(path: str | os.PathLike) -> None:
    """Give ``path`` (a file, or a folder and everything in it) at least the permissions a normally
    created file or folder gets under the umask. Some writers create owner-only files (``tempfile``,
    safetensors' ``save_file``: 0600); this adds the bits the umask allows and removes none."""
    path = Path(path)
    files, dirs = default_mode(False), default_mode(True)

    def fix(p: str, want: int) -> None:
        try:
            mode = os.lstat(p).st_mode
        except OSError:
            return
        if stat.S_ISLNK(mode) or (mode & want) == want:
            return
        os.chmod(p, stat.S_IMODE(mode) | want)

    if not path.is_dir() or path.is_symlink():
        fix(str(path), files)
        return
    fix(str(path), dirs)
    for root, dirnames, filenames in os.walk(path):
        for d in dirnames:
            fix(os.path.join(root, d), dirs)
        for f in filenames:
            fix(os.path.join(root, f), files)


def temp_owner() -> str:
    """``<host>.<pid>``: who owns a temporary (the host's first label, reduced to [A-Za-z0-9-] and 24
    characters, so a temporary's name stays well within the file system's limit)."""
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])[:24] or "host"
    return f"{host}.{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return True
    return True


def remove_stale_temps(path: str | os.PathLike) -> list[Path]:
    """Remove the temporaries of output ``path`` (``.<name>.<kind>.<host>.<pid>.<random>.tmp``) whose
    owning process, on this host, no longer exists; return what was removed. Temporaries of live
    processes and of other hosts are left alone."""
    path = Path(path)
    host, _ = temp_owner().rsplit(".", 1)
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[A-Za-z0-9_-]+\.{re.escape(host)}\.(\d+)\.[a-z0-9_]{{8}}\.tmp")
    removed = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return removed
    prefix = f".{path.name}."
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        match = pattern.fullmatch(entry.name)
        if match is None or _pid_alive(int(match.group(1))):
            continue
        stale = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
        log.warning("removed %s, left by a process that no longer runs (pid %s)", stale, match.group(1))
        removed.append(stale)
    return removed


def temp_sibling(path: str | os.PathLike, is_dir: bool, kind: str = "tmp") -> Path:
    """A new temporary file or folder beside ``path``, owned by this process (see the module notes),
    with the permissions of a normally created one. Stale temporaries of ``path`` are removed first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    prefix = f".{path.name}.{kind}.{temp_owner()}."
    if is_dir:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=path.parent))
        os.chmod(tmp, default_mode(True))
        return tmp
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, default_mode(False))
    finally:
        os.close(fd)
    return Path(name)


@contextlib.contextmanager


def scratch_dir(path: str | os.PathLike, kind: str = "scratch") -> Iterator[Path]:
    """A temporary working folder beside output ``path``, removed when the block ends (however it ends)."""
    tmp = temp_sibling(path, is_dir=True, kind=kind)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
