"""Resumable, verified downloads (:mod:`zsdr.data.archives` extracts what they fetch).

* :func:`resolve_url` — where a URL is fetched from when a ``mirror:`` is configured: the mirror
  holds ``<host>/<path>``, the layout ``wget -x`` / ``wget --mirror`` write, so one wget command
  (or a copy of another site's ``downloads/`` folder) makes a mirror.
* :func:`download` — http(s), ``file://`` and plain paths; bytes go to ``DEST.part``, which a retry or
  a re-run continues with an HTTP ``Range`` request; size / md5 / sha256 are checked before the
  atomic rename onto ``DEST``. ``DEST.lock`` (``fcntl``) lets one process at a time download a
  destination; ``DEST.sha256`` records the sha256 of every verified file, so a file whose source
  publishes no checksum is still checked against itself whenever it is reused.
* :func:`fetch_file` — :func:`download` driven by a ``{"url", "md5", "sha256", "size", "filename"}`` spec.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import sys
import time
from pathlib import Path, PurePosixPath
from typing import Iterator
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import requests
import urllib3
from tqdm import tqdm

from zsdr.data.archives import DownloadError, human_bytes
from zsdr.io import DataError, atomic_write, file_lock

log = logging.getLogger("zsdr.download")

BACKOFF_BASE = 2.0  # seconds; attempt k (0-based) waits BACKOFF_BASE * 2**k before the next try
MAX_DELAY = 120.0  # seconds, cap of one backoff wait
USER_AGENT = "zsdr-download/0.1 (python-requests)"


class _Retry(Exception):
    """A transient failure (5xx, short read, refused resume): try again after a delay."""


class _Fatal(Exception):
    """A failure that retrying cannot fix (404, missing local file)."""


# --------------------------------------------------------------------------------------------- URLs

def mirror_path(url: str) -> str:
    """``<host>/<path>`` of ``url`` under a mirror (a query becomes ``_k-v_k-v``, as in the registry)."""
    parts = urlsplit(url)
    path = parts.path.lstrip("/")
    if parts.query:
        path = f"{path}_{parts.query.replace('&', '_').replace('=', '-')}"
    return f"{parts.netloc.rpartition('@')[2]}/{path}"


def _is_remote(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https")


def _local_path(url: str) -> Path:
    """The file a ``file://`` URL or a plain path names."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        return Path(url2pathname(parts.path))
    return Path(url).expanduser()


def resolve_url(url: str, mirror: str | None) -> str:
    """The URL to fetch ``url`` from: itself, or ``<mirror>/<host>/<path>``.

    ``mirror`` is a base URL (``https://mirror.example.org/zsdr``), a ``file:///abs/folder`` or a
    plain folder path (returned as a ``file://`` URL). Local URLs are never mirrored.
    """
    if not mirror or not _is_remote(url):
        return url
    rel = mirror_path(url)
    if _is_remote(mirror):
        return f"{mirror.rstrip('/')}/{rel}"
    return (_local_path(mirror).resolve() / rel).as_uri()


# ----------------------------------------------------------------------------------------- download

def _digests(path: Path, algorithms: list[str], chunk: int = 1 << 20) -> dict[str, str]:
    hashes = {a: hashlib.new(a) for a in algorithms}
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            for h in hashes.values():
                h.update(block)
    return {a: h.hexdigest() for a, h in hashes.items()}


def _mismatches(path: Path, md5: str | None, sha256: str | None, size: int | None,
                recorded: str | None = None) -> tuple[list[str], str | None]:
    """``(["md5: expected X, got Y", ...], sha256 of path)`` for every given check ``path`` fails;
    ``recorded`` is the sha256 this module wrote beside the file when it last verified it."""
    bad = []
    actual_size = path.stat().st_size
    if size is not None and actual_size != int(size):
        bad.append(f"size: expected {int(size)} bytes, got {actual_size}")
        return bad, None  # no point hashing a file of the wrong length
    expected = {a: v.strip().lower() for a, v in (("md5", md5), ("sha256", sha256)) if v}
    actual = _digests(path, sorted({"sha256", *expected}))
    bad += [f"{a}: expected {expected[a]}, got {actual[a]}" for a in expected if actual[a] != expected[a]]
    if recorded and actual["sha256"] != recorded:
        bad.append(f"sha256 recorded when it was downloaded ({sidecar_path(path).name}): "
                   f"{recorded}, now {actual['sha256']}")
    return bad, actual["sha256"]


