"""Where a mini training step's time goes: the project's trainer against the model's own ceiling.

    .venv/bin/python benchmarks/mini_training.py [--steps 60] [--threads 1]

Builds the mini benchmark's source domain and its tiny RoBERTa (config.yaml: hidden 64, 2 layers) in a
temporary folder and trains the DPR shape of the mini recipes (32 queries, each with its positive and one
hard negative, mean pooling, cosine x 20, pairwise NLL, LAMB) for ``--steps`` steps, at the backbone's
dropout 0.1 and at 0.0 (config.yaml's mini `training.dropout`), two ways:

* zsdr: ``Trainer.train`` as a training job runs it (sampling, reading the texts from the store,
  tokenising and collating every batch on the side thread, forward, backward, clipping, LAMB, the
  schedule, logging, and the model and its loss plot written at the end);
* ceiling: the same task's forward, backward, clipping and LAMB step on batches built beforehand (no
  sampling, tokenising or collating inside the timed loop, no logging, no checkpoint).

It prints steps/s of both (the trainer's from its log: the loop alone) and their ratio: a ratio near 1
means the step is the model's arithmetic, not the trainer's Python around it; and the seconds the
training spent around its loop (building the task, writing the model and its loss plot; the first row
also pays for importing the model classes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def prepare(root: Path) -> Path:
    import yaml

    from zsdr.data.mini import generate
    from zsdr.data.store import build_store
    from zsdr.models.tiny import build_tiny_backbone

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    mini = dict(config["mini"])
    mini["domains"] = [d for d in mini["domains"] if d["role"] == "source"]
    generate(mini, root / "data")
    source = root / "data" / mini["domains"][0]["name"]
    build_store(source)
    build = dict(config["backbones"]["tiny-roberta"]["build"])
    kind = build.pop("kind")
    vocab = build.pop("vocab_size")
    build_tiny_backbone(kind, [source], root / "tiny-roberta", build, vocab_size=vocab, seed=0)
    return source


def spec(root: Path, source: Path, name: str, dropout: float, steps: int) -> dict:
    return {"kind": "bi_encoder", "init": str(root / "tiny-roberta"), "dataset": str(source),
            "negatives": str(source / "negatives.jsonl"), "systems": None, "teacher": None,
            "out": str(root / "out" / name), "checkpoint_dir": str(root / "ckpt" / name),
            "encoder": {"pooling": "mean", "similarity": "cosine", "query_max_length": 32, "doc_max_length": 128},
            "loss": "pairwise_nll", "negatives_per_query": 1, "scale": 20.0, "dropout": dropout,
            "train": {"batch_size": 32, "max_steps": steps, "lr": 1e-2, "optimizer": "lamb", "warmup_steps": 20,
                      "seed": 13, "save_every": 10 * steps, "log_every": 10}}


def zsdr_steps_per_s(s: dict) -> tuple[float, float]:
    """Steps/s of the training loop (from its log: each record's examples/s over its window of steps) and
    the seconds ``run_spec`` spent around the loop (building the task, the final save and plot)."""
    from zsdr.training.launch import run_spec

    start = time.perf_counter()
    run_spec(s, cpu=True, progress=False)
    seconds = time.perf_counter() - start
    log = [json.loads(x) for x in (Path(s["out"]) / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == s["train"]["max_steps"], log[-1]
    loop, done = 0.0, 0
    for rec in log:
        loop += (rec["step"] - done) * s["train"]["batch_size"] / rec["examples_per_s"]
        done = rec["step"]
    return done / loop, seconds - loop


def ceiling_steps_per_s(s: dict) -> float:
    import torch

    from zsdr.training.recipes import build_task
    from zsdr.training.config import TrainConfig, build_optimizer, build_schedule

    cfg = TrainConfig.from_dict(s["train"])
    task = build_task(s)
    steps = cfg.max_steps
    size = cfg.batch_size
    batches = [task.make_batch(list(range(i * size, (i + 1) * size)), 0) for i in range(min(steps, 20))]
    optimizer = build_optimizer(task.parameters(), cfg)
    schedule = build_schedule(optimizer, cfg, steps)
    task.train()
    start = time.perf_counter()
    for step in range(steps):
        loss, _ = task(batches[step % len(batches)])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(task.parameters(), cfg.max_grad_norm)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    return steps / (time.perf_counter() - start)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a mini training job has 1)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = prepare(root)
        rows = []
        for dropout in (0.1, 0.0):
            s = spec(root, source, f"dpr-{dropout}", dropout, args.steps)
            ours, around = zsdr_steps_per_s(s)
            ceiling = ceiling_steps_per_s(spec(root, source, f"ceiling-{dropout}", dropout, args.steps))
            rows.append((dropout, ours, ceiling, around))
        print(f"mini DPR step (32 queries x (1 + 1) passages, tiny RoBERTa 64 x 2), {args.steps} steps, "
              f"{args.threads} thread(s)")
        print(f"{'dropout':>8} {'zsdr steps/s':>13} {'ceiling steps/s':>16} {'zsdr / ceiling':>15} {'s around the loop':>18}")
        for dropout, ours, ceiling, around in rows:
            print(f"{dropout:>8} {ours:>13.2f} {ceiling:>16.2f} {ours / ceiling:>15.2f} {around:>18.1f}")
        print(f"dropout 0.0 vs 0.1, zsdr: {rows[1][1] / rows[0][1]:.2f}x the steps/s")


if __name__ == "__main__":
    main()
