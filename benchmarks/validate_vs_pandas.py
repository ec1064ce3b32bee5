"""Cost of full validation: ``zsdr.data.formats.validate_beir`` against a plain pandas load.

The peer reads the same three files the way a notebook would (``pandas.read_json(lines=True)`` for
corpus and queries, ``pandas.read_csv`` for every qrels split) and checks nothing. zsdr decodes
strictly, checks every record, every id for duplicates and every qrels row against the known ids.
Both run in this process, on the same data, best of ``--repeat`` runs; the ratio is zsdr / pandas.

    .venv/bin/python benchmarks/validate_vs_pandas.py [DATASET_DIR] [--repeat 3]

DATASET_DIR defaults to the BEIR SciFact copy in ../shared/data (or $ZSDR_SHARED_DATA).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pandas as pd

from zsdr.data.formats import qrels_files, validate_beir


def default_dataset() -> Path:
    root = os.environ.get("ZSDR_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
    return Path(root) / "beir" / "scifact"


def pandas_load(directory: Path) -> tuple[int, int, dict[str, int]]:
    corpus = pd.read_json(directory / "corpus.jsonl", lines=True, dtype=False)
    queries = pd.read_json(directory / "queries.jsonl", lines=True, dtype=False)
    qrels = {split: len(pd.read_csv(path, sep="\t")) for split, path in qrels_files(directory).items()}
    return len(corpus), len(queries), qrels


def zsdr_validate(directory: Path) -> tuple[int, int, dict[str, int]]:
    counts = validate_beir(directory)
    return counts.docs, counts.queries, dict(counts.qrels)


def best_of(fn, directory: Path, repeat: int) -> tuple[float, tuple]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn(directory)
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", type=Path, default=default_dataset())
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if not (args.dataset / "corpus.jsonl").is_file():
        print(f"{args.dataset}: no corpus.jsonl (pass a BEIR-layout folder)", file=sys.stderr)
        return 2
    t_pandas, peer = best_of(pandas_load, args.dataset, args.repeat)
    t_zsdr, ours = best_of(zsdr_validate, args.dataset, args.repeat)
    if ours != peer:
        print(f"counts differ: zsdr {ours} vs pandas {peer}", file=sys.stderr)
        return 1
    docs, queries, qrels = ours
    print(f"dataset   {args.dataset.name}: {docs} docs, {queries} queries, qrels {qrels}")
    print(f"pandas    {t_pandas:.3f} s  (load only, no checks)")
    print(f"zsdr      {t_zsdr:.3f} s  (strict decode + full validation)")
    print(f"ratio     zsdr / pandas = {t_zsdr / t_pandas:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
