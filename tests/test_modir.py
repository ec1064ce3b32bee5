"""MoDIR: adversarial losses, the domain classifier, the momentum queue, target triples, and
training with the term (gradient isolation, exact resume)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from tests.conftest import mini_with_backbones, texts_hidden
from zsdr.io import DataError
from zsdr.losses.adversarial import adversarial_loss, confusion_loss, gan_loss, lambda_at, minimax_loss
from zsdr.models.heads import DomainClassifier
from zsdr.training.modir import (ModirConfig, ModirTerm, MomentumQueue, TargetTriples, build_target_triples,
                                 read_target_triples)
from zsdr.workflow import section_defaults

MODIR = section_defaults("recipes.<name>.modir")   # the schema's defaults, which the workflow fills into a spec

MINI = {
    "seed": 5, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 240, "train_queries": 120, "dev_queries": 10},
                {"name": "tgt", "role": "target", "docs": 120, "test_queries": 30}],
}
SIZE = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "max_length": 64, "dropout": 0.0}


# ----------------------------------------------------------------------------------------- losses
def test_confusion_loss_is_its_formula_and_minimal_at_fifty_fifty():
    logits = torch.randn(7, 2, generator=torch.Generator().manual_seed(0)) * 3
    p = logits.softmax(dim=1)
    expected = (-0.5 * (p[:, 0].log() + p[:, 1].log())).mean()
    assert torch.allclose(confusion_loss(logits, 0, 1), expected, atol=1e-6)
    even = torch.tensor([[1.3, 1.3], [-2.0, -2.0]])
    assert math.isclose(float(confusion_loss(even, 0, 1)), math.log(2), rel_tol=1e-6)
    for delta in (0.1, 1.0, 5.0):
        skewed = even + torch.tensor([delta, 0.0])
        assert float(confusion_loss(skewed, 0, 1)) > math.log(2)
    # the gradient vanishes at 50/50
    z = even.clone().requires_grad_(True)
    confusion_loss(z, 0, 1).backward()
    assert torch.allclose(z.grad, torch.zeros_like(z), atol=1e-7)


def test_minimax_gan_and_the_sum_over_embedding_sets():
    src, tgt = torch.tensor([[2.0, 0.0]]), torch.tensor([[0.5, 1.0]])
    assert torch.allclose(minimax_loss(src, 0), -F.cross_entropy(src, torch.tensor([0])))
    assert torch.allclose(gan_loss(tgt, 0), F.cross_entropy(tgt, torch.tensor([0])))
    sets, domains = {"sq": src, "tq": tgt}, {"sq": 0, "tq": 1}
    labels = {"source": 0, "target": 1}
    assert torch.allclose(adversarial_loss("confusion", sets, domains, **labels),
                          confusion_loss(src, 0, 1) + confusion_loss(tgt, 0, 1))
    assert torch.allclose(adversarial_loss("minimax", sets, domains, **labels),
                          minimax_loss(src, 0) + minimax_loss(tgt, 1))
    assert torch.allclose(adversarial_loss("gan", sets, domains, **labels), gan_loss(tgt, 0))  # target sets only
    with pytest.raises(ValueError, match="confusion"):
        adversarial_loss("wgan", sets, domains, **labels)


def test_the_adversarial_losses_take_the_labels_they_are_given():
    # the losses know no label numbering of their own: swapped labels give the swapped sets' losses
    src, tgt = torch.tensor([[2.0, 0.0]]), torch.tensor([[0.5, 1.0]])
    swapped = {"sq": 1, "tq": 0}  # a classifier whose class 1 is the source
    assert torch.allclose(adversarial_loss("gan", {"sq": src, "tq": tgt}, swapped, source=1, target=0),
                          F.cross_entropy(tgt, torch.tensor([1])))  # the target set, labelled as the source
    assert torch.allclose(adversarial_loss("minimax", {"sq": src, "tq": tgt}, swapped, source=1, target=0),
                          minimax_loss(src, 1) + minimax_loss(tgt, 0))
    with pytest.raises(ValueError, match="neither source"):
        adversarial_loss("confusion", {"sq": src}, {"sq": 2}, source=0, target=1)


def test_lambda_halves_every_half_life():
    assert lambda_at(0, 1.0, 10000) == 1.0
    assert math.isclose(lambda_at(10000, 1.0, 10000), 0.5)
    assert math.isclose(lambda_at(25000, 0.5, 10000), 0.5 * 2 ** -2.5)
    assert lambda_at(123, 0.7, None) == 0.7


def test_domain_classifier_is_linear_without_bias_and_clips_logits():
    clf = DomainClassifier(4, clip=5.0, seed=1)
    assert clf.linear.bias is None and tuple(clf.linear.weight.shape) == (2, 4)
    big = torch.full((3, 4), 100.0)
    assert float(clf(big).detach().abs().max()) <= 5.0
    assert torch.equal(DomainClassifier(4, seed=1).linear.weight, clf.linear.weight)
    assert torch.allclose(DomainClassifier.logits_with(clf.linear.weight, big, 5.0), clf(big))


# ------------------------------------------------------------------------------------------ queue
def test_queue_holds_exactly_the_last_n_steps_without_graphs():
    q = MomentumQueue(3)
    w = torch.ones(2, requires_grad=True)
    for step in range(5):
        q.push({"source_queries": w * step})
    assert len(q) == 3
    assert [float(e["source_queries"][0]) for e in q.entries] == [2.0, 3.0, 4.0]
    assert all(not e["source_queries"].requires_grad and e["source_queries"].grad_fn is None for e in q.entries)
    restored = MomentumQueue(1)
    restored.load_state_dict(q.state_dict())
    assert len(restored) == 3 and restored.entries.maxlen == 3


# -------------------------------------------------------------------------------- target triples
def test_target_triples_cycle_queries_and_documents_without_labels(tmp_path):
    d = tmp_path / "t"
    (d / "qrels").mkdir(parents=True)
    docs = [("d1", "a"), ("d2", ""), ("d3", "c"), ("d4", "d"), ("d5", "e"), ("d6", "f"), ("d7", "g")]
    (d / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": "", "text": t}) + "\n" for i, t in docs))
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": q}) + "\n" for q in ["q0", "q1", "q2"]))
    # q2 has only a non-relevant judgement: it is a test query all the same (labels are never read)
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\nq0\td1\t1\nq2\td4\t0\n")
    counts = build_target_triples(d, "test", tmp_path / "triples.tsv")
    rows = read_target_triples(tmp_path / "triples.tsv")
    # 6 non-empty documents -> 3 pairs; 3 queries -> 3 lines; then a 4-query variant would cycle documents
    assert counts == {"triples": 3, "queries": 3, "docs": 6}
    assert rows == [("q0", "d1", "d3"), ("q1", "d4", "d5"), ("q2", "d6", "d7")]
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": q}) + "\n" for q in ["q0", "q1"]))
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\nq0\td1\t1\n")
    build_target_triples(d, "test", tmp_path / "t2.tsv")
    assert read_target_triples(tmp_path / "t2.tsv") == [("q0", "d1", "d3"), ("q1", "d4", "d5"), ("q0", "d6", "d7")]
    (tmp_path / "bad.tsv").write_text("q0\td1\n")
    with pytest.raises(DataError, match="bad.tsv:1"):
        read_target_triples(tmp_path / "bad.tsv")


# ------------------------------------------------------------------------------- with an encoder
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = mini_with_backbones(tmp_path_factory.mktemp("modir"), MINI, SIZE, kinds=("bert",))
    build_target_triples(root / "data" / "tgt", "test", root / "triples.tsv")
    return root


def _term(tiny, **over):
    from zsdr.models.encoder import Encoder

    enc = Encoder.from_pretrained(str(tiny / "bert"), pooling="mean", similarity="dot", query_max_length=16,
                                  doc_max_length=32)
    cfg = ModirConfig.from_dict({**MODIR, "triples": str(tiny / "triples.tsv"), "target": str(tiny / "data" / "tgt"),
                                 "momentum_steps": 4, "chunk": 2, "classifier_lr": 1e-2, **over})
    term = ModirTerm(cfg, enc.dim)
    from zsdr.training.config import TrainConfig

    term.attach(TrainConfig(max_steps=10, lr=1e-3), 10, torch.device("cpu"))
    return enc, term


def test_classifier_and_encoder_gradients_never_cross(tiny):
    enc, term = _term(tiny)
    batch = term.batch(enc, [0, 1, 2], 0, 100)
    q = enc(**enc.collate(enc.tokenize_queries(["a query", "another", "third one"])))
    d = enc(**enc.collate(enc.tokenize_docs([{"title": "", "text": f"doc {i}"} for i in range(6)]))).view(3, 2, -1)
    before = term.classifier.linear.weight.detach().clone()
    enc.zero_grad(set_to_none=True)
    term.on_step(0, 0, True)
    loss, logs = term.loss(enc, q, d, batch)
    # the classifier learned from the queue (its weights moved) without any gradient reaching the encoder
    assert not torch.equal(before, term.classifier.linear.weight)
    assert all(p.grad is None for p in enc.parameters())
    after_update = term.classifier.linear.weight.detach().clone()
    loss.backward()
    # the adversarial loss trains the encoder, never the classifier
    assert term.classifier.linear.weight.grad is None
    assert torch.equal(after_update, term.classifier.linear.weight)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in enc.parameters())
    assert {"local_domain_acc_queries", "local_domain_acc_docs", "classifier_loss", "adversarial_loss",
            "adversarial_lambda"} <= set(logs)
    assert len(term.queue) == 1 and all(not v.requires_grad for v in term.queue.entries[0].values())


def test_target_queries_take_their_own_length(tiny):
    """`target_query_max_length` (MoDIR's --max_query_length_tgd: ArguAna's queries at 512) tokenises the target's
    queries at that length, the source's at the encoder's; at most the model's positions."""
    enc, term = _term(tiny)
    texts = ["word " * 200]
    enc_short = enc.tokenize_queries(texts)["input_ids"][0]
    assert len(enc_short) == 16
    assert len(enc.tokenize_queries(texts, max_length=40)["input_ids"][0]) == 40
    assert len(enc.tokenize_queries(texts, max_length=10_000)["input_ids"][0]) == enc._max_positions()
    enc, term = _term(tiny, target_query_max_length=40)
    batch = term.batch(enc, [0, 1, 2], 0, 100)
    picks = [term.triples[term._order[i % len(term.triples)]] for i in (0, 1, 2)]
    assert batch["q"]["input_ids"].shape[1] == max(
        len(ids) for ids in enc.tokenize_queries([q for q, _, _ in picks], max_length=40)["input_ids"])
    assert enc.config.query_max_length == 16


