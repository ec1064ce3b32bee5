"""DDR's Figure 4: retrieval quality on each target against the target DAM's training time.

The REM trained once on the source DAM is plugged into snapshots of each target DAM (MLM on the
target corpus, initialised from the source DAM) and evaluated; step 0 is the source DAM itself.
The x axis is training time in device hours (the snapshot's cumulative training seconds times
the devices the DAM trained on); the paper plots GPU hours, a CPU run's hours are CPU hours.
The DR baseline (the whole model fine-tuned on the source) is the dashed line.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Sequence

from zsdr.evaluation.metrics import read_metrics
from zsdr.io import DataError, atomic_write, read_json, save_figure
from zsdr.tables.inputs import metric_scores

SNAPSHOTS = "snapshots/snapshots.json"


def snapshot_times(dam: str | os.PathLike) -> tuple[dict[int, float], dict]:
    """``({step: training seconds}, final entry)`` of a DAM trained with snapshots."""
    path = Path(dam) / SNAPSHOTS
    entries = read_json(path, "train the DAM again with snapshot_every set", expect=list)
    try:
        times = {int(e["step"]): float(e["train_seconds"]) for e in entries}
    except (KeyError, TypeError, ValueError):
        raise DataError(path, None, "every entry needs step and train_seconds",
                        "train the DAM again (the trainer writes this file)") from None
    if not entries:
        raise DataError(path, None, "no snapshot entries", "train the DAM again with snapshot_every set")
    return times, entries[-1]


def _value(path, metric: str) -> float:
    return metric_scores(read_metrics(path), path, metric)[0]


def render_dam_curves(points: Sequence[dict], dams: dict, baseline: dict, metric: str, out_png: str | os.PathLike,
                      out_csv: str | os.PathLike, devices: dict | None = None, labels: dict | None = None,
                      scale: str = "") -> list[dict]:
    """``points``: ``{"dataset", "step" (None for the final DAM), "system", "metrics"}``; ``dams``:
    ``{dataset: DAM folder}``; ``baseline``: ``{dataset: metrics file of the DR baseline}``; ``devices``:
    ``{dataset: devices its DAM trained on}`` (default 1). Writes one
    panel per dataset and a CSV (dataset, step, train_seconds, device_hours, system, value, baseline);
    returns the rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = labels or {}
    rows = []
    for p in points:
        d = p["dataset"]
        times, final = snapshot_times(dams[d])
        step = int(final["step"]) if p["step"] is None else int(p["step"])
        if step and step not in times:
            raise DataError(Path(dams[d]) / SNAPSHOTS, None, f"no snapshot at step {step}",
                            "train the DAM again with the configured ddr.figure4.snapshot_every")
        seconds = times.get(step, 0.0)
        rows.append({"dataset": d, "step": step, "train_seconds": seconds,
                     "device_hours": seconds * (devices or {}).get(d, 1) / 3600, "system": p["system"],
                     "value": _value(p["metrics"], metric), "baseline": _value(baseline[d], metric)})
    rows.sort(key=lambda r: (r["dataset"], r["step"]))
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.4 * len(datasets) + 0.6, 3.2), squeeze=False)
    for ax, d in zip(axes[0], datasets):
        mine = [r for r in rows if r["dataset"] == d]
        ax.plot([r["device_hours"] for r in mine], [r["value"] for r in mine], marker="o",
                label=labels.get("system", "DDR"))
        ax.axhline(mine[0]["baseline"], linestyle="--", color="tab:gray", label=labels.get("baseline", "DR"))
        ax.set(title=d, xlabel="target DAM training (device hours)", ylabel=metric)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("DDR Figure 4: quality vs target-DAM training time" + (f" ({scale} scale)" if scale else ""),
                 fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_png)
    with atomic_write(out_csv) as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return rows
