"""Exact search: zsdr's sharded faiss search against a plain torch matmul + topk.

Random unit vectors (``--docs`` x ``--dim`` documents in ``--shards`` modulo shards stored as
float16 or float32, ``--queries`` queries). zsdr reads the shards memory-mapped, one bounded block
at a time, and merges a running top-k; the peer holds the whole matrix in memory as float32 and
runs ``torch.topk(queries @ docs.T)`` in query batches. Both in this process, same threads, best of
``--repeat``; prints the seconds of each, the ratio (zsdr / torch) and whether the results agree.

    .venv/bin/python benchmarks/search_vs_matmul.py [--docs 100000 --dim 384 --queries 1000 --k 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from zsdr.retrieval.encode import NpyAppender
from zsdr.retrieval.search import search_shards


def write_shards(root: Path, docs: np.ndarray, shards: int, dtype: str) -> list[Path]:
    import json

    dirs = []
    for s in range(shards):
        d = root / f"shard-{s}"
        d.mkdir()
        part = docs[s::shards]
        with NpyAppender(d / "embeddings.npy", docs.shape[1], dtype) as w:
            w.append(part)
        (d / "ids.txt").write_text("".join(f"d{i}\n" for i in range(s, len(docs), shards)))
        (d / "meta.json").write_text(json.dumps({"count": len(part), "dim": docs.shape[1], "dtype": dtype,
                                                 "shard": s, "num_shards": shards, "assignment": "modulo"}))
        dirs.append(d)
    return dirs


def torch_topk(queries: np.ndarray, docs: np.ndarray, k: int, device: str, batch: int = 256):
    import torch

    d = torch.from_numpy(docs).to(device)
    scores, rows = [], []
    with torch.inference_mode():
        for start in range(0, len(queries), batch):
            q = torch.from_numpy(queries[start:start + batch]).to(device)
            s, i = torch.topk(q @ d.T, k, dim=1)
            scores.append(s.cpu().numpy())
            rows.append(i.cpu().numpy())
    return np.concatenate(scores), np.concatenate(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--dtype", choices=["float16", "float32"], default="float32",
                        help="shard storage; float16 halves the disk and the agreement is then up to rounding")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gpu", choices=["auto", "yes", "no"], default="no",
                        help="faiss on the GPU (the torch peer then also runs on CUDA)")
    args = parser.parse_args(argv)

    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((args.docs, args.dim), dtype=np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    qids = [f"q{i}" for i in range(args.queries)]
    stored = docs.astype(args.dtype).astype(np.float32)  # what both sides search
    gpu = {"auto": None, "yes": True, "no": False}[args.gpu]
    on_gpu = gpu is not False and faiss.get_num_gpus() > 0
    device = "cuda" if on_gpu and torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        dirs = write_shards(Path(tmp), stored, args.shards, args.dtype)
        t_zsdr = t_torch = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            run = search_shards(queries, qids, dirs, k=args.k, gpu=gpu)
            t_zsdr = min(t_zsdr, time.perf_counter() - start)
            start = time.perf_counter()
            scores, rows = torch_topk(queries, stored, args.k, device)
            t_torch = min(t_torch, time.perf_counter() - start)
    same_sets = sum(set(run[q]) == {f"d{j}" for j in rows[i]} for i, q in enumerate(qids))
    same_order = sum(list(run[q]) == [f"d{j}" for j in rows[i]] for i, q in enumerate(qids))
    diff = max(float(np.abs(np.array(list(run[q].values())) - scores[i]).max()) for i, q in enumerate(qids))
    # Where the orders differ, the two documents' scores differ only by float rounding (near-ties):
    # the largest score gap between the documents the two rankings put at a differing rank.
    gap = 0.0
    for i, q in enumerate(qids):
        exact = queries[i] @ stored.T
        for rank, (doc, j) in enumerate(zip(run[q], rows[i])):
            if doc != f"d{j}":
                gap = max(gap, abs(float(exact[int(doc[1:])]) - float(exact[j])))
    print(f"{args.docs} x {args.dim} docs ({args.dtype}, {args.shards} shards), {args.queries} queries, "
          f"k={args.k}, {args.threads} threads, best of {args.repeat}")
    print(f"zsdr search_shards (faiss IndexFlatIP, {'GPU' if on_gpu else 'CPU'})  {t_zsdr:8.2f} s")
    print(f"torch matmul + topk (all in memory, {device})     {t_torch:8.2f} s")
    print(f"time ratio zsdr / torch: {t_zsdr / t_torch:.2f}")
    print(f"agreement: same top-k set {same_sets}/{len(qids)}, same order {same_order}/{len(qids)}, "
          f"max |score diff| {diff:.2e}; rank swaps only between near-ties (score gap <= {gap:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
