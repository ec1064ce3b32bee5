from zsdr.logs import setup_logging
from zsdr.sparse.lucene import bm25_run, size_jvm

setup_logging(snakemake.log[0])
size_jvm(getattr(snakemake.resources, "mem_mb", None), reads=[snakemake.input.index])
p = snakemake.params
bm25_run(p.dataset, p.split, snakemake.output[0], fields=p.fields, rm3=p.rm3, k1=p.k1, b=p.b, depth=p.depth,
         language=p.language, index_dir=snakemake.input.index, remove_query=p.remove_query,
         threads=snakemake.threads, tag=snakemake.wildcards.system)
