"""Paper-scale data plane: an MS MARCO-sized KD training set, opened as a 4-process job would open it.

Generates a synthetic source shaped like MS MARCO at ``--fraction`` of full size (1.0: 8,841,823
passages of MS MARCO's length distribution, 502,939 training queries with qrels, hard negatives in the
shape of sentence-transformers' ``msmarco-hard-negatives.jsonl``: 6 systems x 50 ids per query, and
teacher scores in the format of its ``cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl``: ``--scores``
per query, 80 by default, 40.2M at full size), then

1. converts it with the pipeline's own functions (``zsdr.data.store.build_store``,
   ``zsdr.training.data.build_training_arrays``), timing each and its peak memory;
2. opens it in 1, then 4 processes at once (each a ``TrainingSet`` as a rank of a KD job opens it) and
   draws KD batches (32 queries, a positive and a negative each, their texts and teacher scores);
   reports open time, batches/s and, from ``/proc/<pid>/smaps_rollup``, each process's private
   (anonymous) memory and the file pages it maps (the stores, in the page cache once per node), and the
   4 processes' total (their private memory plus the mapped files once) against one alone;
3. does the same with the dict-based loading the pipeline used before (``read_corpus``,
   ``read_queries``, ``read_negatives``, ``read_teacher_scores`` + ``with_teacher``) on the first
   ``--dict-fraction`` of the same data (what fits), and prints its bytes per item and the full-size
   figure that follows.

    python benchmarks/data_plane.py --root /tmp/marco --fraction 1.0      # full size (~9 GB of disk)
    python benchmarks/data_plane.py --root /tmp/marco --fraction 0.01     # a quick run
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import pickle
import shutil
import sys
import time
from pathlib import Path

import numpy as np

PASSAGES, QUERIES, QRELS = 8_841_823, 502_939, 532_761      # MS MARCO passage collection, train queries, qrels
SYSTEMS = ("bm25", "msmarco-distilbert-base-tas-b", "msmarco-distilbert-base-v3", "msmarco-MiniLM-L-6-v3",
           "distilbert-margin_mse-cls-dot-v2", "distilroberta-base-ance-firstp")
NEG_PER_SYSTEM = 50
MEAN_WORDS, SIGMA = 56.0, 0.45                                # MS MARCO passages: ~56 words on average
BATCH = 32


def smaps(pid: int | str = "self") -> dict[str, int]:
    """Rss, Pss, private and shared bytes of a process (``/proc/<pid>/smaps_rollup``)."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    # private = anonymous memory (what the process itself allocated); mapped = file-backed pages it maps
    # (the stores: page cache, one copy for every process of a node, whoever touched them first)
    anon = out.get("Anonymous", 0)
    return {"rss": out.get("Rss", 0), "pss": out.get("Pss", 0), "uss": anon, "mapped": out.get("Rss", 0) - anon}


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


