"""Dataset statistics and distribution-shift measures (zsdr.evaluation.analysis)."""

import argparse
import json

import pytest

from zsdr.data.formats import BeirWriter, write_beir
from zsdr.evaluation.analysis import (QUERY_TYPES, dataset_statistics, query_type, query_type_distribution,
                                      register_cli, shift_statistics, unigram_distribution, weighted_jaccard,
                                      words, write_dataset_statistics, write_shift_statistics)
from zsdr.io import DataError

CORPUS = {
    "d1": {"title": "Cells", "text": "Stem cells divide."},
    "d2": {"title": "", "text": "What cells do?  Nothing!"},
    "d3": {"title": "Note", "text": "- a dash"},
}
QUERIES = {"q1": "What do stem cells do?", "q2": "Is it true", "q3": "cells divide", "q4": "unjudged query here"}
QRELS = {"test": {"q1": {"d1": 2, "d2": 0}, "q2": {"d3": 1}}, "train": {"q3": {"d1": 1}}}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny"
    write_beir(path, CORPUS, QUERIES, QRELS)
    return path


@pytest.fixture
def target(tmp_path):
    path = tmp_path / "target"
    write_beir(path, {"x1": {"title": "", "text": "cells divide"}}, {"t1": "How do cells divide?"},
               {"test": {"t1": {"x1": 1}}})
    return path


def _cli(argv):
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


# ---------------------------------------------------------------------------------------------
# Tokenisation and query types


def test_words_whitespace_lowercase_and_strip():
    assert words("  Stem cells\tdivide.\n") == ["Stem", "cells", "divide."]
    assert words("Stem CELLS", lowercase=True) == ["stem", "cells"]
    assert words('"(Cells)." - -- covid-19 it\u2019s \u201cok\u201d', lowercase=True, strip=True) == \
        ["cells", "covid-19", "it\u2019s", "ok"]
    assert words("") == [] and words("  ", strip=True) == []


@pytest.mark.parametrize("text, kind", [
    ("what is a stem cell", "what"),
    ("What is a stem cell?", "what"),
    ("WHEN did it start", "when"),
    ("  Who's there?", "who"),
    ("how-to guide", "how"),
    ("\u00bfWhere is it?", "where"),
    ("Why?", "why"),
    ('"Which" one', "which"),
    ("Is it true", "Y/N"),
    ("does aspirin help", "Y/N"),
    ("Were they", "Y/N"),
    ("Shall we", "Y/N"),
    ("am I right", "Y/N"),
    ("Could, would", "Y/N"),
    ("Whatever happened", "declarative"),
    ("Island nations", "declarative"),
    ("the what of it", "declarative"),
    ("0-dimensional biomaterials show inductive properties.", "declarative"),
    ("", "declarative"),
    ("?!", "declarative"),
])
def test_query_type(text, kind):
    assert query_type(text) == kind


def test_query_type_distribution():
    dist = query_type_distribution(["What is x", "what?", "Is y", "cells divide"])
    assert list(dist) == list(QUERY_TYPES) and len(QUERY_TYPES) == 9
    assert dist["what"] == 0.5 and dist["Y/N"] == 0.25 and dist["declarative"] == 0.25
    assert sum(dist.values()) == pytest.approx(1.0)
    assert query_type_distribution(iter(["how so"]))["how"] == 1.0
    empty = query_type_distribution([])
    assert list(empty) == list(QUERY_TYPES) and set(empty.values()) == {0.0}


# ---------------------------------------------------------------------------------------------
# Weighted Jaccard


