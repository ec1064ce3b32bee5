"""RMSC's learning-curve figures, drawn from the metrics of models saved during training.

Provenance: Fang et al., "Robust Multi-Supervision Combining for Zero-Shot Dense Retrieval"
(AAAI 2024), Figures 2 and 3.

* Figure 2: nDCG@10 on the source's dev set (in-domain; the paper's MS MARCO, blue dotted) and on
  the targets (the paper's five BEIR datasets, solid) against training steps, for Condenser and
  COCO fine-tuned on the source and for QGen continued on a target's generated queries: the
  instability RMSC sets out to fix (in-domain gains while target scores stall or fall).
* Figure 3: the same for RMSC(CD) and RMSC(CO).

The paper's evaluation interval is not stated [X]: the pipeline evaluates every
``rmsc.curves.snapshot_every`` steps. Each panel is one recipe; a per-target recipe's in-domain
line is its model for ``rmsc.source_target``.
"""

from __future__ import annotations

import math
import os
from typing import Sequence

from zsdr.io import save_figure
from zsdr.tables.cocodr_figures import collect_points
from zsdr.tables.figures import figure_legend, metric_label, pyplot, scaled_title, write_csv

TITLES = {2: "Condenser, COCO and QGen fine-tuning", 3: "RMSC(CD) and RMSC(CO)"}


def curve_rows(points: Sequence[dict], metric: str = "ndcg@10") -> list[dict]:
    """One row per point: recipe, label, dataset, in_domain, step, ``metric`` (checked; sorted by recipe
    and dataset in order of appearance, then step)."""
    rows = collect_points(points, "curve", ("recipe", "dataset"), "step", 0, metric)
    for r, p in zip(rows, points):
        r["label"] = str(p.get("label") or r["recipe"])
        r["in_domain"] = bool(p.get("in_domain"))
    recipes = list(dict.fromkeys(r["recipe"] for r in rows))
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    rows.sort(key=lambda r: (recipes.index(r["recipe"]), datasets.index(r["dataset"]), r["step"]))
    return rows


def render_curves(points: Sequence[dict], out_png: str | os.PathLike, out_csv: str | os.PathLike, figure: int = 2,
                  metric: str = "ndcg@10", scale: str = "") -> list[dict]:
    """RMSC Figure 2 or 3: ``metric`` against training steps, one panel per recipe; the in-domain
    dataset dotted blue, each target solid (orange shades). ``points``: ``{"recipe", "label",
    "step", "dataset", "in_domain", "metrics"}``. Writes the PNG and a CSV of the rows; returns them."""
    rows = curve_rows(points, metric)
    recipes = list(dict.fromkeys(r["recipe"] for r in rows))
    targets = list(dict.fromkeys(r["dataset"] for r in rows if not r["in_domain"]))
    plt = pyplot()
    cols = min(len(recipes), 3)
    nrows = math.ceil(len(recipes) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.9 * cols + 0.6, 3.2 * nrows + 0.8), squeeze=False)
    shown = metric_label(metric)
    oranges = ["#e66101", "#fdb863", "#b35806", "#f1a340", "#8c510a", "#fee0b6"]
    markers = "osD^v<>ph*"
    for ax, recipe in zip(axes.flat, recipes):
        own = [r for r in rows if r["recipe"] == recipe]
        for r0 in [r for r in own if r["in_domain"]][:1]:
            line = [r for r in own if r["dataset"] == r0["dataset"]]
            ax.plot([r["step"] for r in line], [r[metric] for r in line], linestyle=":", marker="o", markersize=3,
                    color="tab:blue", label=f"{r0['dataset']} (in-domain)")
        for i, dataset in enumerate(targets):
            line = [r for r in own if r["dataset"] == dataset]
            if line:
                ax.plot([r["step"] for r in line], [r[metric] for r in line], marker=markers[i % len(markers)],
                        markersize=3, color=oranges[i % len(oranges)], label=dataset)
        ax.set(title=own[0]["recipe"], xlabel="training step", ylabel=shown)
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(recipes):]:
        ax.set_visible(False)
    figure_legend(fig, axes)
    title = TITLES.get(figure, "learning curves")
    fig.suptitle(scaled_title(f"RMSC Figure {figure}: {shown} during training, {title}", scale), fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    save_figure(fig, out_png)
    write_csv(out_csv, ["recipe", "label", "dataset", "in_domain", "step", metric], rows)
    return rows
