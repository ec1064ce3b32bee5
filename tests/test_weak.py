"""RMSC's weak supervision: SCL and ICT pairs (zsdr.training.weak) and QGen (zsdr.models.generator,
zsdr.training.qgen and zsdr.training.weak: a tiny T5 trained through the one trainer, sampling, pairs)."""

import json

import numpy as np
import pytest
import torch

from tests.conftest import mini_with_backbones
from zsdr.data.formats import read_corpus, write_beir
from zsdr.io import DataError
from zsdr.models.generator import QueryGenerator, build_tiny_generator
from zsdr.pretrain.spans import document_spans, split_sentences
from zsdr.training.qgen import generator_examples
from zsdr.training.weak.documents import permuted_documents
from zsdr.training.weak.draws import ict_pair, pair_rng, scl_pair
from zsdr.training.weak.format import WeakPair, read_weak_pairs
from zsdr.training.weak.qgen_pairs import write_qgen_pairs
from zsdr.training.weak.scl_ict import write_weak_pairs
from zsdr.training.weak.sets import write_weak_set

# Documents of 1 to 5 sentences; "solo" has one sentence and gives no pair.
SENTENCES = {
    "d1": ["The cat sat on the mat.", "It was a sunny day.", "Birds sang loudly in the old oak tree.",
           "Children played outside until dark."],
    "d2": ["Rivers carry water to the sea.", "Fish swim against the current.", "Bears wait at the falls."],
    "d3": ["Bread needs flour and water.", "Yeast makes the dough rise.", "The oven must be hot.",
           "Crusts turn brown when baked.", "Fresh loaves smell wonderful."],
    "d4": ["Trains leave the station at noon.", "Passengers buy tickets early."],
    "solo": ["Only one sentence lives here."],
    "d6": ["Snow fell all night long.", "Roads were closed by morning.", "Schools stayed shut.",
           "Neighbours cleared the paths together."],
    "d7": ["Bees visit many flowers.", "They carry pollen between plants.", "Honey is stored in combs."],
    "d8": ["Mountains rise above the clouds.", "Climbers carry ropes and axes.", "The summit is cold.",
           "Few reach the top."],
}
TITLES = {did: f"Title {did}" for did in SENTENCES}


class Words:
    """A stand-in tokenizer: one token per whitespace-separated word."""

    def __call__(self, texts, add_special_tokens=False, **kw):
        return {"input_ids": [t.split() for t in texts]}


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    root = tmp_path_factory.mktemp("weak") / "data"
    corpus = {did: {"title": TITLES[did], "text": " ".join(s)} for did, s in SENTENCES.items()}
    write_beir(root, corpus, {"q1": "what do cats do"}, {"train": {"q1": {"d1": 1}}})
    assert all(split_sentences(corpus[did]["text"]) == s for did, s in SENTENCES.items())
    return root


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------------------------ pair draws
def test_ict_pair_by_hand():
    s = SENTENCES["d3"]
    picked = set()
    for seed in range(40):
        query, context = ict_pair(s, np.random.default_rng(seed), keep_probability=0.0)
        i = s.index(query)
        assert context == " ".join(s[:i] + s[i + 1:]) and query not in context
        picked.add(query)
        assert ict_pair(s, np.random.default_rng(seed), keep_probability=1.0) == (query, " ".join(s))
    assert picked == set(s)                                    # every sentence can be the query
    draws = [ict_pair(s, np.random.default_rng(seed), 0.5) for seed in range(200)]
    kept = sum(q in c for q, c in draws)
    assert 60 < kept < 140
    assert ict_pair(s[:1], np.random.default_rng(0)) is None and ict_pair([], np.random.default_rng(0)) is None
    with pytest.raises(ValueError, match="keep_probability"):
        ict_pair(s, np.random.default_rng(0), keep_probability=1.5)


