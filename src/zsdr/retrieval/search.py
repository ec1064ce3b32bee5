"""Dense search jobs and their CLI: a model's queries over shards encoded earlier, the one-shot
``encode-search`` path, several datasets in one process, and the ``zsdr`` commands ``encode-search``,
``encode``, ``encode-queries``, ``search``, ``search-shard`` and ``merge-shards``.

The search itself is :mod:`zsdr.retrieval.exact` (:func:`search_shards`: exact inner-product top-``k``
over embedding shards, ties by corpus position); its scattered form, one job per shard and one merge,
is :mod:`zsdr.retrieval.scatter` (:func:`search_shard_topk`, :func:`merge_shard_topk`). Both are
importable from here as before.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from zsdr.argtypes import UsageError, device, nonnegative_int, positive_int
from zsdr.io import temp_sibling
from zsdr.retrieval.exact import GPU_MAX_K, search_shards, warn_settings
from zsdr.retrieval.scatter import TOPK_FORMAT, merge_shard_topk, search_shard_topk

__all__ = [
    "GPU_MAX_K", "TOPK_FORMAT", "encode_search", "merge_shard_topk", "register_cli", "search_datasets",
    "search_folders", "search_shard_topk", "search_shards", "search_with_model",
]

log = logging.getLogger(__name__)


def search_folders(queries_dir: str | os.PathLike, shard_dirs: Sequence[str | os.PathLike], out_run: str | os.PathLike,
                   k: int = 1000, tag: str = "dense", gpu: bool | None = None, **kwargs) -> dict:
    """Search an embeddings folder of queries over shard folders; write the TREC run."""
    from zsdr.data.formats import write_trec_run
    from zsdr.retrieval.encode import load_embeddings

    q_emb, q_ids, q_meta = load_embeddings(queries_dir)
    warn_settings(q_meta, shard_dirs)
    run = search_shards(np.asarray(q_emb), q_ids, shard_dirs, k=k, gpu=gpu, queries_meta=(str(queries_dir), q_meta),
                        **kwargs)
    write_trec_run(out_run, run, tag=tag, depth=k, provenance=run_provenance(q_meta, shard_dirs))
    return run


def queries_meta(encoder, dataset_dir, split: str) -> tuple[str, dict]:
    """``(where, meta)`` of queries encoded in this process, as an embeddings folder's meta records them
    (:mod:`zsdr.provenance`), for the checks of :func:`search_shards`."""
    from zsdr.provenance import corpus_identity, model_identity

    from zsdr.io import DataError

    try:
        corpus = corpus_identity(dataset_dir)
    except DataError:
        corpus = None
    return (f"{dataset_dir} (the queries of {split})",
            {"corpus": corpus, "model": encoder.name_or_path,
             "model_sha256": model_identity(encoder)["sha256"], "encoder": json.loads(json.dumps(encoder.describe())),
             "dataset": str(dataset_dir), "split": split})


def run_provenance(q_meta: dict, shard_dirs: Sequence[str | os.PathLike] = ()) -> dict:
    """What a dense run records beside it: the corpus (the shards', else the queries' dataset's), the model
    and its digest, the queries' dataset and split, the shard folders."""
    from zsdr.retrieval.encode import read_meta

    corpus = next((m.get("corpus") for m in (read_meta(d) for d in shard_dirs) if m.get("corpus")),
                  q_meta.get("corpus"))
    return {"kind": "dense", "corpus": corpus, "model": q_meta.get("model"), "model_sha256": q_meta.get("model_sha256"),
            "queries": {"dataset": q_meta.get("dataset"), "split": q_meta.get("split")},
            "shards": [str(d) for d in shard_dirs]}


def _write_run(encoder, out_run, run: dict, k: int, tag: str | None, dataset_dir, split: str, start: float,
               shard_dirs: Sequence[str | os.PathLike] = ()) -> None:
    from zsdr.data.formats import write_trec_run

    name = Path(str(encoder.name_or_path or "model")).name or "model"
    write_trec_run(out_run, run, tag=tag or f"dense-{name}", depth=k,
                   provenance=run_provenance(queries_meta(encoder, dataset_dir, split)[1], shard_dirs))
    log.info("dense search %s on %s/%s: %d queries in %.1f s", name, dataset_dir, split, len(run),
             time.perf_counter() - start)


def search_with_model(model, dataset_dir: str | os.PathLike, split: str, shard_dirs: Sequence[str | os.PathLike],
                      out_run: str | os.PathLike, k: int = 1000, tag: str | None = None, batch_size: int = 64,
                      device: str | None = None, precision: str | None = None, gpu: bool | None = None,
                      show_progress: bool = False, **overrides) -> dict:
    """Encode the judged queries of ``split`` with ``model`` and search corpus shards encoded earlier.

    The workflow's search job: the shards come from :func:`~zsdr.retrieval.encode.encode_corpus_shard`
    jobs run with the same model and ``overrides``. Writes the TREC run; returns it.
    """
    from zsdr.models.encoder import load_encoder
    from zsdr.retrieval.encode import encode_judged_queries

    start = time.perf_counter()
    encoder = load_encoder(model, device=device, precision=precision, **overrides)
    q_ids, q_emb = encode_judged_queries(encoder, dataset_dir, split, batch_size, device, precision, show_progress)
    run = search_shards(q_emb, q_ids, shard_dirs, k=k, gpu=gpu, show_progress=show_progress,
                        queries_meta=queries_meta(encoder, dataset_dir, split))
    _write_run(encoder, out_run, run, k, tag, dataset_dir, split, start, shard_dirs)
    return run


def dense_search_run(model, dataset_dir: str | os.PathLike, split: str, inputs: Sequence[str | os.PathLike],
                     out_run: str | os.PathLike, *, scattered: bool, k: int, tag: str, batch_size: int,
                     device: str | None, precision: str | None, **overrides) -> dict:
    """The workflow's `dense_search` job: ``inputs`` are the per-shard top-k files of its `search_shard` jobs, merged
    into the run (``scattered``: :func:`merge_shard_topk`, no model loaded), or the corpus shard folders its judged
    queries are encoded for and searched in (:func:`search_with_model`). Writes the TREC run; returns it."""
    if scattered:
        return merge_shard_topk(inputs, out_run, k=k, tag=tag)
    return search_with_model(model, dataset_dir, split, inputs, out_run, k=k, tag=tag, batch_size=batch_size,
                             device=device, precision=precision, **overrides)


def encode_search(model, dataset_dir: str | os.PathLike, split: str, out_run: str | os.PathLike,
                  pooling: str | None = None, similarity: str | None = None, max_length: int | None = None,
                  query_max_length: int | None = None, doc_max_length: int | None = None,
                  doc_format: str | None = None, query_prefix: str | None = None, doc_prefix: str | None = None,
                  batch_size: int = 64, k: int = 1000, num_shards: int = 1, work_dir: str | os.PathLike | None = None,
                  tag: str | None = None, device: str | None = None, precision: str | None = None,
                  dtype: str = "float16", gpu: bool | None = None, show_progress: bool = True,
                  trust_remote_code: bool = False) -> dict:
    """Encode the judged queries of ``split`` and the corpus (``num_shards`` shards), search, write a TREC run.

    ``model`` is an HF id, a folder or an :class:`~zsdr.models.encoder.Encoder`. Shards go to
    ``work_dir`` (kept) or to a temporary folder beside ``out_run`` (removed). Returns the run.
    ``trust_remote_code``: as in :meth:`Encoder.from_pretrained <zsdr.models.encoder.Encoder.from_pretrained>`.
    """
    from zsdr.models.encoder import load_encoder
    from zsdr.retrieval.encode import encode_corpus_shard, encode_judged_queries

    overrides = dict(pooling=pooling, similarity=similarity, max_length=max_length, query_max_length=query_max_length,
                     doc_max_length=doc_max_length, doc_format=doc_format, query_prefix=query_prefix,
                     doc_prefix=doc_prefix)
    encoder = load_encoder(model, device=device, precision=precision, trust_remote_code=trust_remote_code,
                           **overrides)
    start = time.perf_counter()
    q_ids, q_emb = encode_judged_queries(encoder, dataset_dir, split, batch_size, device, precision, show_progress)
    out_run = Path(out_run)
    out_run.parent.mkdir(parents=True, exist_ok=True)
    temp = None
    if work_dir is None:
        temp = temp_sibling(out_run, is_dir=True, kind="shards")
    root = Path(work_dir) if work_dir is not None else temp
    try:
        shard_dirs = [encode_corpus_shard(encoder, dataset_dir, root / f"shard-{s}-of-{num_shards}", s, num_shards,
                                          batch_size=batch_size, dtype=dtype, device=device, precision=precision,
                                          show_progress=show_progress)
                      for s in range(num_shards)]
        run = search_shards(q_emb, q_ids, shard_dirs, k=k, gpu=gpu, show_progress=show_progress,
                            queries_meta=queries_meta(encoder, dataset_dir, split))
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    _write_run(encoder, out_run, run, k, tag, dataset_dir, split, start)
    return run


def search_datasets(jobs: Sequence[dict], k: int = 1000, tag: str | None = None, batch_size: int = 64,
                    dtype: str = "float16", device: str | None = None, precision: str | None = None,
                    gpu: bool | None = None) -> None:
    """Encode and search several datasets in one process (the workflow's `dense_search_group` job).

    Each job names ``model``, ``options`` (encoder settings), ``dataset``, ``split``, ``embeddings`` (the
    corpus folder written, as one shard) and ``run`` (the TREC run written). A model is loaded once for
    every dataset that uses it with the same settings. Embeddings and runs are those of
    :func:`~zsdr.retrieval.encode.encode_corpus_shard` followed by :func:`search_with_model`.
    """
    from zsdr.models.encoder import load_encoder
    from zsdr.retrieval.encode import encode_corpus_shard

    loaded, encoder = None, None
    for job in jobs:
        key = json.dumps([str(job["model"]), job.get("options") or {}], sort_keys=True, default=str)
        if key != loaded:  # one model in memory at a time
            encoder = None
            encoder = load_encoder(job["model"], device=device, precision=precision, **(job.get("options") or {}))
            loaded = key
        shard = encode_corpus_shard(encoder, job["dataset"], job["embeddings"], 0, 1, batch_size=batch_size,
                                    dtype=dtype, device=device, precision=precision, show_progress=False)
        search_with_model(encoder, job["dataset"], job["split"], [shard], job["run"], k=k, tag=tag,
                          batch_size=batch_size, device=device, precision=precision, gpu=gpu)


# --------------------------------------------------------------------------------------------
# CLI


def _set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)
        try:
            import faiss

            faiss.omp_set_num_threads(threads)
        except (ImportError, AttributeError):  # pragma: no cover
            pass


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="Hugging Face id or model folder")
    p.add_argument("--pooling", choices=["cls", "mean", "cls_linear_ln"], default=None,
                   help="pooling of the last hidden states (default: the checkpoint's zsdr.json or "
                        "sentence-transformers config)")
    p.add_argument("--similarity", choices=["dot", "cosine"], default=None,
                   help="score of a query and a document (default: from the checkpoint, as --pooling)")
    p.add_argument("--max-length", type=positive_int, default=None, help="query and document maximum tokens")
    p.add_argument("--query-max-length", type=positive_int, default=None,
                   help="query maximum tokens (default: --max-length, else the checkpoint's)")
    p.add_argument("--doc-max-length", type=positive_int, default=None,
                   help="document maximum tokens (default: --max-length, else the checkpoint's)")
    p.add_argument("--doc-format", choices=["title_space_text", "title_sep_text", "lower_title_text", "text"],
                   default=None, help="how title and text make the document input (zsdr.models.encoder; "
                                      "default: the checkpoint's, else title_space_text)")
    p.add_argument("--query-prefix", default=None, help="text put before every query (default: the checkpoint's)")
    p.add_argument("--doc-prefix", default=None, help="text put before every document (default: the checkpoint's)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="run the model folder's own code where its config.json asks for it (refused otherwise; "
                        "folders zsdr export wrote need no code run)")
    p.add_argument("--batch-size", type=positive_int, default=64,
                   help="texts per batch at the longest length; shorter batches hold as many tokens "
                        "(default: %(default)s)")
    p.add_argument("--device", type=device, default=None, help="cpu, cuda, cuda:1 (default: CUDA when available)")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default=None,
                   help="autocast on CUDA (auto: bf16 where supported); the CPU always runs fp32")
    p.add_argument("--threads", type=positive_int, default=None, help="CPU threads for torch and faiss")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _overrides(args) -> dict:
    """The encoder settings a command was given (and ``trust_remote_code`` where asked for)."""
    return dict(pooling=args.pooling, similarity=args.similarity, max_length=args.max_length,
                query_max_length=args.query_max_length, doc_max_length=args.doc_max_length,
                doc_format=args.doc_format, query_prefix=args.query_prefix, doc_prefix=args.doc_prefix,
                **({"trust_remote_code": True} if args.trust_remote_code else {}))


