"""Low-level file helpers shared by every stage.

* :class:`DataError` — a bad-input error that names the file, the line and the fix.
* :func:`open_text` — strict UTF-8 text reading of plain or gzip files (BOM and CRLF tolerated).
* :func:`open_raw` — the bytes of a plain or gzip file (gzip detected by its magic bytes).
* :func:`read_json` — a JSON file, every failure a :class:`DataError` naming the file and the fix.
* :func:`atomic_write` / :func:`atomic_dir` — write to a temporary sibling, rename on success,
  remove on failure, so a crashed job never leaves a file that looks finished.
* :func:`file_digest` — streaming md5/sha256 of a file.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import IO, Iterator


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
                    "re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
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


def _tmp_sibling(path: Path, is_dir: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if is_dir:
        return Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Write ``path`` through a temporary sibling that is renamed into place only on success.

    ``mode`` is ``"w"`` (text, UTF-8, ``\\n`` line ends) or ``"wb"``. A path ending in ``.gz`` is
    gzip-compressed (mtime 0, so identical content gives identical bytes).
    """
    path = Path(path)
    tmp = _tmp_sibling(path, is_dir=False)
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
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``path`` when the block succeeds.

    An existing ``path`` is replaced whole. On failure the temporary directory is removed and
    ``path`` is left untouched.
    """
    path = Path(path)
    tmp = _tmp_sibling(path, is_dir=True)
    try:
        yield tmp
        if path.exists():
            old = _tmp_sibling(path, is_dir=True)
            old.rmdir()
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def file_digest(path: str | os.PathLike, algorithm: str = "sha256", chunk: int = 1 << 20) -> str:
    """Hex digest of a file, streamed."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