def test_weighted_jaccard_properties():
    p = {"a": 0.5, "b": 0.5}
    q = {"a": 0.25, "b": 0.25, "c": 0.5}
    assert weighted_jaccard(p, dict(p)) == 1.0
    assert weighted_jaccard(p, {"c": 0.3, "d": 0.7}) == 0.0
    # min: .25 + .25 + 0 = .5 ; max: .5 + .5 + .5 = 1.5
    assert weighted_jaccard(p, q) == pytest.approx(1 / 3)
    assert weighted_jaccard(q, p) == weighted_jaccard(p, q)
    # zero weights and key order change nothing; counts are normalised first
    assert weighted_jaccard({"b": 0.5, "a": 0.5, "z": 0.0}, {"c": 0.5, "a": 0.25, "b": 0.25}) == pytest.approx(1 / 3)
    assert weighted_jaccard({"a": 2}, {"a": 7}) == 1.0
    assert weighted_jaccard({"a": 1, "b": 3}, {"a": 2, "b": 2}) == pytest.approx(0.75 / 1.25)
    assert weighted_jaccard({}, p) == 0.0 and weighted_jaccard({"a": 0.0}, {"a": 0.0}) == 0.0


@pytest.mark.parametrize("bad", [{"a": -0.1}, {"a": float("nan")}, {"a": float("inf")}, {"a": "1"}, {"a": True}])
def test_weighted_jaccard_rejects_bad_weights(bad):
    with pytest.raises(ValueError):
        weighted_jaccard(bad, {"a": 1.0})


# ---------------------------------------------------------------------------------------------
# Statistics and distributions on a tiny BEIR dataset


def test_dataset_statistics_tiny(tiny):
    stats = dataset_statistics(tiny)
    assert list(stats) == ["docs", "doc_avg_words", "queries", "query_avg_words", "qrels", "rel_per_query"]
    # "Cells Stem cells divide." 4 + "What cells do?  Nothing!" 4 + "Note - a dash" 4
    assert stats["docs"] == 3 and stats["doc_avg_words"] == 4.0
    # judged test queries q1 (5 words) and q2 (3); q4 is unjudged
    assert stats["queries"] == 2 and stats["query_avg_words"] == 4.0
    # 3 rows, 2 of grade >= 1 (q1-d2 has grade 0), over 2 judged queries
    assert stats["qrels"] == 3 and stats["rel_per_query"] == 1.0
    train = dataset_statistics(tiny, split="train")
    assert (train["queries"], train["query_avg_words"], train["qrels"], train["rel_per_query"]) == (1, 2.0, 1, 1.0)


def test_dataset_statistics_doc_fields(tiny):
    assert dataset_statistics(tiny, doc_fields="text")["doc_avg_words"] == pytest.approx(10 / 3)
    # title glued to text: "CellsStem cells divide." 3, d2 4, "Note- a dash" 3
    assert dataset_statistics(tiny, doc_fields="beir")["doc_avg_words"] == pytest.approx(10 / 3)
    with pytest.raises(ValueError, match="doc_fields"):
        dataset_statistics(tiny, doc_fields="title")


def test_statistics_stream_gzip(tmp_path):
    with BeirWriter(tmp_path / "gz", compress=True) as w:
        for did, doc in CORPUS.items():
            w.add_doc(did, doc["title"], doc["text"])
        w.add_query("q1", "what now")
        w.add_qrel("test", "q1", "d1", 1)
    stats = dataset_statistics(tmp_path / "gz")
    assert (stats["docs"], stats["doc_avg_words"], stats["queries"], stats["query_avg_words"]) == (3, 4.0, 1, 2.0)


def _write_raw(path, corpus_lines, queries_lines, qrels_text):
    (path / "qrels").mkdir(parents=True)
    (path / "corpus.jsonl").write_text("".join(json.dumps(x) + "\n" for x in corpus_lines), encoding="utf-8")
    (path / "queries.jsonl").write_text("".join(json.dumps(x) + "\n" for x in queries_lines), encoding="utf-8")
    (path / "qrels" / "test.tsv").write_text(qrels_text, encoding="utf-8")
    return path


