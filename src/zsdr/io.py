"""Low-level file helpers shared by every stage.

* :class:`DataError` — a bad-input error that names the file, the line and the fix.
* :func:`open_text` — strict UTF-8 text reading of plain or gzip files (BOM and CRLF tolerated).
* :func:`open_raw` — the bytes of a plain or gzip file (gzip detected by its magic bytes).
* :func:`read_json` — a JSON file, every failure a :class:`DataError` naming the file and the fix.
* :func:`atomic_write` / :func:`atomic_dir` — write to a temporary sibling, rename on success,
  remove on failure, so a crashed job never leaves a file that looks finished. The result has the
  permissions of any file the process creates (``0o666`` / ``0o777`` less the umask), not
  ``tempfile``'s owner-only ``0o600`` / ``0o700``.
* Nothing zsdr did not write is replaced: :func:`atomic_dir` marks every folder it writes
  (``.zsdr-output.json``, naming the kind of output) and replaces only an empty folder or one it
  marked as the same kind; anything else (a dataset, a parent folder, another kind of output) is
  refused before any work, naming the folder (:func:`check_output_dir`). Inside a Snakemake job, the
  folder of a declared output is the workflow's to replace (what earlier versions wrote has no mark).
* :func:`reading` declares the inputs of a command: while it holds, no output folder or file may be
  an input, hold one, or lie inside an input folder (``zsdr export m m``, ``zsdr store ds --out ds``).
* :func:`scratch_dir` — a temporary working folder beside an output, removed afterwards.
* Temporaries are named ``.<output>.<kind>.<host>.<pid>.<random>.tmp``; creating one for an output
  first removes that output's temporaries left by processes of this host that no longer exist (a job
  killed with SIGKILL), never those of a live process or of another host.
* :func:`file_lock` — an exclusive ``fcntl`` lock on ``<path>.lock`` (waits for the holder; removed after).
* :func:`file_digest` — streaming md5/sha256 of a file; :func:`file_record` / :func:`file_changed` — a
  file's size, modification time and checksum, and whether it is still that file (a ``stat`` when the
  size and time match, the checksum otherwise).
* :func:`save_figure` — a matplotlib figure written atomically, the same numbers giving the same bytes.
* :func:`locate_item` — item ``i`` of a sequence stored in parts, as (part, index in the part).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import fcntl
import json
import logging
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import IO, Iterable, Iterator

from zsdr.files import file_changed, file_digest, file_record, locate_item, safe_yaml, yaml_loaders  # noqa: F401

log = logging.getLogger("zsdr.io")

class DataError(ValueError):
    """Bad input data. ``str(err)`` reads ``FILE:LINE: what is wrong (fix: ...)``."""

    def __init__(self, path: str | os.PathLike | None, line: int | None, message: str, fix: str | None = None):
        self.path = None if path is None else str(path)
        self.line = line
        self.message = message
        self.fix = fix
        super().__init__(self.__str__())

    def location(self) -> str:
        if self.path is None:
            return ""
        return f"{self.path}:{self.line}" if self.line else self.path

    def __str__(self) -> str:
        loc = self.location()
        text = f"{loc}: {self.message}" if loc else self.message
        if self.fix:
            text += f" (fix: {self.fix})"
        return text


class MultiDataError(DataError):
    """Several :class:`DataError` found in one pass; the message lists them all (up to a cap)."""

    def __init__(self, errors: list[DataError], truncated: bool = False):
        self.errors = errors
        lines = [str(e) for e in errors]
        if truncated:
            lines.append("... further errors not shown")
        first = errors[0]
        super().__init__(first.path, first.line, first.message, first.fix)
        self._text = "\n".join(lines)

    def __str__(self) -> str:  # noqa: D105
        return getattr(self, "_text", super().__str__())


def _is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


class _CheckedLines:
    """Iterate over the decoded lines of a text stream, turning decode and gzip errors into DataError."""

    def __init__(self, path: Path, raw: IO[bytes]):
        self.path = path
        self.raw = raw
        self.lineno = 0

    def __iter__(self) -> Iterator[str]:
        first = True
        while True:
            try:
                data = self.raw.readline()
            except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
                raise DataError(
                    self.path,
                    self.lineno + 1,
                    f"compressed stream is truncated or corrupt ({exc.__class__.__name__}: {exc})",
                    "download the file again; its checksum will tell whether the copy is complete",
                ) from None
            if not data:
                return
            self.lineno += 1
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    self.path,
                    self.lineno,
                    f"bytes that are not UTF-8 at column {exc.start + 1} ({data[exc.start:exc.start + 4]!r})",
                    f"re-encode the file as UTF-8 (e.g. iconv -f {_legacy_encoding(data)} -t utf-8)",
                ) from None
            if first:
                text = text.removeprefix("\ufeff")
                first = False
            yield text.rstrip("\r\n")


def open_raw(path: str | os.PathLike) -> IO[bytes]:
    """``path`` opened for reading bytes, decompressed when it is gzip (detected by magic bytes)."""
    path = Path(path)
    return gzip.open(path, "rb") if _is_gzip(path) else open(path, "rb")


def read_json(path: str | os.PathLike, fix: str, expect: type | None = dict):
    """The parsed JSON file at ``path``; a missing file, unreadable bytes, invalid JSON (with its
    line) or, with ``expect``, a top-level value of another type raise :class:`DataError` with ``fix``."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(path, None, "file not found", fix) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(path, getattr(exc, "lineno", None), f"not readable as JSON ({exc})", fix) from None
    if expect is not None and not isinstance(data, expect):
        kind = {dict: "a JSON object", list: "a JSON array"}.get(expect, expect.__name__)
        raise DataError(path, None, f"expected {kind}", fix)
    return data


