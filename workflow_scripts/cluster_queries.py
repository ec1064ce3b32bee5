from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.training.query_clusters import cluster_training_queries

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
cluster_training_queries(p.dataset, snakemake.output[0], model=p.model, options=p.options, clusters=p.clusters,
                         clustering=p.clustering, seed=p.seed, dense=p.dense)
