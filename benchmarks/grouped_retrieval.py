"""One retrieval job per system and group of small datasets vs two jobs per dataset.

The workflow's `dense_search_group` encodes and searches one dense system on every one-shard evaluation
dataset in one process (:func:`zsdr.retrieval.search.search_datasets`); without it (`cluster.group_datasets:
false`) each dataset costs an `encode_corpus` job and a `dense_search` job, each a fresh interpreter that
imports torch and transformers and loads the model before its second of work. This script times both
shapes as the workflow runs them (one `python` process per job, the same functions the job scripts
call) on several small synthetic BEIR datasets, checks that the runs are byte-identical, and prints
the ratio.

    .venv/bin/python benchmarks/grouped_retrieval.py                        # 3 datasets, tiny model
    .venv/bin/python benchmarks/grouped_retrieval.py --datasets 8 --docs 2000 --device cuda --base
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT / "src")]
import _synthetic  # noqa: E402

ENCODE = """
import sys, json
from zsdr.retrieval.encode import encode_corpus_shard
job = json.loads(sys.argv[1])
encode_corpus_shard(job["model"], job["dataset"], job["embeddings"], 0, 1, batch_size=job["batch_size"],
                    dtype="float16", device=job["device"], show_progress=False, **job["options"])
"""
SEARCH = """
import sys, json
from zsdr.retrieval.search import search_with_model
job = json.loads(sys.argv[1])
search_with_model(job["model"], job["dataset"], job["split"], [job["embeddings"]], job["run"], k=100, tag="sys",
                  batch_size=job["batch_size"], device=job["device"], **job["options"])
"""
GROUP = """
import sys, json
from zsdr.retrieval.search import search_datasets
jobs = json.loads(sys.argv[1])
search_datasets(jobs, k=100, tag="sys", batch_size=jobs[0]["batch_size"], dtype="float16", device=jobs[0]["device"])
"""


def run(code: str, arg) -> float:
    start = time.perf_counter()
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    subprocess.run([sys.executable, "-c", code, json.dumps(arg)], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", type=int, default=3)
    ap.add_argument("--docs", type=int, default=1200, help="documents per dataset")
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--base", action="store_true", help="a BERT-base-sized random model (default: a tiny one)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--vocab", default=None, help="bert-base-uncased tokenizer folder")
    ap.add_argument("--root", default=None, help="work folder (default: a temporary one)")
    args = ap.parse_args()

    from transformers import BertModel

    root = Path(args.root or tempfile.mkdtemp(prefix="zsdr-group-"))
    vocab = _synthetic.vocab_dir(args.vocab)
    tok = _synthetic.tokenizer(vocab)
    model_dir = root / "model"
    BertModel(_synthetic.bert_config(tok.vocab_size, quick=not args.base)).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    jobs = []
    for d in range(args.datasets):
        texts = _synthetic.passages(vocab, args.docs, seed=d)
        queries = [" ".join(t.split()[:8]) for t in texts[:args.queries]]
        data = _synthetic.write_dataset(root / f"data{d}", texts, queries)
        jobs.append({"model": str(model_dir), "options": {"pooling": "mean", "similarity": "cosine",
                                                          "doc_max_length": 256, "query_max_length": 32},
                     "dataset": str(data), "split": "test", "batch_size": 64, "device": args.device})
    per = [dict(j, embeddings=str(root / "per" / f"emb{i}"), run=str(root / "per" / f"{i}.trec"))
           for i, j in enumerate(jobs)]
    grouped = [dict(j, embeddings=str(root / "group" / f"emb{i}"), run=str(root / "group" / f"{i}.trec"))
               for i, j in enumerate(jobs)]

    t_per = sum(run(ENCODE, j) + run(SEARCH, j) for j in per)
    t_group = run(GROUP, grouped)
    same = all(Path(a["run"]).read_bytes() == Path(b["run"]).read_bytes() for a, b in zip(per, grouped))
    print(f"{args.datasets} datasets x {args.docs} docs, {args.queries} queries each, "
          f"{'BERT-base' if args.base else 'tiny'} model on {args.device}")
    print(f"  per-dataset jobs ({2 * len(per)} processes): {t_per:7.1f} s")
    print(f"  one grouped job  (1 process):  {t_group:7.1f} s")
    print(f"  ratio per-dataset / grouped:   {t_per / t_group:7.2f}   runs byte-identical: {same}")


if __name__ == "__main__":
    main()
