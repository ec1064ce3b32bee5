"""The regression report: each published value beside the value the pipeline measured, and a verdict.

:func:`verdicts` turns the planned rows (a published value, and the metrics file that holds its measured value
or the reason it is not run) into report rows; :func:`write_report` writes ``regressions.csv``, ``.md`` and
a picture of the differences per system and dataset (and logs the verdicts' counts); :func:`check` lists the
FAIL rows of a written report, and :func:`gate` is the check a site runs (it passes only when no row FAILs).
"""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path
from typing import Any

from zsdr.io import atomic_write

log = logging.getLogger("zsdr.regressions")

PASS, FAIL, NOT_RUN = "PASS", "FAIL", "NOT RUN"
REPORT_COLUMNS = ("system", "dataset", "metric", "published", "tolerance", "measured", "delta", "verdict", "reason",
                  "source", "note")


def verdict(value: float, tolerance: float, measured: float | None) -> str:
    """PASS when |measured - value| <= tolerance (to float rounding), FAIL otherwise; NOT RUN without a value."""
    if measured is None or not math.isfinite(measured):
        return NOT_RUN
    return PASS if abs(measured - value) <= tolerance + 1e-9 else FAIL


def measured_value(metrics_file: str | Path, metric: str) -> float | None:
    """The aggregate value of ``metric`` in an evaluation job's metrics file (None when it does not hold it)."""
    data = json.loads(Path(metrics_file).read_text(encoding="utf-8"))
    value = (data.get("aggregate") or {}).get(metric)
    return None if value is None else float(value)


