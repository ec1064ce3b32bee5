"""Outputs written whole or not at all, and only where zsdr may write.

* :func:`atomic_write` / :func:`atomic_dir` write to a temporary sibling, rename on success and remove it
  on failure, so a crashed job never leaves a file that looks finished.
* Nothing zsdr did not write is replaced: :func:`atomic_dir` marks every folder it writes
  (:mod:`zsdr.io.markers`) and replaces only an empty folder or one it marked as the same kind; anything
  else is refused before any work, naming the folder (:func:`check_output_dir`). Inside a Snakemake job,
  the folder of a declared output is the workflow's to replace.
* :func:`reading` declares the inputs of a command: while it holds, no output folder or file may be an
  input, hold one, or lie inside an input folder.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import sys
from pathlib import Path
from typing import IO, Iterable, Iterator

from zsdr.io.errors import DataError
from zsdr.io.markers import OUTPUT_MARKER, files_under, foreign_files, marked_kind, record_written
from zsdr.io.model_contents import model_contents_digest, model_files, stamp_model_contents
from zsdr.io.temporaries import share_tree, temp_sibling


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
    record_written(path)


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
    marked = marked_kind(path)
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
    writers use the default). The folder is marked with it (:data:`~zsdr.io.markers.OUTPUT_MARKER`), and an existing
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
            covered = [f.relative_to(tmp).as_posix() for f in model_files(tmp, config=True)]
            contents = {"contents_sha256": model_contents_digest(tmp, config=True), "contents_files": covered}
        if mark:
            (tmp / OUTPUT_MARKER).write_text(json.dumps({"written_by": "zsdr", "kind": kind,
                                                         "files": files_under(tmp), **contents}) + "\n",
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