def test_statistics_bad_input(tmp_path, tiny):
    with pytest.raises(DataError, match="no qrels for split 'dev'"):
        dataset_statistics(tiny, split="dev")
    doc, query = {"_id": "d1", "text": "x"}, {"_id": "q1", "text": "y"}
    header = "query-id\tcorpus-id\tscore\n"
    missing = _write_raw(tmp_path / "missing", [doc], [query], header + "q1\td1\t1\nq9\td1\t1\n")
    with pytest.raises(DataError, match=r"1 judged queries are not in queries.jsonl \(first: 'q9'\)") as err:
        dataset_statistics(missing)
    assert err.value.path.endswith("test.tsv") and err.value.fix
    with pytest.raises(DataError, match="has no judgements"):
        dataset_statistics(_write_raw(tmp_path / "nojudge", [doc], [query], header))
    with pytest.raises(DataError, match="corpus is empty"):
        dataset_statistics(_write_raw(tmp_path / "nodocs", [], [query], header + "q1\td1\t1\n"))
    with pytest.raises(DataError, match=r"corpus.jsonl:2: .*no \"text\""):
        dataset_statistics(_write_raw(tmp_path / "notext", [doc, {"_id": "d2"}], [query], header + "q1\td1\t1\n"))
    (tmp_path / "nocorpus" / "qrels").mkdir(parents=True)
    with pytest.raises(DataError, match="file not found"):
        unigram_distribution(tmp_path / "nocorpus")


def test_unigram_distribution_tiny(tiny):
    dist = unigram_distribution(tiny)
    # tokens: cells stem cells divide | what cells do nothing | note a dash ("-" dropped): 11
    assert dist == pytest.approx({"cells": 3 / 11, **{w: 1 / 11 for w in
                                  ("a", "dash", "divide", "do", "note", "nothing", "stem", "what")}})
    assert list(dist) == ["cells", "a", "dash", "divide", "do", "note", "nothing", "stem", "what"]
    assert sum(dist.values()) == pytest.approx(1.0)
    assert unigram_distribution(tiny, max_docs=1) == {"cells": 0.5, "divide": 0.25, "stem": 0.25}
    cased = unigram_distribution(tiny, max_docs=1, lowercase=False)
    assert cased == {"Cells": 0.25, "Stem": 0.25, "cells": 0.25, "divide": 0.25}
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_docs"):
            unigram_distribution(tiny, max_docs=bad)


def test_shift_statistics_tiny(tiny, target):
    shift = shift_statistics(tiny, target)
    assert list(shift) == ["query_jaccard", "doc_jaccard", "query_types_source", "query_types_target"]
    # source train queries: q3 "cells divide" (declarative); target test: "How do cells divide?"
    assert shift["query_types_source"]["declarative"] == 1.0 and shift["query_types_target"]["how"] == 1.0
    assert shift["query_jaccard"] == 0.0
    # min: cells 3/11 + divide 1/11 ; max: .5 + .5 + 7 * 1/11  ->  (4/11) / (18/11)
    assert shift["doc_jaccard"] == pytest.approx(2 / 9)
    same = shift_statistics(tiny, tiny, source_split="test", target_split="test")
    assert same["query_jaccard"] == 1.0 and same["doc_jaccard"] == pytest.approx(1.0)
    # test queries of tiny: what + Y/N, against train: declarative only
    assert shift_statistics(tiny, tiny, target_split="test")["query_jaccard"] == 0.0
    # first document only: {cells .5, stem .25, divide .25} vs {cells .5, divide .5}: .75 / 1.25
    assert shift_statistics(tiny, target, max_docs=1)["doc_jaccard"] == pytest.approx(0.75 / 1.25)
    assert shift_statistics(tiny, target) == shift  # deterministic


