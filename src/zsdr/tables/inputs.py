"""Reading what the tables are made of: metrics, dataset statistics and distribution-shift files.

* ``metrics/<dataset>/<system>.json`` (:mod:`zsdr.evaluation.metrics`):
  ``{"aggregate": {metric: value}, "per_query": {qid: {metric: value}}, "queries": n, ...}``.
* ``metrics/<dataset>/<system>.units.json`` (:mod:`zsdr.evaluation.unit_analysis`, tables with
  ``source: units``): the same layout with one ``per_query`` entry per labelled pair; a value is
  ``null`` where the measure does not apply to the pair (or, in ``aggregate``, to any pair).
* ``stats/<dataset>.json``: :func:`zsdr.evaluation.analysis.dataset_statistics` of one split
  (a flat dict with ``docs``, ``queries``, ...; optionally ``"split": name``), or several splits
  as ``{split: statistics}``.
* ``shift/<target>.json``: :func:`zsdr.evaluation.analysis.shift_statistics` of one target
  (``query_jaccard``, ``doc_jaccard``).

Metrics files are read by :func:`zsdr.evaluation.metrics.read_metrics`, the format's own module.
Every reader raises :class:`zsdr.io.DataError` naming the file and what is wrong.
"""

from __future__ import annotations

import os
from pathlib import Path

from zsdr.io import DataError, read_json

STAT_KEYS = ("docs", "doc_avg_words", "queries", "query_avg_words", "qrels", "rel_per_query")
CELL_SUFFIXES = {"metrics": ".json", "units": ".units.json"}   # by a metric table's `source`


def check_metrics_cell(data: dict, path: str | os.PathLike, dataset: str, system: str) -> None:
    """A metrics file given for the cell (``dataset``, ``system``) must say it scores that system's run on
    that dataset where it records them (the workflow's evaluate jobs do: ``dataset``, ``system``): a file of
    another dataset or system put in its place is refused, naming both, not tabulated."""
    from zsdr.io import DataError

    for key, want in (("dataset", dataset), ("system", system)):
        got = data.get(key)
        if isinstance(got, str) and got != want:
            raise DataError(path, None, f"the metrics file scores {key} {got!r}, but the table reads it as {key} "
                            f"{want!r}", "evaluate the cell's own run again (remove the file and rerun the workflow)")


def metric_scores(data: dict, path: str | os.PathLike, metric: str) -> tuple[float | None, dict[str, float]]:
    """(aggregate value, per-query values) of ``metric`` in a metrics file read by
    :func:`zsdr.evaluation.metrics.read_metrics`;
    ``null`` values (a measure that does not apply) give ``None`` / are left out of the per-query values."""
    if metric not in data["aggregate"]:
        raise DataError(path, None, f"metric {metric!r} was not computed (has: {', '.join(sorted(data['aggregate']))})",
                        "add it to evaluation.metrics in the config")
    per_query = {}
    for qid, scores in data["per_query"].items():
        if not isinstance(scores, dict) or metric not in scores:
            raise DataError(path, None, f"query {qid!r} has no per-query {metric!r}", "re-run the evaluate rule")
        if scores[metric] is not None:
            per_query[str(qid)] = float(scores[metric])
    value = data["aggregate"][metric]
    return (None if value is None else float(value)), per_query


def _check_stats(stats, where: str | os.PathLike | None, split: str) -> dict:
    if not isinstance(stats, dict):
        raise DataError(where, None, f"split {split!r}: expected a mapping of statistics")
    missing = [k for k in STAT_KEYS if k not in stats]
    if missing:
        raise DataError(where, None, f"split {split!r} lacks {', '.join(missing)}",
                        "write zsdr.evaluation.analysis.dataset_statistics output")
    return stats


def read_statistics(source: str | os.PathLike | dict) -> dict[str, dict]:
    """Statistics of one dataset as ``{split: statistics}``; a flat file gives ``{"eval": ...}``
    (or ``{its "split": ...}``) — ``"eval"`` standing for the dataset's evaluation split."""
    where = None if isinstance(source, dict) else source
    data = source if isinstance(source, dict) else read_json(source, "re-run the statistics rule that writes it")
    if "docs" in data:
        split = str(data.get("split", "eval"))
        return {split: _check_stats(data, where, split)}
    return {str(split): _check_stats(stats, where, split) for split, stats in data.items()}


def read_shift(source: str | os.PathLike | dict) -> dict[str, float]:
    """Distribution-shift measures of one target (``query_jaccard``, ``doc_jaccard``)."""
    where = None if isinstance(source, dict) else source
    data = source if isinstance(source, dict) else read_json(source, "re-run the shift rule that writes it")
    for key in ("query_jaccard", "doc_jaccard"):
        if not isinstance(data.get(key), (int, float)):
            raise DataError(where, None, f"no numeric {key!r}",
                            "write zsdr.evaluation.analysis.shift_statistics output")
    return data


def cell_file(root: str | os.PathLike, dataset: str, system: str, source: str = "metrics") -> str:
    """Where the cell file of ``(dataset, system)`` lies under ``root`` for a table's ``source``."""
    return f"{root}/{dataset}/{system}{CELL_SUFFIXES[source]}"


def metric_files_by_cell(paths) -> dict[tuple[str, str], Path]:
    """``{(dataset, system): path}`` for files laid out as ``<anything>/<dataset>/<system>.json`` (or
    ``<system>.units.json``)."""
    out = {}
    for p in map(Path, paths):
        name = p.name.removesuffix(CELL_SUFFIXES["units"]) if p.name.endswith(CELL_SUFFIXES["units"]) else p.stem
        out[(p.parent.name, name)] = p
    return out


def files_by_dataset(paths) -> dict[str, Path]:
    """``{dataset: path}`` for files laid out as ``<anything>/<dataset>.json`` (stats, shift)."""
    return {Path(p).stem: Path(p) for p in paths}
