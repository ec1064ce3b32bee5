"""BERM: sentence units, unit BM25, essential-unit labels, the R1/R2 losses and the loss term."""

import json
import math

import pytest
import torch

from tests.conftest import mini_with_backbones, texts_hidden
from zsdr.data.units import read_unit_labels, sentence_spans, tokenize_with_units
from zsdr.io import DataError
from zsdr.losses.semantic_units import matching_representation, unit_balance, unit_extraction
from zsdr.models.encoder import Encoder
from zsdr.sparse.unit_bm25 import UnitBM25
from zsdr.training.berm_term import BermConfig, BermTerm
from zsdr.training.launch import run_spec
from zsdr.training.unit_labels import (gather_labels, label_pairs, label_shard, select_pairs, unit_statistics,
                                      write_statistics)
from zsdr.workflow import section_defaults

MINI = {
    "seed": 5, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 320, "train_queries": 200, "dev_queries": 20}],
}
SIZE = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "max_length": 96, "dropout": 0.0}
PASSAGE = {"title": "Tixgrei facts",
           "text": "Quoorsteand belongs to the cilhiel point. The tixgrei of Grykgraxfie is flealtierdrind. Short one."}
HAND = ["Quoorsteand belongs to the cilhiel point.", "The tixgrei of Grykgraxfie is flealtierdrind.", "Short one."]

BERM = section_defaults("recipes.<name>.berm")   # the schema's defaults, which the workflow fills into a spec


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    return mini_with_backbones(tmp_path_factory.mktemp("berm"), MINI, SIZE)


# ------------------------------------------------------------------------------------------ losses
def test_r1_is_the_kl_from_uniform_by_hand():
    passages = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    units = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]],     # scores 1, 0
                          [[2.0, 3.0], [5.0, 3.0], [0.0, 3.0]],     # scores 3, 3, 3: balanced
                          [[9.0, 9.0], [9.0, 9.0], [9.0, 9.0]]])    # no units: ignored
    mask = torch.tensor([[True, True, False], [True, True, True], [False, False, False]])
    p = [math.e / (math.e + 1), 1 / (math.e + 1)]
    kl = 0.5 * math.log(0.5 / p[0]) + 0.5 * math.log(0.5 / p[1])      # 0.120115
    assert unit_balance(passages, units, mask).item() == pytest.approx((kl + 0.0) / 2, abs=1e-6)


def test_r1_mean_reduction_is_the_official_codes_kl_div_per_unit():
    """``r1_reduction="mean"``: per passage, torch's ``F.kl_div(log P, uniform, reduction='mean')`` on
    its ``(1, n)`` row (the official code's call), i.e. the KL / n; then the mean over passages."""
    torch.manual_seed(0)
    passages, units = torch.randn(4, 8), torch.randn(4, 5, 8)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False], [True] * 3 + [False] * 2, [False] * 5])
    expected = []
    for i in range(3):
        n = int(mask[i].sum())
        logp = torch.log_softmax((units[i, :n] @ passages[i]).unsqueeze(0), dim=-1)
        uniform = torch.softmax(torch.ones(1, n), dim=-1)
        expected.append(torch.nn.functional.kl_div(logp, uniform, reduction="mean").item())
        assert torch.nn.functional.kl_div(logp, uniform, reduction="sum").item() == pytest.approx(
            expected[-1] * n, rel=1e-5)
    got = unit_balance(passages, units, mask, reduction="mean").item()
    assert got == pytest.approx(sum(expected) / 3, rel=1e-5)
    assert unit_balance(passages, units, mask).item() == pytest.approx(
        sum(e * int(mask[i].sum()) for i, e in enumerate(expected)) / 3, rel=1e-5)
    with pytest.raises(ValueError, match="r1_reduction"):
        unit_balance(passages, units, mask, reduction="batchmean")
    with pytest.raises(ValueError, match="r1_reduction"):
        BermConfig.from_dict({**BERM, "r1_reduction": "batchmean"})


