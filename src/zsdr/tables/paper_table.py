"""One table of one paper from the files a run wrote: its spec (zsdr.tables.spec), the cell files, the dataset
statistics and shift files, and DDR Table 5's REM parameter counts, rendered by zsdr.tables.render."""

from __future__ import annotations

import os
from collections.abc import Iterable

import pandas as pd

from zsdr.io import read_json
from zsdr.tables.inputs import files_by_dataset, metric_files_by_cell
from zsdr.tables.render import render_table
from zsdr.tables.spec import load_spec

Paths = Iterable[str | os.PathLike]


def write_paper_table(paper: str, table: int, metric_files: Paths, out_csv: str | os.PathLike,
                      out_md: str | os.PathLike, *, scale: str, stats: Paths = (), shift: Paths = (),
                      datasets_override: list[str] | dict[str, str] | None = None,
                      produced_systems: Iterable[str] | None = None, available_datasets: list[str] | None = None,
                      splits: dict[str, str] | None = None, significance: dict | None = None,
                      rem_files: dict[str, str | os.PathLike] | None = None) -> pd.DataFrame:
    """Render Table ``table`` of ``paper`` into ``out_csv`` and ``out_md`` and return the CSV frame.

    ``metric_files``: the cell files (``<anything>/<dataset>/<system>.json``, or ``.units.json``); ``stats`` and
    ``shift``: the statistics files (``<anything>/<dataset>.json``); ``rem_files``: ``{column key: rem.json}`` of
    the REMs whose parameter counts an info row shows. The rest as :func:`zsdr.tables.render.render_table`."""
    return render_table(
        load_spec(paper, table), metric_files_by_cell(metric_files), out_csv, out_md, scale=scale,
        datasets_override=datasets_override,
        produced_systems=None if produced_systems is None else set(produced_systems),
        available_datasets=available_datasets, stats=files_by_dataset(stats), shift=files_by_dataset(shift),
        splits=splits, significance=significance,
        rem_stats={k: read_json(f, "save the REM again") for k, f in (rem_files or {}).items()},
    )
