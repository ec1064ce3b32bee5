"""Teacher scores from a cross-encoder: score every (query, candidate) pair of a negatives file.

Used when a dataset has no published teacher scores (MS MARCO has sentence-transformers'
``cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz``; the mini source domain does not): the
candidates of a query are its positives and its negative pool, and the output is the JSON-lines
format :func:`zsdr.data.training_set.read_teacher_scores` reads. Texts are read by id from the dataset's
memory-mapped store (:func:`zsdr.data.store.open_current`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os

import torch

from zsdr.argtypes import device, nonnegative_int, positive_int
from zsdr.batching import map_by_length, to_device
from zsdr.data.store import ById, open_current
from zsdr.io import DataError
from zsdr.models.encoder import autocast_dtype, resolve_device
from zsdr.data.training_set import iter_negatives, write_teacher_scores

log = logging.getLogger(__name__)


SORT_WINDOW = 64  # batches sorted by length together


def score_pairs(model_dir: str | os.PathLike, dataset: str | os.PathLike, negatives: str | os.PathLike,
                out: str | os.PathLike, *, batch_size: int = 64, max_candidates: int | None = None,
                random_candidates: int = 0, seed: int = 42, device: str | None = None, precision: str = "auto",
                show_progress: bool = False, max_examples: int | None = None) -> int:
    """Score each query's positives and negative pool (first ``max_candidates`` negatives); returns #pairs.

    ``random_candidates`` adds that many corpus documents drawn uniformly per query (seeded by the
    query's position), so a student distilled from these scores also sees easy negatives with large
    teacher margins (which candidates the teacher scores is an open choice: docs/methods/ddr.md#teacher-scores).

    ``max_examples`` (a distilling recipe's: it keeps the first N examples with a scored positive and
    another scored document, :func:`zsdr.data.training_set.build_training_arrays`) scores the lines of the file
    until N of them qualify, and after that only the later lines of queries already met (their pairs add to
    those queries' scores): the N examples such a recipe keeps get exactly the scores the whole file
    would give them, and the other queries are never scored.
    """
    import numpy as np

    from tqdm.auto import tqdm

    from zsdr.models.cross_encoder import CrossEncoder
    from zsdr.training.tasks import passage_text

    model = CrossEncoder.from_pretrained(model_dir).eval()
    target = resolve_device(device)
    model.to(target)
    amp = autocast_dtype(target, precision)
    docs, query_store = open_current(dataset)
    corpus, queries = ById(docs), ById(query_store)
    pairs = []
    scored_so_far: dict[str, set[str]] = {}   # with max_examples: each query's candidates in the corpus
    qualified, lines = 0, 0
    for i, ex in enumerate(iter_negatives(negatives)):
        lines += 1
        full = bool(max_examples) and qualified >= max_examples
        if full and ex.qid not in scored_so_far:
            continue
        negs = ex.negatives[:max_candidates] if max_candidates else ex.negatives
        extra: list[str] = []
        if random_candidates:
            rng = np.random.default_rng([seed, i])
            taken = set(ex.positives) | set(negs)
            drawn = docs.ids(rng.choice(len(docs), size=min(len(docs), random_candidates * 2), replace=False))
            extra = [d for d in drawn if d not in taken][:random_candidates]
        candidates = [did for did in dict.fromkeys((*ex.positives, *negs, *extra)) if did in corpus]
        pairs.extend((ex.qid, did) for did in candidates)
        if max_examples and not full:
            got = scored_so_far.setdefault(ex.qid, set())
            got.update(candidates)
            positives = set(ex.positives)
            qualified += bool(got & positives) and bool(got - positives)
    if not lines:
        raise DataError(negatives, None, "no training examples", "the file is empty")
    if max_examples:
        log.info("scored the queries of the first %d examples with a scored positive and negative (max_examples "
                 "%d): %d of %d lines' queries", qualified, max_examples, len(scored_so_far), lines)
    scores: dict[str, dict[str, float]] = {}
    for q, d in pairs:  # the file's order: each query as first met, its candidates as listed
        scores.setdefault(q, {})[d] = float("nan")
    # scored in batches of similar lengths, fewer padded positions than the file's order gives (a pair's
    # score does not depend on its batch, to float rounding): each window of SORT_WINDOW batches sorted by
    # the characters of query and passage, its texts read once and dropped with it (memory: one window's)
    window = batch_size * SORT_WINDOW
    ctx = (lambda: torch.autocast(target.type, dtype=amp)) if amp is not None else contextlib.nullcontext
    with torch.inference_mode(), tqdm(total=len(pairs), desc="score pairs", disable=not show_progress) as bar:
        for w in range(0, len(pairs), window):
            texts = [(queries[q], passage_text(corpus[d])) for q, d in pairs[w:w + window]]

            def batch(_: int, rows, texts=texts) -> list[float]:
                feats = to_device(model.features([texts[i][0] for i in rows], [texts[i][1] for i in rows]), target)
                with ctx():
                    logits = model(**feats).float().cpu().tolist()
                bar.update(len(rows))
                return logits

            lengths = [len(q) + len(p) for q, p in texts]
            for (q, d), s in zip(pairs[w:w + window], map_by_length(batch, lengths, size=batch_size), strict=True):
                scores[q][d] = s
    write_teacher_scores(out, scores)
    return len(pairs)


def cmd_score_pairs(args) -> int:
    n = score_pairs(args.model, args.dataset, args.negatives, args.out, batch_size=args.batch_size,
                    max_candidates=args.max_candidates, random_candidates=args.random_candidates,
                    device=args.device, show_progress=not args.quiet, max_examples=args.max_examples)
    print(json.dumps({"pairs": n, "out": args.out}))
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("score-pairs", help="teacher scores: a cross-encoder scores (query, candidate) pairs")
    p.add_argument("model", help="cross-encoder folder or Hugging Face id")
    p.add_argument("dataset", help="BEIR folder with the texts")
    p.add_argument("negatives", help="negatives JSON lines: the candidates of each query")
    p.add_argument("out", help="teacher scores, JSON lines")
    p.add_argument("--batch-size", type=positive_int, default=64, help="pairs scored per batch (default: 64)")
    p.add_argument("--max-candidates", type=positive_int, default=None,
                   help="score only the first N negatives of each query's pool (default: all)")
    p.add_argument("--max-examples", type=positive_int, default=None,
                   help="score only what a recipe with this max_examples reads: the queries of the first N "
                        "examples with a scored positive and negative (default: every query)")
    p.add_argument("--random-candidates", type=nonnegative_int, default=0, help="random corpus documents scored per query")
    p.add_argument("--device", type=device, default=None, help="cpu, cuda, cuda:1 (default: CUDA when available)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_score_pairs)
