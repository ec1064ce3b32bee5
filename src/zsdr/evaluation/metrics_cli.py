"""``zsdr evaluate``: score a TREC run against qrels and print the metrics as JSON (zsdr.evaluation.metrics)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from zsdr.evaluation.metrics import DEFAULT_METRICS, MISSING_CONVENTIONS, evaluate_many, parse_metrics
from zsdr.io import DataError


def cmd_evaluate(args) -> int:
    from zsdr.argtypes import UsageError

    try:
        metrics = parse_metrics(args.metrics)
    except ValueError as exc:
        raise DataError(None, None, f"--metrics: {exc}", "e.g. --metrics ndcg@10,recall@100,mrr@10,hole@10") from None
    if Path(args.run).is_dir():
        raise DataError(args.run, None, "is a folder, not a run file", "pass a TREC run file to --run")
    if args.split is not None and Path(args.qrels).is_file():
        raise UsageError(f"argument --split: applies only to a dataset folder given to --qrels; {args.qrels} is a "
                         "qrels file (fix: drop --split, or pass the dataset folder)")
    job = {"qrels": args.qrels, "split": args.split or "test", "run": args.run, "metrics": [m.name for m in metrics],
           "ignore_identical_ids": args.ignore_identical_ids, "missing": args.missing}
    if args.per_query:
        job["out"] = args.per_query
    result = evaluate_many([job])[0]
    print(json.dumps({m.name: _finite(result["aggregate"][m.name]) for m in metrics}))
    return 0


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _metrics_arg(value: str) -> str:
    """``--metrics``: checked by argparse, so a typo is a usage error (exit 2) before anything is read."""
    import argparse

    try:
        parse_metrics(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (e.g. ndcg@10,recall@100,mrr@10,hole@10)") from None
    return value


def register_cli(subparsers) -> None:
    """Add ``evaluate`` to the ``zsdr`` command."""
    p = subparsers.add_parser("evaluate", help="score a TREC run against qrels; print the metrics as JSON")
    p.add_argument("--qrels", required=True,
                   help="BEIR dataset folder (with --split), BEIR qrels tsv, or TREC qrels (detected by content)")
    p.add_argument("--run", required=True, help="TREC run file 'qid Q0 docid rank score tag'")
    p.add_argument("--metrics", type=_metrics_arg, default=",".join(DEFAULT_METRICS),
                   help=f"comma-separated (default {','.join(DEFAULT_METRICS)})")
    p.add_argument("--split", default=None, help="qrels split of a dataset folder given to --qrels (default: test)")
    p.add_argument("--ignore-identical-ids", action="store_true",
                   help="drop retrieved documents whose id is the query id (BEIR: ArguAna, Quora)")
    p.add_argument("--missing", choices=MISSING_CONVENTIONS, default="zero",
                   help="queries the run lacks: score 0 (BEIR, trec_eval -c; default) or leave out (trec_eval)")
    p.add_argument("--per-query", metavar="OUT.json", default=None,
                   help="also write the full metrics JSON (aggregate and per-query) here")
    p.set_defaults(func=cmd_evaluate)
