import logging

import numpy as np

from zsdr.data.formats import judged_queries
from zsdr.devices import claim_for_job
from zsdr.logs import setup_logging
from zsdr.models.encoder import load_encoder
from zsdr.training.idro import kmeans, write_clusters

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
p = snakemake.params
queries = judged_queries(p.dataset, "train")
qids = list(queries)
device = None if p.dense["device"] == "auto" else p.dense["device"]
encoder = load_encoder(p.model, device=device, precision=p.dense["precision"], **p.options)
emb = np.ascontiguousarray(encoder.encode_queries([queries[q] for q in qids], batch_size=p.dense["batch_size"],
                                                  device=device), dtype=np.float32)
c = p.clustering
assignments, _ = kmeans(emb, p.clusters, seed=p.seed, niter=c.get("niter", 500), nredo=c.get("nredo", 5))
sizes = np.bincount(assignments, minlength=p.clusters)
logging.getLogger("cluster_queries").info("%d queries in %d clusters (sizes %s)", len(qids), p.clusters,
                                          sizes.tolist())
write_clusters(snakemake.output[0], qids, assignments,
               {"model": p.model, "clusters": p.clusters, "seed": p.seed, "sizes": sizes.tolist(), **c})
