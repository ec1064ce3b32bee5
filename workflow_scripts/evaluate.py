# One process scores every run of a dataset: the qrels are parsed once and ranx's kernels are
# loaded once (its numba start-up would otherwise dominate hundreds of small jobs).
from zsdr.evaluation.metrics import evaluate_runs
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
p = snakemake.params
evaluate_runs(p.dataset, p.split, snakemake.input.runs, list(snakemake.output), metrics=p.metrics,
              ignore_identical_ids=p.ignore_identical_ids, dataset=snakemake.wildcards.dataset)
