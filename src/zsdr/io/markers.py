"""The marker of every folder zsdr writes (:data:`OUTPUT_MARKER`): the kind of output it holds and the files
zsdr wrote into it, so that a folder is replaced only when it holds nothing else."""

from __future__ import annotations

import json
import os
from pathlib import Path

from zsdr.io.temporaries import temp_owner


OUTPUT_MARKER = ".zsdr-output.json"
"""Written into every folder :func:`~zsdr.io.outputs.atomic_dir` makes: ``{"written_by": "zsdr", "kind": KIND, "files": [...]}``
(``files``: every file it wrote there, relative to the folder)."""


def output_marker(path: Path) -> dict | None:
    """The marker of folder ``path`` when zsdr wrote it (None: no marker, or one that is not zsdr's)."""
    try:
        data = json.loads((path / OUTPUT_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and data.get("written_by") == "zsdr" and isinstance(data.get("kind"), str):
        return data
    return None


def marked_kind(path: Path) -> str | None:
    """The kind ``path``'s marker names, or None (no marker, or one that is not zsdr's)."""
    data = output_marker(path)
    return data["kind"] if data else None


def files_under(path: Path) -> list[str]:
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
    data = output_marker(Path(path))
    if not data or not isinstance(data.get("files"), list):
        return []
    wrote = set(data["files"])
    return [f for f in files_under(Path(path)) if f not in wrote]


def record_written(path: Path) -> None:
    """A file zsdr wrote into a folder it made (a dataset's dataset.json, a model's card) joins the list of
    the folder's marker, so that replacing the folder later does not take it for a user's file."""
    folder = path.parent
    data = output_marker(folder) if (folder / OUTPUT_MARKER).is_file() else None
    if not data or not isinstance(data.get("files"), list) or path.name in data["files"]:
        return
    data["files"] = sorted([*data["files"], path.name])
    tmp = folder / f".{OUTPUT_MARKER}.{temp_owner()}.tmp"
    try:
        tmp.write_text(json.dumps(data) + "\n", encoding="utf-8")
        os.replace(tmp, folder / OUTPUT_MARKER)
    except OSError:   # a read-only folder: the file stays unlisted (replacing the folder then asks for --force)
        tmp.unlink(missing_ok=True)
