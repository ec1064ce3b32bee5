from zsdr.logs import setup_logging
from zsdr.sparse.lucene import bm25_negatives, size_jvm

setup_logging(snakemake.log[0])
size_jvm(getattr(snakemake.resources, "mem_mb", None), reads=[snakemake.input.index])
p = snakemake.params
bm25_negatives(p.dataset, snakemake.input.index, snakemake.output[0], depth=p.depth, k1=p.bm25["k1"], b=p.bm25["b"],
               language=p.language, threads=snakemake.threads)
