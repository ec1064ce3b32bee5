"""Paper figures whose numbers are a paper table's: drawn from that table's rendered CSV.

A figure here never computes anything of its own: it reads ``results/<paper>/table<N>.csv`` (the
tidy CSV of :mod:`zsdr.tables.render`) and plots, per panel, one entry of the table against another
over the table's datasets — this pipeline's values as filled points, the paper's as hollow ones,
each series with its least-squares line and Pearson r. So the figure and its table cannot
disagree, and a figure regenerates whenever its table does.

Figures drawn from training curves or embeddings (t-SNE, loss curves, per-episode scores) belong to
the method stages that produce those numbers; :data:`FIGURES` lists the ones this module draws.
"""

from __future__ import annotations

import csv
import math
import os
import textwrap
from dataclasses import dataclass

import numpy as np
import pandas as pd

from zsdr.io import DataError, atomic_write, save_figure
from zsdr.tables.formatting import parse_published

AVERAGE_LABELS = ("avg", "average", "mean")


@dataclass(frozen=True)
class Panel:
    x: str          # table entry on the x axis
    y: str          # table entry on the y axis
    xlabel: str
    ylabel: str
    title: str


@dataclass(frozen=True)
class FigureSpec:
    paper: str
    figure: int
    table: int      # the paper table whose CSV holds the figure's numbers
    title: str
    caption: str
    panels: tuple[Panel, ...]


_QUERY, _DOC = "Query-intent similarity to MS MARCO", "Document lexical similarity to MS MARCO"
_GAP = "nDCG@10 gain over BM25"

FIGURES: dict[tuple[str, int], FigureSpec] = {
    ("cocodr", 2): FigureSpec(
        paper="cocodr", figure=2, table=6,
        title="COCO-DR Figure 2: zero-shot gain over BM25 against distribution shift from MS MARCO",
        caption=("Each point is a BEIR task: x, its query-intent or document lexical weighted Jaccard "
                 "similarity to MS MARCO; y, the nDCG@10 of ANCE minus BM25 (Table 6's columns)."),
        panels=(
            Panel("query_jaccard", "ance-bert-gap", _QUERY, _GAP, "(a) ANCE (BERT)"),
            Panel("query_jaccard", "ance-cocondenser-gap", _QUERY, _GAP, "(b) ANCE (coCondenser)"),
            Panel("doc_jaccard", "ance-bert-gap", _DOC, _GAP, "(c) ANCE (BERT)"),
            Panel("doc_jaccard", "ance-cocondenser-gap", _DOC, _GAP, "(d) ANCE (coCondenser)"),
        )),
}


def _number(value) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return parse_published(str(value))


def figure_points(table_csv: str | os.PathLike, x: str, y: str) -> dict[str, list[tuple[str, float, float]]]:
    """``{"reproduced": [(label, x, y), ...], "published": [...]}`` over the table's dataset rows.

    Average rows are left out; a dataset appears in a series only where both of its cells have a
    value of that kind.
    """
    try:
        frame = pd.read_csv(table_csv, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError) as exc:
        raise DataError(table_csv, None, f"cannot read the table: {exc}", "re-render the table it draws from") from None
    missing = {"dataset", "dataset_label", "entry", "reproduced", "published"} - set(frame.columns)
    if missing:
        raise DataError(table_csv, 1, f"not a rendered paper table: no column(s) {sorted(missing)}",
                        "re-render it with the paper_table rule")
    for entry in (x, y):
        if entry not in set(frame["entry"]):
            raise DataError(table_csv, None, f"the table has no entry {entry!r}",
                            "the figure spec and the table spec disagree: fix zsdr.tables.figures.FIGURES")
    points: dict[str, list[tuple[str, float, float]]] = {"reproduced": [], "published": []}
    for dataset, rows in frame.groupby("dataset", sort=False):
        label = rows["dataset_label"].iloc[0] or dataset
        if label.strip().lower() in AVERAGE_LABELS or dataset.strip().lower() in AVERAGE_LABELS:
            continue
        cells = {r.entry: r for r in rows.itertuples(index=False)}
        if x not in cells or y not in cells:
            continue
        for kind in points:
            vx, vy = _number(getattr(cells[x], kind)), _number(getattr(cells[y], kind))
            if vx is not None and vy is not None:
                points[kind].append((label, vx, vy))
    return points


