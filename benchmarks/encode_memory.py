"""Peak memory of corpus encoding at two corpus sizes: zsdr's streamed shard encoder against a naive load.

A tiny BERT (hidden 64, 2 layers, the mini scale's shape) encodes generated BEIR corpora of
``--sizes`` documents (20 to 120 words each). Each run is a fresh subprocess that reports its own
peak RSS (``ru_maxrss``):

* zsdr: ``encode_corpus_shard`` (streams ``corpus.jsonl`` in chunks of 10k, appends to the .npy);
* naive peer: ``read_corpus`` + one ``encode_docs`` over every document + ``np.save``.

Prints both peaks per size and the ratio largest / smallest size for each; a ratio near 1 means
memory does not grow with the corpus.

    .venv/bin/python benchmarks/encode_memory.py [--sizes 10000 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TINY = dict(kind="bert", hidden=64, layers=2, heads=2, intermediate=256, max_length=128)


def generate(path: Path, docs: int, seed: int = 0) -> Path:
    from zsdr.data.formats import BeirWriter

    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(3000)]
    with BeirWriter(path) as w:
        for i in range(docs):
            title = " ".join(rng.choices(vocab, k=rng.randint(0, 6)))
            w.add_doc(f"doc{i}", title, " ".join(rng.choices(vocab, k=rng.randint(20, 120))))
        w.add_query("q0", "w1 w2 w3")
        w.add_qrel("test", "q0", "doc0", 1)
    return path


def child(mode: str, model: str, dataset: str, out: str) -> None:
    import numpy as np
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    start = time.perf_counter()
    if mode == "zsdr":
        from zsdr.retrieval.encode import encode_corpus_shard

        encode_corpus_shard(model, dataset, out, dtype="float16", batch_size=64, show_progress=False, max_length=128)
        count = json.loads((Path(out) / "meta.json").read_text())["count"]
    else:
        from zsdr.data.formats import read_corpus
        from zsdr.models.encoder import Encoder

        corpus = read_corpus(dataset)
        enc = Encoder.from_pretrained(model, max_length=128)
        emb = enc.encode_docs(list(corpus.values()), batch_size=64)
        np.save(out, emb.astype(np.float16))
        count = len(emb)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"count": count, "peak_mb": round(peak_mb, 1), "seconds": round(time.perf_counter() - start, 1)}))


def run_child(mode: str, model: Path, dataset: Path, out: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", mode, str(model), str(dataset), str(out)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} on {dataset.name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:6])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--skip-naive", action="store_true", help="measure zsdr only")
    args = parser.parse_args(argv)

    from zsdr.models.tiny import build_tiny_backbone

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        train = generate(tmp / "train", 2000, seed=99)
        size = {k: v for k, v in TINY.items() if k != "kind"}
        build_tiny_backbone(TINY["kind"], [train], tmp / "model", size, vocab_size=4000, seed=1)
        rows = []
        for n in args.sizes:
            dataset = generate(tmp / f"corpus-{n}", n)
            z = run_child("zsdr", tmp / "model", dataset, tmp / f"out-{n}")
            naive = None if args.skip_naive else run_child("naive", tmp / "model", dataset, tmp / f"naive-{n}.npy")
            corpus_mb = (dataset / "corpus.jsonl").stat().st_size / 2**20
            rows.append((n, corpus_mb, z, naive))
    print(f"{'docs':>8} {'corpus MB':>10} {'zsdr peak MB':>13} {'zsdr s':>7} {'naive peak MB':>14} {'naive s':>8}")
    for n, corpus_mb, z, naive in rows:
        nv = (f"{naive['peak_mb']:14.0f} {naive['seconds']:8.1f}" if naive else f"{'-':>14} {'-':>8}")
        print(f"{n:8d} {corpus_mb:10.1f} {z['peak_mb']:13.0f} {z['seconds']:7.1f} {nv}")
    first, last = rows[0], rows[-1]
    print(f"peak ratio {last[0]} / {first[0]} docs: zsdr {last[2]['peak_mb'] / first[2]['peak_mb']:.2f}"
          + ("" if args.skip_naive else f", naive {last[3]['peak_mb'] / first[3]['peak_mb']:.2f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
