"""GPU throughput check: zsdr's encode, label, generate and train paths against the model's own ceiling.

One process, one GPU, random-weight BERT-base (and T5-base) on the bert-base-uncased vocabulary,
MS MARCO-length synthetic passages (``_synthetic.py``: mean about 89 tokens). Prints one table:

* **ceiling**: the model alone: pre-tokenised, length-sorted batches of ``--batch-size`` already on
  the GPU, bf16 weights, forward only;
* **zsdr encode job**: ``encode_corpus_shard`` (read the corpus JSONL, tokenise, encode, write the
  float16 embeddings folder) at ``--batch-size`` and 4x that, and its ratio to the ceiling;
* **Encoder.encode_docs** in process, and the previous per-row / autocast loop on the same tokens;
* **sentence-transformers** bf16 on the same texts and batch size, and zsdr's ratio to it;
* **reader** (BERM's start probabilities, BERT-base QA head) and **QGen** (T5-base, 3 sampled
  queries of up to 64 tokens per passage) in documents per second;
* **ANCE mining** (``mine_negatives``, when faiss is installed): training queries per second against
  the encoded corpus;
* a **DPR-shaped training step** (32 queries <= 32 tokens, 64 passages <= 128 tokens, in-batch
  softmax, bf16 autocast, AdamW) in steps/s with tokenisation in the step and pre-tokenised, with
  the model FLOP utilisation against the GPU's bf16 dense peak.

Imports only what the GPU machine has (torch, transformers, sentence-transformers, numpy, tokenizers)
and the zsdr modules these paths use (no faiss, ranx, snakemake or pyserini).

    python3 benchmarks/gpu_check.py [--vocab DIR] [--docs 200000]
    python3 benchmarks/gpu_check.py --device cpu --quick      # a small dry run of every step
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import _synthetic as syn  # noqa: E402

PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12}  # dense bf16 tensor-core FLOP/s
ROWS: list[tuple[str, str, str]] = []


def row(name: str, value: str, note: str = "") -> None:
    ROWS.append((name, value, note))
    print(f"  {name}: {value} {note}", flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def section(fn):
    def run(*args, **kwargs):
        start = time.perf_counter()
        print(f"-- {fn.__name__}", flush=True)
        try:
            return fn(*args, **kwargs)
        except Exception:  # one failing step does not hide the others' numbers
            traceback.print_exc()
            row(fn.__name__, "FAILED", "(see the traceback above)")
        finally:
            print(f"   ({time.perf_counter() - start:.1f} s)", flush=True)
    return run


@section
def ceiling(encoder, packed, batch_size: int, device: torch.device, budget: bool = False) -> float:
    """The model alone: length-sorted, pre-padded batches on the device, bf16 weights, forward only;
    batches of ``batch_size`` documents, or (``budget``) of the token budget the encode job uses."""
    from zsdr.batching import length_batches

    half = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = copy.deepcopy(encoder.backbone).to(device=device, dtype=half).eval()
    budget_tokens = batch_size * int(packed.lengths.max()) if budget else None
    rows = length_batches(packed.lengths, size=None if budget else batch_size, max_tokens=budget_tokens)
    batches = [{k: torch.from_numpy(v).to(device) for k, v in packed.pad(r, 0).items()} for r in rows]
    with torch.inference_mode():
        for b in batches[:3]:
            model(**b)
        sync(device)
        start = time.perf_counter()
        for b in batches:
            model(**b).last_hidden_state[:, 0]
        sync(device)
        seconds = time.perf_counter() - start
    count = len(batches)
    del model, batches
    rate = len(packed) / seconds
    what = f"token budget {batch_size} x longest ({count} batches)" if budget else f"batch {batch_size}"
    row(f"ceiling (model alone, bf16 weights){', token budget' if budget else ''}", f"{rate:,.0f} docs/s",
        f"{what}, pre-tokenised, sorted, on the GPU")
    return rate


@section
def previous_job(source: Path, folder: Path, dataset: Path, out: Path, batch_size: int, device: torch.device,
                 ceil: float | None) -> None:
    """The encode job of another zsdr source tree (``--previous``: the code before this change), in a
    subprocess on the same model, corpus and GPU."""
    import json
    import subprocess

    code = ("import sys; sys.path.insert(0, sys.argv[1]); from zsdr.retrieval.encode import encode_corpus_shard; "
            "encode_corpus_shard(sys.argv[2], sys.argv[3], sys.argv[4], batch_size=int(sys.argv[5]), dtype='float16', "
            "device=sys.argv[6], precision='bf16', show_progress=False)")
    subprocess.run([sys.executable, "-c", code, str(source), str(folder), str(dataset), str(out), str(batch_size),
                    str(device)], check=True)
    rate = json.loads((out / "meta.json").read_text())["docs_per_second"]
    note = f"batch {batch_size}" + (f"; ratio to ceiling {rate / ceil:.2f}" if ceil else "")
    row(f"previous encode job ({source}), batch {batch_size}", f"{rate:,.0f} docs/s", note)


@section
def encode_job(folder: Path, dataset: Path, out: Path, batch_size: int, device: torch.device, ceil: float | None,
               precision: str) -> float:
    from zsdr.retrieval.encode import encode_corpus_shard, read_meta

    start = time.perf_counter()
    encode_corpus_shard(folder, dataset, out, batch_size=batch_size, dtype="float16", device=str(device),
                        precision=precision, show_progress=False)
    wall = time.perf_counter() - start
    meta = read_meta(out)
    rate = meta["docs_per_second"]
    note = f"batch {batch_size}; {meta['count'] / wall:,.0f} docs/s with model loading"
    if ceil:
        note += f"; ratio to ceiling {rate / ceil:.2f}"
    row(f"zsdr encode job (encode_corpus_shard), batch {batch_size}", f"{rate:,.0f} docs/s", note)
    return rate


def legacy_encode(encoder, features, batch_size: int, device: torch.device, amp) -> np.ndarray:
    """The encode loop before the packed path: per-row collate, count batches, autocast over fp32
    weights, pageable copies, the index copy synchronising every batch."""
    ids = features["input_ids"]
    n = len(ids)
    lengths = np.fromiter((len(r) for r in ids), dtype=np.int64, count=n)
    order = np.argsort(-lengths, kind="stable")
    out = torch.empty((n, encoder.dim), dtype=torch.float32, device=device)
    types = features.get("token_type_ids")
    with torch.inference_mode():
        for start in range(0, n, batch_size):
            idx = order[start:start + batch_size]
            width = max(len(ids[i]) for i in idx)
            arr = {"input_ids": np.zeros((len(idx), width), dtype=np.int64),
                   "attention_mask": np.zeros((len(idx), width), dtype=np.int64)}
            if types is not None:
                arr["token_type_ids"] = np.zeros((len(idx), width), dtype=np.int64)
            for j, i in enumerate(idx):
                m = len(ids[i])
                arr["input_ids"][j, :m] = ids[i]
                arr["attention_mask"][j, :m] = 1
                if types is not None:
                    arr["token_type_ids"][j, :m] = types[i]
            batch = {k: torch.from_numpy(v).to(device, non_blocking=True) for k, v in arr.items()}
            with torch.autocast(device_type=device.type, dtype=amp, enabled=amp is not None):
                emb = encoder(**batch)
            out[torch.from_numpy(idx).to(device)] = emb.float()
    return out.cpu().numpy()


@section
def in_process(encoder, texts, batch_size: int, device: torch.device, ceil: float | None) -> tuple:
    amp = torch.bfloat16 if device.type == "cuda" else None
    docs = [{"title": "", "text": t} for t in texts]
    encoder.encode_docs(docs[:2048], batch_size=batch_size, device=device, precision="bf16")  # warm-up
    sync(device)
    start = time.perf_counter()
    new = encoder.encode_docs(docs, batch_size=batch_size, device=device, precision="bf16")
    new_rate = len(docs) / (time.perf_counter() - start)
    start = time.perf_counter()
    old = legacy_encode(encoder, encoder.tokenize_docs(docs), batch_size, device, amp)
    old_rate = len(docs) / (time.perf_counter() - start)
    cos = (new * old).sum(1) / np.linalg.norm(new, axis=1) / np.linalg.norm(old, axis=1)
    row("Encoder.encode_docs (tokenise + encode)", f"{new_rate:,.0f} docs/s",
        f"{len(docs):,} docs; ratio to ceiling {new_rate / ceil:.2f}" if ceil else "")
    row("previous loop (per-row collate, autocast)", f"{old_rate:,.0f} docs/s",
        f"same docs; new / previous {new_rate / old_rate:.2f}; min cosine {cos.min():.4f}")
    return new_rate, new


@section
def sentence_transformers(folder: Path, texts, batch_size: int, device: torch.device, zsdr_rate: float | None,
                          zsdr_emb) -> None:
    from sentence_transformers import SentenceTransformer, models

    word = models.Transformer(str(folder), max_seq_length=256)
    pool = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="cls")
    st = SentenceTransformer(modules=[word, pool], device=str(device))
    if device.type == "cuda":
        st = st.to(torch.bfloat16)
    st.encode(texts[:2048], batch_size=batch_size, convert_to_tensor=True)
    sync(device)
    start = time.perf_counter()
    emb = st.encode(texts, batch_size=batch_size, convert_to_tensor=True)
    sync(device)
    rate = len(texts) / (time.perf_counter() - start)
    emb = emb.float().cpu().numpy()
    note = f"bf16 weights, batch {batch_size}"
    if zsdr_rate:
        note += f"; zsdr / sentence-transformers {zsdr_rate / rate:.2f}"
    if zsdr_emb is not None and len(zsdr_emb) == len(emb):
        cos = (emb * zsdr_emb).sum(1) / np.linalg.norm(emb, axis=1) / np.linalg.norm(zsdr_emb, axis=1)
        note += f"; min cosine to zsdr {cos.min():.4f}"
    row("sentence-transformers encode", f"{rate:,.0f} docs/s", note)


@section
def reader(vocab: Path, config, texts, device: torch.device, batch_size: int) -> None:
    from transformers import BertForQuestionAnswering

    from zsdr.models.reader import Reader

    torch.manual_seed(0)
    r = Reader(BertForQuestionAnswering(config), syn.tokenizer(vocab), max_length=384).for_inference(device, "bf16")
    questions = [" ".join(t.split()[:8]) for t in texts]
    r.start_probabilities(questions[:512], texts[:512], batch_size=batch_size)
    sync(device)
    start = time.perf_counter()
    out = r.start_probabilities(questions, texts, batch_size=batch_size)
    rate = len(texts) / (time.perf_counter() - start)
    assert len(out) == len(texts) and all(out)
    row("BERM reader (start probabilities)", f"{rate:,.0f} pairs/s",
        f"{'BERT-base' if config.hidden_size == 768 else 'tiny'} QA, {next(r.parameters()).dtype}, batch {batch_size}, {len(texts):,} pairs")


@section
def qgen(vocab: Path, quick: bool, dataset: Path, out: Path, device: torch.device, batch_size: int,
         docs: int) -> None:
    from transformers import T5Config, T5ForConditionalGeneration

    from zsdr.models.generator import QueryGenerator
    from zsdr.training.weak.qgen_pairs import write_qgen_pairs

    tok = syn.tokenizer(vocab)
    size = dict(d_model=64, d_ff=128, num_layers=2, num_heads=2, d_kv=32) if quick else \
        dict(d_model=768, d_ff=3072, num_layers=12, num_heads=12, d_kv=64)  # T5-base
    config = T5Config(vocab_size=len(tok), num_decoder_layers=size["num_layers"], pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.sep_token_id, decoder_start_token_id=tok.pad_token_id, **size)
    torch.manual_seed(0)
    gen = QueryGenerator(T5ForConditionalGeneration(config), tok, max_length=256,
                         query_max_length=64).for_inference(device, "bf16")
    start = time.perf_counter()
    stats = write_qgen_pairs(gen, dataset, out, queries_per_document=3, max_pairs=3 * docs, batch_size=batch_size,
                             max_length=64)
    rate = stats["documents"] / (time.perf_counter() - start)
    row("QGen T5 (3 sampled queries of <= 64 tokens)", f"{rate:,.1f} docs/s",
        f"{'T5-base' if not quick else 'tiny T5'}, {next(gen.parameters()).dtype}, batch {batch_size}, "
        f"{stats['documents']} docs, random weights (every query runs the full 64 tokens)")


@section
def training(encoder_factory, texts, device: torch.device, steps: int) -> None:
    from zsdr.models.encoder import Packed

    rng = np.random.default_rng(0)
    queries = [" ".join(t.split()[:rng.integers(4, 30)]) for t in texts[:4096]]
    for pre in (False, True):
        for fused in ((False, True) if device.type == "cuda" else (False,)):
            enc = encoder_factory().to(device).train()
            enc.configure(query_max_length=32, doc_max_length=128)
            opt = torch.optim.AdamW(enc.parameters(), lr=1e-5, fused=fused or None)
            labels = torch.arange(32, device=device) * 2

            def batch(i):
                q = queries[(32 * i) % 4000:(32 * i) % 4000 + 32]
                d = texts[(64 * i) % 4000:(64 * i) % 4000 + 64]
                return enc.collate(enc.tokenize_queries(q)), enc.collate(enc.tokenize_docs(d))

            if pre:  # tokenised and padded before the loop, pinned, copied without waiting
                ready = [tuple({k: (v.pin_memory() if device.type == "cuda" else v) for k, v in b.items()}
                               for b in batch(i)) for i in range(steps + 3)]
            n_tokens = []

            def step(i):
                qb, db = ready[i] if pre else batch(i)
                qb = {k: v.to(device, non_blocking=True) for k, v in qb.items()}
                db = {k: v.to(device, non_blocking=True) for k, v in db.items()}
                n_tokens.append((qb["input_ids"].numel(), qb["input_ids"].shape[1], db["input_ids"].numel(),
                                 db["input_ids"].shape[1]))
                with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                    scores = enc(**qb) @ enc(**db).T
                loss = torch.nn.functional.cross_entropy(scores.float(), labels)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            for i in range(3):
                step(i)
            sync(device)
            start = time.perf_counter()
            for i in range(3, steps + 3):
                step(i)
            sync(device)
            seconds = time.perf_counter() - start
            rate = steps / seconds
            cfg = enc.backbone.config
            params = sum(p.numel() for n, p in enc.backbone.named_parameters() if "embeddings" not in n)
            flops = 0.0
            for qn, qs, dn, ds in n_tokens[3:]:  # 6 N per token + attention (12 L d s per token)
                flops += 6 * params * (qn + dn) + 12 * cfg.num_hidden_layers * cfg.hidden_size * (qn * qs + dn * ds)
            name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
            peak = next((v for k, v in PEAK_BF16.items() if k in name), None)
            mfu = f"MFU {flops / seconds / peak:.1%} of {peak / 1e12:.0f} TFLOP/s" if peak else "MFU n/a"
            what = "pre-tokenised" if pre else "tokenised in the step"
            row(f"DPR train step, {what}, AdamW {'fused' if fused else 'foreach'}", f"{rate:.2f} steps/s",
                f"{flops / seconds / 1e12:.1f} TFLOP/s; {mfu}")
            del enc, opt


@section
def mining(folder: Path, texts: list[str], shard: Path, root: Path, device: torch.device, queries: int,
           batch_size: int) -> None:
    """ANCE mining as the pipeline's mine job runs it (``mine_negatives``: encode the judged training
    queries, exact top-200 search of the encoded corpus shard, drop positives, sample 20), in training
    queries per second and query-passage scores per second (what scales to 500k queries x 8.8M)."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        row("ANCE mining (mine_negatives)", "skipped", "faiss is not installed")
        return
    from zsdr.data.formats import write_beir
    from zsdr.retrieval.encode import read_meta
    from zsdr.retrieval.mine import mine_negatives

    rng = np.random.default_rng(3)
    n = len(texts)
    qs = {f"q{i}": " ".join(texts[int(rng.integers(n))].split()[:rng.integers(4, 12)]) for i in range(queries)}
    write_beir(root, {f"d{i}": {"title": "", "text": t} for i, t in enumerate(texts)}, qs,
               {"train": {q: {f"d{int(rng.integers(n))}": 1} for q in qs}})
    docs = read_meta(shard)["count"]
    start = time.perf_counter()
    mine_negatives(folder, root, [shard], root / "mined.jsonl", depth=200, sample=20, batch_size=batch_size,
                   device=str(device), precision="bf16" if device.type == "cuda" else None,
                   gpu=device.type == "cuda")
    wall = time.perf_counter() - start
    row("ANCE mining (mine_negatives: encode queries, top-200 exact search, sample 20)",
        f"{queries / wall:,.0f} queries/s", f"{queries:,} queries x {docs:,} passages: {queries * docs / wall / 1e9:.1f}G "
        f"scores/s with model loading; 502,939 x 8.8M at this rate: {502_939 * 8_841_823 / (queries * docs / wall) / 60:.0f} min")