def sidecar_path(dest: str | os.PathLike) -> Path:
    """``DEST.sha256``: the sha256 of ``DEST`` as this module verified it (``sha256sum -c`` reads it)."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".sha256")


def _read_sidecar(dest: Path) -> str | None:
    try:
        words = sidecar_path(dest).read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError):
        return None
    digest = words[0].lower() if words else ""
    return digest if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest) else None


def verify_recorded(path: str | os.PathLike) -> bool:
    """Check ``path`` against the sha256 recorded beside it when it was downloaded; True when it matched,
    False when there is no record. A mismatch raises :class:`DownloadError` (the file changed since)."""
    path = Path(path)
    recorded = _read_sidecar(path)
    if recorded is None:
        return False
    actual = _digests(path, ["sha256"])["sha256"]
    if actual != recorded:
        raise DownloadError(path, f"the file changed since it was downloaded (sha256 recorded in "
                            f"{sidecar_path(path).name}: {recorded}, now {actual})",
                            f"delete {path} and download it again (`zsdr fetch`, or its Snakemake rule)")
    return True


def _write_sidecar(dest: Path, digest: str) -> None:
    with atomic_write(sidecar_path(dest)) as fh:
        fh.write(f"{digest}  {dest.name}\n")


def _content_range(header: str | None) -> tuple[int | None, int | None]:
    """``(start, total)`` from ``bytes START-END/TOTAL`` or ``bytes */TOTAL`` (None where unknown)."""
    if not header or not header.startswith("bytes "):
        return None, None
    span, _, total = header[6:].partition("/")
    start = None if span.strip() == "*" else int(span.split("-")[0])
    return start, (int(total) if total.strip().isdigit() else None)


@contextlib.contextmanager
def _open_http(session: requests.Session, src: str, offset: int, timeout: float, chunk_size: int
               ) -> Iterator[tuple[Iterator[bytes] | None, int, int | None]]:
    headers = {"Accept-Encoding": "identity", "User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    with session.get(src, stream=True, timeout=timeout, headers=headers) as r:
        code = r.status_code
        if code == 416 and offset:
            _, total = _content_range(r.headers.get("Content-Range"))
            if total == offset:  # the .part is already complete
                yield None, offset, total
                return
            raise _Retry("server refused to resume the partial file")
        if code >= 500 or code in (408, 429):
            raise _Retry(f"HTTP {code} {r.reason}")
        if code >= 400:
            raise _Fatal(f"HTTP {code} {r.reason}")
        if code == 206:
            start, total = _content_range(r.headers.get("Content-Range"))
            if start != offset:
                raise _Retry(f"server resumed at byte {start}, not {offset}")
        else:
            start = 0  # a 200 answer to a Range request: start from zero
            length = r.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        yield _raw_chunks(r, chunk_size), start, total


def _raw_chunks(r: requests.Response, chunk_size: int) -> Iterator[bytes]:
    """The body as sent (no Content-Encoding decoding), in pieces as they arrive, so a dropped
    connection loses nothing already received."""
    try:
        while block := r.raw.read1(chunk_size, decode_content=False):
            yield block
    except (urllib3.exceptions.HTTPError, OSError) as exc:  # IncompleteRead, read timeout, reset
        raise _Retry(f"connection broken: {exc}") from None


@contextlib.contextmanager
def _open_file(src: str, offset: int, chunk_size: int
               ) -> Iterator[tuple[Iterator[bytes], int, int]]:
    path = _local_path(src)
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise _Fatal(f"no such file {path}") from None
    with fh:
        total = os.fstat(fh.fileno()).st_size
        start = offset if offset <= total else 0
        fh.seek(start)
        yield iter(lambda: fh.read(chunk_size), b""), start, total


def _attempt(session: requests.Session, src: str, part: Path, timeout: float, chunk_size: int,
             progress: bool) -> None:
    """One try at completing ``part`` from ``src``; raises _Retry / _Fatal / requests errors."""
    offset = part.stat().st_size if part.exists() else 0
    if _is_remote(src):
        opener = _open_http(session, src, offset, timeout, chunk_size)
    else:
        opener = _open_file(src, offset, chunk_size)
    with opener as (chunks, start, total):
        if chunks is None:
            return
        if offset and start == offset:
            log.info("resuming %s at byte %d", src, offset)
        elif offset:
            log.info("source cannot resume %s; restarting from byte 0", src)
        got = start
        on_terminal = progress and sys.stderr.isatty()
        bar = tqdm(total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                   desc=part.name.removesuffix(".part"), disable=not on_terminal)
        lines = ProgressLines(part.name.removesuffix(".part"), total, start) if progress and not on_terminal else None
        with bar, open(part, "ab" if start else "wb") as out:
            for block in chunks:
                out.write(block)
                got += len(block)
                bar.update(len(block))
                if lines is not None:
                    lines.update(got)
    if total is not None and got < total:
        raise _Retry(f"connection closed after {got} of {total} bytes")


class ProgressLines:
    """Progress as log lines, for a download whose standard error is not a terminal (a job's log, where a
    progress bar leaves nothing): a line at every :attr:`STEP` of the file (every :attr:`UNKNOWN_STEP` bytes
    when the server sends no size), with the bytes so far and the rate since the start."""

    STEP = 0.05                  # of the file's size: a line every 5 %
    UNKNOWN_STEP = 250 * 10**6   # bytes, when the size is not known

    def __init__(self, name: str, total: int | None, start: int = 0, clock=time.monotonic) -> None:
        self.name, self.total, self.start, self.clock = name, total, start, clock
        self.began = clock()
        step = self.STEP * total if total else self.UNKNOWN_STEP
        self.step = max(int(step), 1)
        self.next = (start // self.step + 1) * self.step

    def update(self, got: int) -> None:
        """Log a line when ``got`` (the bytes of the file so far) passed the next step."""
        if got < self.next:
            return
        self.next = (got // self.step + 1) * self.step
        rate = (got - self.start) / max(self.clock() - self.began, 1e-9)
        if self.total:
            log.info("%s: %s of %s (%d%%), %s/s", self.name, human_bytes(got), human_bytes(self.total),
                     int(100 * got / self.total), human_bytes(rate))
        else:
            log.info("%s: %s, %s/s", self.name, human_bytes(got), human_bytes(rate))


def _unresolvable_host(exc: BaseException) -> bool:
    """Whether a connection failed because its host name does not resolve (no network or no DNS, or a wrong
    host): the chain of ``exc`` (causes, contexts, urllib3's ``reason`` and wrapped errors) holds a
    ``socket.gaierror`` or urllib3's NameResolutionError."""
    seen = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, socket.gaierror) or type(cause).__name__ == "NameResolutionError":
            return True
        args = getattr(cause, "args", ())
        nested = next((a for a in args if isinstance(a, BaseException)), None)
        reason = getattr(cause, "reason", None)
        cause = cause.__cause__ or cause.__context__ or (reason if isinstance(reason, BaseException) else nested)
    return False


