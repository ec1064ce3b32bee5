import logging

from zsdr.logs import setup_logging
from zsdr.models.generator import build_tiny_generator

setup_logging(snakemake.log[0])
p = snakemake.params
out = snakemake.output[0].rsplit("/", 1)[0]
summary = build_tiny_generator(p.tokenizer, out, p.size, p.seed)
logging.getLogger("build_generator").info("%s: %s", out, summary)