def test_scl_pair_by_hand():
    spans = ["a b", "c d", "e f"]
    seen = set()
    for seed in range(30):
        q, p = scl_pair(spans, np.random.default_rng(seed))
        assert q in spans and p in spans and q != p
        seen.add((q, p))
    assert len(seen) == 6                                      # both roles, every pair of spans
    assert scl_pair(["x"], np.random.default_rng(0)) is None
    assert scl_pair(["x", "x"], np.random.default_rng(0)) is None  # repeated text counts once


# ---------------------------------------------------------------------------------------- files
def test_ict_file_pairs_are_sentences_and_the_rest_in_order(beir, tmp_path):
    out = tmp_path / "ict.jsonl"
    stats = write_weak_pairs(beir, out, "ict", keep_probability=0.0, seed=3)
    assert {k: stats[k] for k in ("documents", "pairs", "skipped", "distinct", "repeats", "passes")} == {
        "documents": 8, "pairs": 7, "skipped": 1, "distinct": 7, "repeats": 0, "passes": 1}
    recs = lines(out)
    assert sorted(r["doc_id"] for r in recs) == sorted(d for d in SENTENCES if d != "solo")
    for r in recs:
        s = SENTENCES[r["doc_id"]]
        i = s.index(r["query"])
        assert r["positive"] == {"title": TITLES[r["doc_id"]], "text": " ".join(s[:i] + s[i + 1:])}
        assert r["_id"] == f"ict-{r['doc_id']}-0" and r["method"] == "ict"
    write_weak_pairs(beir, out, "ict", keep_probability=1.0, seed=3)
    for r in lines(out):
        assert r["positive"]["text"] == " ".join(SENTENCES[r["doc_id"]])


def test_scl_file_pairs_are_two_distinct_spans(beir, tmp_path):
    out = tmp_path / "scl.jsonl"
    corpus = read_corpus(beir)
    index = {did: i for i, did in enumerate(corpus)}
    stats = write_weak_pairs(beir, out, "scl", tokenizer=Words(), max_tokens=8, new_span_probability=0.1, seed=1)
    assert {k: stats[k] for k in ("documents", "pairs", "skipped")} == {"documents": 8, "pairs": 7, "skipped": 1}
    for r in lines(out):
        doc = corpus[r["doc_id"]]
        spans = document_spans(f"{doc['title']} {doc['text']}", Words(), 8, 0.1, 1, index[r["doc_id"]])
        assert r["query"] in spans and r["positive"]["text"] in spans and r["query"] != r["positive"]["text"]
        assert r["positive"]["title"] == "" and r["method"] == "scl"
    with pytest.raises(ValueError, match="tokenizer"):
        write_weak_pairs(beir, out, "scl")
    with pytest.raises(ValueError, match="qgen"):
        write_weak_pairs(beir, out, "qgen")


