"""Paper-scale data plane: an MS MARCO-sized KD training set, COCO-DR's spans and RMSC's weak pairs, opened as
4-process jobs.

Section ``marco`` (``--sections``):

Generates a synthetic source shaped like MS MARCO at ``--fraction`` of full size (1.0: 8,841,823
passages of MS MARCO's length distribution, 502,939 training queries with qrels, hard negatives in the
shape of sentence-transformers' ``msmarco-hard-negatives.jsonl``: 6 systems x 50 ids per query, and
teacher scores in the format of its ``cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl``: ``--scores``
per query, 80 by default, 40.2M at full size), then

1. converts it with the pipeline's own functions (``zsdr.data.store.build_store``,
   ``zsdr.data.training_set.build_training_arrays``), timing each and its peak memory;
2. opens it in 1, then 4 processes at once (each a ``TrainingSet`` as a rank of a KD job opens it) and
   draws KD batches (32 queries, a positive and a negative each, their texts and teacher scores);
   reports open time, batches/s and, from ``/proc/<pid>/smaps_rollup``, each process's private
   (anonymous) memory and the file pages it maps (the stores, in the page cache once per node), and the
   4 processes' total (their private memory plus the mapped files once) against one alone;
3. does the same with the dict-based loading the pipeline used before (``read_corpus``,
   ``read_queries``, ``read_negatives``, ``read_teacher_scores`` + ``with_teacher``) on the first
   ``--dict-fraction`` of the same data (what fits), and prints its bytes per item and the full-size
   figure that follows.

Section ``coco``: synthetic spans of the 30 corpora COCO-DR pretrains on (``cocodr.pretrained.coco``
of configs/papers/cocodr.yaml: MS MARCO and the corpora of BEIR's 18 tasks, CQADupStack as its 12
forums), at ``--coco-fraction`` of their documents: 52,764,546 at full size, the corpus sizes and mean
document lengths in words of BEIR's Table 1 (Thakur et al., 2021). A document of ``w`` words (log-normal
around its corpus's mean) has ``ceil(1.3 w / 24)`` spans (30-token spans, ~24 tokens filled on average,
[X]: a model of ``write_spans``, not its output) of random words; documents with fewer than two spans are
dropped, as ``write_spans`` drops them. Then

1. writes each corpus's span file with the pipeline's own writer (``zsdr.pretrain.spans.SpanWriter``),
   timing it, and the first ``--coco-list-fraction`` of each corpus's kept documents as the
   ``spans.jsonl`` lines the pipeline wrote before;
2. opens the 30 span files in 1, then 4 processes at once, as the ranks of a COCO job do
   (``open_spans``), reads every page once (an epoch), and draws documents in batches of 200 (a GPU's
   batch in the paper) with their pair of spans (``sample_pair``: what ``CocoTask.make_batch`` reads
   before tokenising): open time, documents/s, private memory and mapped file pages per process;
3. does the same with the lists the pipeline used before (the old ``read_spans``: every spans.jsonl
   parsed into lists of lists of strings in every process) on the ``--coco-list-fraction``.

Section ``rmsc``: a weak-pair file of ``--rmsc-pairs`` pairs (500,000 by default: a weak set as large as MS
MARCO's labelled one, RMSC's "comparable to the supervised set"; queries of ~8 random words, positives of
MS MARCO's passage lengths) in the JSON-lines format of ``zsdr.training.weak``. It is converted with the
pipeline's own ``write_pairs_table`` (timed), then opened in 1, then 4 processes at once as the ranks of an
RMSC job open a weak set (``WeakItems`` over the mapped ``PairsTable``), which draw batches of 32 examples;
and in 4 processes with the list of examples the pipeline built before (``read_weak_pairs`` -> ``Item``\ s).

Section ``dam``: a corpus of ``--dam-fraction`` of MS MARCO's passages (their length distribution), stored with
``build_store`` (timed), then read in 1, then 4 processes at once as the ranks of a DDR DAM job read their
texts (``CorpusTexts`` over the mapped store: kept rows only), which draw batches of 128 documents; and in 4
processes with the list of every document's text the pipeline built before.

    python benchmarks/data_plane.py --root /tmp/marco --fraction 1.0      # full size (~9 GB of disk)
    python benchmarks/data_plane.py --root /tmp/marco --fraction 0.01     # a quick run
    python benchmarks/data_plane.py --root /tmp/zsdr-bench --sections coco --coco-fraction 0.05
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
def random_vocabulary(rng: np.random.Generator, size: int = 30_000) -> np.ndarray:
    """``size`` random lowercase words of 2-9 letters."""
    return np.array(["".join(chr(97 + c) for c in rng.integers(0, 26, size=rng.integers(2, 10)))
                     for _ in range(size)])


def write_corpus(path: Path, n_docs: int, vocab: np.ndarray, rng: np.random.Generator) -> None:
    """``n_docs`` passages of MS MARCO's length distribution (log-normal around 56 words) of random words."""
    mu = np.log(MEAN_WORDS) - SIGMA ** 2 / 2
    with open(path, "w", encoding="utf-8") as fh:
        for lo in range(0, n_docs, 100_000):
            hi = min(n_docs, lo + 100_000)
            lengths = np.clip(np.rint(rng.lognormal(mu, SIGMA, size=hi - lo)), 3, 250).astype(np.int64)
            words = vocab[rng.integers(0, len(vocab), size=int(lengths.sum()))]
            ends = np.cumsum(lengths)
            starts = ends - lengths
            fh.writelines(f'{{"_id": "{lo + i}", "title": "", "text": "{" ".join(words[s:e])}"}}\n'
                          for i, (s, e) in enumerate(zip(starts, ends)))


