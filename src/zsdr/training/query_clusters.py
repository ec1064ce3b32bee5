"""iDRO's query groups for one ANCE episode (docs/methods/cocodr.md; rule `cluster_queries`).

Before each ANCE episode of a recipe with a `dro` term, the model that mines the episode's negatives embeds the
training queries of the source dataset (at the mining's query length) and faiss K-means groups them into K
clusters (:func:`zsdr.training.idro.kmeans`, with config `cocodr.clustering`); the episode's iDRO term reads the
clusters file (:func:`zsdr.training.idro.read_clusters`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from zsdr.data.formats import judged_queries
from zsdr.models.encoder import load_encoder
from zsdr.training.idro import kmeans, write_clusters

log = logging.getLogger(__name__)


def cluster_training_queries(dataset: str | os.PathLike, out_path: str | os.PathLike, *, model: str,
                             options: Mapping[str, Any], clusters: int, clustering: Mapping[str, Any], seed: int,
                             dense: Mapping[str, Any]) -> Path:
    """Write the clusters file of ``dataset``'s judged training queries: each query's K-means cluster among
    ``clusters`` (K), by their embeddings with ``model`` (encoder settings ``options``; config `dense`'s device,
    precision and batch size), faiss K-means with ``clustering``'s ``niter`` and ``nredo`` seeded by ``seed``.
    The file's info records the model, K, the seed, the cluster sizes and ``clustering``. Returns ``out_path``."""
    queries = judged_queries(dataset, "train")
    qids = list(queries)
    device = None if dense["device"] == "auto" else dense["device"]
    encoder = load_encoder(model, device=device, precision=dense["precision"], **options)
    emb = np.ascontiguousarray(encoder.encode_queries([queries[q] for q in qids], batch_size=dense["batch_size"],
                                                      device=device), dtype=np.float32)
    assignments, _ = kmeans(emb, clusters, seed=seed, niter=clustering["niter"], nredo=clustering["nredo"])
    sizes = np.bincount(assignments, minlength=clusters)
    log.info("%d queries in %d clusters (sizes %s)", len(qids), clusters, sizes.tolist())
    return write_clusters(out_path, qids, assignments,
                          {"model": model, "clusters": clusters, "seed": seed, "sizes": sizes.tolist(), **clustering})