def _gpu_flag(value: str) -> bool | None:
    """``--gpu`` as ``search_shards``' ``gpu``; ``yes`` where faiss sees no GPU is a usage error at once
    (before any encoding), naming the fix."""
    if value == "yes":
        import faiss

        if not (faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0):
            raise UsageError("argument --gpu: yes, but faiss sees no GPU (fix: --gpu auto or no; on a CUDA machine "
                             "`make install-gpu` installs faiss-gpu)")
    return {"auto": None, "yes": True, "no": False}[value]


def cmd_encode_search(args) -> int:
    _set_threads(args.threads)
    start = time.perf_counter()
    run = encode_search(args.model, args.dataset, args.split, args.out, batch_size=args.batch_size, k=args.depth,
                        num_shards=args.shards, work_dir=args.work_dir, tag=args.tag, device=args.device,
                        precision=args.precision, dtype=args.dtype, gpu=_gpu_flag(args.gpu),
                        show_progress=not args.quiet, **_overrides(args))
    print(json.dumps({"run": str(args.out), "queries": len(run), "seconds": round(time.perf_counter() - start, 1)}))
    return 0


def _check_shard(args) -> None:
    """``zsdr encode``'s usage check (run by zsdr.cli before the model is looked at)."""
    if args.shard >= args.num_shards:
        raise UsageError(f"argument --shard: shard {args.shard} does not exist among --num-shards {args.num_shards} "
                         f"(fix: pass --shard 0 to {args.num_shards - 1})")


