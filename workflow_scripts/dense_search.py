from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.retrieval.search import merge_shard_topk, search_with_model

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
d = p.dense
if p.scattered:  # cluster.scatter_search: merge the per-shard top-k of the search_shard jobs
    merge_shard_topk(snakemake.input.shards, snakemake.output[0], k=d["depth"], tag=snakemake.wildcards.system)
else:
    search_with_model(p.model, p.dataset, p.split, snakemake.input.shards, snakemake.output[0], k=d["depth"],
                      tag=snakemake.wildcards.system, batch_size=d["batch_size"],
                      device=d["device"], precision=d["precision"], **p.options)
