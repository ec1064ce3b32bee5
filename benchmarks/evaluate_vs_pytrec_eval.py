"""Run evaluation: zsdr (``zsdr.evaluation.metrics``, ranx kernels) against pytrec_eval, same runs, one run.

Data: the BEIR SciFact test qrels and ``--runs`` synthetic TREC runs (seeded numpy, depth ``--depth``
per test query: the judged documents plus random corpus documents, scores on a coarse grid so ties
are common), written to a temporary folder. Metrics: ndcg@10, recall@100, recall@1000, mrr@10; the
pytrec_eval peer computes ndcg_cut_10, recall_100, recall_1000, and recip_rank on each ranking cut
to its top 10 in trec_eval's order (score desc, docid desc); means over every query of the qrels
(trec_eval -c: a query judged only non-relevant or missing from the run scores 0). Both sides read
the qrels and run files themselves.

Measured (wall clock, ``time.perf_counter``):

1. one process per run, as a naive pipeline does it: for the first ``--per-process`` runs, a fresh
   ``python -m zsdr evaluate --qrels DATASET --split test --run R --metrics ...`` against a fresh
   interpreter running a small pytrec_eval script on the same files (interpreter start, imports and
   numba's cache load included; one untimed warm-up process of each kind runs first, so the numba
   cache in NUMBA_CACHE_DIR is warm).
2. batched: one fresh process calling ``evaluate_many`` on all runs (qrels parsed once) against one
   fresh process running pytrec_eval on all runs (qrels parsed once, evaluators built once); and the
   same two in this process (no interpreter start; ``evaluate_many`` after one warm-up call), best of
   ``--repeat``.

Every result of every side is compared (all metrics, all runs, 1e-6); any disagreement exits 1.

    .venv/bin/python benchmarks/evaluate_vs_pytrec_eval.py [--dataset DIR] [--runs 20] [--per-process 3]

DATASET defaults to ../shared/data/beir/scifact next to the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
METRICS = ["ndcg@10", "recall@100", "recall@1000", "mrr@10"]
TOLERANCE = 1e-6

# The peer, as a pipeline would write it with pytrec_eval: run as a script (argv: metrics-free,
# QRELS_TSV RUN...; prints one JSON line of aggregates per run) and exec'd here for the in-process timing.
PYTREC_SCRIPT = r'''
import json
import sys

import pytrec_eval

TREC = {"ndcg@10": "ndcg_cut_10", "recall@100": "recall_100", "recall@1000": "recall_1000"}


def read_qrels(path):
    qrels = {}
    with open(path) as fh:
        next(fh)                                   # BEIR header: query-id corpus-id score
        for line in fh:
            if line.strip():
                q, d, g = line.split("\t")
                qrels.setdefault(q, {})[d] = int(g)
    return qrels


def read_run(path):
    run = {}
    with open(path) as fh:
        for line in fh:
            if line.strip():
                q, _, d, _, s, _ = line.split()
                run.setdefault(q, {})[d] = float(s)
    return run


def top(ranking, k):
    """trec_eval's order (score desc, docid desc), cut at k."""
    return dict(sorted(ranking.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k])


def prepare(qrels_path):
    qrels = read_qrels(qrels_path)
    judged = sorted(qrels)
    full = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values()))
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
    return judged, full, rr


def evaluate(prepared, run_path):
    judged, full, rr = prepared
    run = read_run(run_path)
    scores = full.evaluate(run)
    tops = rr.evaluate({q: top(r, 10) for q, r in run.items()})
    out = {m: sum(scores.get(q, {}).get(t, 0.0) for q in judged) / len(judged) for m, t in TREC.items()}
    out["mrr@10"] = sum(tops.get(q, {}).get("recip_rank", 0.0) for q in judged) / len(judged)
    return out


def evaluate_all(qrels_path, run_paths):
    prepared = prepare(qrels_path)
    return [evaluate(prepared, r) for r in run_paths]