def generate(root: Path, fraction: float, scores: int, seed: int = 0) -> dict:
    """Write the synthetic source into ``root`` (a BEIR folder plus negatives.jsonl and teacher.pkl)."""
    rng = np.random.default_rng(seed)
    n_docs, n_q = max(1000, int(PASSAGES * fraction)), max(100, int(QUERIES * fraction))
    vocab = random_vocabulary(rng)
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    write_corpus(root / "corpus.jsonl", n_docs, vocab, rng)
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
    from zsdr.data.training_set import build_training_arrays

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
    import zsdr.data.training_set  # noqa: F401 - the imports are not the data's memory
    base = smaps()["uss"]
    t0 = time.perf_counter()
    if kind == "store":
        from zsdr.data.training_set import TrainingSet

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
        from zsdr.data.training_set import read_negatives, read_teacher_scores, with_teacher

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
        from zsdr.data.training_set import Example

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


def spawn_ranks(target, args: tuple, procs: int) -> list[dict]:
    """``procs`` processes running ``target(*args, start, done, queue)`` at once, as the ranks of a job: each
    opens its data, waits for the others, draws batches and reports; their memory is read while every rank
    is alive (the shared pages counted once across them)."""
    ctx = mp.get_context("spawn")
    start, done, queue = ctx.Barrier(procs + 1), ctx.Barrier(procs + 1), ctx.Queue()
    ps = [ctx.Process(target=target, args=(*args, start, done, queue)) for _ in range(procs)]
    for p in ps:
        p.start()
    start.wait()
    out = [queue.get() for _ in ps]
    for r in out:
        r.update({f"now_{k}": v for k, v in smaps(r["pid"]).items()})
    done.wait()
    for p in ps:
        p.join()
    return out


def draw_and_report(examples, batch: int, batches: int, read, opened: float, base: int, start, done, queue) -> None:
    """A rank's part after opening its data: wait for the others, ``read`` ``batches`` batches of ``batch`` random
    examples, report the rate and memory (with the open time and the private memory before opening, ``base``)
    and stay alive until every rank has been measured."""
    rng = np.random.default_rng(os.getpid())
    start.wait()
    t1 = time.perf_counter()
    for _ in range(batches):
        for i in rng.integers(0, len(examples), size=batch).tolist():
            read(examples[i])
    rate = batches * batch / (time.perf_counter() - t1)
    queue.put({"pid": os.getpid(), "open_s": opened, "per_s": rate, "examples": len(examples), "base_uss": base,
               **smaps()})
    done.wait()


def print_ranks(rows: list[tuple[str, int, list[dict]]], what: str, rate: str, imports_counted: bool) -> None:
    """A Markdown table of ``(loading, processes, ranks)`` rows: open time, ``what`` drawn per second (the
    ranks' ``rate``), private memory beyond the imports and mapped file pages per process, and all the
    processes together (their private memory, with the imports where ``imports_counted``, plus the mapped
    pages once)."""
    print(f"\n| loading | processes | {what} | open (s, max) | {what} drawn/s per process | private per process "
          "beyond imports (max) | mapped files per process (max) | all processes: private + mapped once |")
    print("|---|---|---|---|---|---|---|---|")
    for name, procs, ranks in rows:
        data = max(r["now_uss"] - r["base_uss"] for r in ranks)
        mapped = max(r["now_mapped"] for r in ranks)
        total = sum(r["now_uss"] - (0 if imports_counted else r["base_uss"]) for r in ranks) + mapped
        print(f"| {name} | {procs} | {ranks[0]['examples']:,} | {max(r['open_s'] for r in ranks):.2f} | "
              f"{np.mean([r[rate] for r in ranks]):,.0f} | {gb(data)} | {gb(mapped)} | {gb(total)} |")


