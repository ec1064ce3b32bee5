from zsdr.logs import setup_logging
from zsdr.training.unit_labels import write_statistics

setup_logging(snakemake.log[0])
p = snakemake.params
write_statistics(p.dataset, snakemake.wildcards.split, snakemake.output[0], collection=p.labels["collection"],
                 variant=p.labels["variant"], k1=p.labels["k1"], b=p.labels["b"], max_pairs=p.max_pairs, seed=p.seed)
