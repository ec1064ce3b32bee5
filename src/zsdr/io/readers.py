"""Strict reading of plain or gzip files: text as UTF-8 (BOM and CRLF tolerated), lines with their numbers,
JSON; every failure a :class:`~zsdr.io.errors.DataError` naming the file and the fix."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import zlib
from pathlib import Path
from typing import IO, Iterator

from zsdr.io.errors import DataError


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


def _legacy_encoding(data: bytes) -> str:
    """The encoding a line that is not UTF-8 most likely came in: GB18030 (GBK's superset, what Chinese files that
    are not UTF-8 use) when the line reads as it with Han characters, else Latin-1."""
    try:
        text = data.decode("gb18030")
    except UnicodeDecodeError:
        return "latin1"
    return "gb18030" if any("\u4e00" <= c <= "\u9fff" for c in text) else "latin1"
