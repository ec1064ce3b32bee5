"""``results/all``: every table and figure of every paper with its SHA-256, in ``sha256sum`` format, so that
``sha256sum -c results/all`` checks a regeneration against it."""

from __future__ import annotations

import os
from collections.abc import Iterable

from zsdr.files import file_digest
from zsdr.io import atomic_write


def write_manifest(paths: Iterable[str | os.PathLike], out: str | os.PathLike) -> None:
    """Write ``out``: one ``<sha256>  <path>`` line per distinct path of ``paths``, sorted by path (the paths as
    given, so that ``sha256sum -c`` run from the same folder reads them)."""
    with atomic_write(out) as fh:
        for path in sorted({os.fspath(p) for p in paths}):
            fh.write(f"{file_digest(path)}  {path}\n")