def test_same_seed_same_file_other_seed_other_choices(beir, tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    for method, kw in (("ict", {}), ("scl", {"tokenizer": Words(), "max_tokens": 8})):
        write_weak_pairs(beir, a, method, seed=5, **kw)
        write_weak_pairs(beir, b, method, seed=5, **kw)
        write_weak_pairs(beir, c, method, seed=6, **kw)
        assert a.read_bytes() == b.read_bytes()
        pairs = lambda p: {(r["doc_id"], r["query"], r["positive"]["text"]) for r in lines(p)}  # noqa: E731
        assert pairs(a) != pairs(c)
        assert [r["doc_id"] for r in lines(a)] != [r["doc_id"] for r in lines(c)]  # another visiting order


def test_max_pairs_takes_a_seeded_subset_and_a_prefix(beir, tmp_path):
    full, part = tmp_path / "full.jsonl", tmp_path / "part.jsonl"
    write_weak_pairs(beir, full, "ict", seed=2)
    stats = write_weak_pairs(beir, part, "ict", seed=2, max_pairs=3)
    assert stats["pairs"] == 3 and stats["documents"] <= 4
    assert lines(part) == lines(full)[:3]                      # the same draws: a prefix of the full file
    subsets = set()
    for seed in range(6):
        write_weak_pairs(beir, part, "ict", seed=seed, max_pairs=3)
        subsets.add(frozenset(r["doc_id"] for r in lines(part)))
    assert len(subsets) > 1                                    # not the first documents of the file
    assert write_weak_pairs(beir, part, "ict", max_pairs=0)["pairs"] == 0 and part.read_text() == ""
    order = [d.id for d in permuted_documents(beir, seed=2, window=3)]  # windows of 3, 6: same order
    assert order == [d.id for d in permuted_documents(beir, seed=2)] and sorted(order) == sorted(SENTENCES)


def test_pairs_per_document_are_distinct(beir, tmp_path):
    out = tmp_path / "ict.jsonl"
    corpus = read_corpus(beir)
    index = {did: i for i, did in enumerate(corpus)}
    stats = write_weak_pairs(beir, out, "ict", pairs_per_document=3, keep_probability=0.0, seed=4)
    recs = lines(out)
    by_doc = {}
    for r in recs:
        by_doc.setdefault(r["doc_id"], []).append(r)
    assert len(by_doc["d4"]) == 2                              # two sentences: two distinct queries only
    assert all(len(v) == 3 for d, v in by_doc.items() if d != "d4") and stats["pairs"] == len(recs) == 20
    for did, rs in by_doc.items():
        assert [r["_id"] for r in rs] == [f"ict-{did}-{k}" for k in range(len(rs))]
        assert len({r["query"] for r in rs}) == len(rs)
        first = ict_pair(SENTENCES[did], pair_rng(4, index[did], 0), 0.0)
        assert (rs[0]["query"], rs[0]["positive"]["text"]) == first  # pair 0 is ict_pair of its stream
    scl = tmp_path / "scl.jsonl"
    write_weak_pairs(beir, scl, "scl", tokenizer=Words(), max_tokens=8, pairs_per_document=50, seed=4)
    by_doc = {}
    for r in lines(scl):
        by_doc.setdefault(r["doc_id"], []).append(frozenset((r["query"], r["positive"]["text"])))
    for did, keys in by_doc.items():
        doc = corpus[did]
        m = len(set(document_spans(f"{doc['title']} {doc['text']}", Words(), 8, 0.1, 4, index[did])))
        assert len(keys) == len(set(keys)) == m * (m - 1) // 2  # every unordered pair once, no repeat


@pytest.fixture(scope="module")
def varied(tmp_path_factory):
    """300 titled documents of 2 to 12 sentences of 3 to 14 words: spans and contexts of many lengths."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(500)]
    corpus = {}
    for d in range(300):
        sentences = [" ".join(rng.choice(words, size=int(rng.integers(3, 15)))).capitalize() + "."
                     for _ in range(int(rng.integers(2, 13)))]
        corpus[f"v{d}"] = {"title": f"Topic {d}", "text": " ".join(sentences)}
    root = tmp_path_factory.mktemp("varied") / "data"
    write_beir(root, corpus, {"q1": "a query"}, {"train": {"q1": {"v0": 1}}})
    return root


def test_negatives_are_drawn_by_the_positives_rule(varied, tmp_path):
    """SCL and ICT negatives: spans / contexts of another document, their lengths and titles distributed as the
    positives' (two-sample Kolmogorov-Smirnov test); for SCL a whole document, the rule they replace, is told apart."""
    from scipy.stats import ks_2samp

    corpus = read_corpus(varied)
    for method, kw in (("scl", {"tokenizer": Words(), "max_tokens": 12}), ("ict", {"keep_probability": 0.1})):
        out = tmp_path / f"{method}.jsonl"
        write_weak_pairs(varied, out, method, seed=2, max_pairs=600, pairs_per_document=None, **kw)
        recs = lines(out)
        assert len(recs) == 600 and all(r["negative"]["doc_id"] != r["doc_id"] for r in recs)
        pos = [len(r["positive"]["text"].split()) for r in recs]
        neg = [len(r["negative"]["text"].split()) for r in recs]
        assert ks_2samp(pos, neg).pvalue > 0.01, (method, np.mean(pos), np.mean(neg))
        if method == "scl":   # the test tells a whole document (the rule the negatives replace) apart
            whole = [len(corpus[r["negative"]["doc_id"]]["text"].split()) for r in recs]
            assert ks_2samp(pos, whole).pvalue < 1e-6
        titled = [(bool(r["positive"]["title"]), bool(r["negative"]["title"])) for r in recs]
        assert set(titled) == ({(False, False)} if method == "scl" else {(True, True)})
        for r in recs:
            neg_doc = corpus[r["negative"]["doc_id"]]
            if method == "scl":                                 # one of that document's spans
                index = list(corpus).index(r["negative"]["doc_id"])
                assert r["negative"]["text"] in document_spans(f"{neg_doc['title']} {neg_doc['text']}", Words(),
                                                               12, 0.1, 2, index)
            else:                                               # that document less at most one sentence
                assert r["negative"]["title"] == neg_doc["title"]
                assert len(split_sentences(neg_doc["text"])) - len(split_sentences(r["negative"]["text"])) in (0, 1)
    back = read_weak_pairs(tmp_path / "ict.jsonl")
    assert back[0].negative == lines(tmp_path / "ict.jsonl")[0]["negative"]


def test_weak_sets_reach_their_size_in_passes_without_repeats(varied, tmp_path):
    """A corpus smaller than the wanted size gives several pairs per document, in passes, no pair twice; the
    statistics count them; a corpus without enough distinct pairs stops short and says by how much."""
    out, stats_file = tmp_path / "ict.jsonl", tmp_path / "ict.stats.json"
    stats = write_weak_pairs(varied, out, "ict", seed=1, max_pairs=1000, pairs_per_document=None,
                             statistics=stats_file)
    recs = lines(out)
    assert stats == json.loads(stats_file.read_text())
    assert stats["pairs"] == len(recs) == 1000 and stats["target"] == 1000 and stats["shortfall"] == 0
    assert stats["distinct"] == len({(r["query"], r["positive"]["text"]) for r in recs}) == 1000
    assert stats["repeats"] == 0 and stats["passes"] == 4 and stats["corpus_documents"] == 300
    per_doc = {}
    for r in recs:
        per_doc[r["doc_id"]] = per_doc.get(r["doc_id"], 0) + 1
    assert max(per_doc.values()) - min(per_doc.values()) <= 2   # spread over the documents, pass by pass
    assert [int(r["_id"].rsplit("-", 1)[1]) for r in recs] == sorted(int(r["_id"].rsplit("-", 1)[1]) for r in recs)
    small = tmp_path / "small.jsonl"
    write_weak_pairs(varied, small, "ict", seed=1, max_pairs=700, pairs_per_document=None)
    assert small.read_text() == "".join(out.read_text().splitlines(keepends=True)[:700])  # a prefix
    capacity = sum(len(set(split_sentences(d["text"]))) for d in read_corpus(varied).values())
    many = write_weak_pairs(varied, out, "ict", seed=1, max_pairs=10**6, pairs_per_document=None, negatives=False)
    assert many["pairs"] == many["distinct"] == capacity and many["shortfall"] == 10**6 - capacity
    assert "negative" not in lines(out)[0]
    twin = tmp_path / "twin"                                    # a corpus holding a document twice
    corpus = read_corpus(varied)
    write_beir(twin, {**corpus, "copy": corpus["v0"]}, {"q1": "a query"}, {"train": {"q1": {"v0": 1}}})
    both = write_weak_pairs(twin, out, "ict", seed=1, max_pairs=10**6, pairs_per_document=None, negatives=False,
                            keep_probability=0.0)      # a query sentence, a context: the twin's pairs are the same
    assert both["pairs"] == both["distinct"] == capacity and both["repeats"] == 0
    assert both["duplicates_left_out"] == len(set(split_sentences(corpus["v0"]["text"])))
    with pytest.raises(ValueError, match="needs max_pairs"):
        write_weak_pairs(varied, out, "ict", pairs_per_document=None)


def test_round_trip_and_bad_lines(beir, tmp_path):
    out = tmp_path / "ict.jsonl.gz"
    write_weak_pairs(beir, out, "ict", seed=0)
    pairs = read_weak_pairs(out)
    assert len(pairs) == 7 and all(isinstance(p, WeakPair) and p.method == "ict" for p in pairs)
    p = pairs[0]
    assert p.id == f"ict-{p.doc_id}-0" and p.positive["title"] == TITLES[p.doc_id] and p.query
    good = {"_id": "x-0", "doc_id": "d", "query": "q", "positive": {"title": "", "text": "t"}, "method": "scl"}
    bad = tmp_path / "bad.jsonl"
    for broken, message in ((dict(good, query=" "), '"query" must be a non-empty string'),
                            ({k: v for k, v in good.items() if k != "doc_id"}, '"doc_id" must be'),
                            (dict(good, positive={"title": "", "text": ""}), '"positive.text" must be'),
                            (dict(good, positive="t"), '"positive" must be an object'),
                            (dict(good, method="bm25"), '"method"'),
                            (dict(good), "duplicate _id")):
        bad.write_text(json.dumps(good) + "\n" + json.dumps(broken) + "\n")
        with pytest.raises(DataError, match=r"bad\.jsonl:2: " + message.replace("(", r"\(")):
            read_weak_pairs(bad)


# ------------------------------------------------------------------------------------------- QGen
MINI = {
    "seed": 5, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 60, "train_queries": 40, "dev_queries": 5}],
}
SIZE = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "max_length": 64, "dropout": 0.0}


