from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.retrieval.search import search_datasets

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
d = snakemake.params.dense
search_datasets(snakemake.params.jobs, k=d["depth"], tag=snakemake.wildcards.system, batch_size=d["batch_size"],
                dtype=d["dtype"], device=d["device"], precision=d["precision"])
