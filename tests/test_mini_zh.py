"""DDR's Chinese track at mini scale: the Chinese mini benchmark (zsdr.data.mini, language zh), BM25 on Han
character bigrams, the plan's `by_language` routing and DDR's Chinese rows, and Chinese ids and text through TREC
runs and the stores (the tiny Chinese backbone's tokenizer: tests/test_tiny.py; Lucene's Chinese analyzer on a
Chinese mini target: tests/test_lucene.py)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from zsdr.data.bm25 import BM25, cjk_tokenize
from zsdr.data.formats import read_corpus, read_qrels, read_queries, validate_beir, write_beir
from zsdr.data.mini import CHINESE, ZH_CHARACTERS, generate

ROOT = Path(__file__).resolve().parents[1]
HAN = re.compile(r"[\u4e00-\u9fff]")


def small_config() -> dict:
    """The Chinese mini benchmark of config.yaml (the generator settings of `mini` under `mini_zh`'s), smaller."""
    config = yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))
    cfg = {**{k: v for k, v in config["mini"].items() if k != "domains"}, **config["mini_zh"]}
    cfg["domains"] = [
        {"name": "mini-zh-source", "role": "source", "docs": 300, "train_queries": 120, "dev_queries": 30},
        {"name": "mini-zh-alpha", "role": "target", "docs": 240, "test_queries": 60, "titles": True},
        {"name": "mini-zh-beta", "role": "target", "docs": 240, "test_queries": 60},
    ]
    return cfg


@pytest.fixture(scope="module")
def zh(tmp_path_factory):
    root = tmp_path_factory.mktemp("mini-zh")
    return root, generate(small_config(), root, language="zh", described_as="mini-zh.json")


def test_deterministic_from_the_seed(zh, tmp_path):
    root, _ = zh
    generate(small_config(), tmp_path / "again", language="zh", described_as="mini-zh.json")
    files = sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(tmp_path / "again") for p in (tmp_path / "again").rglob("*")
                                     if p.is_file())
    assert all((root / f).read_bytes() == (tmp_path / "again" / f).read_bytes() for f in files)
    other = tmp_path / "other"
    generate({**small_config(), "seed": 30}, other, language="zh", described_as="mini-zh.json")
    assert (other / "mini-zh-alpha" / "corpus.jsonl").read_bytes() != (root / "mini-zh-alpha" / "corpus.jsonl").read_bytes()


def test_an_unknown_language_is_refused(tmp_path):
    with pytest.raises(ValueError, match="language must be one of"):
        generate(small_config(), tmp_path, language="fr")


def test_chinese_text_layout_and_manifests(zh):
    root, described = zh
    assert described["language"] == "zh" and json.loads((root / "mini-zh.json").read_text(encoding="utf-8")) == described
    validate_beir(root / "mini-zh-source")
    for name in ("mini-zh-source", "mini-zh-alpha", "mini-zh-beta"):
        manifest = json.loads((root / name / "dataset.json").read_text(encoding="utf-8"))
        assert manifest["language"] == "zh" and manifest["group"] == "mini"
        corpus, queries = read_corpus(root / name), read_queries(root / name)
        for doc in corpus.values():
            text = doc["text"]
            # Han characters, no spaces between words, full-width punctuation only
            assert HAN.search(text) and " " not in text and not re.search(r"[A-Za-z.,?]", text)
            assert text.endswith("。")
        assert sum("，" in d["text"] for d in corpus.values()) > len(corpus) / 2   # clauses break at full-width commas
        assert all(HAN.search(q) and " " not in q for q in queries.values())
    assert all(d["title"] for d in read_corpus(root / "mini-zh-alpha").values())
    assert not any(d["title"] for d in read_corpus(root / "mini-zh-beta").values())
    # qrels graded as the English targets': 2 for the answer, 1 for the entity's other passages
    grades = {g for q in read_qrels(root / "mini-zh-alpha", "test").values() for g in q.values()}
    assert grades == {1, 2}


