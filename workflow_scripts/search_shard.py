from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.retrieval.search import search_shard_topk

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
search_shard_topk(snakemake.input.queries, snakemake.input.shard, snakemake.output[0],
                  k=snakemake.params.dense["depth"])