def run_ranks(kind: str, procs: int, root: Path, arrays: Path, dict_fraction: float, batches: int,
              touch: bool = True) -> list[dict]:
    return spawn_ranks(_rank, (kind, str(root), str(arrays), dict_fraction, batches, touch), procs)


# ------------------------------------------------------------------------------------------ COCO spans
COCO_BATCH = 200    # documents per GPU per step (COCO Base)
# documents, mean words per document (BEIR, Thakur et al. 2021, Table 1; MS MARCO's passage collection)
COCO_CORPORA = {
    "msmarco": (8_841_823, 56.0), "trec-covid": (171_332, 160.8), "nfcorpus": (3_633, 232.3),
    "nq": (2_681_468, 78.9), "hotpotqa": (5_233_329, 46.3), "fiqa": (57_638, 132.3), "arguana": (8_674, 166.8),
    "webis-touche2020": (382_545, 292.4),
    **{f"cqadupstack-{forum}": (n, 129.1) for forum, n in (
        ("android", 22_998), ("english", 40_221), ("gaming", 45_301), ("gis", 37_637), ("mathematica", 16_705),
        ("physics", 38_316), ("programmers", 32_176), ("stats", 42_269), ("tex", 68_184), ("unix", 47_382),
        ("webmasters", 17_405), ("wordpress", 48_605))},
    "quora": (522_931, 11.4), "dbpedia-entity": (4_635_922, 49.7), "scidocs": (25_657, 176.2),
    "fever": (5_416_568, 84.8), "climate-fever": (5_416_593, 84.8), "scifact": (5_183, 213.6),
    "bioasq": (14_914_603, 202.6), "signal1m": (2_866_316, 13.9), "trec-news": (594_977, 634.8),
    "robust04": (528_155, 467.0),
}
TOKENS_PER_WORD, TOKENS_PER_SPAN, COCO_SIGMA = 1.3, 24, 0.6


def generate_spans(root: Path, fraction: float, list_fraction: float, seed: int = 0) -> dict:
    """Write each corpus's span file (SpanWriter, timed) and the old spans.jsonl of its first
    ``list_fraction`` of kept documents into ``root/<corpus>/``."""
    from zsdr.pretrain.spans import SpanWriter

    rng = np.random.default_rng(seed)
    vocab = np.array(["".join(chr(97 + c) for c in rng.integers(0, 26, size=rng.integers(2, 9)))
                      for _ in range(30_000)])
    out = {"documents": 0, "kept": 0, "spans": 0, "listed": 0, "write_s": 0.0, "files": {}}
    t0 = time.perf_counter()
    for name, (n_docs, mean_words) in COCO_CORPORA.items():
        n = max(1, round(n_docs * fraction))
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        mu = np.log(mean_words) - COCO_SIGMA ** 2 / 2
        kept = 0
        with SpanWriter(folder / "spans.arrow") as writer, open(folder / "spans.jsonl", "w", encoding="utf-8") as old:
            for lo in range(0, n, 65_536):
                m = min(65_536, n - lo)
                words = np.clip(np.rint(rng.lognormal(mu, COCO_SIGMA, size=m)), 1, 5000).astype(np.int64)
                n_spans = np.ceil(words * TOKENS_PER_WORD / TOKENS_PER_SPAN).astype(np.int64)
                picks = vocab[rng.integers(0, len(vocab), size=int(words.sum()))]
                at = 0
                docs = []
                for i, (w, k) in enumerate(zip(words.tolist(), n_spans.tolist())):
                    if k >= 2:
                        cut = np.linspace(at, at + w, k + 1).astype(np.int64)
                        docs.append((f"{name}-{lo + i}", [" ".join(picks[a:b]) for a, b in zip(cut[:-1], cut[1:])]))
                    at += w
                t = time.perf_counter()
                for rid, spans in docs:
                    writer.add(rid, spans)
                out["write_s"] += time.perf_counter() - t
                limit = int(np.ceil(list_fraction * n))   # the first list_fraction of the corpus's documents
                listed = [d for d in docs if int(d[0].rsplit("-", 1)[1]) < limit]
                old.writelines(json.dumps({"_id": rid, "spans": spans}) + "\n" for rid, spans in listed)
                kept += len(docs)
                out["spans"] += sum(len(sp) for _, sp in docs)
                out["listed"] += len(listed)
            t = time.perf_counter()
        out["write_s"] += time.perf_counter() - t   # the writer's last batch and footer
        out["documents"] += n
        out["kept"] += kept
        out["files"][name] = kept
    out["seconds"] = time.perf_counter() - t0
    out["arrow_bytes"] = sum((root / c / "spans.arrow").stat().st_size for c in COCO_CORPORA)
    out["jsonl_bytes"] = sum((root / c / "spans.jsonl").stat().st_size for c in COCO_CORPORA)
    return out