if __name__ == "__main__":
    for result in evaluate_all(sys.argv[1], sys.argv[2:]):
        print(json.dumps(result))
'''

# zsdr batched: evaluate_many over all runs (argv: DATASET SPLIT METRICS RUN...), one JSON line per run.
ZSDR_BATCH_SCRIPT = r'''
import json
import sys

from zsdr.evaluation.metrics import evaluate_many

dataset, split, metrics, runs = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4:]
for result in evaluate_many([{"qrels": dataset, "split": split, "run": r, "metrics": metrics} for r in runs]):
    print(json.dumps(result["aggregate"]))
'''


def default_dataset() -> Path:
    return REPO.parent / "shared" / "data" / "beir" / "scifact"


def read_ids(dataset: Path) -> tuple[list[str], dict[str, dict[str, int]]]:
    from zsdr.evaluation.metrics import load_qrels

    with open(dataset / "corpus.jsonl", encoding="utf-8") as fh:
        corpus = [json.loads(line)["_id"] for line in fh if line.strip()]
    return corpus, load_qrels(dataset, "test")


def write_runs(folder: Path, corpus: list[str], qrels: dict[str, dict[str, int]], n: int, depth: int,
               seed: int) -> list[Path]:
    """``n`` TREC runs: per query its judged docs + random corpus docs up to ``depth``, tied scores.

    Judged documents absent from the corpus cannot be retrieved: they are not written (main reports them).
    """
    rng = np.random.default_rng(seed)
    ids = np.array(corpus, dtype=object)
    position = {d: i for i, d in enumerate(corpus)}
    # rank of each doc id in plain string order: sorting by it = sorting by the id (trec_eval's tie-break)
    string_rank = np.empty(len(corpus), dtype=np.int64)
    string_rank[np.argsort(np.array(corpus))] = np.arange(len(corpus))
    paths = []
    for r in range(n):
        lo = int(rng.integers(0, 450))                       # how far up this run puts the judged docs
        lines = []
        for q in sorted(qrels):
            judged = np.array([position[d] for d in qrels[q] if d in position], dtype=np.int64)
            mask = np.ones(len(corpus), dtype=bool)
            mask[judged] = False
            others = rng.permutation(np.flatnonzero(mask))[: depth - len(judged)]
            docs = np.concatenate((judged, others))
            scores = np.concatenate((rng.integers(lo, 500, len(judged)), rng.integers(0, 500, len(others))))
            order = np.lexsort((-string_rank[docs], -scores))  # score desc, then docid desc
            docs, scores = docs[order], scores[order] / 100
            lines.extend(f"{q} Q0 {d} {i} {s:.2f} synth{r}\n" for i, (d, s) in enumerate(zip(ids[docs], scores), 1))
        path = folder / f"run{r:02d}.trec"
        path.write_text("".join(lines))
        paths.append(path)
    return paths


def timed_process(args: list[str], env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} ... failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def max_diff(a: list[dict], b: list[dict]) -> float:
    if len(a) != len(b):
        raise RuntimeError(f"result counts differ: {len(a)} vs {len(b)}")
    return max(abs(x[m] - y[m]) for x, y in zip(a, b) for m in METRICS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=default_dataset(),
                        help="BEIR dataset folder with corpus.jsonl and qrels/test.tsv (default: SciFact in ../shared)")
    parser.add_argument("--runs", type=int, default=20, help="synthetic runs to evaluate (default 20)")
    parser.add_argument("--depth", type=int, default=1000, help="documents per query in each run (default 1000)")
    parser.add_argument("--per-process", type=int, default=3,
                        help="runs timed as one fresh process each, per side (default 3)")
    parser.add_argument("--repeat", type=int, default=1, help="in-process timings: best of this many (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    qrels_tsv = args.dataset / "qrels" / "test.tsv"
    if not (args.dataset / "corpus.jsonl").is_file() or not qrels_tsv.is_file():
        print(f"{args.dataset}: no corpus.jsonl or qrels/test.tsv; pass a BEIR-layout folder with --dataset",
              file=sys.stderr)
        return 2
    if args.runs < 1 or args.depth < 1 or not 1 <= args.per_process <= args.runs or args.repeat < 1:
        parser.error("need --runs >= 1, --depth >= 1, 1 <= --per-process <= --runs, --repeat >= 1")

    env = dict(os.environ)
    env.setdefault("NUMBA_CACHE_DIR", str(REPO / ".cache" / "numba"))
    os.environ.setdefault("NUMBA_CACHE_DIR", env["NUMBA_CACHE_DIR"])
    from zsdr.evaluation.metrics import PreparedQrels, evaluate_many, evaluate_prepared

    peer: dict = {}
    exec(compile(PYTREC_SCRIPT, "pytrec_peer", "exec"), peer)

    corpus, qrels = read_ids(args.dataset)
    evaluated = len(PreparedQrels(qrels))
    known = set(corpus)
    unretrievable = sum(d not in known for docs in qrels.values() for d in docs)
    metric_arg = ",".join(METRICS)
    failures = []
    with tempfile.TemporaryDirectory(prefix="zsdr-bench-eval-") as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        runs = write_runs(tmp, corpus, qrels, args.runs, args.depth, args.seed)
        t_write = time.perf_counter() - start
        peer_script = tmp / "pytrec_peer.py"
        peer_script.write_text(PYTREC_SCRIPT)
        size = sum(p.stat().st_size for p in runs) / 2**20
        print(f"dataset   {args.dataset.name}: {len(corpus)} docs, {evaluated} judged test queries, "
              f"{unretrievable} judged docs not in the corpus (left out of the runs)")
        print(f"runs      {args.runs} x {len(qrels)} queries x depth {args.depth} (seed {args.seed}, tied scores), "
              f"{size:.0f} MiB, written in {t_write:.1f} s")
        print(f"metrics   {metric_arg}  (pytrec_eval: ndcg_cut_10, recall_100, recall_1000, recip_rank on top 10)")
        print(f"python    {sys.executable}; NUMBA_CACHE_DIR={env['NUMBA_CACHE_DIR']}")

        # -- agreement on the first run (in process) ------------------------------------------------
        ours0 = evaluate_prepared(PreparedQrels(qrels), peer["read_run"](runs[0]), METRICS)["aggregate"]
        theirs0 = peer["evaluate_all"](qrels_tsv, runs[:1])[0]
        print()
        print("check     run 0, aggregate   zsdr        pytrec_eval  |diff|")
        for m in METRICS:
            diff = abs(ours0[m] - theirs0[m])
            print(f"          {m:<16} {ours0[m]:.8f}  {theirs0[m]:.8f}   {diff:.1e}")
            if diff > TOLERANCE:
                failures.append(f"run 0 {m}: zsdr {ours0[m]} vs pytrec_eval {theirs0[m]}")
        print(f"          ndcg@10 and recall@100 agree to {TOLERANCE:g}: "
              f"{'yes' if all(abs(ours0[m] - theirs0[m]) <= TOLERANCE for m in METRICS[:2]) else 'NO'}")

        # -- 1. one process per run ---------------------------------------------------------------
        def zsdr_cli(run: Path) -> list[str]:
            return ["-m", "zsdr", "evaluate", "--qrels", str(args.dataset), "--split", "test", "--run", str(run),
                    "--metrics", metric_arg]

        def pytrec_cli(run: Path) -> list[str]:
            return [str(peer_script), str(qrels_tsv), str(run)]

        timed_process(zsdr_cli(runs[0]), env)        # warm-up, untimed: numba cache load / compile, file cache
        timed_process(pytrec_cli(runs[0]), env)      # warm-up, untimed: file cache
        t_cli_zsdr, t_cli_peer, cli_ours, cli_theirs = [], [], [], []
        for run in runs[: args.per_process]:         # interleaved, so drift hits both sides alike
            t, out = timed_process(zsdr_cli(run), env)
            t_cli_zsdr.append(t)
            cli_ours.extend(json_lines(out))
            t, out = timed_process(pytrec_cli(run), env)
            t_cli_peer.append(t)
            cli_theirs.extend(json_lines(out))
        d_cli = max_diff(cli_ours, cli_theirs)
        if d_cli > TOLERANCE:
            failures.append(f"per-process results differ by up to {d_cli:.2e}")

        # -- 2. batched, fresh process -------------------------------------------------------------
        t_batch_zsdr, out = timed_process(["-c", ZSDR_BATCH_SCRIPT, str(args.dataset), "test", metric_arg,
                                           *map(str, runs)], env)
        batch_ours = json_lines(out)
        t_batch_peer, out = timed_process([str(peer_script), str(qrels_tsv), *map(str, runs)], env)
        batch_theirs = json_lines(out)
        d_batch = max_diff(batch_ours, batch_theirs)
        if d_batch > TOLERANCE:
            failures.append(f"batched results differ by up to {d_batch:.2e}")

        # -- 2b. batched, in this process ----------------------------------------------------------
        jobs = [{"qrels": args.dataset, "split": "test", "run": r, "metrics": METRICS} for r in runs]
        evaluate_many(jobs[:1])                      # warm-up: numba kernels loaded in this process
        t_in_zsdr = t_in_peer = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            in_ours = [r["aggregate"] for r in evaluate_many(jobs)]   # fresh cache: qrels parsed once here
            t_in_zsdr = min(t_in_zsdr, time.perf_counter() - start)
            start = time.perf_counter()
            in_theirs = peer["evaluate_all"](qrels_tsv, runs)
            t_in_peer = min(t_in_peer, time.perf_counter() - start)
        d_in = max_diff(in_ours, in_theirs)
        if d_in > TOLERANCE:
            failures.append(f"in-process results differ by up to {d_in:.2e}")

    n, k = args.runs, args.per_process
    m_zsdr, m_peer = float(np.mean(t_cli_zsdr)), float(np.mean(t_cli_peer))
    print()
    print("one warm-up process of each kind ran first, untimed (numba cache warm)")
    print(f"{'mode':<44} {'zsdr':>9} {'pytrec_eval':>12} {'ratio':>7}   max |diff|")
    print(f"{f'1. one process per run, mean of {k} (s/run)':<44} {m_zsdr:>9.3f} {m_peer:>12.3f} "
          f"{m_zsdr / m_peer:>7.2f}   {d_cli:.1e}")
    print(f"{f'2. batched, one process, {n} runs (s total)':<44} {t_batch_zsdr:>9.3f} {t_batch_peer:>12.3f} "
          f"{t_batch_zsdr / t_batch_peer:>7.2f}   {d_batch:.1e}")
    print(f"{'   batched, one process (s/run)':<44} {t_batch_zsdr / n:>9.3f} {t_batch_peer / n:>12.3f} "
          f"{t_batch_zsdr / t_batch_peer:>7.2f}")
    print(f"{f'   batched, in process, {n} runs (s total)':<44} {t_in_zsdr:>9.3f} {t_in_peer:>12.3f} "
          f"{t_in_zsdr / t_in_peer:>7.2f}   {d_in:.1e}")
    print(f"{'   batched, in process (s/run)':<44} {t_in_zsdr / n:>9.3f} {t_in_peer / n:>12.3f} "
          f"{t_in_zsdr / t_in_peer:>7.2f}")
    print()
    print(f"ratio (zsdr / pytrec_eval), one process per run: {m_zsdr / m_peer:.2f}")
    print(f"ratio (zsdr / pytrec_eval), batched per run: {t_batch_zsdr / t_batch_peer:.2f}"
          f"  (in process: {t_in_zsdr / t_in_peer:.2f})")
    if failures:
        print("DISAGREEMENT:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print(f"agreement: all {len(METRICS)} metrics of every evaluated run within {TOLERANCE:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