@pytest.fixture(scope="module")
def qgen(tmp_path_factory):
    """A mini source domain, a tiny T5 on its BERT tokenizer, trained for 40 steps by the one trainer."""
    from zsdr.training.launch import run_spec

    root = mini_with_backbones(tmp_path_factory.mktemp("qgen"), MINI, SIZE, kinds=("bert",))
    summary = build_tiny_generator(root / "bert", root / "gen-init", SIZE, seed=0)
    spec = {"kind": "generator", "init": str(root / "gen-init"), "dataset": str(root / "data" / "src"),
            "max_length": 64, "query_max_length": 16, "dropout": 0.0, "out": str(root / "gen"),
            "checkpoint_dir": str(root / "ckpt"),
            "train": {"batch_size": 8, "max_steps": 150, "lr": 3e-3, "warmup_steps": 2, "seed": 1, "log_every": 1}}
    run_spec(spec, cpu=True, progress=False)
    return root, summary


def test_tiny_generator_trains_through_the_one_trainer(qgen):
    root, summary = qgen
    assert summary["kind"] == "t5" and summary["parameters"] > 0 and (root / "gen-init" / "backbone.json").is_file()
    log = [json.loads(line) for line in (root / "gen" / "train_log.jsonl").read_text().splitlines()]
    first, last = np.mean([r["loss"] for r in log[:3]]), np.mean([r["loss"] for r in log[-3:]])
    assert last < 0.6 * first and log[-1]["accuracy"] > log[0]["accuracy"]
    assert json.loads((root / "gen" / "generator.json").read_text()) == {"max_length": 64, "query_max_length": 16}
    assert json.loads((root / "gen" / "training.json").read_text())["examples"] == 40


