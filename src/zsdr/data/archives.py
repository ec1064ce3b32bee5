"""Safe extraction of zip and tar archives, and the error of a download or archive that cannot be used.

* :func:`extract` — zip and tar (plain, gz, bz2, xz; detected from content) into a temporary sibling
  that becomes ``dest_dir`` only on success; unsafe members (absolute paths, ``..``, links that leave
  the folder, devices) are refused, and so are decompression bombs (:data:`LIMITS`: the expanded size,
  its ratio to the archive's, the number of members; each can be raised through its variable).
* :class:`ExpansionLimit` — those limits, for every reader of an archive (:func:`extract`,
  zsdr.models.released).

Nothing here needs the network (:mod:`zsdr.data.download` fetches the archives).
"""

from __future__ import annotations

import copy
import logging
import lzma
import os
import stat
import tarfile
import zipfile
import zlib
from pathlib import Path

from zsdr.io import DataError, atomic_dir

log = logging.getLogger("zsdr.download")  # extracting is a step of getting a dataset: the downloads' log


class DownloadError(DataError):
    """A download or an archive that cannot be used; ``str()`` names the URL/file and the fix."""

    def __init__(self, path, message: str, fix: str | None = None):
        super().__init__(path, None, message, fix)


def human_bytes(n: float) -> str:
    """``n`` bytes in words: ``"812 bytes"``, ``"3.4 MB"``, ``"1,200.0 GB"``."""
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} TB"


# Decompression bombs: an archive may expand to at most MAX_RATIO times its size (once it expands to more
# than RATIO_FLOOR bytes: a tiny archive of a few repetitive files may compress better), to at most
# MAX_BYTES in all, and hold at most MAX_MEMBERS members; each limit can be raised for a genuine archive
# through its environment variable. Real corpora compress 3-10x (BEIR's zips ~4x, MS MARCO's tar.gz ~3x).
LIMITS = {"ratio": ("ZSDR_EXTRACT_MAX_RATIO", 100), "bytes": ("ZSDR_EXTRACT_MAX_BYTES", 200 * 10 ** 9),
          "members": ("ZSDR_EXTRACT_MAX_MEMBERS", 1_000_000)}
RATIO_FLOOR = 64 * 2 ** 20


def extract_limits() -> dict[str, float]:
    """The limits in force: each from its environment variable when set (a positive number), else the default."""
    out = {}
    for key, (variable, default) in LIMITS.items():
        value = os.environ.get(variable, "").strip()
        try:
            out[key] = float(value) if value else default
        except ValueError:
            out[key] = -1.0
        if out[key] <= 0:
            raise DownloadError(None, f"{variable}={value!r} is not a positive number",
                                f"set {variable} to a number (default {default:g}) or unset it")
    return out


class ExpansionLimit:
    """The members' sizes added up while an archive is read; a limit passed raises :class:`DownloadError`.
    Every reader of an archive counts its members with one before it writes them (:func:`extract`,
    zsdr.models.released)."""

    def __init__(self, archive: Path):
        self.archive, self.size = archive, max(archive.stat().st_size, 1)
        self.limits = extract_limits()
        self.bytes = self.members = 0

    def add(self, size: int) -> None:
        self.bytes += max(int(size), 0)
        self.members += 1
        ratio = self.bytes / self.size
        if self.members > self.limits["members"]:
            self._refuse("members", f"holds more than {self.limits['members']:,.0f} members",
                         f"{self.limits['members'] * 10:.0f}")
        if self.bytes > self.limits["bytes"]:
            self._refuse("bytes", f"expands to more than {human_bytes(self.limits['bytes'])}", f"{self.bytes * 2:.0f}")
        if self.bytes > RATIO_FLOOR and ratio > self.limits["ratio"]:
            self._refuse("ratio", f"expands to {human_bytes(self.bytes)} from {human_bytes(self.size)} ({ratio:,.0f} times its "
                         f"size, more than {self.limits['ratio']:g})", f"{ratio * 2:.0f}")

    def _refuse(self, key: str, what: str, raised: str) -> None:
        variable = LIMITS[key][0]
        raise DownloadError(self.archive, f"{what}: refused as a possible decompression bomb, before writing it",
                            f"if the archive is genuine, allow it with {variable}={raised} and run again")


def _clean_parts(archive: Path, member: str, name: str) -> list[str]:
    """Path components of an archive name; refuse absolute paths and ``..``."""
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise DownloadError(archive, f"unsafe member {member!r}: absolute path",
                            "the archive is malicious or broken; do not use it")
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise DownloadError(archive, f"unsafe member {member!r}: '..' in path",
                            "the archive is malicious or broken; do not use it")
    return parts


def _check_link_target(archive: Path, member: str, base: list[str], target: str, links: set[tuple]) -> None:
    """Walk ``base + target`` lexically: refuse if it leaves the root or passes through another symlink."""
    if target.startswith(("/", "\\")):
        raise DownloadError(archive, f"unsafe member {member!r}: link to absolute path {target!r}",
                            "the archive is malicious or broken; do not use it")
    stack = list(base)
    steps = [p for p in target.split("/") if p not in ("", ".")]
    for step in steps:
        if tuple(stack) in links:
            raise DownloadError(archive, f"unsafe member {member!r}: link through another link",
                                "the archive is malicious or broken; do not use it")
        if step == "..":
            if not stack:
                raise DownloadError(archive, f"unsafe member {member!r}: link target {target!r} is outside "
                                    "the archive folder", "the archive is malicious or broken; do not use it")
            stack.pop()
        else:
            stack.append(step)