def test_r2_is_cross_entropy_over_units_by_hand_and_double_softmax_flattens_it():
    tq, tp = torch.tensor([[2.0, 1.0]]), torch.tensor([[1.0, -1.0]])
    m = matching_representation(tq, tp)

    def gelu(x):
        return 0.5 * x * (1 + math.erf(x / math.sqrt(2)))

    assert m.tolist()[0] == pytest.approx([gelu(2.0), gelu(-1.0)], abs=1e-6)
    units = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [7.0, 7.0]]])
    mask = torch.tensor([[True, True, True, False]])
    logits = [gelu(2.0), gelu(-1.0), gelu(2.0) + gelu(-1.0)]
    lse = math.log(sum(math.exp(x) for x in logits))
    assert unit_extraction(m, units, mask, torch.tensor([2])).item() == pytest.approx(lse - logits[2], abs=1e-5)
    probs = [math.exp(x - lse) for x in logits]
    lse_p = math.log(sum(math.exp(x) for x in probs))
    double = unit_extraction(m, units, mask, torch.tensor([2]), double_softmax=True).item()
    assert double == pytest.approx(lse_p - probs[2], abs=1e-5)
    assert unit_extraction(m, units, mask, torch.tensor([-1])).item() == 0.0   # unlabelled: no loss


# ------------------------------------------------------------------------------------------- units
def test_sentence_spans_of_a_hand_segmented_passage():
    assert [PASSAGE["text"][s:e] for s, e in sentence_spans(PASSAGE["text"])] == HAND


@pytest.mark.parametrize("kind", ["bert", "roberta"])
@pytest.mark.parametrize("doc_format", ["title_space_text", "title_sep_text", "text"])
def test_unit_token_spans_cover_exactly_each_sentence(mini, kind, doc_format):
    enc = Encoder.from_pretrained(mini / kind, pooling="mean", similarity="dot", doc_format=doc_format, doc_max_length=96)
    features, spans = tokenize_with_units(enc, [PASSAGE], [None])
    assert features == enc.tokenize_docs([PASSAGE])
    ids = features["input_ids"][0]
    decoded = [enc.tokenizer.decode(ids[s:e]).strip() for s, e in spans[0]]
    norm = (lambda t: t.lower()) if kind == "bert" else (lambda t: t)
    assert decoded == [norm(h) for h in HAND]
    # the title's tokens and the special tokens belong to no unit
    first = spans[0][0][0]
    assert enc.tokenizer.decode(ids[:first]).lower().count("tixgrei") == (doc_format != "text")


def test_truncated_units_are_none(mini):
    enc = Encoder.from_pretrained(mini / "roberta", pooling="mean", similarity="dot", doc_format="text", doc_max_length=12)
    _, spans = tokenize_with_units(enc, [PASSAGE], [None])
    assert spans[0][0] is not None and spans[0][-1] is None


# ------------------------------------------------------------------------------------ unit BM25
def test_unit_bm25_lucene_and_the_codes_approximation_by_hand():
    lucene = UnitBM25({"a": 1, "b": 2}, n_docs=4, avgdl=2.0, k1=0.9, b=0.4)
    idf_a = math.log1p((4 - 1 + 0.5) / 1.5)
    # unit "a a c": tf 2, length 3
    want = idf_a * 2 / (2 + 0.9 * (1 - 0.4 + 0.4 * 3 / 2))
    assert lucene.score("a", ["a a c", "c"]) == pytest.approx([want, 0.0])
    approx = UnitBM25({"a": 1}, n_docs=4, avgdl=2.0, variant="approximate", k1=1.5, b=0.75)
    norm = 2.5 / 1.5 * (1 - 0.75 + 0.75 * 3 / 100)
    # every query-token occurrence counts, no tf saturation; an unseen token has idf 15
    assert approx.score("a a z", ["a a z"]) == pytest.approx([2 * math.log(4 / 2) * norm + 15 * norm])