def test_features_pad_labels_with_ignore(qgen):
    root, _ = qgen
    gen = QueryGenerator.from_pretrained(root / "gen")
    f = gen.features(["a passage about rivers", "another one"], ["short", "a much longer query text here"])
    labels = f["labels"]
    assert labels.shape[0] == 2 and (labels[0] == -100).any() and not (labels[1] == -100).any()
    assert labels[0, -1] == -100 and (labels[0][labels[0] != -100] != gen.tokenizer.pad_token_id).all()
    assert len(generator_examples(root / "data" / "src", max_examples=5)) == 5
    with pytest.raises(DataError, match="cannot load a seq2seq query generator"):
        QueryGenerator.from_pretrained(root / "bert")            # a masked LM, not a seq2seq model


def test_generate_is_seeded_and_survives_save_and_reload(qgen, tmp_path):
    root, _ = qgen
    gen = QueryGenerator.from_pretrained(root / "gen")
    passages = [p for p, _ in generator_examples(root / "data" / "src", max_examples=5)]
    state = torch.random.get_rng_state()
    out = gen.generate(passages, 3, batch_size=2, seed=7)
    assert torch.equal(state, torch.random.get_rng_state())   # the caller's random state is untouched
    assert len(out) == 5 and all(len(qs) == 3 and all(q and q == q.strip() for q in qs) for qs in out)
    assert gen.generate(passages, 3, batch_size=2, seed=7) == out
    assert gen.generate(passages, 3, batch_size=2, seed=8) != out
    gen.save_pretrained(tmp_path / "copy")
    assert QueryGenerator.from_pretrained(tmp_path / "copy").generate(passages, 3, batch_size=2, seed=7) == out


