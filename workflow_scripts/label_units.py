from zsdr.logs import setup_logging
from zsdr.training.unit_labels import gather_labels

setup_logging(snakemake.log[0])
gather_labels(list(snakemake.input.shards), snakemake.output.labels, snakemake.output.summary,
              snakemake.params.dataset, info=snakemake.params.info)