def test_target_triples_and_their_texts_come_from_the_targets_store(tiny, tmp_path):
    """The modir_triples job and the term read the target's corpus and queries from its store (the
    .jsonl files unreadable), with the triples as int32 rows of it: the same file, the same texts and
    batches as the dicts gave."""
    from zsdr.data.formats import read_corpus, read_queries

    tgt = tiny / "data" / "tgt"
    corpus, queries = read_corpus(tgt), read_queries(tgt)
    triples = read_target_triples(tiny / "triples.tsv")
    with texts_hidden(tgt):
        build_target_triples(tgt, "test", tmp_path / "again.tsv")
        enc, term = _term(tiny)
        assert isinstance(term.triples, TargetTriples) and term.triples.rows.dtype == np.int32
        assert [term.triples[i] for i in range(len(triples))] == [(queries[q], corpus[a], corpus[b])
                                                                 for q, a, b in triples]
        batch = term.batch(enc, [0, 1, 2], 1, 100)
        picks = [triples[term._order[(100 + i) % len(triples)]] for i in (0, 1, 2)]
        expected = {"q": enc.tokenize_queries([queries[q] for q, _, _ in picks]),
                    "d0": enc.tokenize_docs([corpus[d] for _, d, _ in picks]),
                    "d1": enc.tokenize_docs([corpus[d] for _, _, d in picks])}
        for key, tokens in expected.items():
            assert all(torch.equal(batch[key][k], v) for k, v in enc.collate(tokens).items()), key
        q, a, b = triples[0]
        (tmp_path / "bad.tsv").write_text(f"{q}\t{a}\t{b}\n{q}\tnope\t{b}\n")
        with pytest.raises(DataError, match=r"bad\.tsv:2: document 'nope' is not in the target's store.*fix"):
            _term(tiny, triples=str(tmp_path / "bad.tsv"))
    assert (tmp_path / "again.tsv").read_bytes() == (tiny / "triples.tsv").read_bytes()


