"""BERM's figures that come from training runs rather than from a table.

* Figure 4 (:func:`render_weight_grid`): the average nDCG@10 over the target datasets of one model
  per (alpha, beta) point, alpha weighing L_R2 and beta L_R1 (``config berm.grid``); the paper
  reports its optimum at alpha 0.1, beta 1.0 and no cell values.
* Figure 5 lives in :mod:`zsdr.evaluation.tsne` (it embeds texts, so it belongs to the analyses).
"""

from __future__ import annotations

import csv
import os
from typing import Sequence

import numpy as np

from zsdr.evaluation.metrics import read_metrics
from zsdr.io import atomic_write, save_figure
from zsdr.tables.inputs import metric_scores


def render_weight_grid(points: Sequence[dict], metric: str, out_png: str | os.PathLike, out_csv: str | os.PathLike,
                       scale: str = "") -> dict:
    """``points``: ``{"alpha", "beta", "system", "metrics": [metrics JSON per target]}``. Writes the heatmap
    and a CSV (alpha, beta, system, one column per dataset, average); returns the best point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, datasets = [], []
    for p in points:
        values = {}
        for path in p["metrics"]:
            m = read_metrics(path)
            values[m["dataset"]] = metric_scores(m, path, metric)[0]
        datasets = datasets or list(values)
        rows.append({"alpha": p["alpha"], "beta": p["beta"], "system": p["system"], **values,
                     "average": float(np.mean(list(values.values())))})
    alphas = sorted({r["alpha"] for r in rows})
    betas = sorted({r["beta"] for r in rows})
    grid = np.full((len(betas), len(alphas)), np.nan)
    for r in rows:
        grid[betas.index(r["beta"]), alphas.index(r["alpha"])] = r["average"]
    fig, ax = plt.subplots(figsize=(1.4 * len(alphas) + 2.4, 1.1 * len(betas) + 1.8))
    im = ax.imshow(grid, cmap="viridis", origin="lower", aspect="auto")
    for i in range(len(betas)):
        for j in range(len(alphas)):
            ax.text(j, i, f"{grid[i, j]:.3f}", ha="center", va="center", fontsize=8,
                    color="white" if grid[i, j] < np.nanmean(grid) else "black")
    ax.set_xticks(range(len(alphas)), [f"{a:g}" for a in alphas])
    ax.set_yticks(range(len(betas)), [f"{b:g}" for b in betas])
    ax.set(xlabel="alpha (weight of L_R2)", ylabel="beta (weight of L_R1)")
    fig.colorbar(im, ax=ax, label=f"average {metric} over {', '.join(datasets)}")
    ax.set_title("BERM Figure 4: loss weights" + (f" ({scale} scale)" if scale else ""), fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_png)
    with atomic_write(out_csv) as fh:
        w = csv.DictWriter(fh, fieldnames=["alpha", "beta", "system", *datasets, "average"])
        w.writeheader()
        for r in sorted(rows, key=lambda r: (r["beta"], r["alpha"])):
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) and k not in ("alpha", "beta") else v)
                        for k, v in r.items()})
    best = max(rows, key=lambda r: r["average"])
    return {"best": {"alpha": best["alpha"], "beta": best["beta"], "average": best["average"]}}