def read_span_lists(path: Path) -> list[list[str]]:
    """The old ``zsdr.pretrain.spans.read_spans``: a spans.jsonl file as lists of lists of strings."""
    from zsdr.data.formats import iter_jsonl
    from zsdr.io import DataError

    out = []
    for line, obj in iter_jsonl(path):
        spans = obj.get("spans")
        if not isinstance(spans, list) or len(spans) < 2 or not all(isinstance(x, str) and x.strip() for x in spans):
            raise DataError(path, line, "bad spans line", "write the file again")
        out.append(spans)
    return out


def _coco_rank(kind: str, root: str, batches: int, touch: bool, start, done, queue) -> None:
    """One rank of a COCO job: map the 30 span files (or, ``lists``, parse the old spans.jsonl files into
    lists), read every page once with ``touch``, draw batches of documents and their span pairs."""
    rng = np.random.default_rng(os.getpid())
    import zsdr.pretrain.coco  # noqa: F401 - the imports (torch) are not the data's memory
    from zsdr.data.spans import SpanDocuments, open_spans, sample_pair  # noqa: F401

    base = smaps()["uss"]
    t0 = time.perf_counter()
    files = [Path(root) / c for c in COCO_CORPORA]
    if kind == "spans":
        documents = open_spans([f / "spans.arrow" for f in files])
    else:
        documents = []
        for f in files:
            documents.extend(read_span_lists(f / "spans.jsonl"))
    opened = time.perf_counter() - t0
    if touch and kind == "spans":  # read every page once, as an epoch over the documents does
        for spans_file in documents.files:
            for col in spans_file._table.columns:
                for chunk in col.chunks:
                    for buf in chunk.buffers():
                        if buf is not None and buf.size:
                            np.frombuffer(buf, dtype=np.uint8)[::4096].sum()
    start.wait()
    n = len(documents)
    t1 = time.perf_counter()
    drawn = 0
    for _ in range(batches):
        texts = []
        for i in rng.integers(0, n, size=COCO_BATCH).tolist():
            spans = documents[i]
            a, b = sample_pair(len(spans), 7, 0, i)
            texts += [spans[a], spans[b]]
        drawn += COCO_BATCH
    rate = drawn / (time.perf_counter() - t1)
    queue.put({"pid": os.getpid(), "open_s": opened, "docs_per_s": rate, "examples": n, "base_uss": base, **smaps()})
    done.wait()


def run_coco_ranks(kind: str, procs: int, root: Path, batches: int) -> list[dict]:
    return spawn_ranks(_coco_rank, (kind, str(root), batches, True), procs)