def test_domains_have_their_own_words_and_synonyms_no_character_in_common(zh):
    root, described = zh
    source = "".join(d["text"] for d in read_corpus(root / "mini-zh-source").values())
    source += "".join(read_queries(root / "mini-zh-source").values())
    source += (root / "mini-zh-source" / "triples.train.tsv").read_text(encoding="utf-8")
    for name in ("mini-zh-alpha", "mini-zh-beta"):
        pairs = described["domains"][name]["synonyms"]
        target = "".join(d["text"] for d in read_corpus(root / name).values())
        for a, b in pairs:
            assert len(a) == len(b) == 2 and not set(a) & set(b)
            assert a in target and b in target         # both forms occur in the target corpus ...
        # ... and are no words of the source: written without spaces, two source words may meet in one by chance
        in_source = sum(source.count(w) for pair in pairs for w in pair)
        assert in_source <= 0.01 * sum(target.count(w) for pair in pairs for w in pair), (name, in_source)
    assert all(c in ZH_CHARACTERS for pair in described["domains"]["mini-zh-alpha"]["synonyms"] for w in pair for c in w)


def test_units_are_exact(zh):
    root, _ = zh
    for name in ("mini-zh-source", "mini-zh-alpha"):
        corpus = read_corpus(root / name)
        for line in (root / name / "units.jsonl").read_text(encoding="utf-8").splitlines():
            u = json.loads(line)
            text = corpus[u["corpus-id"]]["text"]
            assert "".join(u["sentences"]) == text
            assert text[u["answer_start"]:u["answer_start"] + len(u["answer"])] == u["answer"]
            assert u["answer"] in u["sentences"][u["essential"]]


def test_training_files_mine_negatives_on_character_bigrams(zh):
    root, _ = zh
    train = read_qrels(root / "mini-zh-source", "train")
    corpus, queries = read_corpus(root / "mini-zh-source"), read_queries(root / "mini-zh-source")
    negs = [json.loads(line) for line in (root / "mini-zh-source" / "negatives.jsonl").read_text().splitlines()]
    assert len(negs) == 120 and {r["qid"] for r in negs} == set(train)
    shared = 0
    for rec in negs:
        assert len(rec["neg"]["bm25"]) == 20 and not set(rec["neg"]["bm25"]) & set(rec["pos"])
        # BM25's negatives share character bigrams with the query (whitespace tokens would share none)
        query = set(cjk_tokenize(queries[rec["qid"]]))
        shared += bool(query & set(cjk_tokenize(corpus[rec["neg"]["bm25"][0]]["text"])))
    assert shared == len(negs)
    triples = (root / "mini-zh-source" / "triples.train.tsv").read_text(encoding="utf-8").splitlines()
    assert len(triples) == 120 * small_config()["triples_per_query"] and all(len(t.split("\t")) == 3 for t in triples)


def ndcg10(qrels: dict, run: dict) -> float:
    """Mean nDCG@10 with graded gains (trec_eval's), without starting ranx for a handful of queries."""
    total = 0.0
    for qid, judged in qrels.items():
        ranked = sorted(run.get(qid, {}).items(), key=lambda kv: (-kv[1], kv[0]))[:10]
        dcg = sum(judged.get(d, 0) / math.log2(i + 2) for i, (d, _) in enumerate(ranked))
        ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(judged.values(), reverse=True)[:10]))
        total += dcg / ideal if ideal else 0.0
    return total / len(qrels)


def _ndcg(root: Path, name: str, tokenize) -> float:
    corpus, queries, qrels = read_corpus(root / name), read_queries(root / name), read_qrels(root / name, "test")
    index = BM25([f"{d['title']} {d['text']}".strip() for d in corpus.values()], ids=list(corpus), tokenize=tokenize)
    return ndcg10(qrels, index.search(queries, k=100))


def test_bm25_on_character_bigrams_finds_what_whitespace_tokens_cannot(zh):
    """A query shares no whitespace token with its passage, yet BM25 on Han bigrams (Lucene's CJKAnalyzer,
    Anserini's -language zh) finds it; tests/test_lucene.py runs Lucene itself on a Chinese mini target."""
    root, _ = zh
    for name in ("mini-zh-alpha", "mini-zh-beta"):
        corpus, queries = read_corpus(root / name), read_queries(root / name)
        for qid, docs in read_qrels(root / name, "test").items():
            answer = next(d for d, g in docs.items() if g == 2)
            assert not set(queries[qid].split()) & set(corpus[answer]["text"].split())
        assert _ndcg(root, name, str.split) < 0.02
        assert 0.3 < _ndcg(root, name, cjk_tokenize) < 0.95   # neither hopeless nor trivial: synonyms miss


