"""The memory-mapped text stores and training arrays (zsdr.data.store, zsdr.data.training_set)."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from tests.conftest import mini_with_backbones, texts_hidden

from zsdr.data.formats import read_corpus, read_queries, write_beir
from zsdr.data.store import TextStore, build_store, open_current, open_store, store_is_current
from zsdr.io import DataError
from zsdr.data.training_set import (TrainingSet, build_training_arrays, read_negatives, read_teacher_scores,
                                    with_teacher)


@pytest.fixture
def beir(tmp_path):
    rng = np.random.default_rng(0)
    corpus = {f"d{i}": {"title": f"t{i}" if i % 3 else "", "text": " ".join(rng.choice(["é", "a", "b😀", "c"], 5))}
              for i in range(300)}
    queries = {f"q{i}": f"query {i} ü" for i in range(40)}
    qrels = {"train": {f"q{i}": {f"d{i}": 1, f"d{i + 100}": 0} for i in range(40)}}
    root = tmp_path / "ds"
    write_beir(root, corpus, queries, qrels)
    with open(root / "negatives.jsonl", "w") as fh:
        for i in range(40):
            fh.write(json.dumps({"qid": f"q{i}", "pos": [f"d{i}", "gone"],
                                 "neg": {"bm25": [f"d{i + 50}", f"d{i + 51}", "missing"], "dense": [f"d{i + 51}", f"d{i}"]}}) + "\n")
        fh.write(json.dumps({"qid": "q0", "pos": ["d200"], "neg": {"bm25": ["d201"]}}) + "\n")
    return root, corpus, queries


def test_store_reads_back_every_record_by_row_and_id(beir, tmp_path, monkeypatch):
    root, corpus, queries = beir
    monkeypatch.setattr("zsdr.data.store.BATCH_ROWS", 64)      # several record batches
    build_store(root)
    docs, qs = open_store(root)
    assert len(docs) == 300 and len(qs) == 40
    assert [docs[docs.row(d)] for d in corpus] == list(read_corpus(root).values())
    assert [qs[qs.row(q)] for q in queries] == list(read_queries(root).values())
    assert docs.rows([5, 70, 5]) == [corpus["d5"], corpus["d70"], corpus["d5"]]
    assert docs.ids([299, 0]) == ["d299", "d0"] and "d7" in docs and "nope" not in docs and docs.find("nope") is None
    assert list(docs.iter_range(60, 70)) == [(f"d{i}", corpus[f"d{i}"]) for i in range(60, 70)]
    assert store_is_current(root / "store", root)
    (root / "corpus.jsonl").write_text((root / "corpus.jsonl").read_text() + "\n")
    assert not store_is_current(root / "store", root)


def test_rows_of_many_ids_at_once_and_the_rows_in_id_order(beir, monkeypatch):
    root, corpus, _ = beir
    monkeypatch.setattr("zsdr.data.store.BATCH_ROWS", 64)
    docs, _ = open_store(build_store(root).parent)
    wanted = ["d5", "nope", "d299", "d0", "", "d5", "d10"]
    assert docs.find_rows(wanted).tolist() == [-1 if docs.find(r) is None else docs.find(r) for r in wanted]
    assert docs.find_rows([]).tolist() == []
    assert docs.ids(docs.rows_in_id_order()) == sorted(corpus)          # code point order, as sorted() gives


def test_open_current_maps_the_datasets_store_or_builds_one_for_the_process(beir, caplog):
    root, corpus, queries = beir
    with caplog.at_level("INFO", logger="zsdr.data.store"):
        docs, qs = open_current(root)                                    # no store yet: one for this process
    assert "has no current store" in caplog.text and docs.directory != root / "store"
    assert open_current(root)[0] is docs                                 # built once per process
    assert [docs[i] for i in range(len(docs))] == list(corpus.values()) and qs.ids() == list(queries)
    build_store(root)
    with texts_hidden(root):
        docs, qs = open_current(root)
        assert docs.directory == root / "store" and docs.ids() == list(corpus) and qs[qs.row("q3")] == queries["q3"]
    with open(root / "queries.jsonl", "a") as fh:                       # changed files: the store is stale
        fh.write(json.dumps({"_id": "q-new", "text": "late"}) + "\n")
    docs, qs = open_current(root)
    assert docs.directory != root / "store" and qs.ids()[-1] == "q-new"


MINI = {
    "seed": 4, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 120, "train_queries": 30, "dev_queries": 5}],
}
SIZE = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "max_length": 512, "dropout": 0.0}


def test_teacher_scores_generator_and_reader_examples_read_the_store(tmp_path):
    """Teacher scoring (with random corpus candidates), the query generator's and the reader's examples
    read the texts from the dataset's store: the same results with corpus.jsonl and queries.jsonl
    unreadable."""
    import torch

    from zsdr.training.data import reader_examples
    from zsdr.training.qgen import generator_examples
    from zsdr.training.teacher import score_pairs

    root = mini_with_backbones(tmp_path, MINI, SIZE, kinds=("bert",))
    src = root / "data" / "src"

    def run(tag):
        torch.manual_seed(0)                                               # the classification head's init
        n = score_pairs(root / "bert", src, src / "negatives.jsonl", tmp_path / f"teacher-{tag}.jsonl",
                        batch_size=16, max_candidates=3, random_candidates=2, seed=5, device="cpu")
        return n, generator_examples(src), reader_examples(src, src / "units.jsonl")

    before = run("files")
    with texts_hidden(src):
        after = run("store")
    assert before == after and before[0] > 0 and len(before[1]) >= 30 and before[2]
    assert (tmp_path / "teacher-files.jsonl").read_bytes() == (tmp_path / "teacher-store.jsonl").read_bytes()


def test_a_repeated_id_is_refused_naming_the_file(tmp_path):
    root = tmp_path / "dup"
    write_beir(root, {"a": {"title": "", "text": "x"}}, {"q": "y"}, {"test": {"q": {"a": 1}}})
    with open(root / "corpus.jsonl", "a") as fh:
        fh.write(json.dumps({"_id": "a", "title": "", "text": "z"}) + "\n")
    with pytest.raises(DataError, match="corpus.jsonl.*'a' appears twice"):
        build_store(root)
    assert not (root / "store").exists()


def test_a_missing_store_names_the_fix(tmp_path):
    with pytest.raises(DataError, match="build the dataset's store"):
        TextStore(tmp_path, "corpus")


def test_training_arrays_hold_what_the_dict_loading_held(beir, tmp_path):
    root, corpus, _ = beir
    data = TrainingSet(root, root / "negatives.jsonl", arrays=tmp_path / "arrays")
    old = [e for e in read_negatives(root / "negatives.jsonl")]
    kept = [(e.qid, tuple(p for p in e.positives if p in corpus), tuple(d for d in e.negatives if d in corpus))
            for e in old]
    kept = [k for k in kept if k[1] and k[2]]
    assert [(e.qid, e.positives, e.negatives) for e in data.examples] == kept
    # relevant: the split's qrels with a grade > 0 and every positive of the query (q0 has two lines)
    assert data.relevant_ids(0) == {"d0", "d200"} and data.relevant_ids(3) == {"d3"}
    for i in range(len(data)):
        ex, pos, negs = data.sample(i, 2, 9, 3)
        assert pos in ex.positives and all(n in ex.negatives for n in negs) and len(negs) == 3
    assert np.isnan(data.arrays["pos_score"]).all()
    capped = TrainingSet(root, root / "negatives.jsonl", arrays=tmp_path / "capped", max_examples=5)
    assert [e.qid for e in capped.examples] == [k[0] for k in kept[:5]]
    assert capped.relevant_ids(0) == {"d0", "d200"}       # lines after the cap still count


def test_teacher_scores_from_the_pickle_align_with_the_sampled_documents(beir, tmp_path):
    root, corpus, _ = beir
    rng = np.random.default_rng(1)
    scores = {f"q{i}": {f"d{j}": float(rng.normal()) for j in (i, i + 7, i + 8, 299)} for i in range(0, 40, 2)}
    with open(tmp_path / "t.pkl", "wb") as fh:
        pickle.dump(scores, fh)
    data = TrainingSet(root, root / "negatives.jsonl", teacher=tmp_path / "t.pkl", arrays=tmp_path / "kd")
    want = with_teacher(read_negatives(root / "negatives.jsonl"), read_teacher_scores(tmp_path / "t.pkl"))
    assert [(e.qid, e.positives, e.negatives) for e in data.examples] == [(e.qid, e.positives, e.negatives) for e in want]
    for i in range(len(data)):
        ex, pos, negs = data.sample(i, 0, 3, 2)
        assert data.sample_scores(i, 0, 3, 2) == pytest.approx([scores[ex.qid][d] for d in (pos, *negs)], rel=1e-6)


def test_bad_inputs_name_the_file(beir, tmp_path):
    root, _, _ = beir
    bad = tmp_path / "neg.jsonl"
    bad.write_text(json.dumps({"qid": "nobody", "pos": ["d1"], "neg": {"x": ["d2"]}}) + "\n")
    with pytest.raises(DataError, match="neg.jsonl.*'nobody' is not in"):
        build_training_arrays(root, bad, tmp_path / "a", store=build_store(root))
    assert not (tmp_path / "a").exists()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="empty.jsonl.*no training examples"):
        build_training_arrays(root, empty, tmp_path / "b")


def test_teacher_json_lines_with_a_query_on_two_lines_merge_as_a_dict_update(beir, tmp_path):
    root, _, _ = beir
    lines = [{"qid": "q1", "scores": {"d1": 1.0, "d60": 2.0, "gone": 5.0}}, {"qid": "q2", "scores": {"d2": 0.5, "d9": 1.5}},
             {"qid": "q1", "scores": {"d60": 3.0, "d61": 4.0}}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    data = TrainingSet(root, root / "negatives.jsonl", teacher=path, arrays=tmp_path / "kd")
    want = with_teacher(read_negatives(root / "negatives.jsonl"), read_teacher_scores(path))
    assert [(e.qid, e.positives, e.negatives) for e in data.examples] == [   # what the corpus holds
        (e.qid, tuple(d for d in e.positives if d != "gone"), tuple(d for d in e.negatives if d != "gone"))
        for e in want]
    ex = next(i for i, e in enumerate(data.examples) if e.qid == "q1")
    assert data.examples[ex].negatives == ("d60", "d61")
    for seed in range(5):
        _, pos, negs = data.sample(ex, 0, seed, 2)
        assert data.sample_scores(ex, 0, seed, 2) == [{"d1": 1.0, "d60": 3.0, "d61": 4.0}[d] for d in (pos, *negs)]


def test_processes_started_together_build_the_arrays_once_and_all_map_them(tmp_path):
    """As ranks under a bare torchrun: four processes open the same arrays at the same moment."""
    import multiprocessing as mp

    root = tmp_path / "big"
    n = 20_000
    write_beir(root, {f"d{i}": {"title": "", "text": f"text {i} " * 20} for i in range(n)},
               {f"q{i}": f"query {i}" for i in range(n // 2)}, {"train": {f"q{i}": {f"d{i}": 1} for i in range(n // 2)}})
    with open(root / "negatives.jsonl", "w") as fh:
        for i in range(n // 2):
            fh.write(json.dumps({"qid": f"q{i}", "pos": [f"d{i}"], "neg": {"bm25": [f"d{(i * 7 + k) % n}" for k in range(1, 30)]}}) + "\n")
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_open_and_sample, args=(str(root), str(tmp_path / "shared" / "arrays"), barrier, queue))
             for _ in range(4)]
    for proc in procs:
        proc.start()
    got = [queue.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    assert all(not isinstance(g, str) for g in got), got
    assert len(set(got)) == 1 and len(got[0]) == n // 2


def _open_and_sample(root, arrays, barrier, queue):
    from pathlib import Path

    barrier.wait()
    try:
        data = TrainingSet(root, Path(root) / "negatives.jsonl", arrays=arrays)
        queue.put(tuple(data.sample(i, 0, 1, 2)[1] for i in range(len(data))))
    except Exception as exc:  # noqa: BLE001 - reported to the test
        queue.put(f"{type(exc).__name__}: {exc}")


def test_teacher_scores_of_max_examples_give_a_recipe_the_whole_files_arrays(tmp_path):
    """Scoring with a distilling recipe's max_examples covers only the queries it reads, and its training
    arrays are those it would build from the scores of every query: lines that do not qualify (a positive
    outside the corpus) are passed over, and a query met again later keeps all its candidates."""
    import torch

    from zsdr.training.teacher import score_pairs

    root = mini_with_backbones(tmp_path, MINI, SIZE, kinds=("bert",))
    src = root / "data" / "src"
    build_store(src)
    lines = (src / "negatives.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    last = json.loads(lines[-1])["qid"]
    odd = [json.dumps({**first, "qid": last, "pos": ["no-such-doc"]}),       # does not qualify; its query's own line comes last
           json.dumps({**json.loads(lines[3]), "neg": {"extra": first["neg"][next(iter(first["neg"]))][:2]}})]
    negatives = tmp_path / "negatives.jsonl"
    negatives.write_text("\n".join([odd[0], *lines[:12], odd[1], *lines[12:]]) + "\n")   # lines[3]'s query again

    def score(tag, **kw):
        torch.manual_seed(0)
        out = tmp_path / f"teacher-{tag}.jsonl"
        n = score_pairs(root / "bert", src, negatives, out, batch_size=16, max_candidates=3, random_candidates=2,
                        seed=5, device="cpu", **kw)
        return n, out

    (n_all, every), (n_some, some) = score("all"), score("some", max_examples=8)
    assert n_some < n_all
    queries = [json.loads(x)["qid"] for x in some.read_text().splitlines()]
    assert len(set(queries)) == 9 < len({json.loads(x)["qid"] for x in every.read_text().splitlines()})
    built = {}
    for tag, teacher in (("all", every), ("some", some)):
        built[tag] = build_training_arrays(src, negatives, tmp_path / f"arrays-{tag}", teacher=teacher,
                                           max_examples=8)
    for name in ("qrow", "pos_ptr", "pos", "neg_ptr", "neg", "rel_ptr", "rel"):
        assert np.array_equal(np.load(built["all"] / f"{name}.npy"), np.load(built["some"] / f"{name}.npy")), name
    for name in ("pos_score", "neg_score"):
        np.testing.assert_allclose(np.load(built["all"] / f"{name}.npy"), np.load(built["some"] / f"{name}.npy"),
                                   rtol=1e-5, atol=1e-5)
    assert len(np.load(built["some"] / "qrow.npy")) == 8


def test_teacher_scores_batched_by_length_are_each_pairs_own_score_in_the_files_order(tmp_path):
    """Pairs are scored in length-sorted batches (less padding): every pair gets the score it gets alone (batch
    size 1, no padding), to float rounding, and the file lists queries and candidates in the input's order."""
    import torch

    from zsdr.training.teacher import score_pairs

    root = mini_with_backbones(tmp_path, MINI, SIZE, kinds=("bert",))
    src = root / "data" / "src"
    build_store(src)
    runs = {}
    for batch in (1, 16):
        torch.manual_seed(0)
        out = tmp_path / f"teacher-{batch}.jsonl"
        score_pairs(root / "bert", src, src / "negatives.jsonl", out, batch_size=batch, max_candidates=3, device="cpu")
        runs[batch] = [json.loads(x) for x in out.read_text().splitlines()]
    alone, batched = runs[1], runs[16]
    assert [r["qid"] for r in alone] == [r["qid"] for r in batched] == list(
        dict.fromkeys(json.loads(x)["qid"] for x in (src / "negatives.jsonl").read_text().splitlines()))
    for a, b in zip(alone, batched):
        assert list(a["scores"]) == list(b["scores"])
        np.testing.assert_allclose(list(a["scores"].values()), list(b["scores"].values()), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ a store is the one built, or refused


def test_a_store_changed_in_place_or_cut_short_is_refused_naming_the_file_and_the_fix(beir):
    root = beir[0]
    out = build_store(root)
    arrow = out / "corpus.arrow"
    data = bytearray(arrow.read_bytes())
    i = data.index("t5".encode())   # a title's bytes, deep in the file: the same size, another text
    data[i:i + 2] = b"t6"
    arrow.write_bytes(bytes(data))
    with pytest.raises(DataError) as err:
        TextStore(out, "corpus")
    assert str(err.value) == (f"{arrow}: the store file is not the one built: its bytes differ from those recorded "
                              f"(the checksum differs) (fix: rebuild the store: zsdr store {root})")
    TextStore(out, "queries")   # the other kind's files are fine
    build_store(root)
    order = out / "queries.order.npy"
    order.write_bytes(order.read_bytes()[:-8])
    with pytest.raises(DataError, match=r"queries.order.npy: the store file is not the one built: \d+ bytes where \d+ "
                                        r"were recorded \(fix: rebuild the store"):
        open_store(root)


def test_a_store_copied_without_its_times_is_checked_once_by_its_checksums(beir, monkeypatch):
    import os
    import time

    root = beir[0]
    out = build_store(root)
    arrow = out / "corpus.arrow"
    recorded = json.loads((out / "store.json").read_text())["files"]["corpus.arrow"]
    os.utime(arrow, ns=(time.time_ns(), time.time_ns()))   # what `cp` without -p does
    from zsdr import files

    digests, real = [], files.file_digest
    monkeypatch.setattr(files, "file_digest", lambda path, *a, **k: digests.append(path) or real(path, *a, **k))
    # files up to FULL_CHECK_BYTES are read whole on a process's first open (a change that kept the time too)
    assert len(TextStore(out, "corpus")) == 300
    assert sorted(p.name for p in digests) == ["corpus.arrow", "corpus.hash.npy", "corpus.order.npy"]
    assert arrow.stat().st_mtime_ns == recorded["mtime_ns"]   # the time is back: the next open reads nothing
    TextStore(out, "corpus")
    assert len(digests) == 3


def test_a_damaged_store_of_an_earlier_zsdr_names_the_file_not_a_library_error(beir):
    root = beir[0]
    out = build_store(root)
    meta = json.loads((out / "store.json").read_text())
    del meta["files"]   # as an earlier zsdr wrote it: nothing to check the files against
    (out / "store.json").write_text(json.dumps(meta))
    assert not store_is_current(out, root)   # open_current builds a store of its own instead
    arrow = out / "corpus.arrow"
    arrow.write_bytes(arrow.read_bytes()[:200])
    with pytest.raises(DataError, match=rf"{arrow}: the store file is damaged \(ArrowInvalid: .*\) \(fix: rebuild the "
                                        rf"store: zsdr store {root}\)"):
        TextStore(out, "corpus")
    (out / "queries.hash.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(DataError, match="queries.hash.npy: the store file is missing or damaged"):
        TextStore(out, "queries")


def test_validate_checks_every_checksum_of_the_store(beir, capsys):
    import os

    from .test_reliability import the_error_line, zsdr

    root = beir[0]
    out = build_store(root)
    assert zsdr(capsys, "validate", root)[0] == 0
    arrow = out / "queries.arrow"
    st = arrow.stat()
    data = bytearray(arrow.read_bytes())
    i = data.index("query 7".encode())
    data[i:i + 7] = b"QUERY 7"
    arrow.write_bytes(bytes(data))
    os.utime(arrow, ns=(st.st_atime_ns, st.st_mtime_ns))   # bits rotted under the same time: only a full check
    TextStore(out, "queries")
    code, _, err = zsdr(capsys, "validate", root)
    assert code == 1
    assert the_error_line(err) == (f"zsdr validate: error: {arrow}: the store file is not the one built: its bytes "
                                   "differ from those recorded (the checksum differs) (fix: rebuild the store: zsdr "
                                   f"store {root})")
