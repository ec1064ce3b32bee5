"""The papers' own numbers: the CSVs under ``zsdr/tables/published/`` read as text, keyed by a spec's
``published.key``, the row and column of that CSV each spec entry names, and the check that every
published row and column is named by exactly one entry (a spec and its CSV cannot drift apart).
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass
from pathlib import Path

from zsdr.io import DataError
from zsdr.tables.spec_model import KeyContext, TableSpec, package_dir

PUBLISHED_DIR = package_dir("published")


@dataclass(frozen=True)
class PublishedTable:
    path: Path
    columns: tuple[str, ...]
    rows: dict          # key tuple -> {column: raw text}
    order: tuple        # key tuples in file order


@functools.lru_cache(maxsize=None)
def read_published(name: str | Path, columns: tuple[str, ...] = ()) -> list[dict]:
    """A published CSV (a file name under ``published/``, or a path) as a list of ``{column: text}``
    (every cell kept as text; empty = empty); ``columns`` (a tuple: the result is cached) must all
    be in its header."""
    path = Path(name) if Path(name).is_file() else PUBLISHED_DIR / name
    if not path.is_file():
        raise DataError(path, None, "published table not found", "add the CSV under zsdr/tables/published/")
    text = path.read_text(encoding="utf-8")
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header:
        raise DataError(path, 1, "empty published table")
    if len(set(header)) != len(header):
        raise DataError(path, 1, "duplicate column names in the header")
    missing = [c for c in columns if c not in header]
    if missing:
        raise DataError(path, 1, f"no column(s) {', '.join(missing)}", "restore the published CSV")
    out = []
    for lineno, row in enumerate(reader, start=2):
        if len(row) != len(header):
            raise DataError(path, lineno, f"{len(row)} fields where the header has {len(header)}",
                            "quote cells that contain commas")
        out.append(dict(zip(header, row)))
    return out


def published_table(spec: TableSpec, marker: bool = False) -> PublishedTable | None:
    """The spec's published CSV (or its marker CSV) keyed by the values of ``published.key``."""
    pub = spec.published
    if pub is None or pub.file is None or (marker and pub.marker_file is None):
        return None
    name = pub.marker_file if marker else pub.file
    rows = read_published(name)
    path = PUBLISHED_DIR / name
    columns = tuple(rows[0]) if rows else ()
    keyed: dict = {}
    for i, row in enumerate(rows, start=2):
        k = tuple(row[c] for c in pub.key) if pub.key else (str(i - 2),)
        if k in keyed:
            raise DataError(path, i, f"row key {k} appears twice", "make published.key identify rows")
        keyed[k] = row
    return PublishedTable(path=path, columns=columns, rows=keyed, order=tuple(keyed))


def published_row_ref(spec: TableSpec, entry, metric_label: str | None = None) -> tuple | None:
    """The published CSV key of a row-axis entry (None: the paper has no such row).

    A multi-column label used as the default names the row by its last ``n`` parts, ``n`` being
    the number of key columns (less the metric column when ``metrics`` expands the rows).
    """
    if entry.published is None or spec.published is None or spec.published.file is None:
        return None
    ref = entry.published if isinstance(entry.published, tuple) else (entry.published,)
    n = len(spec.published.key) - (metric_label is not None)
    if len(ref) != n and isinstance(entry.label, tuple) and entry.published == entry.label:
        ref = ref[-n:]
    return ref + ((metric_label,) if metric_label is not None else ())


def published_column_ref(entry, metric_label: str | None = None) -> str | None:
    """The published CSV column of a column-axis entry (None: the paper has no such column); a
    dataset column expanded by ``metrics`` (systems-as-rows) is ``"<dataset column> <metric label>"``."""
    if entry.published is None:
        return None
    ref = entry.published if isinstance(entry.published, str) else " ".join(entry.published)
    return ref if metric_label is None else f"{ref} {metric_label}"


def _row_and_column_refs(spec: TableSpec):
    """(row refs, column refs): every published row key and column the spec's entries name."""
    rows, cols = [], []
    row_entries = spec.datasets if spec.rows_are_datasets else spec.systems
    col_entries = spec.systems if spec.rows_are_datasets else spec.datasets
    for e in row_entries:
        expand = spec.metrics and spec.rows_are_datasets and e.kind != "info"
        for mlabel in ([m for _, m in spec.metrics] if expand else [None]):
            ref = published_row_ref(spec, e, mlabel)
            if ref is not None:
                rows.append((e, ref))
    for e in col_entries:
        expand = spec.metrics and not spec.rows_are_datasets and e.kind != "info"
        for mlabel in ([m for _, m in spec.metrics] if expand else [None]):
            ref = published_column_ref(e, mlabel)
            if ref is not None:
                cols.append((e, ref, False))
        marker = getattr(e, "published_marker", None)
        if marker:
            cols.append((e, marker, True))
    return rows, cols


def check_published_shape(spec: TableSpec) -> None:
    """Every published row and column is named by exactly one spec entry, and every name exists."""
    pub = spec.published
    if pub is None or pub.file is None:
        return
    table = published_table(spec)
    ctx = KeyContext(spec.path)
    for k in pub.key + pub.ignore:
        if k not in table.columns:
            raise ctx.error("published.key/ignore", f"column {k!r} is not in {pub.file}")
    rows, cols = _row_and_column_refs(spec)
    markers = published_table(spec, marker=True)
    seen_rows: dict = {}
    for e, ref in rows:
        if len(ref) != len(pub.key):
            raise ctx.error(f"{e.key}.published", f"{ref} does not give the {len(pub.key)} key values {list(pub.key)}")
        if ref not in table.rows:
            raise ctx.error(f"{e.key}.published", f"no row {ref} in {pub.file}",
                            "set `published:` to the CSV row's key (or null: the paper has no such row)")
        if ref in seen_rows:
            raise ctx.error(f"{e.key}.published", f"row {ref} is already named by {seen_rows[ref]!r}")
        seen_rows[ref] = e.key
    missing = [k for k in table.order if k not in seen_rows]
    if missing:
        raise ctx.error("datasets/systems", f"published rows {missing} of {pub.file} are named by no entry",
                        "add an entry (an info row for text rows) or fix its `published:`")
    seen_cols: dict = {}
    for e, col, is_marker in cols:
        source = markers if is_marker and markers is not None else table
        if col not in source.columns:
            raise ctx.error(f"{e.key}.published", f"no column {col!r} in {Path(source.path).name}",
                            "set `published:` to the CSV column (or null: the paper has no such column)")
        if source is table:
            if col in seen_cols:
                raise ctx.error(f"{e.key}.published", f"column {col!r} is already named by {seen_cols[col]!r}")
            seen_cols[col] = e.key
    left = [c for c in table.columns if c not in seen_cols and c not in pub.key and c not in pub.ignore]
    if left:
        raise ctx.error("systems/datasets", f"published columns {left} of {pub.file} are named by no entry",
                        "name them with `published:` / `published_marker:`, or list them in published.ignore")
    if markers is not None:
        if set(markers.rows) - set(table.rows):
            raise ctx.error("published.marker_file", "the marker file has rows the table does not have")