def download(url: str, dest: str | os.PathLike, *, md5: str | None = None, sha256: str | None = None,
             size: int | None = None, mirror: str | None = None, retries: int = 5, timeout: float = 60,
             progress: bool = True, chunk_size: int = 1 << 20, checksum_from: str | None = None,
             mirror_setting: str = "`mirror:` in the config") -> Path:
    """Fetch ``url`` (or its mirror copy) to ``dest``, resumably, and verify it; return ``dest``.

    One process at a time downloads a destination: ``DEST.lock`` is locked for the whole call, and a
    second caller (another ``zsdr fetch``, a Snakemake job, another checkout sharing the downloads
    folder) waits, then finds the finished file. Every file this function verifies gets a
    ``DEST.sha256`` sidecar; an existing ``dest`` is kept when it passes the given checks and the
    sidecar's sha256 (a file without a sidecar, e.g. placed by hand, passes on the given checks
    alone and gets one). ``retries`` is the number of further tries after the first on connection
    errors, timeouts, 5xx answers and short reads; a host name that does not resolve (offline) fails at
    once. ``mirror_setting``: how the caller's user sets the mirror, for the fix of a failure (the
    workflow's `mirror:`; ``zsdr fetch --mirror``). Without a terminal, ``progress`` logs a line every
    5 % (:class:`ProgressLines`) instead of drawing a bar.
    """
    dest = Path(dest)
    with file_lock(dest, what=f"the download of {dest.name}"):
        return _download_locked(url, dest, md5=md5, sha256=sha256, size=size, mirror=mirror, retries=retries,
                                timeout=timeout, progress=progress, chunk_size=chunk_size,
                                checksum_from=checksum_from, mirror_setting=mirror_setting)