@contextlib.contextmanager
def open_lines(path: str | os.PathLike) -> Iterator[_CheckedLines]:
    """Yield an iterator over the lines of ``path`` (gzip detected by magic bytes).

    Lines come without their ``\\n`` / ``\\r\\n``; ``.lineno`` on the iterator is the 1-based
    number of the last line returned. A leading BOM is dropped.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, "file not found", "check the path, or run the rule that produces it")
    raw = open_raw(path)
    try:
        yield _CheckedLines(path, raw)
    finally:
        raw.close()


def open_text(path: str | os.PathLike) -> io.TextIOBase:
    """Open plain or gzip text for reading as strict UTF-8 (for callers that need a file object)."""
    path = Path(path)
    if _is_gzip(path):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", errors="strict", newline=None)
    return open(path, encoding="utf-8-sig", errors="strict", newline=None)


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


def _owner() -> str:
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
    host, _ = _owner().rsplit(".", 1)
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
    prefix = f".{path.name}.{kind}.{_owner()}."
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


def _name_the_output(exc: BaseException, path: Path) -> None:
    """An OSError without a file name (a full disk while a library writes) names the output it was for."""
    if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
        exc.filename = str(path)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write ``path`` through a temporary sibling that is renamed into place only on success.

    ``mode`` is ``"w"`` (text, UTF-8, ``\\n`` line ends) or ``"wb"``. A path ending in ``.gz`` is
    gzip-compressed (mtime 0, so identical content gives identical bytes).
    """
    path = Path(path)
    _check_not_an_input(path, is_dir=False)
    tmp = temp_sibling(path, is_dir=False)
    binary = "b" in mode
    try:
        with open(tmp, "wb") as base:
            if path.suffix == ".gz":
                raw: IO = gzip.GzipFile(filename="", mode="wb", fileobj=base, mtime=0)
            else:
                raw = base
            fh = raw if binary else io.TextIOWrapper(raw, encoding=encoding, newline="\n")
            with fh:
                yield fh
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        _name_the_output(exc, path)
        raise
    _record_written(path)


def _record_written(path: Path) -> None:
    """A file zsdr wrote into a folder it made (a dataset's dataset.json, a model's card) joins the list of
    the folder's marker, so that replacing the folder later does not take it for a user's file."""
    folder = path.parent
    data = _marker(folder) if (folder / OUTPUT_MARKER).is_file() else None
    if not data or not isinstance(data.get("files"), list) or path.name in data["files"]:
        return
    data["files"] = sorted([*data["files"], path.name])
    tmp = folder / f".{OUTPUT_MARKER}.{_owner()}.tmp"
    try:
        tmp.write_text(json.dumps(data) + "\n", encoding="utf-8")
        os.replace(tmp, folder / OUTPUT_MARKER)
    except OSError:   # a read-only folder: the file stays unlisted (replacing the folder then asks for --force)
        tmp.unlink(missing_ok=True)


OUTPUT_MARKER = ".zsdr-output.json"
"""Written into every folder :func:`atomic_dir` makes: ``{"written_by": "zsdr", "kind": KIND, "files": [...]}``
(``files``: every file it wrote there, relative to the folder)."""

_FORCE: list[bool] = []


@contextlib.contextmanager
def replacing_foreign_files(force: bool = True) -> Iterator[None]:
    """Inside the block, :func:`atomic_dir` replaces a folder zsdr wrote even when files zsdr did not write
    were put into it since (a command's ``--force``); they are removed with the folder."""
    _FORCE.append(bool(force))
    try:
        yield
    finally:
        _FORCE.pop()