def _check_gpu(args) -> None:
    """The usage check of the commands with ``--gpu`` (run by zsdr.cli before the model is looked at)."""
    _gpu_flag(args.gpu)


def cmd_encode(args) -> int:
    from zsdr.retrieval.encode import encode_corpus_shard, read_meta

    _check_shard(args)
    _set_threads(args.threads)
    out = encode_corpus_shard(args.model, args.dataset, args.out, args.shard, args.num_shards,
                              batch_size=args.batch_size, dtype=args.dtype, device=args.device,
                              precision=args.precision, chunk_size=args.chunk_size, show_progress=not args.quiet,
                              **_overrides(args))
    meta = read_meta(out)
    print(json.dumps({"out": str(out), "count": meta["count"], "dim": meta["dim"], "seconds": meta["seconds"]}))
    return 0


def cmd_encode_queries(args) -> int:
    from zsdr.retrieval.encode import encode_queries_file, read_meta

    _set_threads(args.threads)
    out = encode_queries_file(args.model, args.dataset, args.split, args.out, batch_size=args.batch_size,
                              device=args.device, precision=args.precision, show_progress=not args.quiet,
                              **_overrides(args))
    meta = read_meta(out)
    print(json.dumps({"out": str(out), "count": meta["count"], "dim": meta["dim"]}))
    return 0


