"""A model folder's contents digest: recorded when zsdr writes the folder and checked before it is loaded, so
that a model whose files changed on disk is refused and a retrained model's ``config.json`` changes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from zsdr.files import file_digest
from zsdr.io.errors import DataError
from zsdr.io.markers import OUTPUT_MARKER, output_marker


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


def model_files(folder: Path, config: bool = False) -> list[Path]:
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
    rels = names if names is not None else [p.relative_to(folder).as_posix() for p in model_files(folder, config)]
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
    :func:`~zsdr.io.outputs.check_output_dir`). What they were is the digest of every file (``config.json`` included) that
    :func:`~zsdr.io.outputs.atomic_dir` records in the folder's output marker when it writes a model (``config.json``'s own
    stamp, :func:`stamp_model_contents`, travels with the config into any folder a library saves from the
    loaded model, so it does not say which folder it was made for). A folder without that record (a
    download, a folder saved by other code, an earlier version's output) passes. Each folder is read once per
    process while its files keep their sizes and times."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    marker = output_marker(folder)
    recorded = marker.get("contents_sha256") if marker and marker.get("kind") == "model" else None
    if not isinstance(recorded, str):
        return
    names = marker.get("contents_files")
    names = [str(n) for n in names] if isinstance(names, list) else None
    files = [folder / n for n in names] if names is not None else model_files(folder, config=True)
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
