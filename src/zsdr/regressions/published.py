"""Published values the regressions compare the pipeline with: one CSV row per (system, dataset, metric).

Columns (``published.csv`` beside this module is the project's own file; a config may add files,
`regressions.files`):

* ``system``: a system of the config (`systems`, a trained recipe's name), as the pipeline names it;
* ``dataset``: a registry dataset, a mini domain or one of config `datasets.local`;
* ``metric``: a metric zsdr.evaluation.metrics computes (``ndcg@10``, ``recall@100``, ``mrr@10``, ...);
* ``value``: the published number, as a fraction (0.6789, not 67.89);
* ``tolerance``: the largest |measured - value| that still passes;
* ``source``: where the number is printed, precisely enough to open it (paper, table, row and column; or
  the file, commit and condition of a reproduction matrix);
* ``note`` (optional): what a reader of the row should know (a setting the config does not have, ...).

A bad file stops planning with one line naming the file, the line and the fix.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

BUILTIN = Path(__file__).with_name("published.csv")
"""The project's published values (sources: the README beside it)."""

COLUMNS = ("system", "dataset", "metric", "value", "tolerance", "source")
OPTIONAL = ("note",)


class PublishedError(ValueError):
    """A published-values file that cannot be read as one: ``FILE:LINE: what (fix: ...)``."""


@dataclass(frozen=True)
class Published:
    system: str
    dataset: str
    metric: str
    value: float
    tolerance: float
    source: str
    note: str = ""
    file: str = ""
    line: int = 0

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.system, self.dataset, self.metric)


def _number(text: str, where: str, column: str, fix: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PublishedError(f"{where}: {column} {text!r} is not a number (fix: {fix})") from None
    if not math.isfinite(value):
        raise PublishedError(f"{where}: {column} {text!r} is not a finite number (fix: {fix})")
    return value


def read_published(path: str | Path) -> list[Published]:
    """The rows of one published-values file, checked: the columns, numbers, known metrics, one row per
    (system, dataset, metric), a source on every row."""
    from zsdr.evaluation.metrics import parse_metrics

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PublishedError(f"{path}: cannot read the published values ({exc}) (fix: config key regressions.files "
                             "names a readable UTF-8 CSV file)") from None
    lines = [line for line in text.splitlines()]
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None:
        raise PublishedError(f"{path}: empty (fix: a header line {','.join(COLUMNS)}, then one row per value)")
    header = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in header]
    unknown = [c for c in header if c not in COLUMNS + OPTIONAL]
    if missing or unknown:
        what = f"no column {', '.join(missing)}" if missing else f"unknown column {', '.join(unknown)}"
        raise PublishedError(f"{path}:1: {what} (fix: the header is {','.join(COLUMNS)}[,note])")
    rows: list[Published] = []
    seen: dict[tuple[str, str, str], int] = {}
    known_metrics: set[str] = set()
    for number, cells in enumerate(reader, start=2):
        if not cells or all(not c.strip() for c in cells):
            continue
        where = f"{path}:{number}"
        if len(cells) != len(header):
            raise PublishedError(f"{where}: {len(cells)} cells, the header has {len(header)} (fix: quote a cell "
                                 "that holds a comma)")
        row = {h: c.strip() for h, c in zip(header, cells)}
        for column in ("system", "dataset", "metric", "source"):
            if not row[column]:
                raise PublishedError(f"{where}: no {column} (fix: every row names its system, dataset, metric and "
                                     "the source a reader can open)")
        if row["metric"] not in known_metrics:
            try:
                parse_metrics([row["metric"]])
            except ValueError as exc:
                raise PublishedError(f"{where}: {exc} (fix: a metric zsdr computes, e.g. ndcg@10, recall@100, "
                                     "recall@1000, mrr@10)") from None
            known_metrics.add(row["metric"])
        value = _number(row["value"], where, "value", "the published number as a fraction, e.g. 0.6789")
        if not 0 <= value <= 1:
            raise PublishedError(f"{where}: value {row['value']} is outside [0, 1] (fix: write a percentage such as "
                                 "67.89 as the fraction 0.6789)")
        tolerance = _number(row["tolerance"], where, "tolerance", "the largest difference that passes, e.g. 0.002")
        if tolerance < 0:
            raise PublishedError(f"{where}: tolerance {row['tolerance']} is negative (fix: 0 or more)")
        key = (row["system"], row["dataset"], row["metric"])
        if key in seen:
            raise PublishedError(f"{where}: {'/'.join(key)} is given twice (first on line {seen[key]}) (fix: keep one "
                                 "row per system, dataset and metric)")
        seen[key] = number
        rows.append(Published(*key, value=value, tolerance=tolerance, source=row["source"],
                              note=row.get("note", ""), file=str(path), line=number))
    return rows


def read_all(files: list[str | Path], builtin: bool = True) -> list[Published]:
    """The rows of the project's file (with ``builtin``) and of ``files``, in that order; a later file's row for
    the same (system, dataset, metric) replaces the earlier one, in its place."""
    out: dict[tuple[str, str, str], Published] = {}
    for path in ([BUILTIN] if builtin else []) + [Path(f) for f in files]:
        for row in read_published(path):
            out[row.key] = row
    return list(out.values())