def coco_section(root: Path, fraction: float, list_fraction: float, batches: int, keep: bool) -> None:
    root = root / "coco"
    meta = root / "generated.json"
    want = {"fraction": fraction, "list_fraction": list_fraction}
    if meta.is_file() and {k: json.loads(meta.read_text()).get(k) for k in want} == want:
        gen = json.loads(meta.read_text())
        print(f"reusing {root}: {gen['kept']:,} span documents")
    else:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        gen = {**generate_spans(root, fraction, list_fraction), **want}
        meta.write_text(json.dumps(gen))
    full = sum(n for n, _ in COCO_CORPORA.values())
    print(f"\n## COCO spans: {len(COCO_CORPORA)} corpora, {gen['documents']:,} documents ({fraction:g} of {full:,}), "
          f"{gen['kept']:,} kept with {gen['spans']:,} spans\n")
    print(f"span files (SpanWriter): {gen['write_s']:.1f} s of writing, {gb(gen['arrow_bytes'])} on disk "
          f"(whole generation {gen['seconds']:.0f} s); old spans.jsonl of {list_fraction:g} of them: "
          f"{gen['listed']:,} documents, {gb(gen['jsonl_bytes'])}")
    rows = [("span files (mapped)", procs, run_coco_ranks("spans", procs, root, batches)) for procs in (1, 4)]
    rows.append((f"lists ({list_fraction:g} of it)", 4, run_coco_ranks("lists", 4, root, max(10, batches // 4))))
    print_ranks(rows, "documents", "docs_per_s", imports_counted=True)
    lists = rows[2][2]
    per_doc = max(r["now_uss"] - r["base_uss"] for r in lists) / max(lists[0]["examples"], 1)
    kept_full = gen["kept"] / fraction
    per_rank_spans = max(r["now_uss"] - r["base_uss"] for r in rows[1][2])
    print(f"\nlists: {per_doc:,.0f} private bytes per document in every process; at full size ({kept_full:,.0f} kept "
          f"documents) ~{gb(per_doc * kept_full)} per process, x 8 for COCO's 8-GPU job. Span files at full size: "
          f"~{gb(gen['arrow_bytes'] / fraction)} of page cache for the whole node, shared by its processes; "
          f"{gb(per_rank_spans)} private per process at this size.")
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------------------ RMSC weak pairs
def generate_pairs(path: Path, pairs: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(30_000)]
    t0 = time.perf_counter()
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(pairs):
            n = max(4, int(rng.lognormal(np.log(MEAN_WORDS), SIGMA)))
            picks = rng.integers(0, len(words), size=n + 8).tolist()
            fh.write(json.dumps({"_id": f"scl-d{i}-0", "doc_id": f"d{i}", "query": " ".join(words[j] for j in picks[:8]),
                                 "positive": {"title": "", "text": " ".join(words[j] for j in picks[8:])},
                                 "method": "scl"}) + "\n")
    return time.perf_counter() - t0


def _rmsc_rank(kind: str, jsonl: str, table: str, batches: int, start, done, queue) -> None:
    """One rank of an RMSC job reading a weak set: mapped (``table``) or the old list of examples."""
    from zsdr.training.rmsc import Item, WeakItems
    from zsdr.training.weak.format import read_weak_pairs
    from zsdr.training.weak.table import PairsTable

    base = smaps()["uss"]
    t0 = time.perf_counter()
    if kind == "table":
        items = WeakItems(PairsTable(table), 1)
    else:
        items = [Item(1, p.query, p.positive, p.id, frozenset({p.id, p.doc_id})) for p in read_weak_pairs(jsonl)]
    opened = time.perf_counter() - t0
    draw_and_report(items, BATCH, batches, lambda item: (item.query, item.positive["text"], item.relevant),
                    opened, base, start, done, queue)


def rmsc_section(root: Path, pairs: int, batches: int, keep: bool) -> None:
    from zsdr.training.weak.table import write_pairs_table

    root = root / "rmsc"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    jsonl, table = root / "scl.jsonl", root / "scl.arrow"
    gen_s = generate_pairs(jsonl, pairs)
    t0 = time.perf_counter()
    write_pairs_table(jsonl, table)
    convert_s = time.perf_counter() - t0
    print(f"\n## RMSC weak pairs: {pairs:,} pairs, {gb(jsonl.stat().st_size)} of JSON lines (written in {gen_s:.0f} s)\n")
    print(f"converted (write_pairs_table): {convert_s:.1f} s, {gb(table.stat().st_size)} table")
    rows = []
    for kind, procs in (("table", 1), ("table", 4), ("list", 4)):
        ranks = spawn_ranks(_rmsc_rank, (kind, str(jsonl), str(table), batches), procs)
        rows.append(("mapped table" if kind == "table" else "list of examples (before)", procs, ranks))
    print_ranks(rows, "examples", "per_s", imports_counted=False)
    listed = rows[2][2]
    per_pair = max(r["now_uss"] - r["base_uss"] for r in listed) / pairs
    print(f"\nlist of examples: {per_pair:,.0f} private bytes per pair in every process (x 8 for an 8-GPU job); "
          f"the table: {table.stat().st_size / pairs:,.0f} bytes per pair of page cache, once per node.")
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------------------ DDR's DAM texts
DAM_BATCH = 128     # documents per GPU per step (DDR's DAMs: 512 over 4 GPUs)


def _dam_rank(kind: str, root: str, batches: int, start, done, queue) -> None:
    """One rank of a DAM's MLM job reading its corpus: the mapped store (``CorpusTexts``) or the old list of
    every document's text (``corpus_texts`` before: the corpus parsed into Python strings in every process)."""
    import itertools

    import pyarrow.compute  # noqa: F401  (imported by either path's job anyway: counted with the imports)

    from zsdr.pretrain.mlm import CorpusTexts
    from zsdr.pretrain.spans import corpus_documents

    base = smaps()["uss"]
    t0 = time.perf_counter()
    if kind == "store":
        texts = CorpusTexts(root)
    else:
        texts = list(itertools.islice((t for _, _, t in corpus_documents(root) if t), None))
    opened = time.perf_counter() - t0
    draw_and_report(texts, DAM_BATCH, batches, lambda text: text, opened, base, start, done, queue)


def dam_section(root: Path, fraction: float, batches: int, keep: bool) -> None:
    from zsdr.data.store import build_store

    root = root / "dam"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    vocab = random_vocabulary(rng)
    n_docs = max(1000, int(PASSAGES * fraction))
    t0 = time.perf_counter()
    write_corpus(root / "corpus.jsonl", n_docs, vocab, rng)
    (root / "queries.jsonl").write_text('{"_id": "q0", "text": "a query"}\n', encoding="utf-8")
    gen_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    build_store(root)
    store_s = time.perf_counter() - t0
    print(f"\n## DDR's DAM texts: {n_docs:,} MS MARCO-length passages, {gb((root / 'corpus.jsonl').stat().st_size)} "
          f"of JSON lines (written in {gen_s:.0f} s)\n")
    print(f"store (build_store): {store_s:.1f} s, "
          f"{gb(sum(f.stat().st_size for f in (root / 'store').iterdir()))}")
    rows = []
    for kind, procs in (("store", 1), ("store", 4), ("list", 4)):
        ranks = spawn_ranks(_dam_rank, (kind, str(root), batches), procs)
        rows.append(("mapped store (CorpusTexts)" if kind == "store" else "list of texts (before)", procs, ranks))
    print_ranks(rows, "documents", "per_s", imports_counted=False)
    listed = rows[2][2]
    per_doc = max(r["now_uss"] - r["base_uss"] for r in listed) / n_docs
    print(f"\nlist of texts: {per_doc:,.0f} private bytes per document in every process "
          f"({gb(per_doc * PASSAGES)} per process for MS MARCO's {PASSAGES:,} passages, x 4 for DDR's 4-GPU DAM); "
          f"the store: {max(r['now_uss'] - r['base_uss'] for r in rows[1][2]) / n_docs:,.1f} private bytes per document.")
    if not keep:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--root", type=Path, required=True, help="where the synthetic source is written")
    parser.add_argument("--fraction", type=float, default=1.0, help="of MS MARCO's size (1.0: full size)")
    parser.add_argument("--scores", type=int, default=80, help="teacher scores per query (80: 40.2M at full size)")
    parser.add_argument("--dict-fraction", type=float, default=0.1,
                        help="of the generated data that the dict-based loading reads (what fits in memory)")
    parser.add_argument("--batches", type=int, default=200, help="KD batches each process draws")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--sections", default="marco,coco,rmsc,dam",
                        help="any of marco, coco, rmsc, dam (comma-separated)")
    parser.add_argument("--coco-fraction", type=float, default=1.0,
                        help="of the 30 COCO corpora's documents (1.0: 52,764,546)")
    parser.add_argument("--coco-list-fraction", type=float, default=0.1,
                        help="of the generated span documents that the old list loading reads (what fits)")
    parser.add_argument("--coco-batches", type=int, default=100, help="batches of 200 documents each process draws")
    parser.add_argument("--rmsc-pairs", type=int, default=500_000, help="weak pairs of the rmsc section")
    parser.add_argument("--dam-fraction", type=float, default=0.25,
                        help="of MS MARCO's passages in the dam section (the old list loading reads them all)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sections = {x.strip() for x in args.sections.split(",") if x.strip()}
    unknown = sections - {"marco", "coco", "rmsc", "dam"}
    if unknown:
        parser.error(f"--sections: unknown {', '.join(sorted(unknown))} (use marco, coco, rmsc, dam)")
    if "dam" in sections:
        dam_section(args.root, args.dam_fraction, max(20, args.batches), args.keep)
    if "rmsc" in sections:
        rmsc_section(args.root, args.rmsc_pairs, max(20, args.batches), args.keep)
    if "coco" in sections:
        coco_section(args.root, args.coco_fraction, args.coco_list_fraction, args.coco_batches, args.keep)
    if "marco" not in sections:
        return 0
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
