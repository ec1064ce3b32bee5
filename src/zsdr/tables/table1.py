"""``results/table1.csv``: the project's own head-to-head table.

Rows are systems; columns are the source domain's dev split and every zero-shot target domain,
plus the mean over targets. Every cell comes from a metrics file of the pipeline.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from zsdr.io import DataError, atomic_write


def build_table1(metric_files: list[str | os.PathLike], systems: dict[str, str], datasets: list[str], source: str,
                 metric: str) -> pd.DataFrame:
    """``metric_files`` are ``<anything>/<dataset>/<system>.json`` files covering systems x datasets."""
    by_key = {(Path(f).parent.name, Path(f).stem): Path(f) for f in metric_files}
    rows = []
    targets = [d for d in datasets if d != source]
    for system, label in systems.items():
        row = {"system": system, "description": label}
        for d in datasets:
            path = by_key.get((d, system))
            if path is None:
                raise DataError(f"{d}/{system}.json", None, "no metrics file given for this cell",
                                "list it among the table rule's inputs")
            try:
                result = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise DataError(path, None, f"cannot read metrics ({exc})", "re-run the evaluate rule") from None
            if metric not in result["aggregate"]:
                raise DataError(path, None, f"metric {metric!r} was not computed",
                                "add it to evaluation.metrics in the config")
            row[f"{d} ({'source' if d == source else 'target'})"] = round(result["aggregate"][metric], 4)
        if targets:
            row["target mean"] = round(sum(row[f"{d} (target)"] for d in targets) / len(targets), 4)
        rows.append(row)
    return pd.DataFrame(rows)


def write_table(df: pd.DataFrame, csv: str | os.PathLike, md: str | os.PathLike, title: str) -> None:
    with atomic_write(csv) as fh:
        df.to_csv(fh, index=False)
    with atomic_write(md) as fh:
        fh.write(f"# {title}\n\n")
        fh.write(df.to_markdown(index=False))
        fh.write("\n")