# ---------------------------------------------------------------------------------------- labels
def test_labels_bm25_only_and_the_gathered_summary(mini, tmp_path):
    src = mini / "data" / "src"
    pairs = select_pairs(src, "train")
    assert len(pairs) == 200 and pairs == sorted(pairs)
    scorer = unit_statistics(src, pairs, "units")
    label_pairs(src, pairs[::2], scorer, tmp_path / "a.jsonl")
    label_pairs(src, pairs[1::2], scorer, tmp_path / "b.jsonl")
    report = gather_labels([tmp_path / "a.jsonl", tmp_path / "b.jsonl"], tmp_path / "l.jsonl", tmp_path / "s.json", src)
    assert report["pairs"] == 200 == report["judged"]
    assert 0.5 < report["agreement"] == report["agreement_bm25_only"] <= 1.0   # no reader: BM25 decides
    labels = read_unit_labels(tmp_path / "l.jsonl")
    assert len(labels) == 200
    truth = {json.loads(x)["query-id"]: json.loads(x) for x in (src / "units.jsonl").read_text().splitlines()}
    qid, pid = pairs[0]
    spans, essential, scores = labels[(qid, pid)]
    assert len(scores) == len(spans) and essential == max(range(len(scores)), key=lambda j: (scores[j], -j))
    text = [json.loads(x) for x in (src / "corpus.jsonl").read_text().splitlines() if json.loads(x)["_id"] == pid][0]
    assert [text["text"][s:e] for s, e in spans] == truth[qid]["sentences"]


def test_unit_labelling_reads_the_texts_from_the_store(mini, tmp_path):
    """The unit_stats and label_units_shard jobs read passages and queries from the dataset's store:
    with corpus.jsonl and queries.jsonl unreadable they write the same files, byte for byte, and a
    reader sees the store's texts."""
    src = mini / "data" / "src"
    write_statistics(src, "train", tmp_path / "stats.json", max_pairs=60, seed=3)
    label_shard(src, "train", tmp_path / "stats.json", tmp_path / "labels.jsonl", shard=1, shards=2, max_pairs=60,
                seed=3)
    pairs = select_pairs(src, "train", 60, 3)[1::2]
    corpus = {json.loads(x)["_id"]: json.loads(x)["text"] for x in (src / "corpus.jsonl").read_text().splitlines()}
    queries = {json.loads(x)["_id"]: json.loads(x)["text"] for x in (src / "queries.jsonl").read_text().splitlines()}

    class Recorder(_OracleReader):
        def start_probabilities(self, questions, passages, batch_size=64):
            seen.extend(zip(questions, passages))
            return super().start_probabilities(questions, passages, batch_size)

    seen = []
    with texts_hidden(src):
        write_statistics(src, "train", tmp_path / "stats2.json", max_pairs=60, seed=3)
        label_shard(src, "train", tmp_path / "stats2.json", tmp_path / "labels2.jsonl", shard=1, shards=2,
                    max_pairs=60, seed=3)
        scorer = UnitBM25.load(tmp_path / "stats2.json")
        label_pairs(src, pairs, scorer, tmp_path / "read.jsonl", reader=Recorder(src / "units.jsonl"))
    assert (tmp_path / "stats.json").read_bytes() == (tmp_path / "stats2.json").read_bytes()
    assert (tmp_path / "labels.jsonl").read_bytes() == (tmp_path / "labels2.jsonl").read_bytes()
    assert seen == [(queries[q], corpus[d]) for q, d in pairs]


class _OracleReader:
    """Puts all start probability on the answer's first character (what a perfect reader does)."""

    def __init__(self, units_file):
        self.answer = {}
        for line in units_file.read_text().splitlines():
            o = json.loads(line)
            self.answer[" ".join(o["sentences"])] = o["answer_start"]

    def start_probabilities(self, questions, passages, batch_size=64):
        return [[(self.answer[p], self.answer[p] + 3, 1.0), (0, 3, 0.0)] for p in passages]


def test_the_reader_term_moves_labels_to_the_answering_unit(mini, tmp_path):
    src = mini / "data" / "src"
    pairs = select_pairs(src, "train")
    scorer = unit_statistics(src, pairs, "units")
    label_pairs(src, pairs, scorer, tmp_path / "a.jsonl", reader=_OracleReader(src / "units.jsonl"), delta=100.0)
    report = gather_labels([tmp_path / "a.jsonl"], tmp_path / "l.jsonl", tmp_path / "s.json", src)
    assert report["agreement"] == 1.0 > report["agreement_bm25_only"]


