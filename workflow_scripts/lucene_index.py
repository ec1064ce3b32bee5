from zsdr.logs import setup_logging
from zsdr.sparse.lucene import build_index, size_jvm

setup_logging(snakemake.log[0])
size_jvm(getattr(snakemake.resources, "mem_mb", None), reads=[snakemake.params.dataset])
p = snakemake.params
build_index(p.dataset, snakemake.output[0], fields=snakemake.wildcards.fields, language=p.language,
            threads=snakemake.threads)
