from zsdr.logs import setup_logging
from zsdr.sparse.lucene import bm25_negatives

setup_logging(snakemake.log[0])
p = snakemake.params
bm25_negatives(p.dataset, snakemake.input.index, snakemake.output[0], depth=p.depth, k1=p.bm25["k1"], b=p.bm25["b"],
               language=p.language, threads=snakemake.threads)