def _train_step(enc, term, step):
    """One encoder step of the MoDIR term on two queries x two documents (the term's own updates run)."""
    term.on_step(step, step, True)
    with torch.no_grad():
        q = enc(**enc.collate(enc.tokenize_queries(["x", "y"])))
        d = enc(**enc.collate(enc.tokenize_docs(["a", "b", "c", "d"]))).view(2, 2, -1)
    term.loss(enc, q, d, term.batch(enc, [step, step + 1], 0, 50))


def test_training_modes_fill_the_queue_as_specified(tiny):
    for mode, expected in (("momentum", 4), ("single", 1), ("repeat", 0)):
        enc, term = _term(tiny, mode=mode)
        for step in range(6):
            _train_step(enc, term, step)
        assert len(term.queue) == expected, mode


def test_classifier_gets_its_n_over_chunk_steps_while_the_queue_fills(tiny):
    """The official code trains on queue[min(rep, len - 1)] for rep = 1 .. n: a queue still filling
    repeats its newest entry, so every encoder step makes n / chunk classifier steps (here 4 / 2 = 2)."""
    enc, term = _term(tiny)
    steps = []
    original = term.optimizer.step
    term.optimizer.step = lambda *a, **k: (steps.append(term.step), original(*a, **k))[1]
    tags = []
    for step in range(6):
        _train_step(enc, term, step)
        current = term.queue.entries[-1]
        tags.append([next(i for i, e in enumerate(term.queue.entries) if e is x) for x in term.rehearsal(current)])
    assert steps == [s for s in range(6) for _ in range(2)]
    # queue lengths 1, 2, 3, 4, 4, 4: entry indices (oldest = 0) the classifier trains on
    assert tags == [[0, 0, 0, 0], [1, 1, 1, 1], [1, 2, 2, 2], [1, 2, 3, 3], [1, 2, 3, 3], [1, 2, 3, 3]]
    single = _term(tiny, mode="single")[1]
    single.queue.push({"source_queries": torch.ones(1)})
    assert len(single.rehearsal({})) == 1


