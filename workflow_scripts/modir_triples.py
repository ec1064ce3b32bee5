import logging

from zsdr.logs import setup_logging
from zsdr.training.modir import build_target_triples

setup_logging(snakemake.log[0])
p = snakemake.params
logging.getLogger("zsdr").info("target triples: %s", build_target_triples(p.dataset, p.split, snakemake.output[0]))
