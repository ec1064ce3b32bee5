"""``results/table1.csv``: the project's own head-to-head table.

Rows are systems; columns are the source domain's dev split and every zero-shot target domain,
plus the mean over targets. Every cell comes from a metrics file of the pipeline.

Significance: the strongest baseline (the one of ``baselines`` with the best target mean; the first
listed wins a tie) is the reference. Every other system is compared with it on each target by a
two-tailed paired test over per-query scores (t-test by default): ``†`` p < 0.05, ``‡`` p < 0.01,
shown where the system is better. The CSV keeps the numbers plain and adds, per target,
``<column> p`` and ``<column> marker`` columns, and a ``role`` column (reference / baseline / system).
"""

from __future__ import annotations

import os

import pandas as pd

from zsdr.evaluation import significance
from zsdr.evaluation.metrics import read_metrics
from zsdr.io import DataError
from zsdr.tables import inputs
from zsdr.tables.render import (emphasis_ranks, format_value, md_escape, md_table, md_value, paired_test, rounded,
                                write_outputs)
from zsdr.tables.spec import load_systems

SYMBOLS = ((0.01, "‡"), (0.05, "†"))
DIGITS = 4


def _labels(systems) -> dict[str, str]:
    """``{system: description}`` from such a mapping or a list of ids (labels from systems.yaml)."""
    if isinstance(systems, dict):
        return dict(systems)
    known = load_systems()
    return {s: known[s].label if s in known else "" for s in systems}


def build_table1(metric_files: list[str | os.PathLike], systems: dict[str, str] | list[str], datasets: list[str],
                 source: str, metric: str, baselines: list[str] | None = None, test: str = "ttest",
                 trials: int = 10000, holm: bool = False) -> pd.DataFrame:
    """``metric_files`` are ``<anything>/<dataset>/<system>.json`` files covering systems x datasets.

    ``baselines``: the systems the others are tested against (the strongest by target mean is the
    reference); none: no significance. ``test``: ``ttest`` or ``fisher`` (``trials``); ``holm``:
    Holm-correct all p-values of the table together.
    """
    by_key = inputs.metric_files_by_cell(metric_files)
    labels = _labels(systems)
    targets = [d for d in datasets if d != source]
    column = {d: f"{d} ({'source' if d == source else 'target'})" for d in datasets}
    rows, per_query = [], {}
    for system, label in labels.items():
        row = {"system": system, "description": label}
        for d in datasets:
            path = by_key.get((d, system))
            if path is None:
                raise DataError(f"{d}/{system}.json", None, "no metrics file given for this cell",
                                "list it among the table rule's inputs")
            value, per_query[(d, system)] = inputs.metric_scores(read_metrics(path), path, metric)
            row[column[d]] = round(value, DIGITS)
        if targets:
            row["target mean"] = round(sum(row[column[d]] for d in targets) / len(targets), DIGITS)
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs.update(metric=metric, source=source, test=test, trials=trials, holm=holm, reference=None,
                    baselines=list(baselines or []))
    for b in baselines or []:
        if b not in labels:
            raise DataError(None, None, f"table1 baseline {b!r} is not one of the table's systems "
                                        f"({', '.join(labels)})", "list every baseline under table1.systems too")
    if not baselines or not targets:
        return df
    means = dict(zip(df["system"], df["target mean"]))
    reference = max(baselines, key=lambda b: (means[b], -baselines.index(b)))
    df.attrs["reference"] = reference
    df["role"] = ["reference" if s == reference else "baseline" if s in baselines else "system" for s in df["system"]]
    tests = []
    for system in df["system"]:
        for d in targets:
            if system != reference:
                result = paired_test(per_query[(d, system)], per_query[(d, reference)], test, trials,
                                     f"table1: {d} {system} vs {reference}")
                tests.append((system, d, result["p"], result["mean_a"] > result["mean_b"]))
    if holm:
        tests = [(s, d, p, better) for (s, d, _, better), p in zip(tests, significance.holm([t[2] for t in tests]))]
    found = {(s, d): (p, better) for s, d, p, better in tests}
    for d in targets:
        col = column[d]
        df[f"{col} p"] = [round(found[(s, d)][0], 6) if (s, d) in found else None for s in df["system"]]
        df[f"{col} marker"] = [significance.marker(found[(s, d)][0], SYMBOLS)
                               if found.get((s, d), (0, False))[1] else "" for s in df["system"]]
    return df


def write_table(df: pd.DataFrame, csv: str | os.PathLike, md: str | os.PathLike, title: str) -> None:
    """Write the CSV as is and the Markdown with markers and the best value per column in bold."""
    value_cols = [c for c in df.columns if c.endswith((" (source)", " (target)")) or c == "target mean"]
    fmt = f"d{DIGITS}"
    bold = {c: emphasis_ranks({i: rounded(v, fmt) for i, v in df[c].items() if pd.notna(v)})[0] for c in value_cols}
    header = ["system", "description"] + value_cols
    rows = []
    for i, row in df.iterrows():
        cells = [md_escape(str(row["system"])), md_escape(str(row["description"]))]
        for c in value_cols:
            marker = row.get(f"{c} marker", "") or ""
            cells.append(md_value(format_value(row[c], fmt), "bold" if i in bold[c] else "", marker))
        rows.append(cells)
    lines = [f"# {title}", "", md_table(header, rows), "", "Bold = best per column."]
    ref = df.attrs.get("reference")
    if ref:
        test = ("two-tailed paired t-test" if df.attrs.get("test", "ttest") == "ttest"
                else f"Fisher randomization test ({df.attrs.get('trials')} trials)")
        holm = ", Holm-corrected over the table" if df.attrs.get("holm") else ""
        lines.append(f"† p < 0.05, ‡ p < 0.01: better than the strongest baseline, {ref} (best target mean among "
                     f"{', '.join(df.attrs.get('baselines', []))}), by a {test} over the per-query "
                     f"{df.attrs.get('metric', '')} of each target{holm}.")
    write_outputs(df, "\n".join(lines), csv, md)
