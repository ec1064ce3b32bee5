"""Low-level file helpers shared by every stage, one module per concern; the rest of zsdr imports them from
``zsdr.io`` (:data:`__all__`).

* :mod:`~zsdr.io.errors`: :class:`DataError`, a bad-input error that names the file, the line and the fix.
* :mod:`~zsdr.io.readers`: :func:`open_text` (strict UTF-8 text of plain or gzip files, BOM and CRLF
  tolerated), :func:`open_lines` (its lines, numbered), :func:`open_raw` (the bytes, gzip detected by its
  magic bytes), :func:`read_json` (every failure a :class:`DataError` naming the file and the fix).
* :mod:`~zsdr.io.outputs`: :func:`atomic_write` / :func:`atomic_dir` write to a temporary sibling, rename
  on success and remove it on failure, so a crashed job never leaves a file that looks finished. Nothing
  zsdr did not write is replaced: :func:`atomic_dir` marks every folder it writes
  (:mod:`~zsdr.io.markers`: ``.zsdr-output.json``, naming the kind of output) and replaces only an empty
  folder or one it marked as the same kind; anything else (a dataset, a parent folder, another kind of
  output) is refused before any work, naming the folder (:func:`check_output_dir`). Inside a Snakemake job,
  the folder of a declared output is the workflow's to replace (what earlier versions wrote has no mark).
  :func:`reading` declares the inputs of a command: while it holds, no output folder or file may be an
  input, hold one, or lie inside an input folder (``zsdr export m m``, ``zsdr store ds --out ds``).
  :func:`save_figure`: a matplotlib figure written atomically, the same numbers giving the same bytes.
* :mod:`~zsdr.io.model_contents`: a model folder's contents digest, recorded when it is written and checked
  before it is loaded (:func:`verify_model_contents`).
* :mod:`~zsdr.io.temporaries`: temporaries beside an output (``.<output>.<kind>.<host>.<pid>.<random>.tmp``;
  creating one first removes that output's temporaries left by processes of this host that no longer exist,
  never those of a live process or of another host), with the permissions of any file the process creates
  (``0o666`` / ``0o777`` less the umask), not ``tempfile``'s owner-only ``0o600`` / ``0o700``;
  :func:`scratch_dir`, a temporary working folder beside an output, removed afterwards.
* :mod:`~zsdr.io.locks`: :func:`file_lock`, an exclusive ``fcntl`` lock on ``<path>.lock`` (waits for the
  holder; removed after).
* From :mod:`zsdr.files`: :func:`file_digest` (streaming md5/sha256 of a file); :func:`file_record` /
  :func:`file_changed` (a file's size, modification time and checksum, and whether it is still that file: a
  ``stat`` when the size and time match, the checksum otherwise); :func:`locate_item` (item ``i`` of a
  sequence stored in parts, as (part, index in the part)); :func:`safe_yaml`.
"""

from __future__ import annotations

from zsdr.files import file_changed, file_digest, file_record, locate_item, safe_yaml, yaml_loaders
from zsdr.io.errors import DataError, MultiDataError
from zsdr.io.locks import file_lock
from zsdr.io.markers import OUTPUT_MARKER, foreign_files
from zsdr.io.model_contents import (
    MODEL_CARD,
    MODEL_STAMP_KEY,
    model_contents_digest,
    stamp_model_contents,
    verify_model_contents,
)
from zsdr.io.outputs import (
    JOB_OUTPUTS_VARIABLE,
    atomic_dir,
    atomic_write,
    check_output_dir,
    check_output_file,
    job_outputs_environment,
    reading,
    replacing_foreign_files,
    save_figure,
)
from zsdr.io.readers import open_lines, open_raw, open_text, read_json
from zsdr.io.temporaries import current_umask, default_mode, remove_stale_temps, scratch_dir, share_tree, temp_sibling

__all__ = [
    "DataError", "MultiDataError", "open_lines", "open_raw", "open_text", "read_json",
    "OUTPUT_MARKER", "JOB_OUTPUTS_VARIABLE", "atomic_dir", "atomic_write", "check_output_dir", "check_output_file",
    "foreign_files", "job_outputs_environment", "reading", "replacing_foreign_files", "save_figure",
    "MODEL_CARD", "MODEL_STAMP_KEY", "model_contents_digest", "stamp_model_contents", "verify_model_contents",
    "current_umask", "default_mode", "remove_stale_temps", "scratch_dir", "share_tree", "temp_sibling", "file_lock",
    "file_changed", "file_digest", "file_record", "locate_item", "safe_yaml", "yaml_loaders",
]
