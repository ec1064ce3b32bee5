"""Exact checkpoints and model snapshots of a training run.

A checkpoint (``<checkpoint_dir>/step-NNNNNNNNN/``: model, optimizer, scheduler, loss scaler and every
process's RNG states, plus the step, the settings' fingerprint and the training time) is written
atomically; one written for other settings or another number of processes is ignored. Snapshots
(``snapshots/step-NNNNNNNNN/`` and ``snapshots.json``) are the model every ``snapshot_every`` steps,
staged beside the checkpoints and moved into the output with the final model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from torch import nn

from zsdr.io import atomic_write, share_tree

# The trainer's logger: what happens to a run's checkpoints belongs to its training log.
log = logging.getLogger("zsdr.training.trainer")

STATE_FILE = "trainer_state.json"
SNAPSHOT_DIR = "snapshots"
SNAPSHOT_FILE = "snapshots.json"


def fingerprint_of(settings: dict, files: list[str | os.PathLike] = ()) -> str:
    """A digest of the settings and of the inputs' sizes and modification times."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for f in files:
        st = os.stat(f)
        h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def checkpoints(ckpt_dir: Path | None) -> list[Path]:
    """The complete checkpoints in ``ckpt_dir``, oldest first."""
    if ckpt_dir is None or not ckpt_dir.is_dir():
        return []
    return sorted(p for p in ckpt_dir.glob("step-*") if (p / STATE_FILE).is_file())


def latest_checkpoint(ckpt_dir: Path | None, fingerprint: str, world: int) -> tuple[Path, int, float] | None:
    """(path, step, train_seconds) of the newest checkpoint written for these settings and processes."""
    for path in reversed(checkpoints(ckpt_dir)):
        state = json.loads((path / STATE_FILE).read_text())
        if state.get("fingerprint") == fingerprint and state.get("world") == world:
            return path, int(state["step"]), float(state.get("train_seconds", 0.0))
        log.warning("ignoring checkpoint %s: written for other settings", path)
    return None


def save_checkpoint(acc, ckpt_dir: Path, step: int, fingerprint: str, world: int, train_seconds: float = 0.0) -> None:
    """Write the checkpoint of ``step`` atomically (every process takes part) and remove the older ones."""
    final = ckpt_dir / f"step-{step:09d}"
    tmp = ckpt_dir / f".step-{step:09d}.tmp"
    if acc.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    acc.wait_for_everyone()
    acc.save_state(str(tmp), safe_serialization=True)
    acc.wait_for_everyone()
    if acc.is_main_process:
        (tmp / STATE_FILE).write_text(json.dumps(
            {"step": step, "fingerprint": fingerprint, "world": world,
             "train_seconds": train_seconds}) + "\n")
        share_tree(tmp)  # safetensors writes 0600: the team may read checkpoints like any output
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in checkpoints(ckpt_dir):
            if old != final:
                shutil.rmtree(old, ignore_errors=True)
    acc.wait_for_everyone()


def snapshot_root(ckpt_dir: Path | None, out_dir: Path) -> Path:
    """Where snapshots wait for the end of training: in the checkpoint directory (kept when a
    run is killed) or, without one, beside the output like the log file."""
    if ckpt_dir is not None:
        return ckpt_dir / SNAPSHOT_DIR
    return out_dir.parent / f".{out_dir.name}.{SNAPSHOT_DIR}"


def resume_snapshots(root: Path, every: int | None, start: int) -> list[dict]:
    """The staged snapshots up to step ``start``; the rest (a killed run's after its checkpoint,
    an unfinished one, a stale run's) are removed and will be taken again."""
    if not every or start == 0:
        shutil.rmtree(root, ignore_errors=True)
        return []
    listed = []
    if (root / SNAPSHOT_FILE).is_file():
        listed = json.loads((root / SNAPSHOT_FILE).read_text(encoding="utf-8"))
    kept = [e for e in listed if e["step"] <= start and (root / snapshot_name(e["step"])).is_dir()]
    expected = set(range(every, start + 1, every))
    if {e["step"] for e in kept} != expected:
        log.warning("snapshots of steps %s are missing from %s; the curve will lack them",
                    sorted(expected - {e["step"] for e in kept}), root)
    names = {snapshot_name(e["step"]) for e in kept}
    for p in root.iterdir() if root.is_dir() else ():
        if p.name == SNAPSHOT_FILE or p.name in names:
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    with atomic_write(root / SNAPSHOT_FILE) as fh:
        fh.write(json.dumps(kept, indent=1) + "\n")
    return kept


def save_snapshot(root: Path, model_task: nn.Module, step: int, train_seconds: float, snapshots: list[dict]) -> None:
    """Save the model of ``step`` under ``root`` and list it in ``snapshots.json``."""
    name = snapshot_name(step)
    tmp = root / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model_task.save(tmp)
    share_tree(tmp)
    shutil.rmtree(root / name, ignore_errors=True)
    os.replace(tmp, root / name)
    snapshots.append({"step": step, "train_seconds": train_seconds, "path": f"{SNAPSHOT_DIR}/{name}"})
    with atomic_write(root / SNAPSHOT_FILE) as fh:
        fh.write(json.dumps(snapshots, indent=1) + "\n")


def publish_snapshots(root: Path, out_tmp: Path, snapshots: list[dict], step: int, train_seconds: float) -> None:
    """Move the staged snapshots into the output folder being written and list them with the final model."""
    dest = out_tmp / SNAPSHOT_DIR
    dest.mkdir(parents=True, exist_ok=True)
    for e in snapshots:
        shutil.move(str(root / snapshot_name(e["step"])), str(dest / snapshot_name(e["step"])))
    final = [*snapshots, {"step": step, "train_seconds": train_seconds, "path": "."}]
    (dest / SNAPSHOT_FILE).write_text(json.dumps(final, indent=1) + "\n", encoding="utf-8")


def snapshot_name(step: int) -> str:
    return f"step-{step:09d}"
