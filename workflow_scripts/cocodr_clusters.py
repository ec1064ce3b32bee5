"""COCO-DR Figure 5c and Table 4 from the last clustering of the iDRO recipe (docs/methods/cocodr.md#evaluation-and-analyses).

Every embedding is the iDRO model's (the paper's "COCO-DR embeddings"). A source cluster's
embedding is the mean of its training queries', so a target's average dot product with a cluster
is its mean query embedding's dot product with that mean; the nearest cluster is the largest.
iDRO's effect on a cluster is the change of the training loss (pairwise NLL on the last episode's
mined negatives) of its queries from the model without iDRO to the model with it.
"""

import json
import logging
import random

import numpy as np

from zsdr.data.formats import judged_queries
from zsdr.devices import claim_for_job
from zsdr.evaluation.cocodr import (by_cluster, by_query, cluster_centroids, example_losses, nearest_clusters,
                                   nearest_source, pick_gains)
from zsdr.evaluation.metrics import read_metrics
from zsdr.io import atomic_write
from zsdr.logs import setup_logging
from zsdr.models.encoder import load_encoder
from zsdr.tables.cocodr_figures import write_table4
from zsdr.tables.inputs import metric_scores
from zsdr.training.idro import read_clusters

setup_logging(snakemake.log[0])
claim_for_job(snakemake)
log = logging.getLogger("cocodr_clusters")
p, inp, out = snakemake.params, snakemake.input, snakemake.output
device = None if p.dense["device"] == "auto" else p.dense["device"]
batch = p.dense["batch_size"]
clusters = read_clusters(inp.clusters)
k = max(clusters.values()) + 1
source_texts = judged_queries(p.source, "train")
qids = [q for q in source_texts if q in clusters]
if p.max_source_queries and len(qids) > p.max_source_queries:
    qids = sorted(random.Random(p.seed).sample(qids, p.max_source_queries), key=qids.index)
sides = {"with": p.with_idro, "without": p.without_idro}


encoder = load_encoder(p.with_idro["model"], device=device, **p.with_idro["options"])
source_emb = encoder.encode_queries([source_texts[q] for q in qids], batch_size=batch, device=device)
labels = np.array([clusters[q] for q in qids])
# one pass of training losses per model serves Figure 5c's clusters and Table 4's queries
pairs = {side: example_losses(s["model"], s["options"], p.source, inp.negatives, set(qids).__contains__,
                              scale=s["scale"], seed=p.seed, batch_size=batch, device=device)
         for side, s in sides.items()}
cluster_losses = {side: by_cluster(pairs[side], clusters, k) for side in sides}
query_losses = {side: by_query(pairs[side]) for side in sides}
# a cluster without a training loss under both models (no mined negatives) is not a candidate
centroids = cluster_centroids(source_emb, labels, k)
centroids[[c for c in range(k) if any(cluster_losses[side][c]["loss"] is None for side in sides)]] = np.nan
target_emb = {}
for d, folder in p.targets.items():
    texts = judged_queries(folder, p.splits[d])
    target_emb[d] = (texts, encoder.encode_queries(list(texts.values()), batch_size=batch, device=device))
    c, scores = nearest_clusters(target_emb[d][1], centroids)
    record = {"dataset": d, "nearest_cluster": int(c), "cluster_queries": int((labels == c).sum()),
              "loss_with": cluster_losses["with"][c]["loss"], "loss_without": cluster_losses["without"][c]["loss"],
              "scores": {str(i): float(v) for i, v in enumerate(scores) if np.isfinite(v)},
              "with": p.with_idro["system"], "without": p.without_idro["system"], "clusters": inp.clusters}
    log.info("%s: nearest source cluster %d (%d queries), training loss %.4f without iDRO, %.4f with", d, c,
             record["cluster_queries"], record["loss_without"], record["loss_with"])
    path = next(f for f in out.analysis if f.endswith(f"/{d}.json"))
    with atomic_write(path) as fh:
        fh.write(json.dumps(record, indent=1) + "\n")

# Table 4: the target queries iDRO helps most, their nearest source training query and its loss change.
d4 = p.table4_dataset
scores = {side: metric_scores(read_metrics(p.metrics[d4][key]), p.metrics[d4][key], "ndcg@10")[1]
          for side, key in (("with", "with_idro"), ("without", "without_idro"))}
picked = pick_gains(scores["without"], scores["with"], n=p.queries)
texts, emb = target_emb[d4]
order = list(texts)
nearest = nearest_source(emb[[order.index(q) for q, _ in picked]], source_emb)
near_qids = [qids[i] for i in nearest]


def gain(qid):
    before, after = query_losses["without"].get(qid), query_losses["with"].get(qid)
    return None if before is None or after is None else float(before - after)


rows = [{"target_query": texts[q], "qid": q, "target_gain": float(g), "nearest_source_query": source_texts[s],
         "source_gain": gain(s)} for (q, g), s in zip(picked, near_qids)]
write_table4(out.csv, out.md, rows, published=inp.published, scale=p.scale)