def _tar_plan(archive: Path, tf: tarfile.TarFile, strip: int) -> list[tarfile.TarInfo]:
    """Checked copies of the members of ``tf`` with ``strip`` leading components removed."""
    plan, links, expansion = [], set(), ExpansionLimit(archive)
    for m in tf:  # one member at a time: a bomb is refused before the rest of its stream is decompressed
        expansion.add(m.size if m.isreg() else 0)
        if not (m.isreg() or m.isdir() or m.issym() or m.islnk()):
            raise DownloadError(archive, f"unsafe member {m.name!r}: device, fifo or special file",
                                "the archive is malicious or broken; do not use it")
        parts = _clean_parts(archive, m.name, m.name)[strip:]
        if not parts:
            continue
        new = copy.copy(m)
        new.name = "/".join(parts)
        if m.islnk():
            target = _clean_parts(archive, f"{m.name} -> {m.linkname}", m.linkname)[strip:]
            if not target:
                raise DownloadError(archive, f"unsafe member {m.name!r}: hard link to {m.linkname!r}",
                                    "extract with a smaller strip")
            new.linkname = "/".join(target)
        if m.issym():
            links.add(tuple(parts))
        plan.append(new)
    for m in plan:  # nothing may be written through a symlink, and links may not chain outwards
        parts = m.name.split("/")
        if any(tuple(parts[:i]) in links for i in range(1, len(parts))):
            raise DownloadError(archive, f"unsafe member {m.name!r}: path goes through a symlink",
                                "the archive is malicious or broken; do not use it")
        if m.issym():
            _check_link_target(archive, m.name, parts[:-1], m.linkname, links)
        elif m.islnk():
            target = m.linkname.split("/")
            if any(tuple(target[:i]) in links for i in range(1, len(target))):
                raise DownloadError(archive, f"unsafe member {m.name!r}: hard link through a symlink",
                                    "the archive is malicious or broken; do not use it")
    return plan


def _extract_tar(archive: Path, out: Path, strip: int) -> None:
    with tarfile.open(archive, "r:*") as tf:
        plan = _tar_plan(archive, tf, strip)
        if hasattr(tarfile, "data_filter"):  # second line of defence (Python 3.11.4+)
            tf.extractall(out, members=plan, filter="data")
        else:  # pragma: no cover
            tf.extractall(out, members=plan)


def _extract_zip(archive: Path, out: Path, strip: int) -> None:
    with zipfile.ZipFile(archive) as zf:
        expansion = ExpansionLimit(archive)
        for info in zf.infolist():  # the sizes the archive declares (zipfile reads no more than them)
            expansion.add(info.file_size)
        for info in zf.infolist():
            kind = stat.S_IFMT(info.external_attr >> 16)
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                raise DownloadError(archive, f"unsafe member {info.filename!r}: symlink or special file",
                                    "the archive is malicious or broken; do not use it")
            parts = _clean_parts(archive, info.filename, info.filename)[strip:]
            if not parts:
                continue
            target = out.joinpath(*parts)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                while block := src.read(1 << 20):
                    dst.write(block)


def _corrupt(archive: Path, is_zip: bool, exc: BaseException) -> None:
    raise DownloadError(archive, f"cannot extract: truncated, corrupt or not a zip/tar archive "
                        f"({'zip' if is_zip else 'tar'}: {exc.__class__.__name__}: {exc})",
                        "delete the file and download it again (its checksum tells whether it is complete)"
                        ) from None


def extract(archive: str | os.PathLike, dest_dir: str | os.PathLike, *, strip: int = 0) -> Path:
    """Safely unpack a zip or tar(.gz/.bz2/.xz) ``archive`` into ``dest_dir`` (a new or empty folder); return it.

    The format is read from the content. ``strip`` drops leading path components
    (``tar --strip-components``). On any error nothing is left at ``dest_dir``.
    """
    archive, dest_dir = Path(archive), Path(dest_dir)
    if not archive.is_file():
        raise DownloadError(archive, "archive not found", "download it first")
    with open(archive, "rb") as fh:
        magic = fh.read(4)
    is_zip = magic in (b"PK\x03\x04", b"PK\x05\x06") or zipfile.is_zipfile(archive)
    try:
        with atomic_dir(dest_dir, kind="extracted archive", mark=False) as tmp:
            (_extract_zip if is_zip else _extract_tar)(archive, tmp, strip)
    except DownloadError:
        raise
    except OSError as exc:
        if exc.errno is not None:  # a real I/O error (disk full, permissions), not bad archive data
            raise
        _corrupt(archive, is_zip, exc)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError) as exc:
        if isinstance(exc, getattr(tarfile, "FilterError", ())):
            raise DownloadError(archive, f"unsafe member refused by tarfile's data filter: {exc}",
                                "the archive is malicious or broken; do not use it") from None
        _corrupt(archive, is_zip, exc)
    log.info("extracted %s -> %s", archive, dest_dir)
    return dest_dir