def dpr_training_set(root: Path, texts: list[str], queries: int = 4096):
    """A BEIR folder of ``texts`` and a negatives file: query i judges passage 2i, passage 2i + 1 its negative."""
    import json

    from zsdr.data.training_set import TrainingSet

    rng = np.random.default_rng(1)
    n = min(queries, len(texts) // 2)
    qtexts = [" ".join(t.split()[:rng.integers(4, 30)]) for t in texts[1:2 * n:2]]
    syn.write_dataset(root, texts[:2 * n], qtexts)
    with open(root / "negatives.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"qid": f"q{i}", "pos": [f"d{2 * i}"], "neg": {"bm25": [f"d{2 * i + 1}"]}}) + "\n")
    return TrainingSet(root, root / "negatives.jsonl", split="none")


@section
def trainer_steps(encoder_factory, data, out: Path, device: torch.device, warm: int, steps: int,
                  compiled: bool = False) -> None:
    """zsdr's Trainer on a DPR-shaped BiEncoderTask (contrastive, 32 queries <= 32 tokens, 1 + 1 passages
    <= 128 tokens each: 64 in-batch passages, bf16, fused AdamW, clipping): batches prepared by the
    thread, by worker processes, and pre-tokenised (the same step on ready, pinned batches); with
    ``compiled``, the backbone compiled (workers and pre-tokenised). steps/s from the trainer's own log (a record every ``warm`` steps) after
    ``warm`` steps (3 x ``warm`` when compiled); ``steps`` a multiple of ``warm``."""
    import json
    import logging

    from zsdr.training.tasks import BiEncoderTask
    from zsdr.training.config import TrainConfig
    from zsdr.training.trainer import Trainer

    logging.basicConfig(level=logging.WARNING)
    cuda = device.type == "cuda"

    class Ready(BiEncoderTask):  # the same task, its batches made before the loop
        ready: dict = {}

        def make_batch(self, indices, epoch):
            return self.ready[tuple(indices), epoch]

    peak = peak_flops(device)
    rates = {}
    if not compiled:
        variants = [("thread", 0, False, False), ("pre-tokenised", 0, False, True), ("processes", None, False, False)]
    else:
        variants = [("pre-tokenised, compiled", 0, True, True), ("processes, compiled", None, True, False)]
    for name, workers, compiled, ready in variants:
        t0 = time.perf_counter()
        enc = encoder_factory()
        enc.configure(query_max_length=32, doc_max_length=128)
        task = (Ready if ready else BiEncoderTask)(enc, data, "contrastive", negatives=1, scale=1.0, seed=7)
        total = (warm * (3 if compiled else 1)) + steps
        cfg = TrainConfig(batch_size=32, max_steps=total + warm, lr=1e-5, precision="bf16" if cuda else "fp32",
                          log_every=warm, save_every=10 ** 9, seed=7)
        run_out = out / name.replace(", ", "-")
        tr = Trainer(task, cfg, run_out, cpu=not cuda, progress=False, stop_after=total, workers=workers,
                     compile=compiled)
        plain = BiEncoderTask(enc, data, "contrastive", negatives=1, scale=1.0, seed=7)
        batches = [plain.make_batch(*tr.indices(m)) for m in range(total)]
        if ready:
            Ready.ready = {(tuple(tr.indices(m)[0]), tr.indices(m)[1]):
                           {k: ({a: b.pin_memory() for a, b in v.items()} if isinstance(v, dict) and cuda else v)
                            for k, v in b.items()} for m, b in zip(range(total), batches)}
        tr.train()
        log_file = run_out.parent / f".{run_out.name}.train_log.jsonl"
        recs = [json.loads(line) for line in log_file.read_text().splitlines()]
        timed = [r for r in recs if r["step"] > total - steps]
        rate = float(np.mean([r["examples_per_s"] for r in timed])) / 32
        rates[name] = rate
        flops = float(np.mean([step_flops(enc, b["q"]["input_ids"], b["d"]["input_ids"]) for b in batches[-steps:]]))
        mfu = f"; MFU {flops * rate / peak:.1%}" if peak else ""
        note = f"{flops * rate / 1e12:.1f} TFLOP/s{mfu}"
        row(f"zsdr Trainer DPR step, batches by {name}", f"{rate:.2f} steps/s",
            f"{note} ({time.perf_counter() - t0:.0f} s with start-up)")
        del enc, task, tr, plain
        if cuda:
            torch.cuda.empty_cache()
    for name, rate in rates.items():
        ref = name.replace("thread", "pre-tokenised").replace("processes", "pre-tokenised")
        if ref != name and ref in rates:
            row(f"zsdr Trainer, {name} / {ref}", f"{rate / rates[ref]:.2f}", "(acceptance: >= 0.95)")


def peak_flops(device: torch.device) -> float | None:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def step_flops(enc, q_ids: torch.Tensor, d_ids: torch.Tensor) -> float:
    """Training FLOPs of one step: 6 N per token plus attention (12 L d s per token), queries and passages."""
    cfg = enc.backbone.config
    params = sum(p.numel() for n, p in enc.backbone.named_parameters() if "embeddings" not in n)
    qn, qs, dn, ds = q_ids.numel(), q_ids.shape[1], d_ids.numel(), d_ids.shape[1]
    return 6 * params * (qn + dn) + 12 * cfg.num_hidden_layers * cfg.hidden_size * (qn * qs + dn * ds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", help="folder with the bert-base-uncased tokenizer files")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="a tiny model and few documents (a dry run)")
    parser.add_argument("--docs", type=int, default=None, help="corpus size (200,000; --quick 1,500)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--skip", default="", help="comma-separated steps to leave out (ceiling, job, inprocess, "
                        "mining, st, reader, trainer, train, compile, qgen)")
    parser.add_argument("--previous", type=Path, help="a zsdr source tree (its src/) whose encode job to time too")
    parser.add_argument("--watchdog", type=float, default=None,
                        help="after this many seconds print every thread's stack and exit (a hung step shows where)")
    args = parser.parse_args(argv)
    if args.watchdog:
        import faulthandler

        faulthandler.dump_traceback_later(args.watchdog, exit=True)
    device = torch.device(args.device)
    n = args.docs or (1_500 if args.quick else 200_000)
    skip = set(filter(None, args.skip.split(",")))
    vocab = syn.vocab_dir(args.vocab)
    from zsdr.models.encoder import Encoder, EncoderConfig, Packed

    t0 = time.perf_counter()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device {name}; torch {torch.__version__}; {n:,} docs; batch {args.batch_size}", flush=True)
    tok = syn.tokenizer(vocab)
    config = syn.bert_config(len(tok), args.quick)
    texts = syn.passages(vocab, n, seed=0)

    def encoder_factory():
        from transformers import BertModel

        torch.manual_seed(0)
        return Encoder(BertModel(config, add_pooling_layer=False), syn.tokenizer(vocab),
                       EncoderConfig(pooling="cls", similarity="dot", doc_max_length=256), name_or_path="random-bert",
                       precision="bf16")

    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        tmp = Path(tmp)
        encoder = encoder_factory().eval()
        folder = encoder.save_pretrained(tmp / "model")
        dataset = syn.write_dataset(tmp / "data", texts)
        packed = Packed.of(encoder.tokenize_docs([{"title": "", "text": t} for t in texts]))
        row("passages", f"{n:,}", f"mean {packed.lengths.mean():.1f} tokens (median {np.median(packed.lengths):.0f}, "
                                   f"max {packed.lengths.max()}); BERT-base {'(tiny: --quick)' if args.quick else ''}")
        encoder.to(device)
        ceil = ceiling(encoder, packed, args.batch_size, device) if "ceiling" not in skip else None
        if "ceiling" not in skip:
            ceiling(encoder, packed, args.batch_size, device, budget=True)
        if "job" not in skip:
            encode_job(folder, dataset, tmp / "emb", args.batch_size, device, ceil, "bf16")
            encode_job(folder, dataset, tmp / "emb4", 4 * args.batch_size, device, ceil, "bf16")
        if "job" not in skip and "mining" not in skip:
            mining(folder, texts, tmp / "emb", tmp / "mining", device, 20_000 if not args.quick else 50,
                   args.batch_size)
        if args.previous:
            previous_job(args.previous, folder, dataset, tmp / "prev", args.batch_size, device, ceil)
            previous_job(args.previous, folder, dataset, tmp / "prev4", 4 * args.batch_size, device, ceil)
        sub = texts[: max(n // 4, 1000)]
        got = in_process(encoder, sub, args.batch_size, device, ceil) if "inprocess" not in skip else None
        zsdr_rate, zsdr_emb = got if got else (None, None)
        if "st" not in skip:
            sentence_transformers(folder, sub, args.batch_size, device, zsdr_rate, zsdr_emb)
        encoder.release_inference_copy()
        encoder.cpu()
        if "reader" not in skip:
            reader(vocab, config, texts[:20_000 if not args.quick else 300], device, args.batch_size)
        warm, steps = (10, 60) if not args.quick else (2, 4)
        if "trainer" not in skip:
            data = dpr_training_set(tmp / "train-data", texts[:8192])
            trainer_steps(encoder_factory, data, tmp / "trainer", device, warm, steps)
        if "train" not in skip:
            training(encoder_factory, texts, device, 30 if not args.quick else 3)
        if "compile" not in skip and "trainer" not in skip and device.type == "cuda":
            trainer_steps(encoder_factory, data, tmp / "trainer", device, warm, steps, compiled=True)
        if "qgen" not in skip:  # last: its time depends most on the sampled lengths
            m = 512 if not args.quick else 6
            qdata = syn.write_dataset(tmp / "qgen", texts[:m])
            qgen(vocab, args.quick, qdata, tmp / "qgen.jsonl", device, 128 if not args.quick else 6, m)
    print(f"\n## GPU check: {name}, torch {torch.__version__} ({time.perf_counter() - t0:.0f} s)\n")
    print("| step | throughput | notes |\n|---|---|---|")
    for name_, value, note in ROWS:
        print(f"| {name_} | {value} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