def test_cjk_tokens_follow_lucenes_cjk_analyzer():
    assert cjk_tokenize("北京是首都，Beijing 2022年。京") == ["北京", "京是", "是首", "首都", "beijing", "2022", "年", "京"]


def test_chinese_ids_and_text_round_trip_through_runs_and_stores(tmp_path):
    from zsdr.data.store import build_store, open_store
    from zsdr.data.trec_runs import read_trec_run, write_trec_run

    corpus = {"文档-1": {"title": "标题", "text": "北京是中国的首都。"}, "文档-2": {"title": "", "text": "上海，大城市！"},
              "d3": {"title": "", "text": "𠀀 扩展B区字符"}}
    queries = {"问题-1": "中国的首都是哪里？", "q2": "上海"}
    write_beir(tmp_path / "ds", corpus, queries, {"test": {"问题-1": {"文档-1": 2}, "q2": {"文档-2": 1}}})
    assert read_corpus(tmp_path / "ds") == corpus and read_queries(tmp_path / "ds") == queries
    assert read_qrels(tmp_path / "ds", "test") == {"问题-1": {"文档-1": 2}, "q2": {"文档-2": 1}}
    run = {"问题-1": {"文档-1": 3.5, "文档-2": 1.25}, "q2": {"文档-2": 2.0, "d3": 0.5}}
    write_trec_run(tmp_path / "run.trec", run, tag="bm25-flat")
    assert read_trec_run(tmp_path / "run.trec") == run
    build_store(tmp_path / "ds")
    docs, qs = open_store(tmp_path / "ds")
    assert [docs[docs.row(d)] for d in corpus] == list(corpus.values())
    assert [qs[qs.row(q)] for q in queries] == list(queries.values())


# ---------------------------------------------------------------------------------------------
# The plan: routing, DDR's Chinese rows, table 1 untouched


@pytest.fixture(scope="module")
def plan():
    from zsdr.plan.core import load_plan

    return load_plan(ROOT)


DDR_TABLE2 = ["ddr-dr-contrast", "ddr-contrast", "ddr-dr-distill", "ddr-distill"]


def test_ddr_systems_route_to_their_chinese_twins_on_the_chinese_targets(plan):
    systems, datasets = plan.systems, plan.datasets
    assert datasets.mini_zh == ["mini-zh-source", "mini-zh-alpha", "mini-zh-beta"]
    assert [datasets.language(d) for d in ("mini-zh-alpha", "mini-alpha", "cpr-ecom")] == ["zh", "en", "zh"]
    for system in [*DDR_TABLE2, "ddr-rem-pa192", "ddr-nodf-contrast", "ddr-nosi-contrast", "ddr-nod-contrast"]:
        twin = systems.routed(system, "mini-zh-alpha")
        assert twin == f"{system}-zh" and systems.routed(system, "mini-alpha") == system
        assert "tiny-bert-zh" in systems.dense_model(system, "mini-zh-alpha") or "-zh" in systems.dense_model(
            system, "mini-zh-alpha")
        assert "zh" not in systems.dense_model(system, "mini-alpha")
    # DDR on a Chinese target: the Chinese REM on that target's DAM, trained from the Chinese source DAM
    assert systems.dense_model("ddr-contrast", "mini-zh-beta") == "models/dams/tiny-bert-zh--mini-zh-source--mini-zh-beta"
    assert systems.encoder_options("ddr-contrast", "mini-zh-beta")["rem"] == "models/trained/ddr-contrast-zh/rem"
    assert plan.recipes.by_name["ddr-contrast-zh"]["dataset"] == "mini-zh-source"
    assert plan.ddr.dam_settings("mini-zh-source")["role"] == "source"
    assert plan.ddr.dam_settings("mini-zh-alpha")["role"] == "target"
    assert plan.datasets.backbone_corpora({"language": "zh"}) == datasets.mini_zh
    assert plan.datasets.backbone_corpora({}) == ["mini-source", "mini-alpha", "mini-beta"]
    assert plan.datasets.backbone_corpus["tiny-bert-zh"] == datasets.mini_zh
    assert plan.job("tiny_backbone", {"backbone": "tiny-bert-zh"}).datasets == [f"data/{n}" for n in datasets.mini_zh]