def _spec(tiny, name, **train):
    return {"kind": "bi_encoder", "init": str(tiny / "bert"), "dataset": str(tiny / "data" / "src"),
            "negatives": str(tiny / "data" / "src" / "negatives.jsonl"), "systems": None, "teacher": None,
            "out": str(tiny / "out" / name), "checkpoint_dir": str(tiny / "ckpt" / name),
            "encoder": {"pooling": "mean", "similarity": "dot", "query_max_length": 16, "doc_max_length": 32},
            "loss": "pairwise_nll", "negatives_per_query": 1, "scale": 1.0, "dropout": 0.0,
            "modir": {**MODIR, "triples": str(tiny / "triples.tsv"), "target": str(tiny / "data" / "tgt"),
                      "momentum_steps": 3, "chunk": 2, "classifier_lr": 1e-2, "lambda0": 1.0,
                      "lambda_half_life": 4},
            "train": {"batch_size": 8, "max_steps": 8, "lr": 1e-3, "optimizer": "lamb", "warmup_steps": 2,
                      "seed": 3, "save_every": 3, "log_every": 1, **train}}


def test_training_logs_domain_accuracy_and_resumes_exactly(tiny):
    from zsdr.training.launch import run_spec

    full = _spec(tiny, "full")
    run_spec(full, cpu=True, progress=False)
    log = [json.loads(x) for x in (Path(full["out"]) / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 8 and all(0.0 <= r["local_domain_acc_docs"] <= 1.0 for r in log)
    assert math.isclose(log[4]["adversarial_lambda"], 2 ** -1.0)  # step index 4 with half-life 4
    # killed after step 5 (checkpoint at step 3): the resumed run restores encoder, classifier,
    # its optimizer and the queue, and ends with the same weights
    cut = _spec(tiny, "cut")
    assert run_spec(cut, cpu=True, progress=False, stop_after=5) is None
    run_spec(cut, cpu=True, progress=False)
    a, b = load_file(f"{full['out']}/model.safetensors"), load_file(f"{cut['out']}/model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    cut_log = [json.loads(x) for x in (Path(cut["out"]) / "train_log.jsonl").read_text().splitlines()]
    assert [r["local_domain_acc_docs"] for r in cut_log] == [r["local_domain_acc_docs"] for r in log]
    # without the term the same spec trains another model (the adversary does act on the encoder)
    plain = _spec(tiny, "plain")
    plain.pop("modir")
    run_spec(plain, cpu=True, progress=False)
    c = load_file(f"{plain['out']}/model.safetensors")
    assert any(not torch.equal(a[k], c[k]) for k in a)