def cmd_search(args) -> int:
    _set_threads(args.threads)
    start = time.perf_counter()
    run = search_folders(args.queries, args.shards, args.out, k=args.depth, tag=args.tag, gpu=_gpu_flag(args.gpu),
                         show_progress=not args.quiet)
    print(json.dumps({"run": str(args.out), "queries": len(run), "seconds": round(time.perf_counter() - start, 1)}))
    return 0


def cmd_search_shard(args) -> int:
    _set_threads(args.threads)
    start = time.perf_counter()
    out = search_shard_topk(args.queries, args.shard, args.out, k=args.depth, gpu=_gpu_flag(args.gpu),
                            show_progress=not args.quiet)
    print(json.dumps({"out": str(out), "seconds": round(time.perf_counter() - start, 1)}))
    return 0


def cmd_merge_shards(args) -> int:
    run = merge_shard_topk(args.parts, args.out, k=args.depth, tag=args.tag)
    print(json.dumps({"run": str(args.out), "queries": len(run)}))
    return 0


def register_cli(subparsers) -> None:
    """Add ``encode-search``, ``encode``, ``encode-queries``, ``search``, ``search-shard`` and ``merge-shards``
    to a ``zsdr`` subparsers object."""
    p = subparsers.add_parser("encode-search", help="dense retrieval in one go: encode queries and corpus, search")
    _add_model_args(p)
    p.add_argument("--dataset", required=True, help="BEIR-layout folder")
    p.add_argument("--split", default="test", help="qrels split whose judged queries are searched (default: test)")
    p.add_argument("--out", required=True, help="TREC run to write")
    p.add_argument("--shards", type=positive_int, default=1, help="encode the corpus in this many shards")
    p.add_argument("--depth", type=positive_int, default=1000, help="documents per query")
    p.add_argument("--dtype", choices=["float16", "float32"], default="float16", help="stored document embeddings")
    p.add_argument("--work-dir", default=None, help="keep the shard folders here (default: temporary)")
    p.add_argument("--tag", default=None, help="run tag, the TREC run's last column (default: dense-<model name>)")
    p.add_argument("--gpu", choices=["auto", "yes", "no"], default="auto", help="faiss on the GPU")
    p.set_defaults(func=cmd_encode_search, check_usage=_check_gpu)

    p = subparsers.add_parser("encode", help="encode one shard of a corpus into an embeddings folder")
    _add_model_args(p)
    p.add_argument("--dataset", required=True, help="BEIR-layout folder")
    p.add_argument("--out", required=True, help="embeddings folder to write")
    p.add_argument("--shard", type=nonnegative_int, default=0, help="which shard to encode, from 0 (default: 0)")
    p.add_argument("--num-shards", type=positive_int, default=1,
                   help="contiguous corpus shards of nearly equal size (default: 1, the whole corpus)")
    p.add_argument("--dtype", choices=["float16", "float32"], default="float16",
                   help="stored document embeddings (default: float16)")
    p.add_argument("--chunk-size", type=positive_int, default=10_000,
                   help="documents read, encoded and written at a time")
    p.set_defaults(func=cmd_encode, check_usage=_check_shard)

    p = subparsers.add_parser("encode-queries", help="encode the judged queries of a split into an embeddings folder")
    _add_model_args(p)
    p.add_argument("--dataset", required=True, help="BEIR-layout folder")
    p.add_argument("--split", default="test", help="qrels split whose judged queries are encoded (default: test)")
    p.add_argument("--out", required=True, help="embeddings folder to write")
    p.set_defaults(func=cmd_encode_queries)

    p = subparsers.add_parser("search", help="exact inner-product search of query embeddings over corpus shards")
    p.add_argument("--queries", required=True, help="embeddings folder of the queries")
    p.add_argument("--shards", required=True, nargs="+", help="embeddings folders of the corpus")
    p.add_argument("--out", required=True, help="TREC run to write")
    p.add_argument("--depth", type=positive_int, default=1000, help="documents per query (default: 1000)")
    p.add_argument("--tag", default="dense", help="run tag, the TREC run's last column (default: dense)")
    p.add_argument("--gpu", choices=["auto", "yes", "no"], default="auto",
                   help="faiss on the GPU (auto: when one is visible)")
    p.add_argument("--threads", type=positive_int, default=None, help="CPU threads for torch and faiss")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_search, check_usage=_check_gpu)

    p = subparsers.add_parser("search-shard", help="one shard's exact top-k for query embeddings (scattered search)")
    p.add_argument("--queries", required=True, help="embeddings folder of the queries")
    p.add_argument("--shard", required=True, help="embeddings folder of one corpus shard")
    p.add_argument("--out", required=True, help=".npz of the shard's top-k to write")
    p.add_argument("--depth", type=positive_int, default=1000, help="documents kept per query (default: 1000)")
    p.add_argument("--gpu", choices=["auto", "yes", "no"], default="auto",
                   help="faiss on the GPU (auto: when one is visible)")
    p.add_argument("--threads", type=positive_int, default=None, help="CPU threads for torch and faiss")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_search_shard, check_usage=_check_gpu)

    p = subparsers.add_parser("merge-shards", help="merge per-shard top-k files (search-shard) into a TREC run")
    p.add_argument("--parts", required=True, nargs="+", help="the shards' .npz files, in shard order")
    p.add_argument("--out", required=True, help="TREC run to write")
    p.add_argument("--depth", type=positive_int, default=1000, help="documents per query (default: 1000)")
    p.add_argument("--tag", default="dense", help="run tag, the TREC run's last column (default: dense)")
    p.set_defaults(func=cmd_merge_shards)