def test_write_qgen_pairs_are_readable_weak_pairs(qgen, tmp_path):
    root, _ = qgen
    gen = QueryGenerator.from_pretrained(root / "gen")
    data = root / "data" / "src"
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    stats = write_qgen_pairs(gen, data, a, queries_per_document=2, max_pairs=9, seed=3, batch_size=4)
    write_qgen_pairs(gen, data, b, queries_per_document=2, max_pairs=9, seed=3, batch_size=4)
    assert a.read_bytes() == b.read_bytes() and stats["pairs"] == 9
    pairs = read_weak_pairs(a)
    corpus = read_corpus(data)
    assert len(pairs) == 9 and all(p.method == "qgen" and p.positive == corpus[p.doc_id] for p in pairs)
    by_doc = {}
    for p in pairs:
        by_doc.setdefault(p.doc_id, []).append(p)
    assert stats["documents"] == len(by_doc) + stats["skipped"]
    for did, ps in by_doc.items():
        assert [p.id for p in ps] == [f"qgen-{did}-{k}" for k in range(len(ps))]
        assert len({p.query for p in ps}) == len(ps)            # a repeated query is written once
    order = [d.id for d in permuted_documents(data, seed=3)]
    assert list(by_doc) == order[:len(by_doc)]                  # the seeded selection of write_weak_pairs


def _reference_qgen(gen, data, out, n, max_pairs, seed, batch_size):
    """The chunked CPU writer write_qgen_pairs was before the GPU's length-sorted pools (reference)."""
    import itertools

    from zsdr.models.generator import passage_of
    from zsdr.training.weak.documents import selected_documents
    from zsdr.training.weak.format import write_pair

    pairs = 0
    docs = selected_documents(data, seed, max_pairs, n)
    with open(out, "w", encoding="utf-8") as fh:
        for c in itertools.count():
            chunk = list(itertools.islice(docs, batch_size))
            if not chunk or pairs >= max_pairs:
                break
            generated = gen.generate([passage_of({"title": d.title, "text": d.text}) for d in chunk], n,
                                     batch_size=batch_size, seed=[seed, c])
            for doc, queries in zip(chunk, generated):
                queries = list(dict.fromkeys(queries))[:max_pairs - pairs]
                for k, q in enumerate(queries):
                    write_pair(fh, "qgen", doc.id, k, q, {"title": doc.title, "text": doc.text})
                pairs += len(queries)
                if pairs >= max_pairs:
                    break