# ------------------------------------------------------------------------------------------ generation
def generate(root: Path, fraction: float, scores: int, seed: int = 0) -> dict:
    """Write the synthetic source into ``root`` (a BEIR folder plus negatives.jsonl and teacher.pkl)."""
    rng = np.random.default_rng(seed)
    n_docs, n_q = max(1000, int(PASSAGES * fraction)), max(100, int(QUERIES * fraction))
    vocab = np.array(["".join(chr(97 + c) for c in rng.integers(0, 26, size=rng.integers(2, 10)))
                      for _ in range(30_000)])
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    mu = np.log(MEAN_WORDS) - SIGMA ** 2 / 2
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for lo in range(0, n_docs, 100_000):
            hi = min(n_docs, lo + 100_000)
            lengths = np.clip(np.rint(rng.lognormal(mu, SIGMA, size=hi - lo)), 3, 250).astype(np.int64)
            words = vocab[rng.integers(0, len(vocab), size=int(lengths.sum()))]
            ends = np.cumsum(lengths)
            starts = ends - lengths
            fh.writelines(f'{{"_id": "{lo + i}", "title": "", "text": "{" ".join(words[s:e])}"}}\n'
                          for i, (s, e) in enumerate(zip(starts, ends)))
    with open(root / "queries.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n_q):
            fh.write(f'{{"_id": "q{i}", "text": "{" ".join(vocab[rng.integers(0, len(vocab), size=6)])}"}}\n')
    two = rng.random(n_q) < (QRELS - QUERIES) / QUERIES
    positives = [rng.integers(0, n_docs, size=2 if t else 1) for t in two]
    (root / "qrels").mkdir(exist_ok=True)
    with open(root / "qrels" / "train.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for i, pos in enumerate(positives):
            fh.writelines(f"q{i}\t{p}\t1\n" for p in pos)
    teacher: dict[int, dict[int, float]] = {}
    with open(root / "negatives.jsonl", "w", encoding="utf-8") as fh:
        for i, pos in enumerate(positives):
            negs = rng.integers(0, n_docs, size=(len(SYSTEMS), NEG_PER_SYSTEM))
            neg = {s: negs[j].tolist() for j, s in enumerate(SYSTEMS)}
            fh.write(json.dumps({"qid": f"q{i}", "pos": [int(p) for p in pos], "neg": neg}) + "\n")
            scored = np.concatenate([pos, negs.ravel()[:max(0, scores - len(pos))]])
            teacher[i] = dict(zip(scored.tolist(), rng.normal(0.0, 4.0, size=len(scored)).tolist()))
    with open(root / "teacher.pkl", "wb") as fh:  # {qid: {pid: score}}, passage ids as ints like the original
        pickle.dump({f"q{q}": row for q, row in teacher.items()}, fh, protocol=pickle.HIGHEST_PROTOCOL)
    n_scores = sum(len(r) for r in teacher.values())
    del teacher
    sizes = {p.name: p.stat().st_size for p in root.iterdir() if p.is_file()}
    return {"docs": n_docs, "queries": n_q, "scores": n_scores, "seconds": time.perf_counter() - t0, "bytes": sizes}


# ------------------------------------------------------------------------------------------ conversion
def _convert(root: str, arrays: str, queue) -> None:
    import resource

    from zsdr.data.store import build_store
    from zsdr.training.data import build_training_arrays

    t0 = time.perf_counter()
    build_store(root)
    t1 = time.perf_counter()
    build_training_arrays(root, Path(root) / "negatives.jsonl", arrays, teacher=Path(root) / "teacher.pkl")
    t2 = time.perf_counter()
    queue.put({"store_s": t1 - t0, "arrays_s": t2 - t1,
               "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})


# ------------------------------------------------------------------------------------------ ranks
def _rank(kind: str, root: str, arrays: str, fraction_of_dict: float, batches: int, touch: bool, start, done,
          queue) -> None:
    """One rank: open the training set (with ``touch``, read every page of the stores once, as an epoch
    does), wait for the others, draw KD batches, report memory."""
    rng = np.random.default_rng(os.getpid())
    import zsdr.training.data  # noqa: F401 - the imports are not the data's memory
    base = smaps()["uss"]
    t0 = time.perf_counter()
    if kind == "store":
        from zsdr.training.data import TrainingSet

        data = TrainingSet(root, Path(root) / "negatives.jsonl", teacher=Path(root) / "teacher.pkl", arrays=arrays)
        n = len(data)

        def draw(idx):  # what BiEncoderTask.make_batch reads for a KD batch
            picks = [data.draw(int(i), 0, 7, 1) for i in idx]
            docs = data.corpus_store.rows([r for rows, _ in picks for r in rows])
            queries = data.queries_store.rows([int(data.arrays["qrow"][int(i)]) for i in idx])
            return queries, docs, [scores for _, scores in picks]
    else:
        data = DictTrainingSet(root, fraction_of_dict)
        n = len(data.examples)

        def draw(idx):
            out = []
            for i in idx:
                ex, pos, negs = data.sample(int(i), 0, 7, 1)
                out.append((data.queries[ex.qid], [data.corpus[d] for d in (pos, *negs)],
                            [data.teacher[ex.qid][d] for d in (pos, *negs)]))
            return out
    opened = time.perf_counter() - t0
    if touch and kind == "store":  # read every page once, as an epoch over the data does
        touched = sum(int(np.asarray(a[::1024]).sum(dtype=np.float64) > 0) for a in data.arrays.values())
        for store in (data.corpus_store, data.queries_store):
            for col in store._table.columns:
                for chunk in col.chunks:
                    for buf in chunk.buffers():
                        if buf is not None and buf.size:
                            touched += int(np.frombuffer(buf, dtype=np.uint8)[::4096].sum() > 0)
    start.wait()
    t1 = time.perf_counter()
    for _ in range(batches):
        draw(rng.integers(0, n, size=BATCH))
    rate = batches / (time.perf_counter() - t1)
    queue.put({"pid": os.getpid(), "open_s": opened, "batches_per_s": rate, "examples": n, "base_uss": base,
               **smaps()})
    done.wait()


class DictTrainingSet:
    """The dict-based loading the pipeline used before the stores (everything read into Python objects),
    on the first ``fraction`` of the corpus lines (examples restricted to what those lines hold)."""

    def __init__(self, root: str, fraction: float):
        from zsdr.data.formats import read_queries
        from zsdr.training.data import read_negatives, read_teacher_scores, with_teacher

        root = Path(root)
        self.corpus = {}
        limit = int(sum(1 for _ in open(root / "corpus.jsonl", encoding="utf-8")) * fraction)
        with open(root / "corpus.jsonl", encoding="utf-8") as fh:
            for k, line in enumerate(fh):
                if k >= limit:
                    break
                obj = json.loads(line)
                self.corpus[obj["_id"]] = {"title": obj.get("title", "") or "", "text": obj["text"]}
        self.queries = read_queries(root)
        examples = read_negatives(root / "negatives.jsonl")
        keep_q = int(len(examples) * fraction)
        examples = examples[:keep_q]
        self.teacher = read_teacher_scores(root / "teacher.pkl")
        self.teacher = {q: self.teacher[q] for q in [e.qid for e in examples] if q in self.teacher}
        examples = with_teacher(examples, self.teacher)
        from zsdr.training.data import Example

        self.examples = []
        for ex in examples:
            ex = Example(ex.qid, tuple(p for p in ex.positives if p in self.corpus),
                         tuple(d for d in ex.negatives if d in self.corpus))
            if ex.positives and ex.negatives:
                self.examples.append(ex)
        self.items = {"docs": len(self.corpus), "neg_ids": sum(len(e.negatives) for e in self.examples),
                      "scores": sum(len(r) for r in self.teacher.values())}

    def sample(self, index, epoch, seed, negatives):
        ex = self.examples[index % len(self.examples)]
        rng = np.random.default_rng([seed, epoch, index])
        pos = ex.positives[int(rng.integers(len(ex.positives)))] if len(ex.positives) > 1 else ex.positives[0]
        picks = rng.choice(len(ex.negatives), size=negatives, replace=len(ex.negatives) < negatives)
        return ex, pos, [ex.negatives[int(i)] for i in picks]


def run_ranks(kind: str, procs: int, root: Path, arrays: Path, dict_fraction: float, batches: int,
              touch: bool = True) -> list[dict]:
    ctx = mp.get_context("spawn")
    start, done, queue = ctx.Barrier(procs + 1), ctx.Barrier(procs + 1), ctx.Queue()
    ps = [ctx.Process(target=_rank, args=(kind, str(root), str(arrays), dict_fraction, batches, touch, start, done, queue))
          for _ in range(procs)]
    for p in ps:
        p.start()
    start.wait()
    out = [queue.get() for _ in ps]
    for r in out:  # every rank alive: the shared pages counted once across them
        r.update({f"now_{k}": v for k, v in smaps(r["pid"]).items()})
    done.wait()
    for p in ps:
        p.join()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="where the synthetic source is written")
    parser.add_argument("--fraction", type=float, default=1.0, help="of MS MARCO's size (1.0: full size)")
    parser.add_argument("--scores", type=int, default=80, help="teacher scores per query (80: 40.2M at full size)")
    parser.add_argument("--dict-fraction", type=float, default=0.1,
                        help="of the generated data that the dict-based loading reads (what fits in memory)")
    parser.add_argument("--batches", type=int, default=200, help="KD batches each process draws")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    root = args.root
    gen_meta = root / "generated.json"
    if gen_meta.is_file() and json.loads(gen_meta.read_text()).get("fraction") == args.fraction:
        gen = json.loads(gen_meta.read_text())
        print(f"reusing {root}: {gen['docs']:,} passages, {gen['queries']:,} queries, {gen['scores']:,} scores")
    else:
        shutil.rmtree(root, ignore_errors=True)
        gen = generate(root, args.fraction, args.scores)
        gen["fraction"] = args.fraction
        gen_meta.write_text(json.dumps(gen))
        print(f"generated {gen['docs']:,} passages, {gen['queries']:,} queries, {gen['scores']:,} teacher scores "
              f"in {gen['seconds']:.0f} s; files: " + ", ".join(f"{k} {gb(v)}" for k, v in gen["bytes"].items()))
    arrays = root / "arrays"
    shutil.rmtree(root / "store", ignore_errors=True)
    shutil.rmtree(arrays, ignore_errors=True)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_convert, args=(str(root), str(arrays), q))
    p.start()
    conv = q.get()
    p.join()
    store_bytes = sum(f.stat().st_size for f in (root / "store").iterdir())
    arrays_bytes = sum(f.stat().st_size for f in arrays.iterdir())
    print(f"convert: store {conv['store_s']:.0f} s ({gb(store_bytes)}), training arrays {conv['arrays_s']:.0f} s "
          f"({gb(arrays_bytes)}), peak memory of the conversion job {gb(conv['peak_rss'])}")
    rows = []
    for procs in (1, 4):
        ranks = run_ranks("store", procs, root, arrays, 1.0, args.batches)
        rows.append(("stores", procs, ranks))
    dict_ranks = run_ranks("dict", 1, root, arrays, args.dict_fraction, max(20, args.batches // 4))
    rows.append((f"dicts ({args.dict_fraction:g} of it)", 1, dict_ranks))

    print(f"\n## Data plane: {gen['docs']:,} passages, {gen['queries']:,} queries, {gen['scores']:,} teacher scores "
          f"({args.fraction:g} of MS MARCO)\n")
    print("| loading | processes | examples | open (s, max) | KD batches/s per process | private per process (max) "
          "| mapped files per process (max) | all processes: private + mapped once | vs one process |")
    print("|---|---|---|---|---|---|---|---|---|")
    alone = None
    for name, procs, ranks in rows:
        uss = max(r["now_uss"] for r in ranks)
        mapped = max(r["now_mapped"] for r in ranks)
        total = sum(r["now_uss"] for r in ranks) + mapped
        if name == "stores" and procs == 1:
            alone = total
        ratio = f"{total / alone:.2f}x" if name == "stores" and alone else ""
        print(f"| {name} | {procs} | {ranks[0]['examples']:,} | {max(r['open_s'] for r in ranks):.1f} | "
              f"{np.mean([r['batches_per_s'] for r in ranks]):.0f} | {gb(uss)} | {gb(mapped)} | {gb(total)} | {ratio} |")
    d = dict_ranks[0]
    data_uss = d["now_uss"] - d["base_uss"]
    scale = 1.0 / max(args.dict_fraction * args.fraction, 1e-12)
    print(f"\ndict-based loading of {args.dict_fraction:g} of this data: {gb(data_uss)} private per process beyond "
          f"the imports ({gb(d['base_uss'])}); at full MS MARCO size (the same per-item cost) ~{gb(data_uss * scale)} "
          f"per process, x 4 for a 4-GPU job. Stores at this size: "
          f"{gb(max(r['now_uss'] for r in rows[1][2]) - rows[1][2][0]['base_uss'])} private per process beyond the imports.")
    if not args.keep:
        shutil.rmtree(root / "store", ignore_errors=True)
        shutil.rmtree(arrays, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
