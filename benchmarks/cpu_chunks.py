"""A mini training on the CPU: whole padded batches against chunks of similar lengths (training.cpu_chunk_tokens).

    .venv/bin/python benchmarks/cpu_chunks.py [--steps 100] [--rounds 3] [--chunk-tokens 2048] [--negatives 1]

Builds the mini benchmark's source domain and its tiny RoBERTa (as benchmarks/mini_training.py does) and trains
the DPR shape of the mini recipes (32 queries, each with its positive and ``--negatives`` hard negatives: 64
passages of 44-91 tokens a batch with one, 128 with three as DDR's mini recipes; mean pooling, cosine x 20,
pairwise NLL, LAMB, dropout 0) with the project's trainer, two
ways, one after the other in each round (the machine's speed drifts; alternating keeps the comparison fair):

* whole: ``cpu_chunk_tokens`` null, every batch padded to its longest text and run in one pass;
* chunks: ``cpu_chunk_tokens`` N (config.yaml's mini setting 2048), each batch cut into chunks of similar
  lengths, each padded to its own longest text (zsdr.models.inference.run_in_length_chunks).

It prints the training loop's CPU seconds per step (process time, one thread, as a mini training job) of each
round, the median of each way and their ratio, and the largest difference between the two ways' final losses
(equal to float rounding: the chunks change no number, only the order of sums).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def loop_cpu_per_step(s: dict) -> tuple[float, float]:
    """CPU seconds per step of one training run (its whole ``run_spec`` less a run of 1 step, so building the
    task and writing the model cancel out) and the run's last logged loss."""
    from zsdr.training.launch import run_spec

    def cpu(spec: dict) -> float:
        start = time.process_time()
        run_spec(spec, cpu=True, progress=False)
        return time.process_time() - start

    short = json.loads(json.dumps(s))
    short["out"] += "-short"
    short["checkpoint_dir"] += "-short"
    short["train"]["max_steps"] = 1
    steps = s["train"]["max_steps"]
    per_step = (cpu(s) - cpu(short)) / (steps - 1)
    log = [json.loads(x) for x in (Path(s["out"]) / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == steps, log[-1]
    return per_step, log[-1]["loss"]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--chunk-tokens", type=int, default=2048)
    ap.add_argument("--negatives", type=int, default=1, help="hard negatives per query (DDR's mini recipes: 3)")
    args = ap.parse_args(argv)
    import torch

    from mini_training import prepare, spec

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = prepare(root)
        times: dict[str, list[float]] = {"whole": [], "chunks": []}
        losses: dict[str, list[float]] = {"whole": [], "chunks": []}
        for r in range(args.rounds):
            for way, chunk in (("whole", None), ("chunks", args.chunk_tokens)):
                s = spec(root, source, f"{way}-{r}", 0.0, args.steps)
                s["train"]["cpu_chunk_tokens"] = chunk
                s["negatives_per_query"] = args.negatives
                per_step, loss = loop_cpu_per_step(s)
                times[way].append(per_step)
                losses[way].append(loss)
                print(f"round {r + 1} {way:>6}: {per_step * 1000:7.1f} ms CPU a step, final loss {loss:.5f}", flush=True)
        whole, chunks = statistics.median(times["whole"]), statistics.median(times["chunks"])
        print(f"mini DPR step (32 queries x (1 + {args.negatives}) passages, tiny RoBERTa 64 x 2, dropout 0), "
              f"{args.steps} steps, "
              f"1 thread, median of {args.rounds} rounds")
        print(f"whole batches {whole * 1000:.1f} ms, chunks of <= {args.chunk_tokens} tokens {chunks * 1000:.1f} ms: "
              f"ratio {chunks / whole:.2f}")
        print(f"final losses: whole {losses['whole'][0]:.6f}, chunks {losses['chunks'][0]:.6f} "
              f"(difference {abs(losses['whole'][0] - losses['chunks'][0]):.1e})")


if __name__ == "__main__":
    main()