def test_cli(tiny, target, tmp_path, capsys):
    assert _cli(["stats", str(tiny)]) == 0
    assert json.loads(capsys.readouterr().out) == dataset_statistics(tiny)
    out = tmp_path / "stats" / "tiny.json"
    assert _cli(["stats", str(tiny), "--split", "train", "--doc-fields", "text", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text()) == dataset_statistics(tiny, "train", doc_fields="text")
    assert _cli(["shift", str(tiny), str(target), "--max-docs", "1"]) == 0
    assert json.loads(capsys.readouterr().out) == shift_statistics(tiny, target, max_docs=1)
    assert _cli(["shift", str(tiny), str(tiny), "--source-split", "test"]) == 0
    assert json.loads(capsys.readouterr().out)["query_jaccard"] == 1.0
    with pytest.raises(SystemExit):
        _cli(["shift", str(tiny), str(target), "--max-docs", "0"])


def test_the_statistics_jobs_write_what_the_tables_read(tiny, target, tmp_path):
    """`dataset_stats` and `shift_stats` (workflow_scripts): every qrels split's statistics, and one target's shift
    beside the source's folder and the target's name, each a JSON file."""
    out = tmp_path / "stats" / "tiny.json"
    stats = write_dataset_statistics(tiny, out, doc_fields="text")
    assert json.loads(out.read_text()) == stats == {
        split: dataset_statistics(tiny, split, doc_fields="text") for split in ("test", "train")}
    out = tmp_path / "stats" / "shift" / "target.json"
    shift = write_shift_statistics(tiny, target, out, target="target", source_split="train", target_split="test",
                                   max_docs=1)
    assert json.loads(out.read_text()) == shift == {"source": str(tiny), "target": "target",
                                                    **shift_statistics(tiny, target, max_docs=1)}


# ---------------------------------------------------------------------------------------------
# Real data (../shared/data; skipped without it)


@pytest.mark.shared_data
def test_scifact_statistics_match_beir(shared_data):
    scifact = shared_data / "beir" / "scifact"
    stats = dataset_statistics(scifact)
    # BEIR Table 1: corpus 5,183; test queries 300; 1.1 relevant docs per query
    assert stats["docs"] == 5183 and stats["queries"] == 300 and stats["qrels"] == 339
    assert round(stats["rel_per_query"], 1) == 1.1 and stats["rel_per_query"] == pytest.approx(339 / 300)
    # BEIR's 213.63 avg doc words is reproduced exactly by title and text glued without a blank;
    # joining them with a blank (the default) gives one word more per document.
    assert round(dataset_statistics(scifact, doc_fields="beir")["doc_avg_words"], 2) == 213.63
    assert round(stats["doc_avg_words"], 2) == 214.63
    assert round(dataset_statistics(scifact, doc_fields="text")["doc_avg_words"], 2) == 201.81
    # BEIR's 12.37 query words is the mean over all 1,109 queries (12.38); the 300 test ones give 12.51
    assert round(stats["query_avg_words"], 2) == 12.51
    assert abs(stats["query_avg_words"] - 12.37) < 0.2


@pytest.mark.shared_data
def test_vaswani_statistics_and_shift(shared_data):
    vaswani = shared_data / "vaswani" / "beir-format"
    stats = dataset_statistics(vaswani)
    assert (stats["docs"], stats["queries"], stats["qrels"]) == (11429, 93, 2083)
    assert stats["rel_per_query"] == pytest.approx(2083 / 93)
    assert 30 < stats["doc_avg_words"] < 60 and 5 < stats["query_avg_words"] < 20
    scifact = shared_data / "beir" / "scifact"
    shift = shift_statistics(scifact, vaswani)
    # SciFact's claims are declarative; Vaswani's queries nearly so
    assert shift["query_types_source"]["declarative"] == 1.0
    assert shift["query_types_target"]["declarative"] > 0.9 and 0.9 < shift["query_jaccard"] < 1.0
    # two scientific-abstract corpora in different fields: some, not much, word overlap
    assert 0.1 < shift["doc_jaccard"] < 0.6
    assert sum(shift["query_types_target"].values()) == pytest.approx(1.0)
