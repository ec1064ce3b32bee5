"""The mini benchmark: deterministic, valid, and hard in the intended ways."""

import collections
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from zsdr.data.bm25 import BM25, simple_tokenize
from zsdr.data.formats import read_corpus, read_qrels, read_queries, validate_beir
from zsdr.data import mini as mini_module
from zsdr.data.mini import generate
from zsdr.evaluation.metrics import evaluate_run

ROOT = Path(__file__).resolve().parents[1]


def small_config(seed=13):
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())["mini"]
    cfg["seed"] = seed
    cfg["domains"] = [
        {"name": "mini-source", "role": "source", "docs": 900, "train_queries": 300, "dev_queries": 100},
        {"name": "mini-alpha", "role": "target", "docs": 600, "test_queries": 100, "titles": True},
        {"name": "mini-beta", "role": "target", "docs": 600, "test_queries": 100},
    ]
    return cfg


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    root = tmp_path_factory.mktemp("mini")
    described = generate(small_config(), root)
    return root, described


def test_deterministic(mini, tmp_path):
    root, _ = mini
    generate(small_config(), tmp_path)
    for f in sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file()):
        assert (root / f).read_bytes() == (tmp_path / f).read_bytes(), f
    other = tmp_path / "other"
    generate(small_config(seed=14), other)
    assert (other / "mini-alpha" / "corpus.jsonl").read_bytes() != (root / "mini-alpha" / "corpus.jsonl").read_bytes()


def test_layout_and_counts(mini):
    root, described = mini
    src = validate_beir(root / "mini-source")
    assert (src.docs, src.qrels, src.queries) == (900, {"train": 300, "dev": 100}, 400)
    for name in ("mini-alpha", "mini-beta"):
        c = validate_beir(root / name)
        assert c.docs == 600 and c.qrels_queries == {"test": 100}
        grades = collections.Counter(g for docs in read_qrels(root / name, "test").values() for g in docs.values())
        assert grades[2] == 100 and grades[1] > 100  # graded: one answer, several same-entity passages
        manifest = json.loads((root / name / "dataset.json").read_text())
        assert manifest["docs"] == 600 and manifest["group"] == "mini"
    assert json.loads((root / "mini.json").read_text())["domains"].keys() == described["domains"].keys()
    assert all(d["title"] for d in read_corpus(root / "mini-alpha").values())
    assert not any(d["title"] for d in read_corpus(root / "mini-beta").values())


def test_training_files(mini):
    root, _ = mini
    train = read_qrels(root / "mini-source", "train")
    negs = [json.loads(line) for line in (root / "mini-source" / "negatives.jsonl").read_text().splitlines()]
    assert len(negs) == 300
    corpus = read_corpus(root / "mini-source")
    for rec in negs:
        assert rec["pos"] == list(train[rec["qid"]])
        assert len(rec["neg"]["bm25"]) == 20 and not set(rec["neg"]["bm25"]) & set(rec["pos"])
        assert set(rec["neg"]["bm25"]) <= set(corpus)
    triples = (root / "mini-source" / "triples.train.tsv").read_text().splitlines()
    k = small_config()["triples_per_query"]
    assert len(triples) == 300 * k and all(len(t.split("\t")) == 3 for t in triples)
    # like MS MARCO's triples, negatives are drawn from the whole BM25 list, not only its head
    rank = {}
    for rec in negs:
        for r, did in enumerate(rec["neg"]["bm25"]):
            rank.setdefault(corpus[did]["text"], []).append(r)
    ranks = [min(rank[t.split("\t")[2]]) for t in triples]
    assert max(ranks) >= k and all(r < 20 for r in ranks)


def test_essential_units_are_exact(mini):
    import syntok.segmenter as segmenter

    root, _ = mini
    for name in ("mini-source", "mini-alpha"):
        corpus = read_corpus(root / name)
        for line in (root / name / "units.jsonl").read_text().splitlines():
            u = json.loads(line)
            text = corpus[u["corpus-id"]]["text"]
            assert " ".join(u["sentences"]) == text
            ess = u["sentences"][u["essential"]]
            assert text[u["answer_start"]:u["answer_start"] + len(u["answer"])] == u["answer"]
            assert u["answer"] in ess.split(" ")
            # syntok (BERM's segmenter) recovers exactly these units
            split = ["".join(t.spacing + t.value for t in s).strip() for p in segmenter.analyze(text) for s in p]
            assert split == u["sentences"]


