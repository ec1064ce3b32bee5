from zsdr.logs import setup_logging
from zsdr.sparse.run import bm25_inmemory_run

setup_logging(snakemake.log[0])
p = snakemake.params
bm25_inmemory_run(p.dataset, p.split, snakemake.output[0], k1=p.k1, b=p.b, depth=p.depth)
