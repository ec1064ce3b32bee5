from zsdr.logs import setup_logging
from zsdr.retrieval.search import search_with_model

setup_logging(snakemake.log[0])
p = snakemake.params
d = p.dense
search_with_model(p.model, p.dataset, p.split, snakemake.input.shards, snakemake.output[0], k=d["depth"],
                  tag=snakemake.wildcards.system, batch_size=d["batch_size"],
                  device=d["device"], precision=d["precision"], **p.options)