def test_qgen_pairs_on_the_cpu_equal_the_reference_writer(qgen, tmp_path):
    from zsdr.training.weak.qgen_pairs import generate_sorted

    root, _ = qgen
    gen = QueryGenerator.from_pretrained(root / "gen").for_inference("cpu", "bf16")
    assert next(gen.parameters()).dtype == torch.float32  # the CPU keeps float32, whatever is asked
    data = root / "data" / "src"
    new, ref = tmp_path / "new.jsonl", tmp_path / "ref.jsonl"
    write_qgen_pairs(gen, data, new, queries_per_document=3, max_pairs=25, seed=4, batch_size=3)
    _reference_qgen(gen, data, ref, 3, 25, 4, 3)
    assert new.read_bytes() == ref.read_bytes() and len(new.read_text().splitlines()) == 25
    # the GPU's sorted pools, run on the CPU: batches of similar length, answers in the passages' order
    passages = [p for p, _ in generator_examples(data, max_examples=7)]
    out = generate_sorted(gen, passages, 2, 0, 5, 3, top_k=25, top_p=0.95, max_length=12)
    lengths = [len(gen.tokenizer(p, max_length=gen.max_length, truncation=True)["input_ids"]) for p in passages]
    order = sorted(range(7), key=lambda i: -lengths[i])
    first = gen.generate([passages[i] for i in order[:3]], 2, batch_size=3, seed=[5, 0, 0], top_k=25, top_p=0.95,
                         max_length=12)
    assert [out[i] for i in order[:3]] == first and all(out)


# ------------------------------------------------------------------------------------ the workflow's one call
WEAK = {"max_pairs": 7, "pairs_per_document": None, "max_tokens": 6, "new_span_probability": 0.1,
        "keep_probability": 0.1}
QGEN = {"queries_per_document": 2, "batch_size": 4, "top_k": 25, "top_p": 0.95, "max_length": 16}


def test_write_weak_set_is_the_methods_writer_with_the_configs_settings(beir, tmp_path):
    """rules/rmsc.smk's weak_pairs job: ICT through write_weak_set writes what write_weak_pairs writes with
    config rmsc.weak's settings, statistics included; an unknown method or a QGen set without a generator is
    refused before anything is written."""
    out, stats = tmp_path / "ict.jsonl", tmp_path / "ict.stats.json"
    got = write_weak_set(beir, out, stats, method="ict", weak=WEAK, qgen=QGEN, tokenizer="unused", generator=None,
                         seed=5, device="auto", precision="bf16", gpus=0, threads=1)
    want = write_weak_pairs(beir, tmp_path / "ref.jsonl", "ict", max_pairs=7, pairs_per_document=None, seed=5,
                            keep_probability=0.1, statistics=tmp_path / "ref.stats.json")
    assert got == want and out.read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    assert json.loads(stats.read_text()) == want
    for method, generator, words in (("mlm", None, "use one of scl, ict, qgen"),
                                     ("qgen", None, "no generator given")):
        with pytest.raises(ValueError, match=words):
            write_weak_set(beir, tmp_path / "x.jsonl", tmp_path / "x.stats.json", method=method, weak=WEAK,
                           qgen=QGEN, tokenizer="unused", generator=generator, seed=5, device="auto",
                           precision="bf16", gpus=0, threads=1)
    assert not (tmp_path / "x.jsonl").exists()


def test_write_weak_set_generates_qgen_pairs_on_the_cpu_without_a_gpu(qgen, tmp_path):
    root, _ = qgen
    data, out = root / "data" / "src", tmp_path / "qgen.jsonl"
    got = write_weak_set(data, out, tmp_path / "qgen.stats.json", method="qgen", weak=WEAK, qgen=QGEN,
                         tokenizer="unused", generator=str(root / "gen"), seed=3, device="cuda", precision="bf16",
                         gpus=0, threads=1)   # dense.device names CUDA, but the job holds no GPU: the CPU
    gen = QueryGenerator.from_pretrained(root / "gen").for_inference("cpu", "bf16")
    want = write_qgen_pairs(gen, data, tmp_path / "ref.jsonl", queries_per_document=2, max_pairs=7, seed=3,
                            batch_size=4, top_k=25, top_p=0.95, max_length=16)
    assert got["pairs"] == want["pairs"] == 7 and out.read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
