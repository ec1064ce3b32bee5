from zsdr.evaluation.metrics import evaluate_files
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
p = snakemake.params
evaluate_files(p.dataset, p.split, snakemake.input.run, snakemake.output[0], p.metrics)