def entry_note(table_csv: str | os.PathLike, entry: str) -> str:
    """The most common reason the table gives for an entry's empty cells ('' when none)."""
    frame = pd.read_csv(table_csv, dtype=str, keep_default_na=False)
    notes = frame.loc[(frame["entry"] == entry) & (frame["reproduced"] == "") & (frame["note"] != ""), "note"]
    return notes.value_counts().index[0] if len(notes) else ""


def fit(points: list[tuple[str, float, float]]) -> tuple[float, float, float] | None:
    """Least-squares slope, intercept and Pearson r of the points (None below 3 points or no spread)."""
    if len(points) < 3:
        return None
    xs = np.array([p[1] for p in points])
    ys = np.array([p[2] for p in points])
    if np.ptp(xs) == 0 or np.ptp(ys) == 0:
        return None
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(slope), float(intercept), float(np.corrcoef(xs, ys)[0, 1])


def render_figure(spec: FigureSpec, table_csv: str | os.PathLike, out: str | os.PathLike, scale: str = "") -> dict:
    """Draw ``spec`` from its table's CSV into ``out`` (PNG or SVG by suffix), atomically.

    Returns ``{panel title: {"reproduced": n points, "published": n, "r_reproduced": r, ...}}``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 2 if len(spec.panels) > 1 else 1
    rows = math.ceil(len(spec.panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    summary = {}
    styles = {"reproduced": dict(color="tab:blue", marker="o", label="zsdr"),
              "published": dict(facecolors="none", edgecolors="tab:gray", marker="o", label="paper")}
    for ax, panel in zip(axes.flat, spec.panels):
        points = figure_points(table_csv, panel.x, panel.y)
        info = {}
        for kind, pts in points.items():
            info[kind] = len(pts)
            if not pts:
                continue
            xs, ys = [p[1] for p in pts], [p[2] for p in pts]
            ax.scatter(xs, ys, s=28, zorder=3, **styles[kind])
            if kind == "reproduced":
                for label, px, py in pts:
                    ax.annotate(label, (px, py), fontsize=6, xytext=(3, 3), textcoords="offset points")
            line = fit(pts)
            info[f"r_{kind}"] = line[2] if line else None
            if line:
                grid = np.linspace(min(xs), max(xs), 2)
                color = "tab:blue" if kind == "reproduced" else "tab:gray"
                ax.plot(grid, line[0] * grid + line[1], color=color, lw=1, ls="--",
                        label=f"{styles[kind]['label']} fit, r = {line[2]:.2f}")
        if not any(points.values()):
            why = entry_note(table_csv, panel.y) or entry_note(table_csv, panel.x) or f"see table {spec.table}"
            ax.text(0.5, 0.5, f"no values{f' at {scale} scale' if scale else ''}:\n" + "\n".join(textwrap.wrap(why, 40)),
                    ha="center", va="center", transform=ax.transAxes, fontsize=8, color="tab:gray")
        ax.axhline(0, color="black", lw=0.5)
        ax.set(title=panel.title, xlabel=panel.xlabel, ylabel=panel.ylabel)
        ax.title.set_fontsize(10)
        if any(points.values()):
            ax.legend(fontsize=7, loc="best")
        summary[panel.title] = info
    for ax in list(axes.flat)[len(spec.panels):]:
        ax.set_visible(False)
    fig.suptitle(spec.title + (f" ({scale} scale)" if scale else ""), fontsize=11)
    fig.tight_layout()
    save_figure(fig, out)
    return summary


def write_csv(out_csv: str | os.PathLike, fieldnames: list[str], rows: list[dict]) -> None:
    """A figure's numbers as CSV, atomically: floats to 6 significant digits, ``None`` as an empty cell."""
    with atomic_write(out_csv) as fh:
        w = csv.DictWriter(fh, fieldnames=fieldnames)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else ("" if v is None else v)) for k, v in r.items()})


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def scaled_title(title: str, scale: str) -> str:
    """A figure title with the scale it was drawn at, when one is given."""
    return title + (f" ({scale} scale)" if scale else "")


def metric_label(metric: str) -> str:
    """``ndcg@10`` -> ``nDCG@10`` (other metrics as named)."""
    return "nDCG" + metric[4:] if metric.lower().startswith("ndcg") else metric


def figure_legend(fig, axes, max_columns: int | None = 4) -> None:
    """One legend under the panels with every labelled line of ``axes`` once (first handle wins)."""
    handles: dict = {}
    for ax in getattr(axes, "flat", axes):
        for handle, text in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(text, handle)
    ncol = len(handles) if max_columns is None else min(len(handles), max_columns)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=max(ncol, 1), fontsize=8)
