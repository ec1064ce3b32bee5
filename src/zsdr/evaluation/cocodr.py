"""COCO-DR's analyses (Yu et al., EMNLP 2022, §6 and App. H): embedding geometry, the nearest source
query cluster of a target, per-cluster training losses and the case study's helpers.

* :func:`alignment` / :func:`uniformity` (Fig. 5b): Wang & Isola's (ICML 2020) measures,
  ``ℓ_align = E_{(x,y)∼p_pos} ‖h(x) − h(y)‖²`` over positive pairs and
  ``ℓ_uniform = log E_{x,y∼p_data} exp(−t ‖h(x) − h(y)‖²)`` (t = 2) over pairs of distinct rows.
  Both are defined on the unit sphere, so by default the rows are L2-normalised first
  (``normalize=False`` measures the raw vectors, e.g. of a dot-product model, as they are).
  Lower is better for both: aligned positives, embeddings spread over the sphere.
  :func:`span_geometry` (Fig. 5a/b) measures them, with the COCO contrastive loss, on the span pairs
  of a target corpus (the positives of COCO pretraining) under a pretrained model.
* :func:`nearest_clusters` (Fig. 5c): the source (MS MARCO) query cluster a target task is nearest
  to, by the average dot product between the target's query embeddings and the cluster's.
* :func:`cluster_training_losses` / :func:`training_losses` (Fig. 5c, Table 4): a model's training
  loss (the pairwise NLL of docs/methods/cocodr.md#fine-tuning-model-and-loss) on the source's training queries, per cluster or per
  query; compared between a model trained with and one trained without iDRO.
* :func:`pick_gains` / :func:`nearest_source` (Table 4): the target queries that gain most from
  iDRO and the nearest source training query of each.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Callable, Mapping

import numpy as np

from zsdr.data.spans import span_pair_texts
from zsdr.data.training_set import TrainingSet
from zsdr.evaluation.case_study import nearest_rows
from zsdr.evaluation.domain import finite_matrix
from zsdr.io import atomic_write
from zsdr.losses.coco import contrastive_of_vectors
from zsdr.models.inference import cls_vectors

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Geometry (Fig. 5b)


def _matrix(x, name: str) -> np.ndarray:
    """``x`` as a float64 matrix of finite values (the domain analyses' check)."""
    return finite_matrix(x, name, dtype=np.float64)


def _unit(x: np.ndarray, name: str) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(f"{name} has a zero row, which cannot be put on the unit sphere")
    return x / norms


def alignment(x, y, normalize: bool = True) -> float:
    """Wang & Isola's ℓ_align: ``mean_i ‖x_i − y_i‖²`` over the positive pairs ``(x_i, y_i)`` (rows).

    ``normalize`` (default, the definition's unit sphere) L2-normalises the rows first; the value then
    lies in [0, 4] (0: every pair identical)."""
    x, y = _matrix(x, "x"), _matrix(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"x and y must pair up row by row, got shapes {x.shape} and {y.shape}")
    if not len(x):
        raise ValueError("alignment needs at least one positive pair")
    if normalize:
        x, y = _unit(x, "x"), _unit(y, "y")
    return float(np.mean(np.sum((x - y) ** 2, axis=1)))


def uniformity(x, t: float = 2.0, normalize: bool = True, block: int = 1024) -> float:
    """Wang & Isola's ℓ_uniform: ``log mean_{i<j} exp(−t ‖x_i − x_j‖²)`` over the pairs of distinct rows.

    ``normalize`` (default, the definition's unit sphere) L2-normalises the rows first; the value then
    lies in [−4t, 0] (0: every row the same). Computed exactly, ``block`` rows at a time (memory
    ``block × len(x)``), with a running log-sum-exp."""
    x = _matrix(x, "x")
    if len(x) < 2:
        raise ValueError(f"uniformity needs at least 2 rows, got {len(x)}")
    if not t > 0:
        raise ValueError(f"t must be > 0, got {t}")
    if normalize:
        x = _unit(x, "x")
    sq = np.sum(x ** 2, axis=1)
    top, total, count = -np.inf, 0.0, 0
    for start in range(0, len(x) - 1, block):
        rows = slice(start, min(start + block, len(x)))
        d2 = np.maximum(sq[rows, None] + sq[None, :] - 2.0 * x[rows] @ x.T, 0.0)
        i = np.arange(rows.start, rows.stop)[:, None]
        values = -t * d2[i < np.arange(len(x))[None, :]]   # pairs i < j only
        if not values.size:
            continue
        m = float(values.max())
        if m > top:
            total, top = total * np.exp(top - m), m
        total += float(np.exp(values - top).sum())
        count += values.size
    return float(top + np.log(total / count))


def span_geometry(model_dir: str | os.PathLike, spans_path: str | os.PathLike, *, docs: int = 1000,
                  batch_size: int = 64, seed: int = 0, max_length: int = 128, device=None) -> dict:
    """COCO-DR Fig. 5a/b statistics of a pretrained model on a corpus's spans, from one encoding of the
    span pairs of ``docs`` documents (:func:`zsdr.data.spans.span_pair_texts`, their last-layer [CLS]
    vectors by :func:`zsdr.models.inference.cls_vectors`, as COCO pretraining encodes them): the COCO
    contrastive loss (:func:`zsdr.losses.coco.contrastive_of_vectors`: ``contrastive_loss``,
    ``contrastive_accuracy``, ``documents``, ``batch_size``) plus ``alignment`` over the documents'
    span pairs and ``uniformity`` over all their spans (on the unit sphere, as Wang & Isola define
    them), ``geometry_documents`` (how many documents those use: all of them, where the loss leaves
    out a last incomplete batch) and ``max_length``."""
    vectors = cls_vectors(model_dir, span_pair_texts(spans_path, docs, seed), batch_size=2 * int(batch_size),
                          max_length=max_length, device=device)
    stats = contrastive_of_vectors(vectors, batch_size, where=spans_path)
    x1, x2 = vectors[0::2].numpy(), vectors[1::2].numpy()
    return {**stats, "alignment": alignment(x1, x2), "uniformity": uniformity(np.concatenate([x1, x2])),
            "geometry_documents": len(x1), "max_length": int(max_length)}


def write_span_geometry(model_dir: str | os.PathLike, spans_path: str | os.PathLike, out_path: str | os.PathLike, *,
                        docs: int, batch_size: int, seed: int, device: str | None) -> dict:
    """:func:`span_geometry` of ``model_dir`` on ``spans_path`` (config `cocodr.analysis`'s ``docs`` and
    ``batch_size``; ``device`` "auto": CUDA where there is one), written to ``out_path`` as one JSON object
    with the model and the span file (rule `cocodr_geometry`). Returns the record."""
    stats = span_geometry(model_dir, spans_path, docs=docs, batch_size=batch_size, seed=seed,
                          device=None if device == "auto" else device)
    record = {"model": model_dir, "spans": spans_path, **stats}
    with atomic_write(out_path) as fh:
        fh.write(json.dumps(record, indent=1) + "\n")
    return record


# ---------------------------------------------------------------------------------------------
# Nearest source cluster (Fig. 5c)


def cluster_centroids(embeddings, labels, k: int) -> np.ndarray:
    """``(k, dim)``: the mean embedding of each cluster's members (``labels[i]`` in ``0..k-1``); a
    cluster without members gets a row of NaN."""
    embeddings = _matrix(embeddings, "embeddings")
    labels = np.asarray(labels, dtype=np.int64)
    if labels.shape != (len(embeddings),):
        raise ValueError(f"labels must give one cluster per row ({len(embeddings)}), got shape {labels.shape}")
    if len(labels) and (labels.min() < 0 or labels.max() >= k):
        raise ValueError(f"cluster labels must lie in 0..{k - 1}")
    sums = np.zeros((k, embeddings.shape[1]))
    np.add.at(sums, labels, embeddings)
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts[:, None]


def nearest_clusters(target_queries, centroids) -> tuple[int, np.ndarray]:
    """The source query cluster nearest to a target: ``(index, scores)`` with ``scores[k]`` the average
    dot product between the target's query embeddings ``(m, dim)`` and cluster k's members.

    The average of ``⟨t_i, s_j⟩`` over target queries i and members j is ``⟨mean_i t_i, mean_j s_j⟩``,
    so with ``centroids`` the clusters' mean embeddings (a K-means centroid is the mean of its members;
    :func:`cluster_centroids` computes it exactly) ``scores = centroids @ mean(target_queries)``.
    Rows of NaN (empty clusters) score ``-inf``; ties go to the lower index."""
    target_queries, centroids = _matrix(target_queries, "target_queries"), np.asarray(centroids, dtype=np.float64)
    if centroids.ndim != 2 or centroids.shape[1] != target_queries.shape[1] or not len(centroids):
        raise ValueError(f"centroids must be (K, {target_queries.shape[1]}), got shape {centroids.shape}")
    if not len(target_queries):
        raise ValueError("nearest_clusters needs at least one target query embedding")
    empty = np.isnan(centroids).any(axis=1)
    scores = np.where(empty, -np.inf, np.nan_to_num(centroids) @ target_queries.mean(axis=0))
    if empty.all():
        raise ValueError("every cluster is empty")
    return int(np.argmax(scores)), scores


# ---------------------------------------------------------------------------------------------
# Training losses on the source (Fig. 5c, Table 4)


def example_losses(model, options: dict | None, dataset, negatives, keep: Callable[[str], bool], *,
                   negatives_per_query: int = 1, scale: float = 1.0, max_queries: int | None = None, seed: int = 0,
                   batch_size: int = 64, device=None) -> list[tuple[str, float]]:
    """``[(qid, loss)]`` of the training examples whose query ``keep`` accepts (a seeded sample of at
    most ``max_queries`` of them, in file order): the loss of :func:`training_losses`, one encoding
    pass; :func:`by_query` and :func:`by_cluster` average it."""
    from zsdr.models.encoder import load_encoder

    if negatives_per_query < 1:
        raise ValueError(f"negatives_per_query must be >= 1, got {negatives_per_query}")
    if max_queries is not None and max_queries < 1:
        raise ValueError(f"max_queries must be >= 1, got {max_queries}")
    data = TrainingSet(dataset, negatives)
    picked = [i for i, ex in enumerate(data.examples) if keep(ex.qid)]
    if len(picked) < len(data):
        log.info("%d of %d training examples skipped (their query is not asked for)", len(data) - len(picked),
                 len(data))
    if max_queries is not None and len(picked) > max_queries:
        rng = np.random.default_rng(seed)
        picked = [picked[i] for i in np.sort(rng.choice(len(picked), size=max_queries, replace=False))]
    if not picked:
        return []
    # The draws of epoch 0 of a training run with this seed (TrainingSet.sample is a pure function).
    samples = [data.sample(i, epoch=0, seed=seed, negatives=negatives_per_query) for i in picked]
    doc_ids = list(dict.fromkeys(d for _, pos, negs in samples for d in (pos, *negs)))
    row = {d: j for j, d in enumerate(doc_ids)}
    encoder = load_encoder(model, device=device, **(options or {}))
    q = encoder.encode_queries([data.queries[ex.qid] for ex, _, _ in samples], batch_size=batch_size,
                               device=device).astype(np.float64)
    docs = encoder.encode_docs([data.corpus[d] for d in doc_ids], batch_size=batch_size,
                               device=device).astype(np.float64)
    # The encoder's similarity: it L2-normalises its vectors for cosine, so a dot product is right for both.
    cand = np.array([[row[pos], *(row[d] for d in negs)] for _, pos, negs in samples])
    logits = scale * np.einsum("nd,ncd->nc", q, docs[cand])
    top = logits.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
    losses = lse - logits[:, 0]                                       # −log softmax(...)[positive]
    return [(ex.qid, float(v)) for (ex, _, _), v in zip(samples, losses)]


def training_losses(model, options: dict | None, dataset: str | os.PathLike, negatives: str | os.PathLike, *,
                    qids=None, negatives_per_query: int = 1, scale: float = 1.0, max_queries: int | None = None,
                    seed: int = 0, batch_size: int = 64, device=None) -> dict[str, float]:
    """``{qid: loss}``: the pairwise NLL ``−log softmax([scale·s(q,d+), scale·s(q,d−_1), ...])[0]`` of each
    training query of ``negatives`` (a hard-negatives file over the BEIR folder ``dataset``, read by
    :class:`zsdr.data.training_set.TrainingSet`), with the positive and ``negatives_per_query`` negatives
    that ``TrainingSet.sample(i, epoch=0, seed)`` draws — so two models are scored on the same
    candidates. ``qids``: only these queries (None: all); ``max_queries``: a seeded sample of at most
    that many of them. ``s`` is the encoder's similarity (``model`` loaded by
    :func:`zsdr.models.encoder.load_encoder` with ``options``). A query with several examples gets
    their mean."""
    wanted = None if qids is None else {str(q) for q in qids}
    keep = (lambda q: True) if wanted is None else wanted.__contains__
    return by_query(example_losses(model, options, dataset, negatives, keep,
                                   negatives_per_query=negatives_per_query, scale=scale, max_queries=max_queries,
                                   seed=seed, batch_size=batch_size, device=device))


def by_query(pairs: list[tuple[str, float]]) -> dict[str, float]:
    """``{qid: mean loss of its examples}`` of :func:`example_losses`' pairs."""
    sums: dict[str, list[float]] = {}
    for qid, loss in pairs:
        sums.setdefault(qid, []).append(loss)
    return {qid: float(np.mean(v)) for qid, v in sums.items()}


def cluster_assignment(clusters: Mapping[str, int], k: int) -> dict[str, int]:
    """``{qid: cluster}`` checked: every cluster an integer in ``0..k-1``."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    assign = {}
    for qid, c in clusters.items():
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 0 <= int(c) < k:
            raise ValueError(f"query {qid!r}: cluster {c!r} is not an integer in 0..{k - 1}")
        assign[str(qid)] = int(c)
    return assign


def by_cluster(pairs: list[tuple[str, float]], assign: Mapping[str, int], k: int) -> dict[int, dict]:
    """``{cluster: {"loss": mean over its examples, "queries": n}}`` for clusters ``0..k-1`` of
    :func:`example_losses`' pairs (``{"loss": None, "queries": 0}`` for a cluster without one)."""
    groups: dict[int, list[float]] = {c: [] for c in range(k)}
    for qid, loss in pairs:
        groups[assign[qid]].append(loss)
    log.info("training losses of %d queries in %d of %d clusters", len(pairs), sum(1 for v in groups.values() if v), k)
    return {c: {"loss": float(np.mean(v)) if v else None, "queries": len(v)} for c, v in groups.items()}


def cluster_training_losses(model, options: dict | None, dataset: str | os.PathLike, negatives: str | os.PathLike,
                            clusters: Mapping[str, int], k: int, *, negatives_per_query: int = 1, scale: float = 1.0,
                            max_queries: int | None = None, seed: int = 0, batch_size: int = 64,
                            device=None) -> dict[int, dict]:
    """``{cluster: {"loss": mean training loss of its queries, "queries": n}}`` for clusters ``0..k-1``
    (``{"loss": None, "queries": 0}`` for a cluster without a scored query): the per-example losses of
    :func:`training_losses` grouped by ``clusters`` (``{qid: cluster}``, e.g. iDRO's K-means
    assignment of the training queries). Examples whose query ``clusters`` does not name are skipped
    (the count is logged); ``max_queries`` samples among the others."""
    assign = cluster_assignment(clusters, k)
    pairs = example_losses(model, options, dataset, negatives, assign.__contains__,
                           negatives_per_query=negatives_per_query, scale=scale, max_queries=max_queries, seed=seed,
                           batch_size=batch_size, device=device)
    return by_cluster(pairs, assign, k)


# ---------------------------------------------------------------------------------------------
# Case study (Table 4)


def pick_gains(scores_before: Mapping[str, float], scores_after: Mapping[str, float],
               n: int = 5) -> list[tuple[str, float]]:
    """The ``n`` queries both score sets cover with the largest gain ``after − before``, largest first;
    equal gains (to 12 decimals, so that 0.7 − 0.5 ties with 0.4 − 0.2) in qid order."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    common = set(scores_before) & set(scores_after)
    if not common:
        raise ValueError("the two score sets share no query: evaluate both models on the same split")
    gains = {q: float(scores_after[q]) - float(scores_before[q]) for q in common}
    return sorted(gains.items(), key=lambda kv: (-round(kv[1], 12), kv[0]))[:n]


def nearest_source(query_emb, source_emb) -> list[int]:
    """For each row of ``query_emb`` ``(m, dim)`` the row of ``source_emb`` ``(s, dim)`` with the largest
    inner product (ties: the lower index)."""
    query_emb, source_emb = _matrix(query_emb, "query_emb"), _matrix(source_emb, "source_emb")
    if query_emb.shape[1] != source_emb.shape[1]:
        raise ValueError(f"dims differ: query_emb {query_emb.shape[1]}, source_emb {source_emb.shape[1]}")
    if not len(source_emb):
        raise ValueError("nearest_source needs at least one source embedding")
    return [int(row[0]) for row in nearest_rows(query_emb, source_emb, 1)]
