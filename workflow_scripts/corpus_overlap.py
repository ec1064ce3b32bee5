from zsdr.data.store import write_corpus_overlap
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
write_corpus_overlap(snakemake.params.dataset, snakemake.params.donor, snakemake.output[0])
