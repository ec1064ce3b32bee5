"""The training log of a run: ``train_log.jsonl`` (one record every ``log_every`` steps: step, epoch,
loss, learning rate, gradient norm, examples per second and every value the task logs), which of the
logged values are loss terms, the progress line each record gets in the job's log, and the loss-curve
PNG written with the model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from zsdr.io import atomic_write, save_figure

LOG_FILE = "train_log.jsonl"
PLOT_FILE = "loss.png"


def read_log(path: Path, start: int) -> list[dict]:
    """The records up to ``start`` (a resumed run drops what the killed one logged after its checkpoint)."""
    if not path.is_file():
        return []
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut off by the kill
        if rec.get("step", 0) <= start:
            kept.append(rec)
    with atomic_write(path) as fh:
        fh.writelines(json.dumps(r) + "\n" for r in kept)
    return kept


# Keys of a train_log.jsonl record that the trainer writes itself (not logged by the task).
RECORD_KEYS = ("step", "epoch", "loss", "last_loss", "lr", "grad_norm", "examples_per_s")
# A logged value whose name has one of these words (split at "_") is not a loss term: accuracies,
# counts, weights, a schedule's lambda.
NOT_LOSS_WORDS = {"accuracy", "acc", "tokens", "lambda", "weight", "entropy", "clusters"}


def logged_values(records: list[dict]) -> list[str]:
    """The task's logged values across ``records``, in the order they first appear."""
    return list(dict.fromkeys(k for r in records for k in r if k not in RECORD_KEYS))


def loss_terms(records: list[dict]) -> list[str]:
    """The logged values that are loss terms (``task_loss``, BERM's ``r1`` / ``r2``, MoDIR's
    ``adversarial_loss``, COCO's ``mlm_head`` ..., RMSC's ``loss_<group>``), not accuracies or counts."""
    return [k for k in logged_values(records) if not NOT_LOSS_WORDS & set(k.lower().split("_"))]


def _duration(seconds: float) -> str:
    seconds = int(round(max(seconds, 0.0)))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def progress_line(name: str, rec: dict, total: int, start: int, elapsed: float) -> str:
    """``train dpr-berm: step 20/100 (20%), loss 0.6931 (r1 0.04, r2 0.4, task_loss 0.65), accuracy 0.5,
    lr 2.00e-05, 812.3 examples/s, ETA 0:01:05`` (the loss: the mean over the log window; the logged
    values: the record's step's; the ETA: this run's pace since ``start``; ``done in`` at the end)."""
    step = rec["step"]
    terms, values = loss_terms([rec]), logged_values([rec])
    parts = [f"train {name}: step {step}/{total} ({100 * step / max(total, 1):.0f}%)",
             f"loss {rec['loss']:.4f}" + (f" ({', '.join(f'{k} {rec[k]:.4g}' for k in terms)})" if terms else "")]
    parts += [f"{k} {rec[k]:.4g}" for k in values if k not in terms]
    parts.append(f"lr {rec['lr']:.2e}")
    parts.append(f"{rec['examples_per_s']:.1f} examples/s")
    done = step - start
    if step < total and done > 0:
        parts.append(f"ETA {_duration(elapsed / done * (total - step))}")
    elif step >= total:
        parts.append(f"done in {_duration(elapsed)}")
    return ", ".join(parts)


def plot_losses(records: list[dict], out: str | os.PathLike, title: str = "") -> None:
    """:func:`loss_figure` as a PNG, with no date or version in the file (:func:`zsdr.io.save_figure`):
    the same records give the same bytes."""
    save_figure(loss_figure(records, title), out)


def loss_figure(records: list[dict], title: str = ""):
    """The run's loss curves: the total loss (mean over each log window) and each loss term the task
    logged (:func:`loss_terms`, at the logged step) against the step, the learning rate dotted on a
    labelled second axis, one legend for all lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    if records:
        steps = [r["step"] for r in records]
        ax.plot(steps, [r["loss"] for r in records], color="black", lw=1.6, label="loss (total)")
        for k, term in enumerate(loss_terms(records)):
            points = [(r["step"], r[term]) for r in records if r.get(term) is not None]
            ax.plot([p[0] for p in points], [p[1] for p in points], lw=1.0, color=plt.get_cmap("tab10")(k % 10),
                    label=term)
        ax2 = ax.twinx()
        ax2.plot(steps, [r["lr"] for r in records], color="tab:gray", linestyle=":", label="learning rate")
        ax2.set_ylabel("learning rate")
        ax2.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
        handles, labels = ax.get_legend_handles_labels()
        more, more_labels = ax2.get_legend_handles_labels()
        ax.legend(handles + more, labels + more_labels, fontsize=7, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no steps logged", ha="center", va="center", transform=ax.transAxes, color="tab:gray")
    ax.set_title(title)
    fig.tight_layout()
    return fig