def test_ddr_tables_take_the_chinese_targets_as_their_chinese_rows_and_table1_never(plan):
    tables, evaluation = plan.tables, plan.evaluation
    chinese = {"mini-alpha": "en", "mini-beta": "en", "mini-zh-alpha": "zh", "mini-zh-beta": "zh"}
    for n in (1, 2, 4, 5, 6):
        assert tables.override(("ddr", n)) == chinese
    assert tables.override(("ddr", 3)) == ["mini-alpha", "mini-beta"]      # Table 3 has English rows only
    assert tables.override(("berm", 1)) == ["mini-alpha", "mini-beta"]
    cells = set(tables.cells[("ddr", 2)])
    assert {(d, s) for d in ("mini-zh-alpha", "mini-zh-beta") for s in ["bm25-flat", "bm25-rm3", *DDR_TABLE2]} <= cells
    assert not {d for key, c in tables.cells.items() if key[0] != "ddr" for d, _ in c} & set(plan.datasets.mini_zh)
    assert not set(plan.datasets.evaluated) & set(plan.datasets.mini_zh)
    assert not set(evaluation.group_datasets) & set(plan.datasets.mini_zh)
    # every table-1 system on one dataset: not on the Chinese domains, whose cells are evaluated one by one
    regex = re.compile(rf"metrics/(?P<dataset>{evaluation.evaluate_dataset_constraint()})/x\.json$")
    assert regex.match("metrics/mini-alpha/x.json") and not regex.match("metrics/mini-zh-alpha/x.json")
    assert set(DDR_TABLE2) | {"bm25-flat"} <= set(evaluation.extra_eval_systems)


def test_ddr_table2_renders_its_chinese_rows_from_the_chinese_cells(plan, tmp_path):
    from zsdr.tables.render import render_table
    from zsdr.tables.spec import load_spec

    key = ("ddr", 2)
    files = {}
    for i, (dataset, system) in enumerate(plan.tables.cells[key]):
        per_query = {f"q{j}": {m: (i * 3 + j * j) % 11 / 10 for m in ("ndcg@10", "recall@100", "recall@1000")}
                     for j in range(5)}
        aggregate = {m: sum(q[m] for q in per_query.values()) / 5 for m in ("ndcg@10", "recall@100", "recall@1000")}
        path = tmp_path / "metrics" / dataset / f"{system}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"aggregate": aggregate, "per_query": per_query, "queries": 5}))
        files[(dataset, system)] = path
    render_table(load_spec(*key), files, tmp_path / "t.csv", tmp_path / "t.md", scale="mini",
                 datasets_override=plan.tables.override(key), produced_systems=set(plan.systems.by_name))
    md = (tmp_path / "t.md").read_text(encoding="utf-8")
    rows = [line for line in md.splitlines() if line.startswith("|") and ("mini-zh-alpha" in line or "mini-zh-beta" in line)]
    assert len(rows) == 6 and all(re.match(r"\|\s*zh\s*\|", r) for r in rows)   # 2 targets x 3 metrics, labelled zh
    assert all(re.search(r"\d\.\d{3}", r) for r in rows)


def test_a_chinese_mini_config_without_one_source_is_refused(tmp_path):
    from zsdr.plan.datasets import build_datasets
    from zsdr.workflow import read_config

    config = read_config(ROOT)
    config["mini_zh"]["domains"] = [d for d in config["mini_zh"]["domains"] if d["role"] == "target"]
    with pytest.raises(ValueError, match=r"^config key mini_zh.domains: the Chinese mini benchmark needs exactly one "
                                         r"domain of role source, found 0"):
        build_datasets(config)
    config = read_config(ROOT)
    config["mini_zh"]["domains"][1]["name"] = "mini-alpha"
    with pytest.raises(ValueError, match="'mini-alpha' is also a domain of `mini`"):
        build_datasets(config)
