"""QGen weak pairs of a corpus (:mod:`zsdr.training.weak`): queries a seq2seq generator writes for each
document, which is their positive (:func:`write_qgen_pairs`; BEIR's QGen setup)."""

from __future__ import annotations

import itertools
import json
import logging
import os
from typing import TYPE_CHECKING

from zsdr.batching import map_by_length
from zsdr.io import atomic_write
from zsdr.training.weak.documents import selected_documents
from zsdr.training.weak.format import iter_weak_pairs, pair_statistics, write_pair

if TYPE_CHECKING:
    from zsdr.models.generator import QueryGenerator

log = logging.getLogger(__name__)

GPU_POOL = 16  # batches of documents length-sorted together on a GPU (write_qgen_pairs)


def generate_sorted(generator: QueryGenerator, passages: list[str], n: int, pool: int, seed: int, batch_size: int,
                    **sampling) -> list[list[str]]:
    """:meth:`QueryGenerator.generate` over ``passages`` in batches of ``batch_size`` similar token lengths
    (longest first, :func:`zsdr.batching.map_by_length`), batch ``b`` seeded from ``(seed, pool, b)``;
    results in the order of ``passages``."""
    lengths = [len(ids) for ids in generator.tokenizer(passages, max_length=generator.max_length, truncation=True,
                                                       return_token_type_ids=False,
                                                       return_attention_mask=False)["input_ids"]]

    def batch(b: int, rows) -> list[list[str]]:
        return generator.generate([passages[i] for i in rows], n, batch_size=batch_size, seed=[seed, pool, b],
                                  **sampling)

    return map_by_length(batch, lengths, size=batch_size)


def write_qgen_pairs(generator: QueryGenerator, dataset_dir: str | os.PathLike, out_path: str | os.PathLike, *,
                     queries_per_document: int = 3, max_pairs: int | None = None, seed: int = 0,
                     batch_size: int = 32, device=None, top_k: int = 25, top_p: float = 0.95,
                     max_length: int = 64, show_progress: bool = False,
                     statistics: str | os.PathLike | None = None) -> dict:
    """Write ``qgen`` weak pairs of the BEIR corpus in ``dataset_dir`` to ``out_path``.

    Documents are visited in the seeded order of :func:`~zsdr.training.weak.documents.permuted_documents` (the selection rule of
    :func:`~zsdr.training.weak.scl_ict.write_weak_pairs`) in chunks of ``batch_size``; chunk ``c`` is generated with seed
    ``(seed, c)`` (:meth:`QueryGenerator.generate`, ``queries_per_document`` per document). A document's
    distinct non-empty queries become pairs ``qgen-<doc_id>-<k>`` whose positive is the whole
    document ``{"title", "text"}``; a document without one is skipped and counted. Writing stops at
    ``max_pairs`` pairs. Returns ``{"documents", "pairs", "skipped"}``.

    On a GPU the documents are taken ``GPU_POOL * batch_size`` at a time, sorted by passage length
    and generated in batches of ``batch_size`` similar lengths (batch ``b`` of pool ``c`` seeded from
    ``(seed, c, b)``), then written in the selection order; the CPU keeps the chunks above.
    ``statistics``: a path that also gets the set's :func:`pair_statistics` (its ``passes``: 1), as JSON.
    """
    from tqdm.auto import tqdm

    from zsdr.models.generator import passage_of

    if int(queries_per_document) < 1:
        raise ValueError(f"queries_per_document {queries_per_document} must be >= 1")
    if max_pairs is not None and int(max_pairs) < 0:
        raise ValueError(f"max_pairs {max_pairs} must be >= 0 (or null for every document)")
    stats = {"documents": 0, "pairs": 0, "skipped": 0}
    docs = selected_documents(dataset_dir, seed, max_pairs, queries_per_document)
    if device is not None:
        generator.model.to(device)
    on_gpu = next(generator.model.parameters()).device.type == "cuda"
    pool_size = batch_size * (GPU_POOL if on_gpu else 1)
    bar = tqdm(desc="qgen", unit="doc", disable=not show_progress)
    with bar, atomic_write(out_path) as fh:
        for chunk_index in itertools.count():
            chunk = list(itertools.islice(docs, pool_size))
            if not chunk:
                break
            passages = [passage_of({"title": d.title, "text": d.text}) for d in chunk]
            if on_gpu:
                generated = generate_sorted(generator, passages, queries_per_document, chunk_index, seed,
                                             batch_size, top_k=top_k, top_p=top_p, max_length=max_length)
            else:
                generated = generator.generate(passages, queries_per_document, top_k=top_k, top_p=top_p,
                                               max_length=max_length, batch_size=batch_size,
                                               seed=[seed, chunk_index])
            bar.update(len(chunk))
            for doc, queries in zip(chunk, generated):
                stats["documents"] += 1
                queries = list(dict.fromkeys(queries))
                if max_pairs is not None:
                    queries = queries[:max_pairs - stats["pairs"]]
                if not queries:
                    stats["skipped"] += 1
                for k, query in enumerate(queries):
                    write_pair(fh, "qgen", doc.id, k, query, {"title": doc.title, "text": doc.text})
                stats["pairs"] += len(queries)
                if max_pairs is not None and stats["pairs"] >= max_pairs:
                    break
            if max_pairs is not None and stats["pairs"] >= max_pairs:
                break
    log.info("qgen pairs of %s: %d from %d documents (%d skipped)", dataset_dir, stats["pairs"],
             stats["documents"], stats["skipped"])
    if statistics is not None:
        distinct, most = set(), {}
        for p in iter_weak_pairs(out_path):
            distinct.add((p.query, p.doc_id))
            most[p.doc_id] = most.get(p.doc_id, 0) + 1
        with atomic_write(statistics) as fh:
            json.dump(pair_statistics("qgen", max_pairs, stats["documents"], stats["skipped"], stats["pairs"],
                                      len(distinct), 1 if stats["pairs"] else 0, max(most.values(), default=0)),
                      fh, indent=1)
    return stats
