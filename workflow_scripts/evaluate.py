# One process scores every run of a dataset: the qrels are parsed once and ranx's kernels are
# loaded once (its numba start-up would otherwise dominate hundreds of small jobs).
from pathlib import Path

from zsdr.evaluation.metrics import evaluate_many
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
p = snakemake.params
runs, outputs = snakemake.input.runs, list(snakemake.output)
runs = [runs] if isinstance(runs, str) else list(runs)   # evaluate_system: one run
assert len(runs) == len(outputs), (runs, outputs)
jobs = [
    {"qrels": p.dataset, "split": p.split, "run": run, "out": out, "metrics": list(p.metrics),
     "ignore_identical_ids": bool(p.ignore_identical_ids),
     "meta": {"dataset": snakemake.wildcards.dataset, "system": Path(out).stem}}
    for run, out in zip(runs, outputs)
]
evaluate_many(jobs)
