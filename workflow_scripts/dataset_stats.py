from zsdr.evaluation.analysis import write_dataset_statistics
from zsdr.logs import setup_logging

setup_logging(snakemake.log[0])
write_dataset_statistics(snakemake.params.dataset, snakemake.output[0], doc_fields=snakemake.params.doc_fields)