def _vocab(root: Path, name: str) -> set[str]:
    words = set()
    for d in read_corpus(root / name).values():
        words.update(simple_tokenize(d["title"] + " " + d["text"]))
    for q in read_queries(root / name).values():
        words.update(simple_tokenize(q))
    return words


def test_target_vocabulary_never_seen_in_source(mini):
    root, described = mini
    source_words = _vocab(root, "mini-source") | set(
        simple_tokenize((root / "mini-source" / "triples.train.tsv").read_text()))
    for name in ("mini-alpha", "mini-beta"):
        target_words = _vocab(root, name)
        synonyms = {w for pair in described["domains"][name]["synonyms"] for w in pair}
        assert synonyms <= target_words
        assert not synonyms & source_words
        # only the shared English words of the generator (function, general and template words) overlap
        template_words = set(simple_tokenize(" ".join(
            mini_module.ESSENTIAL_TEMPLATES + mini_module.DISTRACTOR_TEMPLATES + mini_module.INTRO_TEMPLATES
            + mini_module.QUERY_TEMPLATES)))
        allowed = set(mini_module.FUNCTION_WORDS) | set(mini_module.GENERAL_WORDS) | template_words
        assert target_words & source_words <= allowed


def test_synonymy_is_learnable_from_the_target_corpus_alone(mini):
    """In each target corpus both synonyms of a concept keep the same company (their cue words)."""
    root, described = mini
    for name in ("mini-alpha", "mini-beta"):
        sents = [simple_tokenize(s) for d in read_corpus(root / name).values()
                 for s in re.split(r"(?<=\.) ", d["text"])]
        df = collections.Counter(w for s in sents for w in set(s))
        company = collections.defaultdict(collections.Counter)
        for s in sents:
            rare = {w for w in s if df[w] < 0.05 * len(sents)}
            for w in set(s):
                company[w].update(rare - {w})
        pairs = described["domains"][name]["synonyms"]
        same = sum({w for w, _ in company[a].most_common(2)} == {w for w, _ in company[b].most_common(2)}
                   for a, b in pairs)
        assert same >= 0.9 * len(pairs), (name, same, len(pairs))


def _ndcg_by_mismatch(root: Path, name: str, pairs: list[list[str]], expand: bool):
    corpus, queries = read_corpus(root / name), read_queries(root / name)
    qrels = read_qrels(root / name, "test")
    other = {a: b for a, b in pairs} | {b: a for a, b in pairs}
    if expand:
        queries = {q: t + " " + " ".join(other[w] for w in t.split() if w in other) for q, t in queries.items()}
    index = BM25([f"{d['title']} {d['text']}".strip() for d in corpus.values()], ids=list(corpus))
    per_query = evaluate_run(qrels, index.search(queries, k=100), ["ndcg@10"])["per_query"]
    units = {u["query-id"]: u for u in map(json.loads, (root / name / "units.jsonl").read_text().splitlines())}
    matched, mismatched = [], []
    for qid, m in per_query.items():
        ess = set(units[qid]["sentences"][units[qid]["essential"]].split())
        attr = [w for w in read_queries(root / name)[qid].split() if w in other]
        (matched if attr and attr[0] in ess else mismatched).append(m["ndcg@10"])
    return np.mean(matched), np.mean(mismatched), np.mean(matched + mismatched)


def test_lexical_gap_is_real_and_closed_by_target_synonymy(mini):
    """BM25 fails where the query's synonym differs from its answer's; knowing the synonyms helps."""
    root, described = mini
    for name in ("mini-alpha", "mini-beta"):
        pairs = described["domains"][name]["synonyms"]
        matched, mismatched, overall = _ndcg_by_mismatch(root, name, pairs, expand=False)
        assert matched - mismatched > 0.1, (name, matched, mismatched)
        _, mismatched_expanded, overall_expanded = _ndcg_by_mismatch(root, name, pairs, expand=True)
        assert mismatched_expanded > mismatched + 0.02, (name, mismatched, mismatched_expanded)
        assert overall_expanded > overall
        assert 0.3 < overall < 0.95  # neither trivial nor hopeless for BM25
