"""How domain-invariant a dense retriever's embeddings are: MoDIR's analyses (Xin et al., Findings of ACL 2022).

MoDIR (§5 and its appendix) measures how far an encoder keeps the source domain (the one it was
trained on) apart from a target domain it has never seen, in the embedding space retrieval uses:

* Global Domain-Acc (:func:`global_domain_accuracy`), once for queries and once for documents: a fresh
  linear classifier learns to tell source from target embeddings; its accuracy on held-out rows is the
  measure. As in the official code (``dry_dc_evaluation``): equally many rows per domain, 70 % of each
  to train, Adam at learning rate 5e-4, batches of 48, 500 steps. The domains being balanced, chance
  is 0.5; lower (closer to 0.5) = the embeddings reveal less of their domain = more domain-invariant.
* KNN-Source% (:func:`knn_source_share`): source and target documents share one exact index; for each
  target query, the share of its k nearest documents that come from the source domain, averaged over
  the queries. An encoder that keeps the domains apart finds target documents only (0), one that mixes
  them finds source documents too; so here, unlike Domain-Acc, higher = more mixed, bounded by what
  the index holds (with k = the whole index it is the source's share of the documents).

Differences from the official code: the classifier is a fresh ``Linear(dim, 2)`` per kind of text
(there, the adversarial training's own classifier, bias-free with logits clipped to ±5, goes on
training on alternating query and passage batches), and rows are sampled at random rather than taken
from the head of each embedding file.

:func:`domain_analysis` samples the texts of two BEIR datasets, embeds them with one model and computes
the three numbers; :func:`write_domain_analysis` writes them as JSON.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from zsdr.data.formats import find_file, iter_records, judged_queries
from zsdr.io import atomic_write

log = logging.getLogger(__name__)

MIN_ROWS = 4


def finite_matrix(x: np.ndarray, name: str, dtype=np.float32) -> np.ndarray:
    """``x`` as a C-contiguous matrix of finite values (float32 unless ``dtype`` says otherwise)."""
    x = np.ascontiguousarray(x, dtype=dtype)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (rows x dim), got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} holds values that are not finite")
    return x


def _pick(total: int, n: int | None, rng: np.random.Generator) -> np.ndarray:
    """Sorted row numbers of a seeded sample of at most ``n`` of ``total`` rows (all when ``n`` is None)."""
    if n is None or n >= total:
        return np.arange(total)
    return np.sort(rng.choice(total, size=n, replace=False))


def _train_linear(x: torch.Tensor, y: torch.Tensor, *, seed: int, lr: float, batch_size: int,
                  steps: int) -> torch.nn.Linear:
    """A seeded ``Linear(dim, 2)`` trained with Adam and cross-entropy on ``steps`` batches of ``(x, y)``
    (consecutive slices of seeded permutations of the rows, a new permutation when one is used up)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        classifier = torch.nn.Linear(x.shape[1], 2)
    optimizer = torch.optim.Adam(classifier.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    order, position = torch.randperm(len(x), generator=generator), 0
    with torch.enable_grad():
        for _ in range(steps):
            if position >= len(order):
                order, position = torch.randperm(len(x), generator=generator), 0
            rows = order[position:position + batch_size]
            position += batch_size
            loss = F.cross_entropy(classifier(x[rows]), y[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return classifier


def global_domain_accuracy(source: np.ndarray, target: np.ndarray, *, seed: int, train_fraction: float = 0.7,
                           lr: float = 5e-4, batch_size: int = 48, steps: int = 500) -> float:
    """Held-out accuracy of a fresh linear classifier telling ``source`` (label 0) from ``target`` (1) rows.

    The larger side is subsampled to the smaller one's size and both are shuffled (seeded);
    ``train_fraction`` of each side trains ``torch.nn.Linear(dim, 2)`` (Adam, cross-entropy, ``steps``
    batches of ``batch_size``), the rest measures it. It runs on the CPU in one thread (the model is
    tiny: more threads only wait on each other), so a seed gives the same result whatever the thread
    setting; the global random state and thread count are left as they were.
    """
    source, target = finite_matrix(source, "source"), finite_matrix(target, "target")
    if min(len(source), len(target)) < MIN_ROWS:
        raise ValueError(f"Domain-Acc needs at least {MIN_ROWS} rows per domain, got {len(source)} source and "
                         f"{len(target)} target rows")
    if source.shape[1] != target.shape[1]:
        raise ValueError(f"source and target dims differ ({source.shape[1]} vs {target.shape[1]})")
    if not 0 < train_fraction < 1:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    if lr <= 0 or batch_size < 1 or steps < 1:
        raise ValueError(f"lr must be > 0 and batch_size, steps >= 1 (got {lr}, {batch_size}, {steps})")
    rng = np.random.default_rng(seed)
    n = min(len(source), len(target))
    sides = [x[rng.permutation(len(x))[:n]] for x in (source, target)]
    n_train = min(max(int(train_fraction * n), 1), n - 1)

    def split(rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(np.concatenate([side[rows] for side in sides]))
        return x, torch.arange(2).repeat_interleave(len(x) // 2)

    (x_train, y_train), (x_test, y_test) = split(slice(None, n_train)), split(slice(n_train, None))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        classifier = _train_linear(x_train, y_train, seed=seed, lr=lr, batch_size=batch_size, steps=steps)
        with torch.no_grad():
            return float((classifier(x_test).argmax(dim=1) == y_test).double().mean())
    finally:
        torch.set_num_threads(threads)


def knn_source_share(source_docs: np.ndarray, target_docs: np.ndarray, target_queries: np.ndarray,
                     k: int = 100) -> float:
    """Mean over ``target_queries`` of the share of source documents among each one's ``k`` nearest
    documents (exact inner product over source and target documents together; ``k`` is capped at
    the number of documents)."""
    source_docs, target_docs = finite_matrix(source_docs, "source_docs"), finite_matrix(target_docs, "target_docs")
    target_queries = finite_matrix(target_queries, "target_queries")
    if len({source_docs.shape[1], target_docs.shape[1], target_queries.shape[1]}) != 1:
        raise ValueError(f"dims differ: source_docs {source_docs.shape[1]}, target_docs {target_docs.shape[1]}, "
                         f"target_queries {target_queries.shape[1]}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    docs = np.concatenate([source_docs, target_docs])
    if not len(docs) or not len(target_queries):
        raise ValueError(f"KNN-Source% needs documents and queries, got {len(docs)} documents and "
                         f"{len(target_queries)} queries")
    import faiss

    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(docs)
    _, neighbours = index.search(target_queries, min(k, len(docs)))
    return float((neighbours < len(source_docs)).mean())


def _corpus_size(dataset: str | os.PathLike) -> int:
    return sum(1 for _ in iter_records(find_file(Path(dataset), "corpus.jsonl"), "corpus"))


def _encode_corpus_rows(encoder, dataset: str | os.PathLike, picks: list[np.ndarray], batch_size: int,
                        device: str | None) -> list[np.ndarray]:
    """The embeddings of each set of corpus rows in ``picks`` (the corpus is streamed, each row encoded once)."""
    rows = np.unique(np.concatenate(picks))
    wanted = set(rows.tolist())
    docs = [{"title": obj.get("title", "") or "", "text": obj["text"]}
            for i, (_, _, obj) in enumerate(iter_records(find_file(Path(dataset), "corpus.jsonl"), "corpus"))
            if i in wanted]
    emb = encoder.encode_docs(docs, batch_size=batch_size, device=device)
    return [emb[np.searchsorted(rows, p)] for p in picks]


def domain_analysis(model: str, options: dict, source: str, source_split: str, target: str, target_split: str, *,
                    queries: int, docs: int, knn_docs: int | None, knn_k: int, seed: int, classifier: dict,
                    batch_size: int = 64, device: str | None = None) -> dict:
    """Global Domain-Acc (queries, docs) and KNN-Source% of ``model`` between two BEIR datasets.

    ``model``: a model folder or HF id, its :class:`zsdr.models.encoder.EncoderConfig` overridden by
    ``options``. Queries are those the splits' qrels judge, at most ``queries`` per domain (seeded),
    equalised for Domain-Acc; documents at most ``docs`` per domain, equally many. KNN-Source% indexes
    at most ``knn_docs`` documents of each corpus (None: all) and asks with every sampled target query.
    ``classifier``: overrides of :func:`global_domain_accuracy`'s training settings.
    """
    from zsdr.models.encoder import load_encoder

    for name, value in (("queries", queries), ("docs", docs), ("knn_k", knn_k), ("knn_docs", knn_docs)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    rng = np.random.default_rng(seed)
    source_texts = list(judged_queries(source, source_split).values())
    target_texts = list(judged_queries(target, target_split).values())
    target_texts = [target_texts[i] for i in _pick(len(target_texts), queries, rng)]
    n_queries = min(len(source_texts), len(target_texts))
    source_texts = [source_texts[i] for i in _pick(len(source_texts), n_queries, rng)]
    target_rows = _pick(len(target_texts), n_queries, rng)
    sizes = {"source": _corpus_size(source), "target": _corpus_size(target)}
    n_docs = min(docs, *sizes.values())
    if min(n_queries, n_docs) < MIN_ROWS:
        raise ValueError(f"Domain-Acc needs at least {MIN_ROWS} queries and documents per domain; {source} and "
                         f"{target} give {n_queries} judged queries and {n_docs} documents each")
    picks = {d: [_pick(total, n_docs, rng), _pick(total, knn_docs, rng)] for d, total in sizes.items()}

    encoder = load_encoder(model, device=device, **options)
    source_queries = encoder.encode_queries(source_texts, batch_size=batch_size, device=device)
    target_queries = encoder.encode_queries(target_texts, batch_size=batch_size, device=device)
    source_docs, knn_source_docs = _encode_corpus_rows(encoder, source, picks["source"], batch_size, device)
    target_docs, knn_target_docs = _encode_corpus_rows(encoder, target, picks["target"], batch_size, device)

    result = {
        "global_domain_acc": {
            "queries": global_domain_accuracy(source_queries, target_queries[target_rows], seed=seed, **classifier),
            "docs": global_domain_accuracy(source_docs, target_docs, seed=seed, **classifier),
        },
        "knn_source": knn_source_share(knn_source_docs, knn_target_docs, target_queries, knn_k),
        "knn_k": knn_k,
        "counts": {"source_queries": n_queries, "target_queries": n_queries, "source_docs": n_docs,
                   "target_docs": n_docs, "knn_source_docs": len(knn_source_docs),
                   "knn_target_docs": len(knn_target_docs), "knn_queries": len(target_queries)},
    }
    log.info("%s, %s -> %s: Domain-Acc %s, KNN-Source %.4f (k=%d)", model, source, target,
             result["global_domain_acc"], result["knn_source"], knn_k)
    return result


def write_domain_analysis(out: str | os.PathLike, **kwargs) -> dict:
    """:func:`domain_analysis` (``kwargs``: its arguments, by name) written to ``out`` as JSON (atomically),
    after the arguments that identify it; returns what was written."""
    result = domain_analysis(**kwargs)
    data = {"model": str(kwargs["model"]), "encoder": kwargs["options"], "source": str(kwargs["source"]),
            "source_split": kwargs["source_split"], "target": str(kwargs["target"]),
            "target_split": kwargs["target_split"], "seed": kwargs["seed"], **result}
    with atomic_write(out) as fh:
        json.dump(data, fh, indent=1)
        fh.write("\n")
    return data