def test_bad_labels_name_file_and_line(tmp_path):
    bad = tmp_path / "labels.jsonl"
    bad.write_text('{"qid": "1", "pid": "2", "units": [[0, 4]], "essential": 0}\n{"qid": "1", "units": 3}\n')
    with pytest.raises(DataError) as err:
        read_unit_labels(bad)
    assert "labels.jsonl" in str(err.value) and ":2" in str(err.value)
    bad.write_text('{"qid": "1", "pid": "2", "units": [[0, 4]], "essential": 3}\n')
    with pytest.raises(DataError, match="outside"):
        read_unit_labels(bad)
    with pytest.raises(ValueError, match="unknown key"):
        BermConfig.from_dict({"r3_weight": 1})


# ------------------------------------------------------------------------------------ loss term
def test_the_term_pools_units_over_their_tokens_only(mini):
    enc = Encoder.from_pretrained(mini / "roberta", pooling="mean", similarity="dot", doc_format="text", doc_max_length=96)
    spans = sentence_spans(PASSAGE["text"])
    term = BermTerm(BermConfig(**{**BERM, "r1_weight": 1.0, "r2_weight": 1.0}))
    term.labels = {("q", "p"): (spans, 1)}
    features = enc.tokenize_docs([PASSAGE, PASSAGE])
    width = len(features["input_ids"][0]) + 5                       # padding beyond the text
    batch = term.batch(enc, ["q", "other"], ["p", "p"], [PASSAGE, PASSAGE], width)
    assert batch["targets"].tolist() == [1, -1] and batch["mask"].sum().item() == 6
    hidden = torch.randn(2, width, 4)
    units = torch.einsum("nul,nlh->nuh", batch["weights"], hidden)
    _, tok = tokenize_with_units(enc, [PASSAGE], [spans])
    for i, (s, e) in enumerate(tok[0]):
        assert torch.allclose(units[0, i], hidden[0, s:e].mean(0), atol=1e-6)
    loss, logs = term.loss(torch.randn(2, 4), torch.randn(2, 4), hidden, batch)
    assert loss.item() > 0 and set(logs) == {"r1", "r2", "unit_accuracy", "no_visible_unit", "essential_moved"}


def test_the_essential_unit_is_the_best_one_truncation_leaves(mini, tmp_path):
    """BERM's label is the argmax over the units the encoder's maximum length keeps (the official code labels
    the truncated input), recomputed per length from the labels' scores; a passage with no unit left is counted
    (no_visible_unit) and has no target; a changed unit is counted (moved)."""
    from zsdr.losses.semantic_units import unit_pooling, visible_essential
    from zsdr.training.unit_labels import visible_label_counts

    assert visible_essential([1.0, 3.0, 2.0], 1, [0, 2]) == 2 and visible_essential([1.0, 3.0, 2.0], 1, []) == -1
    assert visible_essential([2.0, 1.0, 2.0], 0, [0, 1, 2]) == 0        # ties: the first, as numpy.argmax
    assert visible_essential(None, 1, [0]) == -1 and visible_essential(None, 0, [0]) == 0  # a file without scores
    spans = sentence_spans(PASSAGE["text"])
    short = Encoder.from_pretrained(mini / "roberta", pooling="mean", similarity="dot", doc_format="text",
                                    doc_max_length=12)
    whole = Encoder.from_pretrained(mini / "roberta", pooling="mean", similarity="dot", doc_format="text",
                                    doc_max_length=96)
    _, kept = tokenize_with_units(short, [PASSAGE], [spans])
    left = [j for j, t in enumerate(kept[0]) if t is not None]
    assert left and left[-1] < 2                                      # the last unit is cut at 12 tokens
    labels = [(spans, 2, [1.0, 2.0, 5.0]), (spans, 2, [1.0, 2.0, 5.0]), (spans, 1, [0.0, 4.0, 1.0])]
    out = unit_pooling(short, [PASSAGE] * 3, labels, 12)
    best = [left.index(max(left, key=lambda j: h[j])) for _, _, h in labels]   # the best of the units left
    assert out["targets"].tolist() == best and [left[b] for b in best] != [2, 2, 1]
    assert out["labelled"] == 3 and out["moved"] == sum(left[b] != k for b, (_, k, _) in zip(best, labels)) >= 2
    assert out["no_visible_unit"] == 0
    assert unit_pooling(whole, [PASSAGE] * 3, labels, 96)["targets"].tolist() == [2, 2, 1]
    tiny = Encoder.from_pretrained(mini / "roberta", pooling="mean", similarity="dot",
                                   doc_format="title_space_text", doc_max_length=4)                  # the title fills the input: no unit left
    none = unit_pooling(tiny, [PASSAGE], labels[:1], 4)
    assert none["targets"].tolist() == [-1] and none["no_visible_unit"] == 1 and none["moved"] == 0
    src = mini / "data" / "src"                                       # a labels file at two lengths
    pairs = select_pairs(src, "train")[:40]
    label_pairs(src, pairs, unit_statistics(src, pairs, "units"), tmp_path / "l.jsonl")
    long_counts = visible_label_counts(src, tmp_path / "l.jsonl", whole)
    short_counts = visible_label_counts(src, tmp_path / "l.jsonl", short)
    assert long_counts["labelled"] == short_counts["labelled"] == 40
    assert long_counts["moved"] == 0 and short_counts["moved"] > 0 and short_counts["share_moved"] <= 1.0