def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Report rows from planned rows: ``{system, dataset, metric, value, tolerance, source, note}`` with either
    ``metrics`` (the file that holds the measured value) or ``reason`` (why the row is not run)."""
    out = []
    for row in rows:
        measured, reason = None, row.get("reason") or ""
        if not reason:
            measured = measured_value(row["metrics"], row["metric"])
            if measured is None:
                reason = f"{row['metrics']} holds no {row['metric']} (add it to evaluation.metrics)"
        result = verdict(row["value"], row["tolerance"], measured)
        out.append({
            "system": row["system"], "dataset": row["dataset"], "metric": row["metric"],
            "published": row["value"], "tolerance": row["tolerance"],
            "measured": None if measured is None else round(measured, 4),
            "delta": None if measured is None else round(measured - row["value"], 4) + 0.0,   # no -0.0000
            "verdict": result, "reason": reason, "source": row["source"], "note": row.get("note", ""),
        })
    return out


def counts(report: list[dict[str, Any]]) -> dict[str, int]:
    return {v: sum(r["verdict"] == v for r in report) for v in (PASS, FAIL, NOT_RUN)}


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def write_csv(report: list[dict[str, Any]], path: str | Path) -> None:
    with atomic_write(Path(path)) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(REPORT_COLUMNS)
        for r in report:
            writer.writerow([_cell(r[c]) if c != "delta" or r[c] is None else f"{r[c]:+.4f}" for c in REPORT_COLUMNS])


def read_csv(path: str | Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def write_markdown(report: list[dict[str, Any]], path: str | Path, title: str = "Reproduction regressions") -> None:
    n = counts(report)
    lines = [f"# {title}", "",
             f"{len(report)} published values: **{n[PASS]} PASS**, **{n[FAIL]} FAIL**, {n[NOT_RUN]} NOT RUN. "
             "A row PASSes when |measured - published| <= its tolerance; NOT RUN says why it was not measured "
             "(a dataset or checkpoint not available here, a system this config does not define). Sources: the "
             "`source` column (docs/regressions.md lists the files and tables).", ""]
    order = {FAIL: 0, PASS: 1, NOT_RUN: 2}
    lines += ["| system | dataset | metric | published | ± | measured | Δ | verdict | source / reason |",
              "|---|---|---|--:|--:|--:|--:|---|---|"]
    for r in sorted(report, key=lambda r: (order[r["verdict"]], r["system"], r["dataset"], r["metric"])):
        why = r["source"] if r["verdict"] != NOT_RUN else f"{r['reason']} — {r['source']}"
        if r["note"]:
            why += f" ({r['note']})"
        delta = "" if r["delta"] is None else f"{r['delta']:+.4f}"
        lines.append(f"| {r['system']} | {r['dataset']} | {r['metric']} | {r['published']:.4f} | {r['tolerance']:.4f} | "
                     f"{_cell(r['measured'])} | {delta} | {r['verdict']} | {why.replace('|', '/')} |")
    with atomic_write(Path(path)) as fh:
        fh.write("\n".join(lines) + "\n")


def write_figure(report: list[dict[str, Any]], path: str | Path) -> None:
    """Δ (measured - published) per system (rows) and dataset (columns), one panel per metric; a cell
    outside its tolerance is marked ×, a row not run is left grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    metrics = sorted({r["metric"] for r in report}) or ["ndcg@10"]
    fig_h = 1.5
    panels = []
    for metric in metrics:
        rows = [r for r in report if r["metric"] == metric]
        systems = sorted({r["system"] for r in rows})
        datasets = sorted({r["dataset"] for r in rows})
        panels.append((metric, rows, systems, datasets))
        fig_h += 0.35 * max(1, len(systems)) + 1.6
    width = max(6.0, 0.42 * max((len(p[3]) for p in panels), default=1) + 3.5)
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, fig_h), squeeze=False)
    limit = max([abs(r["delta"]) for r in report if r["delta"] is not None] + [0.01])
    for ax, (metric, rows, systems, datasets) in zip(axes[:, 0], panels):
        grid = np.full((max(1, len(systems)), max(1, len(datasets))), np.nan)
        for r in rows:
            i, j = systems.index(r["system"]), datasets.index(r["dataset"])
            if r["delta"] is not None:
                grid[i, j] = r["delta"]
            if r["verdict"] == FAIL:
                ax.text(j, i, "×", ha="center", va="center", fontsize=9, color="black")
        cmap = matplotlib.colormaps["RdBu"].with_extremes(bad="#dddddd")
        image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-limit, vmax=limit, aspect="auto")
        ax.set_xticks(range(len(datasets)), datasets, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(range(len(systems)), systems, fontsize=7)
        ax.set_title(f"{metric}: measured - published (× outside the tolerance, grey: not run)", fontsize=8)
        fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)


def write_report(rows: list[dict[str, Any]], csv_path: str | Path, md_path: str | Path,
                 png_path: str | Path | None = None) -> list[dict[str, Any]]:
    report = verdicts(rows)
    write_csv(report, csv_path)
    write_markdown(report, md_path)
    if png_path is not None:
        write_figure(report, png_path)
    log.info("%s", ", ".join(f"{n} {v}" for v, n in counts(report).items()))
    return report


def check(csv_path: str | Path) -> list[str]:
    """One line per FAIL row of a written report ([] when none fails): what a site's gate reports."""
    return [f"FAIL {r['system']} on {r['dataset']} {r['metric']}: measured {r['measured']}, published {r['published']} "
            f"± {r['tolerance']} ({r['source']})" for r in read_csv(csv_path) if r["verdict"] == FAIL]


class RegressionFailure(Exception):
    """A published value the pipeline did not reproduce (a FAIL row): what fails a site's gate."""


def gate(csv_path: str | Path, ok_path: str | Path) -> None:
    """The gate of a written report: writes ``ok_path`` when no row FAILs; else writes nothing and raises a
    :class:`RegressionFailure` naming the report and every FAIL row (:func:`check`), one a line."""
    failed = check(csv_path)
    if failed:
        raise RegressionFailure("\n  ".join([f"{len(failed)} published value(s) not reproduced ({csv_path}):",
                                              *failed]))
    Path(ok_path).write_text("every measured row PASSes\n", encoding="utf-8")
