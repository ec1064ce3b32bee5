"""ANCE negative refresh: retrieve with the latest checkpoint, drop positives, sample negatives.

The corpus is encoded by the ordinary sharded encode jobs (the checkpoint is a dense system like
any other); this step encodes the training queries, searches the shards exactly (top
``depth``, 200 in ANCE / COCO-DR), removes every document labelled relevant to the query and
samples ``sample`` negatives uniformly without replacement (20 in ANCE / MoDIR / BERM, 30 in
COCO-DR; docs/methods/baselines.md#ance-negative-refresh), kept in rank order. Sampling is seeded per query (its position in
the qrels), so the same checkpoint gives the same file. With ``max_examples`` (the recipe's: its training
reads only the first that many examples) only as many queries are encoded and searched as give that
many examples, in qrels order, in blocks: the file is the first ``max_examples`` lines of the file
that mining every query would write. Output: the negatives JSON-lines format
(system ``ance``) that :class:`zsdr.data.training_set.TrainingSet` reads.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Sequence

import numpy as np

from zsdr.argtypes import device, positive_int
from zsdr.data.formats import read_qrels
from zsdr.data.training_set import Example, write_negatives

log = logging.getLogger(__name__)


def sample_negatives(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], sample: int,
                     seed: int, start: int = 0) -> list[Example]:
    """Per query (qrels order): the run's documents minus its relevant ones, ``sample`` drawn uniformly;
    ``qrels`` may be a block of the split's, from position ``start`` (the position seeds the draw)."""
    out = []
    for i, (qid, judged) in enumerate(qrels.items(), start):
        positives = tuple(d for d, g in judged.items() if g > 0)
        if not positives:
            continue
        relevant = set(positives)
        pool = [d for d in run.get(qid, {}) if d not in relevant]
        if not pool:
            continue
        rng = np.random.default_rng([seed, i])
        picks = np.sort(rng.choice(len(pool), size=min(sample, len(pool)), replace=False))
        out.append(Example(qid, positives, tuple(pool[int(j)] for j in picks)))
    return out


def mine_negatives(model, dataset: str | os.PathLike, shard_dirs: Sequence[str | os.PathLike], out: str | os.PathLike,
                   *, split: str = "train", depth: int = 200, sample: int = 20, seed: int = 42, batch_size: int = 64,
                   device: str | None = None, precision: str | None = None, gpu: bool | None = None,
                   system: str = "ance", show_progress: bool = False, max_examples: int | None = None,
                   **overrides) -> dict:
    from zsdr.models.encoder import load_encoder
    from zsdr.retrieval.encode import encode_judged_queries
    from zsdr.retrieval.search import queries_meta, search_shards

    encoder = load_encoder(model, device=device, precision=precision, **overrides)
    items = list(read_qrels(dataset, split).items())
    examples: list[Example] = []
    start = 0
    while start < len(items) and not (max_examples and len(examples) >= max_examples):
        # the queries still needed, 5% more for those that give no example (no positive, nothing left)
        need = max_examples - len(examples) if max_examples else len(items)
        size = need + need // 20 + 1
        block = dict(items[start:start + size])
        q_ids, q_emb = encode_judged_queries(encoder, dataset, split, batch_size, device, precision, show_progress,
                                             block)
        run = search_shards(q_emb, q_ids, shard_dirs, k=depth, gpu=gpu, show_progress=show_progress,
                            queries_meta=queries_meta(encoder, dataset, split))
        examples += sample_negatives(run, block, sample, seed, start)
        start += len(block)
    if max_examples:
        examples = examples[:max_examples]
    write_negatives(out, examples, system)
    stats = {"queries": start, "of": len(items), "with_negatives": len(examples),
             "mean_negatives": float(np.mean([len(e.negatives) for e in examples])) if examples else 0.0}
    log.info("mined negatives: %s", json.dumps(stats))
    return stats


def cmd_mine(args) -> int:
    stats = mine_negatives(args.model, args.dataset, args.shards, args.out, split=args.split, depth=args.depth,
                           sample=args.sample, seed=args.seed, batch_size=args.batch_size, device=args.device,
                           show_progress=not args.quiet, max_examples=args.max_examples)
    print(json.dumps(stats))
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("mine", help="ANCE negatives: retrieve with a checkpoint, drop positives, sample")
    p.add_argument("model", help="the checkpoint that retrieves: an encoder folder or Hugging Face id")
    p.add_argument("dataset", help="BEIR-layout folder whose training queries are mined")
    p.add_argument("out", help="negatives JSON lines to write (one line per query)")
    p.add_argument("--shards", nargs="+", required=True, help="corpus embedding folders of the same model")
    p.add_argument("--split", default="train", help="qrels split whose judged queries are mined (default: train)")
    p.add_argument("--depth", type=positive_int, default=200,
                   help="documents retrieved per query before positives are dropped (default: 200, as ANCE)")
    p.add_argument("--sample", type=positive_int, default=20,
                   help="negatives sampled per query from what is left (default: 20)")
    p.add_argument("--seed", type=int, default=42, help="seed of the sampling (default: 42)")
    p.add_argument("--max-examples", type=positive_int, default=None,
                   help="stop once this many queries have negatives, in qrels order (a recipe's max_examples: "
                        "the training reads no more); default: every judged query")
    p.add_argument("--batch-size", type=positive_int, default=64, help="queries encoded per batch (default: 64)")
    p.add_argument("--device", type=device, default=None, help="cpu, cuda, cuda:1 (default: CUDA when available)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_mine)