def test_dpr_plus_berm_trains_and_lowers_r1(mini, tmp_path):
    src = mini / "data" / "src"
    pairs = select_pairs(src, "train")
    label_pairs(src, pairs, unit_statistics(src, pairs, "units"), tmp_path / "labels.jsonl")
    spec = {"kind": "bi_encoder", "init": str(mini / "roberta"), "dataset": str(src),
            "negatives": str(src / "negatives.jsonl"), "out": str(tmp_path / "out"),
            "checkpoint_dir": str(tmp_path / "ckpt"),
            "encoder": {"pooling": "mean", "similarity": "dot", "query_max_length": 16, "doc_max_length": 96},
            "loss": "pairwise_nll", "negatives_per_query": 1, "scale": 1.0, "dropout": 0.0,
            "berm": {**BERM, "labels": str(tmp_path / "labels.jsonl"), "r1_weight": 1.0, "r2_weight": 0.1},
            "train": {"batch_size": 8, "max_steps": 30, "lr": 2e-3, "optimizer": "adamw", "seed": 3,
                      "save_every": 100, "log_every": 1}}
    run_spec(spec, cpu=True, progress=False)
    log = [json.loads(x) for x in (tmp_path / "out" / "train_log.jsonl").read_text().splitlines()]
    assert all({"r1", "r2", "task_loss"} <= set(r) for r in log)
    assert sum(r["r1"] for r in log[-5:]) < sum(r["r1"] for r in log[:5])


def test_the_term_scores_with_the_logit_vectors(mini):
    """With an inverse temperature s the term scores sqrt(s)·t, the vectors whose dot product is the logit."""
    enc = Encoder.from_pretrained(mini / "roberta", pooling="mean", similarity="dot", doc_format="text", doc_max_length=96)
    spans = sentence_spans(PASSAGE["text"])
    plain, hot = BermTerm(BermConfig(**BERM)), BermTerm(BermConfig(**BERM, scale=4.0))
    for term in (plain, hot):
        term.labels = {("q", "p"): (spans, 1)}
    width = len(enc.tokenize_docs([PASSAGE])["input_ids"][0])
    batch = plain.batch(enc, ["q"], ["p"], [PASSAGE], width)
    q, p, hidden = torch.randn(1, 4), torch.randn(1, 4), torch.randn(1, width, 4)
    assert hot.loss(q, p, hidden, batch)[0].item() == pytest.approx(plain.loss(2 * q, 2 * p, hidden, batch)[0].item())
