"""File helpers every layer uses and that need nothing else of zsdr: YAML parsed by libyaml where PyYAML has
it, file digests and records, an item's place among concatenated parts. (zsdr.io re-exports them.)"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
from typing import Sequence


def yaml_loaders(mixin: type | None = None) -> tuple[type, type]:
    """(the fast loader, the pure-Python one), each a SafeLoader with ``mixin``'s methods first (e.g. a
    ``construct_mapping`` that refuses duplicate keys): the fast one parses with libyaml where PyYAML was
    built with it, ~10x faster on the workflow's config, schema and table files; the same documents, as the
    constructor and the resolver stay Python's in both."""
    import yaml

    bases = [yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)]
    if mixin is not None:
        bases = [type(f"{mixin.__name__}{b.__name__}", (mixin, b), {}) for b in bases]
    return bases[1], bases[0]


def safe_yaml(text: str, mixin: type | None = None):
    """``yaml.safe_load(text)`` parsed by libyaml where it is present. A document libyaml refuses is parsed
    again by the pure-Python parser, so that errors (and their wording and marks) are the same either way."""
    import yaml

    fast, slow = yaml_loaders(mixin)
    if fast is not slow:
        try:
            return yaml.load(text, Loader=fast)  # noqa: S506 - a SafeLoader
        except yaml.YAMLError:
            pass
    return yaml.load(text, Loader=slow)  # noqa: S506 - a SafeLoader


def file_digest(path: str | os.PathLike, algorithm: str = "sha256", chunk: int = 1 << 20) -> str:
    """Hex digest of a file, streamed."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_record(path: str | os.PathLike) -> dict:
    """What identifies a file's content later, cheaply: ``{"bytes", "mtime_ns", "sha256"}``."""
    st = os.stat(path)
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": file_digest(path)}


def file_changed(path: str | os.PathLike, record: dict, restore_mtime: bool = False) -> str | None:
    """Why the file at ``path`` is not the one :func:`file_record` described, or None when it is.

    A different size decides at once; the same size and modification time pass without reading the
    file (one ``stat``); any other modification time is settled by the checksum (the whole file is
    read: a copy that did not keep the times, or bytes changed in place). With ``restore_mtime``, a
    file whose checksum matches gets the recorded modification time back (when this process may set
    it), so the next check is a ``stat`` again."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "the file is missing"
    if st.st_size != record.get("bytes"):
        return f"{st.st_size} bytes where {record.get('bytes')} were recorded"
    if st.st_mtime_ns == record.get("mtime_ns"):
        return None
    if file_digest(path) != record.get("sha256"):
        return "its bytes differ from those recorded (the checksum differs)"
    if restore_mtime:
        with contextlib.suppress(OSError):
            os.utime(path, ns=(st.st_atime_ns, record["mtime_ns"]))
    return None


def locate_item(starts: Sequence[int], i: int, where: str = "", what: str = "document") -> tuple[int, int]:
    """Item ``i`` (negative: from the end) of parts that start at ``starts`` (cumulative from 0, the
    last entry the total) as (part, index in the part); out of range: an ``IndexError`` that says
    ``<what> <i> of <total><where>``."""
    i, total = int(i), int(starts[-1])
    if i < 0:
        i += total
    if not 0 <= i < total:
        raise IndexError(f"{what} {i} of {total}{where}")
    k = bisect.bisect_right(starts, i) - 1
    return k, i - int(starts[k])