def _download_locked(url: str, dest: Path, *, md5: str | None, sha256: str | None, size: int | None,
                     mirror: str | None, retries: int, timeout: float, progress: bool, chunk_size: int,
                     checksum_from: str | None = None, mirror_setting: str = "`mirror:` in the config") -> Path:
    part = dest.with_name(dest.name + ".part")
    checked = bool(md5 or sha256 or size is not None)
    if dest.is_file():
        recorded = _read_sidecar(dest)
        bad, digest = _mismatches(dest, md5, sha256, size, recorded)
        if not bad:
            if recorded is None:
                _write_sidecar(dest, digest)
                how = "verified" if checked else "not verified: no published checksum; its sha256 is now recorded"
            else:
                how = "verified" if checked else "matches the sha256 recorded at download"
            log.info("%s already present (%s)", dest, how)
            return dest
        log.warning("%s exists but fails its check (%s); downloading again", dest, "; ".join(bad))
        dest.unlink()
        sidecar_path(dest).unlink(missing_ok=True)
    src = resolve_url(url, mirror)
    via = "" if src == url else f" (mirror copy {src})"
    scheme = urlsplit(src).scheme
    if scheme not in ("http", "https", "file", ""):
        raise DownloadError(url, f"unsupported URL scheme {scheme!r}", "use an http(s) or file:// URL")
    if size is not None and part.exists() and part.stat().st_size > int(size):
        part.unlink()  # longer than the file can be: not a prefix of it
    dest.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s%s -> %s", url, via, dest)
    fix_missing = (f"put the file at {mirror.rstrip('/')}/{mirror_path(url)} (the `wget -x` layout)" if src != url
                   else f"set {mirror_setting} to a folder holding {mirror_path(url)}"
                   if _is_remote(url) else "check the path") + f", or place the file at {dest} by hand"
    with requests.Session() as session:
        for attempt in range(retries + 1):
            try:
                _attempt(session, src, part, timeout, chunk_size, progress)
                break
            except _Fatal as exc:
                raise DownloadError(url, f"cannot download{via}: {exc}", fix_missing) from None
            except (_Retry, requests.ConnectionError, requests.Timeout,
                    requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError) as exc:
                if isinstance(exc, requests.ConnectionError) and _unresolvable_host(exc):
                    # offline or a wrong host name: waiting does not bring the name service back
                    raise DownloadError(url, f"cannot download{via}: the host name {urlsplit(src).hostname!r} does "
                                        "not resolve (no network or no DNS; not retried)",
                                        f"connect this machine, or {fix_missing}") from None
                if attempt == retries:
                    raise DownloadError(url, f"cannot download{via} after {retries + 1} attempts: {exc}",
                                        f"check the network and try again (the partial file is resumed); "
                                        f"or {fix_missing}") from None
                delay = min(BACKOFF_BASE * 2 ** attempt, MAX_DELAY)
                log.warning("download of %s failed (%s); retry %d/%d in %.1fs", src, exc, attempt + 1, retries, delay)
                time.sleep(delay)
    bad, digest = _mismatches(part, md5, sha256, size)
    if bad:
        part.unlink(missing_ok=True)
        origin = f", expected checksum from {checksum_from}" if checksum_from else ""
        raise DownloadError(url, f"downloaded file{via} fails verification ({'; '.join(bad)}{origin})",
                            "download again (the partial copy was deleted); if it fails again, the mirror copy "
                            "is damaged or the expected checksum is wrong: replace the copy or fix the checksum")
    _write_sidecar(dest, digest)   # before the rename: a finished dest always has its sidecar
    os.replace(part, dest)
    log.info("saved %s (%d bytes, sha256 %s)", dest, dest.stat().st_size, digest)
    return dest


def fetch_file(spec: dict, dest_dir: str | os.PathLike, mirror: str | None = None, **options) -> Path:
    """Download ``spec["url"]`` to ``dest_dir / (spec["filename"] or the URL's basename)``.

    ``spec`` may carry ``md5``, ``sha256``, ``size`` and ``checksum_from`` (where the checksum comes from,
    for the message of a mismatch); ``options`` go to :func:`download`.
    """
    if "url" not in spec:
        raise DataError(None, None, f"download spec without a url: {spec!r}", "add a `url:` entry")
    url = spec["url"]
    name = spec.get("filename") or PurePosixPath(unquote(urlsplit(url).path)).name
    if not name or name in (".", ".."):
        raise DownloadError(url, "the URL names no file", "add a `filename:` entry to the spec")
    return download(url, Path(dest_dir) / name, md5=spec.get("md5"), sha256=spec.get("sha256"),
                    size=spec.get("size"), mirror=mirror, checksum_from=spec.get("checksum_from"), **options)
