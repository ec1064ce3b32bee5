from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.retrieval.search import dense_search_run

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
d = p.dense
dense_search_run(p.model, p.dataset, p.split, snakemake.input.shards, snakemake.output[0], scattered=p.scattered,
                 k=d["depth"], tag=snakemake.wildcards.system, batch_size=d["batch_size"], device=d["device"],
                 precision=d["precision"], **p.options)