def _marker(path: Path) -> dict | None:
    try:
        data = json.loads((path / OUTPUT_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and data.get("written_by") == "zsdr" and isinstance(data.get("kind"), str):
        return data
    return None


def _marked_kind(path: Path) -> str | None:
    """The kind ``path``'s marker names, or None (no marker, or one that is not zsdr's)."""
    data = _marker(path)
    return data["kind"] if data else None


def _files_under(path: Path) -> list[str]:
    """Every file (and link) under ``path``, relative, ``/``-separated, but the marker."""
    out = []
    for root, dirs, files in os.walk(path):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            rel = os.path.relpath(os.path.join(root, name), path).replace(os.sep, "/")
            if rel != OUTPUT_MARKER:
                out.append(rel)
    return sorted(out)


def foreign_files(path: str | os.PathLike) -> list[str]:
    """The files under a folder zsdr wrote that its marker does not list (put there since); ``[]`` for a
    folder whose marker lists nothing (an earlier version's)."""
    data = _marker(Path(path))
    if not data or not isinstance(data.get("files"), list):
        return []
    wrote = set(data["files"])
    return [f for f in _files_under(Path(path)) if f not in wrote]


def _listing(names: list[str], folder: Path, limit: int = 5) -> str:
    shown = [n + ("/" if (folder / n).is_dir() else "") for n in sorted(names)[:limit]]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(shown) + more


JOB_OUTPUTS_VARIABLE = "ZSDR_JOB_OUTPUTS"


def _job_outputs() -> list[Path]:
    """The declared outputs of the Snakemake job this process runs (a ``script:`` job: the ``snakemake``
    object of its ``__main__``; a process it started: ``$ZSDR_JOB_OUTPUTS``), as absolute paths."""
    job = getattr(sys.modules.get("__main__"), "snakemake", None)
    outputs = getattr(job, "output", None)
    try:
        listed = [os.fspath(p) for p in outputs] if outputs is not None else \
            json.loads(os.environ.get(JOB_OUTPUTS_VARIABLE) or "[]")
        return [Path(os.path.abspath(p)) for p in listed]
    except (TypeError, ValueError):
        return []


def job_outputs_environment() -> dict[str, str]:
    """``{ZSDR_JOB_OUTPUTS: ...}`` for the processes a Snakemake job starts (a multi-process training), so
    that they may replace the job's declared output folders as the job itself may; empty outside a job."""
    outputs = _job_outputs()
    return {JOB_OUTPUTS_VARIABLE: json.dumps([str(p) for p in outputs])} if outputs else {}


def _declared_by_the_job(path: Path) -> bool:
    """Whether ``path`` is a declared output of the running Snakemake job, or the folder of one."""
    path = Path(os.path.abspath(path))
    return any(path == out or path == out.parent for out in _job_outputs())


_READING: list[tuple[Path, bool]] = []


def _absolute(path: str | os.PathLike) -> Path:
    """``path`` made absolute with its symlinks resolved as far as it exists."""
    return Path(os.path.realpath(os.path.abspath(path)))


@contextlib.contextmanager
def reading(paths: Iterable[str | os.PathLike]) -> Iterator[None]:
    """Declare the inputs of the work inside the block (files, or folders read whole; a path that does
    not exist is skipped): no :func:`atomic_dir` or :func:`atomic_write` of this process may then replace
    one, a folder holding one, or write inside an input folder. The ``zsdr`` command declares what
    each command reads."""
    added = [(_absolute(p), Path(p).is_dir()) for p in paths if p is not None and os.path.lexists(p)]
    _READING.extend(added)
    try:
        yield
    finally:
        for item in added:
            _READING.remove(item)


def check_output_file(path: str | os.PathLike) -> None:
    """Refuse (:class:`DataError`) an output file that is an input declared with :func:`reading`, or lies
    inside an input folder (what :func:`atomic_write` checks, for a command to check before its work)."""
    _check_not_an_input(Path(path), is_dir=False)


def _check_not_an_input(path: Path, is_dir: bool) -> None:
    """Refuse an output ``path`` that is, holds, or lies inside an input declared with :func:`reading`."""
    if not _READING:
        return
    target = _absolute(path)
    what = "output folder" if is_dir else "output file"
    for source, folder in _READING:
        if target == source:
            problem = f"the {what} is an input of this command"
        elif source.is_relative_to(target):
            problem = f"the {what} holds {source}, an input of this command; writing it would replace that input"
        elif folder and target.is_relative_to(source):
            problem = f"the {what} lies inside {source}, an input folder of this command"
        else:
            continue
        raise DataError(path, None, problem, f"write it to a {what.split()[1]} outside the inputs")


def check_output_dir(path: str | os.PathLike, kind: str = "model") -> None:
    """Refuse (:class:`DataError` naming the folder and the fix) an output folder that :func:`atomic_dir`
    may not replace with a ``kind`` output: an input of the command (:func:`reading`), a file, or a folder
    that holds anything but what zsdr wrote there as a ``kind`` output. A missing or empty folder, or one
    marked as ``kind``, passes. Inside a Snakemake job, the job's declared outputs and their folders pass:
    the workflow plans where its outputs go, and removes the old ones itself."""
    path = Path(path)
    _check_not_an_input(path, is_dir=True)
    if not os.path.lexists(path):
        return
    if not path.is_dir():
        raise DataError(path, None, "the output folder is a file", "remove it or write the output elsewhere")
    names = [n for n in os.listdir(path) if n != OUTPUT_MARKER]
    if not names:
        return
    marked = _marked_kind(path)
    if _declared_by_the_job(path):
        return
    if marked == kind:
        foreign = foreign_files(path)
        if foreign and not (_FORCE and _FORCE[-1]):
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise DataError(path, None, f"refusing to replace this {kind}: it holds {shown}, which zsdr did not write "
                            "there, and replacing the folder would delete them", "move them out of the folder, or "
                            "pass --force to replace the folder with them")
        return
    if marked is not None:
        raise DataError(path, None, f"refusing to replace this folder: zsdr wrote it as {_a(marked)}, not as {_a(kind)}",
                        f"write the {kind} to a new or empty folder")
    raise DataError(path, None, f"refusing to replace this folder: it holds {_listing(names, path)}, which zsdr "
                    f"did not write as {_a(kind)}", f"write the {kind} to a new or empty folder, or remove this "
                    "folder yourself if nothing in it is needed")


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, kind: str = "model", mark: bool = True) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``path`` when the block succeeds.

    ``kind`` names what the folder holds (``"store"``, ``"dataset"``, ``"Lucene index"``, ...; model
    writers use the default). The folder is marked with it (:data:`OUTPUT_MARKER`), and an existing
    ``path`` is replaced whole only when :func:`check_output_dir` allows it: checked before the block
    runs and again before the rename. ``mark=False`` (a folder that must hold exactly what the block
    wrote: an archive's contents) writes no marker, so such a folder is never replaced once it holds
    anything. Before the rename, everything in it gets the umask's permissions (:func:`share_tree`).
    On failure the temporary directory is removed and ``path`` is left untouched.
    """
    path = Path(path)
    if path.is_symlink() and path.is_dir():
        path = Path(os.path.realpath(path))   # the folder the link names is replaced; the link stays
    check_output_dir(path, kind)
    tmp = temp_sibling(path, is_dir=True)
    try:
        yield tmp
        contents = {}
        if kind == "model":
            stamp_model_contents(tmp)
            covered = [f.relative_to(tmp).as_posix() for f in _model_files(tmp, config=True)]
            contents = {"contents_sha256": model_contents_digest(tmp, config=True), "contents_files": covered}
        if mark:
            (tmp / OUTPUT_MARKER).write_text(json.dumps({"written_by": "zsdr", "kind": kind,
                                                         "files": _files_under(tmp), **contents}) + "\n",
                                             encoding="utf-8")
        share_tree(tmp)  # what the block's writers made owner-only (safetensors: 0600) follows the umask
        if os.path.lexists(path):
            check_output_dir(path, kind)  # another process may have put something there meanwhile
            old = temp_sibling(path, is_dir=True, kind="old")
            old.rmdir()
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        _name_the_output(exc, path)
        raise


MODEL_CARD = "README.md"
MODEL_STAMP_KEY = "zsdr_contents_sha256"
"""The key of a model folder's ``config.json`` that :func:`stamp_model_contents` sets."""


def stamp_model_contents(folder: str | os.PathLike) -> str | None:
    """Record in ``folder/config.json`` a digest of every other file of the folder (weights, heads,
    adapters, tokenizer), so that the file the workflow declares as a model's output changes whenever the
    model does. Snakemake does not rerun a job for an input that is newer but has the checksum it recorded
    when the job last ran; a retrained model's config.json is otherwise byte-identical to the old one, so
    after a run cut between a training and its evaluations the stale scores would stand. The digest is
    deterministic: the same weights give the same file (a nested model folder, a snapshot, is left to its own
    stamp). Returns it, or None for a folder without
    ``config.json`` (nothing to stamp)."""
    folder = Path(folder)
    config = folder / "config.json"
    if not config.is_file():
        return None
    data = json.loads(config.read_text(encoding="utf-8"))
    data[MODEL_STAMP_KEY] = model_contents_digest(folder)
    config.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return data[MODEL_STAMP_KEY]


def _model_files(folder: Path, config: bool = False) -> list[Path]:
    """The files a model folder's digest covers: all but the output marker, the model card (``README.md``,
    written into the folder after the evaluations), nested model folders (snapshots, stamped themselves)
    and, unless ``config``, ``config.json`` (which carries :func:`stamp_model_contents`' stamp)."""
    top = folder / "config.json"
    nested = {p.parent for p in folder.rglob("config.json") if p != top}
    return sorted(p for p in folder.rglob("*") if p.is_file() and (config or p != top) and p.name != OUTPUT_MARKER
                  and p != folder / MODEL_CARD and not any(n in p.parents for n in nested))


def model_contents_digest(folder: str | os.PathLike, config: bool = False, names: list[str] | None = None) -> str:
    """The digest :func:`stamp_model_contents` records for ``folder`` as its files are now (``config``: with
    ``config.json`` too, as the output marker records it; ``names``: of these files, as the marker lists
    them, a missing one digested as missing)."""
    folder = Path(folder)
    h = hashlib.sha256()
    rels = names if names is not None else [p.relative_to(folder).as_posix() for p in _model_files(folder, config)]
    for rel in rels:
        path = folder / rel
        digest = file_digest(path) if path.is_file() else "missing"
        h.update(rel.encode() + b"\0" + digest.encode() + b"\n")
    return h.hexdigest()


_VERIFIED_MODELS: set[tuple] = set()


def verify_model_contents(folder: str | os.PathLike) -> None:
    """Refuse (:class:`DataError` naming the folder and how to rebuild it) a model folder zsdr wrote whose
    files are no longer those it was written with: weights changed on disk, ``config.json`` edited, a file
    removed or swapped (a file added since is not one of them: replacing the folder names it, see
    :func:`check_output_dir`). What they were is the digest of every file (``config.json`` included) that
    :func:`atomic_dir` records in the folder's output marker when it writes a model (``config.json``'s own
    stamp, :func:`stamp_model_contents`, travels with the config into any folder a library saves from the
    loaded model, so it does not say which folder it was made for). A folder without that record (a
    download, a folder saved by other code, an earlier version's output) passes. Each folder is read once per
    process while its files keep their sizes and times."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    marker = _marker(folder)
    recorded = marker.get("contents_sha256") if marker and marker.get("kind") == "model" else None
    if not isinstance(recorded, str):
        return
    names = marker.get("contents_files")
    names = [str(n) for n in names] if isinstance(names, list) else None
    files = [folder / n for n in names] if names is not None else _model_files(folder, config=True)
    key = (os.path.realpath(folder), recorded,
           tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else (str(p),) for p in files))
    if key in _VERIFIED_MODELS:
        return
    if model_contents_digest(folder, config=True, names=names) != recorded:
        raise DataError(folder, None, f"the model's files are not those it was written with (their digest differs "
                        f"from the one in {OUTPUT_MARKER}): changed on disk, removed or replaced",
                        "write the model again: remove the folder and rerun the job that makes it (training, or the "
                        "backbone build), or copy it again from where it was made")
    _VERIFIED_MODELS.add(key)


def save_figure(fig, out: str | os.PathLike) -> None:
    """Write a matplotlib figure to ``out`` (PNG, SVG or PDF by suffix) atomically and close it."""
    import matplotlib.pyplot as plt

    fmt = os.fspath(out).rsplit(".", 1)[-1].lower()
    if fmt not in ("png", "svg", "pdf"):
        plt.close(fig)
        raise ValueError(f"{out}: figures are written as .png, .svg or .pdf")
    with atomic_write(out, "wb", encoding=None) as fh:
        # No creation date or software version in the file: the same numbers give the same bytes.
        fig.savefig(fh, format=fmt, dpi=150, metadata={"Software": None} if fmt == "png" else
                    {"Creator": None, "Date": None} if fmt == "svg" else {"Creator": None, "CreationDate": None})
    plt.close(fig)


def _legacy_encoding(data: bytes) -> str:
    """The encoding a line that is not UTF-8 most likely came in: GB18030 (GBK's superset, what Chinese files that
    are not UTF-8 use) when the line reads as it with Han characters, else Latin-1."""
    try:
        text = data.decode("gb18030")
    except UnicodeDecodeError:
        return "latin1"
    return "gb18030" if any("\u4e00" <= c <= "\u9fff" for c in text) else "latin1"
