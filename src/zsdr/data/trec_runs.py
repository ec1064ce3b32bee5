"""TREC run files: reading (as dicts or as a pyarrow table, repeated pairs warned about and dropped) and
writing. (zsdr.data.formats re-exports them.)"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import numpy as np

from zsdr.io import DataError, atomic_write, file_digest, open_lines, open_raw

log = logging.getLogger("zsdr.formats")


def _warn_repeated(path: Path, repeats: int, line: int | None, qid: str, did: str) -> None:
    """Log that ``repeats`` (query, document) pairs of a run occur more than once."""
    where = f"{path}:{line}" if line else str(path)
    log.warning("%s: document %r is listed again for query %r (%d repeated (query, document) line%s in the run); "
                "each pair keeps the score of its last line, as a dict would (trec_eval refuses such a run) "
                "(fix: write each document once per query)", where, did, qid, repeats, "" if repeats == 1 else "s")


def iter_trec_rows(path: Path, columns: str, fix: str):
    """``(line, columns)`` of each non-blank line of a blank-separated TREC file (a run, qrels) whose
    columns are named by ``columns`` (``"qid Q0 docid rank score tag"``); a line with another number of
    columns raises :class:`DataError` naming the file, the line and ``fix``."""
    count = len(columns.split())
    with open_lines(path) as lines:
        for text in lines:
            if not text.strip():
                continue
            cols = text.split()
            if len(cols) != count:
                raise DataError(path, lines.lineno, f"expected {count} columns '{columns}', found {len(cols)}", fix)
            yield lines.lineno, cols


def _first_repeat_line(path: Path) -> tuple[int, str, str] | None:
    """``(line, qid, docid)`` of the first line of ``path`` that repeats an earlier (query, document) pair."""
    seen: set[tuple[str, str]] = set()
    with open_lines(path) as lines:
        for text in lines:
            cols = text.split()
            if len(cols) < 3:
                continue
            pair = (cols[0], cols[2])
            if pair in seen:
                return lines.lineno, pair[0], pair[1]
            seen.add(pair)
    return None


def read_trec_run(path: str | os.PathLike) -> dict[str, dict[str, float]]:
    """A TREC run ``qid Q0 docid rank score tag`` as ``{qid: {docid: score}}``.

    A score that is not a finite number raises :class:`DataError` (``FILE:LINE``); a (query,
    document) pair listed again keeps its last score, with a warning naming the first repeat.
    """
    path = Path(path)
    run: dict[str, dict[str, float]] = {}
    repeats, first_repeat = 0, None
    for line, cols in iter_trec_rows(path, "qid Q0 docid rank score tag", "write runs in TREC format"):
        try:
            score = float(cols[4])
        except ValueError:
            raise DataError(path, line, f"score {cols[4]!r} is not a number", "fix the run file") from None
        if not math.isfinite(score):
            raise DataError(path, line, f"score {cols[4]!r} of document {cols[2]!r} is not a finite number",
                            "fix the run's writer (a NaN or infinite score cannot be ranked)")
        docs = run.setdefault(cols[0], {})
        if cols[2] in docs:
            repeats += 1
            first_repeat = first_repeat or (line, cols[0], cols[2])
        docs[cols[2]] = score
    if repeats:
        _warn_repeated(path, repeats, *first_repeat)
    return run


RUN_COLUMNS = ("q", "d", "s")   # query id, document id, score: the columns of a run table


def run_table(run: "dict[str, dict[str, float]]"):
    """``{qid: {docid: score}}`` as a pyarrow table with string columns ``q``, ``d`` and float64 ``s``."""
    import pyarrow as pa

    qids = [q for q, docs in run.items() for _ in range(len(docs))]
    dids = [d for docs in run.values() for d in docs]
    scores = np.fromiter((s for docs in run.values() for s in docs.values()), dtype=np.float64, count=len(dids))
    return pa.table({"q": pa.array(qids, pa.string()), "d": pa.array(dids, pa.string()), "s": scores})


def _dedupe_run(table, path: Path | None = None):
    """Keep the last line of each (query, document) pair, as :func:`read_trec_run`'s dict does, and
    warn about the repeats (naming the first one's line when ``path`` is given)."""
    import pyarrow.compute as pc

    q, d = (pc.dictionary_encode(table[c]).combine_chunks() for c in ("q", "d"))
    key = q.indices.to_numpy().astype(np.int64) * max(len(d.dictionary), 1) + d.indices.to_numpy()
    ordered = np.sort(key)
    if not (ordered[1:] == ordered[:-1]).any():
        return table
    _, first_from_end = np.unique(key[::-1], return_index=True)
    repeats = table.num_rows - len(first_from_end)
    if path is not None:
        first = _first_repeat_line(path)
        if first is not None:
            _warn_repeated(path, repeats, *first)
    return table.take(np.sort(table.num_rows - 1 - first_from_end))


def read_trec_run_table(path: str | os.PathLike):
    """A TREC run as a pyarrow table (``q``, ``d``, ``s``: see :data:`RUN_COLUMNS`), one row per pair.

    Runs written with single spaces (zsdr's, Anserini's, most tools') are parsed by Arrow's CSV
    reader, an order of magnitude faster than line-by-line Python; any other file (tabs, runs of
    spaces, a BOM, a malformed line) goes through :func:`read_trec_run`, which accepts any whitespace
    and reports a bad line as ``FILE:LINE``. Both give the same pairs and scores; a pair listed twice
    keeps its last score, with a warning naming the first repeat's line (trec_eval refuses such a run).
    """
    path = Path(path)
    table = _read_single_spaced_run(path) if path.is_file() else None
    return _dedupe_run(table, path) if table is not None else run_table(read_trec_run(path))


def _read_single_spaced_run(path: Path):
    """The fast path of :func:`read_trec_run_table`: the table, or None where the slow path must decide."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyarrow import csv as pacsv

    names = ["q", "z", "d", "r", "s", "t"]
    options = dict(
        read_options=pacsv.ReadOptions(column_names=names),
        parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False, double_quote=False),
        convert_options=pacsv.ConvertOptions(
            column_types={n: pa.float64() if n == "s" else pa.string() for n in names},
            strings_can_be_null=False, null_values=[], include_columns=list(RUN_COLUMNS)))
    with open_raw(path) as raw:
        try:
            if raw.peek(3)[:3] == b"\xef\xbb\xbf":
                return None
            table = pacsv.read_csv(raw, **options)
        except (pa.ArrowInvalid, OSError, EOFError):
            return None
    if not table.num_rows or table["s"].null_count:
        return None
    if not pc.all(pc.is_finite(table["s"])).as_py():
        return None   # NaN or infinite scores: the slow path names the line
    if any(pc.any(pc.equal(pc.binary_length(table[c]), 0)).as_py() for c in ("q", "d")):
        return None   # an empty field: two spaces in a row
    return table.combine_chunks()


def write_trec_run(path: str | os.PathLike, run: dict[str, dict[str, float]], tag: str, depth: int = 1000,
                   provenance: dict | None = None) -> None:
    """Write ``{qid: {docid: score}}`` as a TREC run, best first (ties broken by docid), atomically.
    ``provenance`` (the corpus, model, queries it was made from) is written beside it
    (:func:`write_run_provenance`); without it a sidecar an earlier run left is removed."""
    remove_run_provenance(path)
    with atomic_write(path) as fh:
        for qid in sorted(run):
            ranked = sorted(run[qid].items(), key=lambda kv: (-kv[1], kv[0]))[:depth]
            for rank, (did, score) in enumerate(ranked, 1):
                fh.write(f"{qid} Q0 {did} {rank} {score:.6f} {tag}\n")
    if provenance is not None:
        write_run_provenance(path, **provenance)


# ------------------------------------------------------------------------------------------------
# A run's provenance sidecar (zsdr.provenance checks it at the joins)

RUN_SIDECAR_SUFFIX = ".provenance.json"

_DIGESTS: dict[tuple, str] = {}


def cached_digest(path: Path) -> str:
    """The SHA-256 of a file, computed once per process while its size and time stay the same."""
    st = path.stat()
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = file_digest(path)
    return _DIGESTS[key]


def run_sidecar(run: str | os.PathLike) -> Path:
    run = Path(run)
    return run.with_name(run.name + RUN_SIDECAR_SUFFIX)


def write_run_provenance(run: str | os.PathLike, **info) -> None:
    """Write ``<run>.provenance.json``: ``info`` (``corpus``, ``model``, ``queries``, ...) and the run's
    SHA-256 (the run is written first)."""
    run = Path(run)
    with atomic_write(run_sidecar(run)) as fh:
        json.dump({"run_sha256": file_digest(run), **info}, fh, indent=1, sort_keys=True, default=str)
        fh.write("\n")


def read_run_provenance(run: str | os.PathLike) -> dict | None:
    """The sidecar of ``run``, or None: none there, unreadable, or written for other bytes than the run's
    (a run replaced by another program; logged)."""
    run, side = Path(run), run_sidecar(run)
    if not side.is_file() or not run.is_file():
        return None
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        log.warning("%s is not readable; the run's provenance is not checked", side)
        return None
    if not isinstance(data, dict) or data.get("run_sha256") != cached_digest(run):
        log.warning("%s describes other bytes than %s (the run was written again since); not used", side, run)
        return None
    return data


def remove_run_provenance(run: str | os.PathLike) -> None:
    """Remove a run's sidecar (a run written without provenance must not keep an older run's)."""
    run_sidecar(run).unlink(missing_ok=True)
