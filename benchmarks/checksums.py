"""The cost of verifying an embeddings shard's checksum while it is searched, on a paper-scale shard.

    .venv/bin/python benchmarks/checksums.py [--rows 2210456] [--dim 768] [--queries 43] [--rounds 3] [--dir DIR]

The shard is configs/paper.yaml's largest by rows: MS MARCO's 8,841,823 passages in ``dense.dataset_shards``'
4 shards, 2,210,456 x 768 float16 (3.4 GB), written as an encode job writes it (zsdr.retrieval.encode: rows
and ids with their checksums and provenance in meta.json), random rows. The job is the scattered search's
per-shard job (zsdr.retrieval.scatter.search_shard_topk: BEIR's MS MARCO test split, TREC DL 2019, has 43
queries; top 1000), on the CPU. Each round runs it twice, alternating (the machine's speed drifts): as
shipped (the rows hashed as the search reads them, the ids before it starts), and with the row checksum
switched off (RowDigest a no-op). It prints the wall seconds of each, the median difference and its share
of the job, and the seconds of the checksum alone over the shard in the page cache (the same bytes hashed
without the search).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def write_shard(folder: Path, rows: int, dim: int, chunk: int = 100_000) -> Path:
    from zsdr.io import atomic_dir
    from zsdr.retrieval.encode import EMBEDDINGS, FORMAT_VERSION, IDS, META, NpyAppender, _algorithm, row_hasher

    rng = np.random.default_rng(0)
    with atomic_dir(folder, kind="embeddings folder") as tmp:
        ids_digest = row_hasher()
        with NpyAppender(tmp / EMBEDDINGS, dim, "float16") as out, open(tmp / IDS, "wb") as ids:
            for start in range(0, rows, chunk):
                n = min(chunk, rows - start)
                out.append(rng.standard_normal((n, dim), dtype=np.float32) * 0.05)
                text = "".join(f"doc{i}\n" for i in range(start, start + n)).encode()
                ids_digest.update(text)
                ids.write(text)
        meta = {"format_version": FORMAT_VERSION, "kind": "corpus", "count": rows, "dim": dim, "dtype": "float16",
                "shard": 0, "num_shards": 4, "assignment": "range", "start": 0, "stop": rows,
                "corpus": {"dataset": "benchmark", "docs": rows * 4, "sha256": "0" * 64}, "model_sha256": None,
                "checksums": {"algorithm": _algorithm(out.digest), EMBEDDINGS: out.digest.hexdigest(),
                              IDS: ids_digest.hexdigest()}}
        (tmp / META).write_text(json.dumps(meta), encoding="utf-8")
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_210_456)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--queries", type=int, default=43)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the shard is written (default: a temporary folder); a shard "
                                                "of --rows left there by an earlier run is searched again")
    args = ap.parse_args()

    import zsdr.retrieval.encode as encode
    from zsdr.retrieval.encode import write_query_embeddings
    from zsdr.retrieval.scatter import search_shard_topk

    root = Path(args.dir or tempfile.mkdtemp(prefix="zsdr-checksums-"))
    start = time.perf_counter()
    shard = root / "shard"
    try:   # a shard of this size written by an earlier run of this script is searched again
        same = json.loads((shard / "meta.json").read_text())["count"] == args.rows
    except (OSError, ValueError, KeyError):
        same = False
    if not same:
        write_shard(shard, args.rows, args.dim)
    print(f"shard {args.rows} x {args.dim} float16, {(shard / 'embeddings.npy').stat().st_size / 1e9:.2f} GB, "
          f"written in {time.perf_counter() - start:.1f} s")
    meta = json.loads((shard / "meta.json").read_text())
    queries = np.random.default_rng(1).standard_normal((args.queries, args.dim)).astype(np.float32)
    qdir = write_query_embeddings(root / "queries", [f"q{i}" for i in range(args.queries)], queries,
                                  corpus=meta["corpus"], model_sha256=None)

    real = encode.RowDigest

    class Off(real):
        def __init__(self, directory, meta):
            super().__init__(directory, meta)
            self.expected = self.h = None

    def job(verify: bool) -> float:
        encode.RowDigest = real if verify else Off
        try:
            t = time.perf_counter()
            search_shard_topk(qdir, shard, root / "part.npz", k=1000, gpu=False)
            return time.perf_counter() - t
        finally:
            encode.RowDigest = real

    job(False)   # the page cache warm, as the later rounds find it
    on, off = [], []
    for r in range(args.rounds):
        off.append(job(False))
        on.append(job(True))
        print(f"round {r + 1}: search job {off[-1]:.2f} s without the row checksum, {on[-1]:.2f} s with it")
    t = time.perf_counter()
    encode._rows_digest(shard / "embeddings.npy", meta["checksums"]["algorithm"])
    alone = time.perf_counter() - t
    diff = statistics.median(a - b for a, b in zip(on, off))
    print(f"checksum ({meta['checksums']['algorithm']}) of the rows alone: {alone:.2f} s; job median "
          f"{statistics.median(on):.2f} s with, {statistics.median(off):.2f} s without; difference {diff:+.2f} s "
          f"({diff / statistics.median(off):+.1%} of the job)")


if __name__ == "__main__":
    main()
