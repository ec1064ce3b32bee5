"""CPU proxy of the GPU encode check: zsdr's encode job against the pure forward pass of the same model.

A tiny random-weight BERT on the bert-base-uncased vocabulary (``_synthetic.py``), MS MARCO-length
synthetic passages, the CPU. The model is cheap here, so what the pipeline adds around it shows:

* **pipeline**: ``encode_corpus_shard``, the encode job (read the corpus JSONL, tokenise, pad,
  encode, write the float16 embeddings folder; its own docs/s, model loading excluded);
* **ceiling**: the same model's forward pass alone, on the same batches (the job's chunks, sorted
  and cut as the installed zsdr cuts them), tokenised and padded before the clock starts.

Both run in this process, interleaved ``--repeat`` times (best of each); the script prints
pipeline / ceiling (the target is 0.85 or more). Not a test: timings are not assertions.

    .venv/bin/python benchmarks/encode_cpu_proxy.py [--docs 20000] [--hidden 128] [--layers 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import _synthetic as syn  # noqa: E402


def job_batches(lengths: np.ndarray, chunk: int, batch_size: int) -> list[np.ndarray]:
    """The rows of each batch the encode job forms: chunks of ``chunk`` documents, each sorted longest
    first and cut by the installed zsdr's rule (a token budget of ``batch_size`` x the chunk's
    longest text where zsdr.batching or ``batch_bounds`` exists, else ``batch_size`` documents)."""
    try:
        from zsdr.batching import length_batches
    except ImportError:
        length_batches = None
    try:
        from zsdr.models.encoder import batch_bounds
    except ImportError:
        batch_bounds = None
    out = []
    for lo in range(0, len(lengths), chunk):
        part = lengths[lo:lo + chunk]
        if length_batches is not None:
            out.extend(lo + rows for rows in length_batches(part, max_tokens=batch_size * max(int(part.max()), 1)))
            continue
        order = np.argsort(-part, kind="stable")
        if batch_bounds is None:
            bounds = [(s, min(s + batch_size, len(order))) for s in range(0, len(order), batch_size)]
        else:
            bounds = batch_bounds(part[order], batch_size * max(int(part[order[0]]), 1))
        out.extend(lo + order[s:e] for s, e in bounds)
    return out


def padded(ids: list[list[int]], rows: np.ndarray, pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(ids[i]) for i in rows)
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for j, i in enumerate(rows):
        input_ids[j, :len(ids[i])] = ids[i]
        mask[j, :len(ids[i])] = 1
    return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(mask),
            "token_type_ids": torch.zeros_like(torch.from_numpy(mask))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", help="folder with the bert-base-uncased tokenizer files")
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--batch-size", type=int, default=64, help="the job's batch_size (dense.batch_size)")
    parser.add_argument("--chunk", type=int, default=10_000, help="the job's chunk_size")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import BertConfig, BertModel

    from zsdr.models.encoder import Encoder, EncoderConfig
    from zsdr.retrieval.encode import encode_corpus_shard, read_meta

    vocab = syn.vocab_dir(args.vocab)
    tok = syn.tokenizer(vocab)
    texts = syn.passages(vocab, args.docs, seed=0)
    config = BertConfig(vocab_size=len(tok), hidden_size=args.hidden, num_hidden_layers=args.layers,
                        num_attention_heads=max(args.hidden // 64, 1), intermediate_size=4 * args.hidden)
    torch.manual_seed(0)
    encoder = Encoder(BertModel(config, add_pooling_layer=False), tok,
                      EncoderConfig(pooling="cls", similarity="dot", doc_max_length=256), name_or_path="tiny-bert")
    encoder.eval()
    with tempfile.TemporaryDirectory(prefix="encode_cpu_proxy-") as tmp:
        tmp = Path(tmp)
        folder = encoder.save_pretrained(tmp / "model")
        dataset = syn.write_dataset(tmp / "data", texts)
        ids = encoder.tokenize_docs([{"title": "", "text": t} for t in texts])["input_ids"]
        lengths = np.array([len(r) for r in ids])
        batches = [padded(ids, rows, tok.pad_token_id) for rows in job_batches(lengths, args.chunk, args.batch_size)]
        print(f"{args.docs:,} passages, mean {lengths.mean():.1f} tokens; BERT {args.hidden} x {args.layers} layers; "
              f"{len(batches)} batches; {args.threads} threads", flush=True)
        best_pipe = best_ceil = 0.0
        for r in range(args.repeat):
            with torch.inference_mode():
                start = time.perf_counter()
                for b in batches:
                    encoder(**b)
                ceil = args.docs / (time.perf_counter() - start)
            out = encode_corpus_shard(folder, dataset, tmp / f"emb{r}", batch_size=args.batch_size, device="cpu",
                                      chunk_size=args.chunk, show_progress=False)
            pipe = read_meta(out)["docs_per_second"]
            print(f"  run {r + 1}: pipeline {pipe:,.0f} docs/s, ceiling {ceil:,.0f} docs/s", flush=True)
            best_pipe, best_ceil = max(best_pipe, pipe), max(best_ceil, ceil)
    print(f"pipeline (encode_corpus_shard) {best_pipe:,.0f} docs/s; ceiling (forward alone) {best_ceil:,.0f} docs/s; "
          f"ratio {best_pipe / best_ceil:.2f} (target >= 0.85)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
