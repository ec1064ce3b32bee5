"""COCO-DR's continuous contrastive pretraining: spans (zsdr.pretrain.spans), the span-contrastive
loss (zsdr.losses.coco, by hand and across two gloo processes) and the task (zsdr.pretrain.coco)."""

import json
import math
import os
import socket

import numpy as np
import pytest
import torch

from tests.conftest import mini_with_backbones
from zsdr.data.spans import SpanDocuments, open_spans, read_spans, sample_pair
from zsdr.io import DataError
from zsdr.losses.coco import span_contrastive
from zsdr.pretrain.coco import HEAD_CONFIG, HEAD_WEIGHTS, build_coco_task, contrastive_loss_on, whole_word_selection
from zsdr.pretrain.mlm import IGNORE
from zsdr.pretrain.spans import (SpanWriter, document_spans, pack_spans, split_sentences, write_span_documents,
                                 write_spans)

MINI = {
    "seed": 5, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 120, "train_queries": 20, "dev_queries": 5}],
}
SIZE = {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 64, "max_length": 32, "dropout": 0.0}


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    from transformers import AutoTokenizer

    root = mini_with_backbones(tmp_path_factory.mktemp("coco"), MINI, SIZE)
    for kind in ("bert", "roberta"):
        tok = AutoTokenizer.from_pretrained(root / kind)
        write_spans(root / "data" / "src", root / f"spans-{kind}.arrow", tok, 30, 0.1, seed=0)
    return root


def coco_spec(mini, kind="bert", **over):
    return {"init": str(mini / kind), "spans": [str(mini / f"spans-{kind}.arrow")], "max_length": 32,
            "mlm_probability": 0.15, "head_layers": 2, "skip_from": 1, "late_mlm": True, "contrastive_weight": 1.0,
            "backbone_dropout": False, "max_examples": None, "head": "new", "train": {"seed": 7}, **over}


class Words:
    """A stand-in tokenizer: one token per whitespace-separated word."""

    def __call__(self, texts, add_special_tokens=False, **kw):
        return {"input_ids": [t.split() for t in texts]}


class Draws:
    """A stand-in generator whose ``random()`` returns preset values (and counts the calls)."""

    def __init__(self, values):
        self.values = list(values)
        self.calls = 0

    def random(self):
        self.calls += 1
        return self.values.pop(0)


# ------------------------------------------------------------------------------------------ spans
SENTENCES = [f"s{k}" for k in range(6)]
COUNTS = [10, 12, 15, 3, 40, 5]


def test_pack_spans_by_hand():
    rng = np.random.default_rng(0)
    assert pack_spans(SENTENCES, COUNTS, 30, 0.0, rng) == ["s0 s1", "s2 s3", "s4", "s5"]  # 22, 18, 40 alone, 5
    assert pack_spans(SENTENCES, COUNTS, 30, 1.0, rng) == SENTENCES                       # always a new span
    draws = Draws([0.1, 0.9, 0.9, 0.9, 0.9])
    # s1 ends s0's span early (0.1 < 0.5); s1 + s2 + s3 = 30 exactly fits; 40 is too long to join; 45 > 30
    assert pack_spans(SENTENCES, COUNTS, 30, 0.5, draws) == ["s0", "s1 s2 s3", "s4", "s5"]
    assert draws.calls == 5                                  # one draw before every sentence after a span's first
    with pytest.raises(ValueError, match="token counts"):
        pack_spans(SENTENCES, COUNTS[:-1], 30, 0.0, rng)


def test_documents_with_one_span_or_a_tiny_first_span_are_dropped():
    words = Words()
    assert document_spans("Just one sentence here.", words, 30, 0.0) is None
    text = "Alpha beta gamma. Delta epsilon zeta."
    assert document_spans(text, words, 30, 0.0) is None                                   # both fit in one span
    assert document_spans(text, words, 3, 0.0) == ["Alpha beta gamma.", "Delta epsilon zeta."]
    assert document_spans("Hi. Then a much longer sentence follows here.", words, 4, 0.0) is None  # first: 1 token
    assert document_spans("Hi you. Then a much longer sentence follows.", words, 4, 0.0) is None   # first: 2 tokens
    assert document_spans("Hi to you. Then a much longer sentence follows.", words, 4, 0.0) == [
        "Hi to you.", "Then a much longer sentence follows."]                           # a long sentence alone


def test_document_spans_are_seeded_by_seed_and_document_index():
    text = " ".join(f"Sentence number {k} is here." for k in range(20))
    words = Words()
    a = document_spans(text, words, 30, 0.5, seed=1, index=3)
    assert a == document_spans(text, words, 30, 0.5, seed=1, index=3)
    assert " ".join(a) == text
    assert any(document_spans(text, words, 30, 0.5, seed=1, index=i) != a for i in range(4, 8))
    assert any(document_spans(text, words, 30, 0.5, seed=s, index=3) != a for s in range(2, 6))


def test_spans_of_a_real_text_respect_the_token_limit(mini):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(mini / "bert")
    corpus = [json.loads(line) for line in (mini / "data" / "src" / "corpus.jsonl").read_text().splitlines()]
    long = " ".join(corpus[0]["text"].replace(".", "").split()[:45]) + "."
    text = " ".join(d["text"] for d in corpus[:6]) + " " + long + " " + corpus[7]["text"]
    sentences = split_sentences(text)
    spans = document_spans(text, tok, 30, 0.1, seed=0, index=0)
    count = lambda s: len(tok(s, add_special_tokens=False)["input_ids"])  # noqa: E731
    assert count(long) > 30 and long in spans                                 # a long sentence is a span of its own
    for span in spans:
        assert count(span) <= 30 or span in sentences, span
    assert " ".join(spans) == " ".join(sentences)

    written = read_spans(mini / "spans-bert.arrow")
    by_id = {d["_id"]: d for d in corpus}
    assert len(written) > 100
    index = {d["_id"]: i for i, d in enumerate(corpus)}
    ids = [written.id(i) for i in range(len(written))]
    assert sorted(ids, key=index.get) == ids                  # corpus order
    for i in range(20):                                       # written = document_spans of its corpus position
        doc = by_id[ids[i]]
        assert written[i] == document_spans(f"{doc.get('title') or ''} {doc['text']}".strip(), tok, 30, 0.1,
                                            seed=0, index=index[ids[i]])


def test_write_spans_counts_and_bad_span_files_are_named(mini, tmp_path):
    import pyarrow as pa

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(mini / "bert")
    stats = write_spans(mini / "data" / "src", tmp_path / "s.arrow", tok, 30, 0.1, seed=0, max_docs=10)
    spans = read_spans(tmp_path / "s.arrow")
    assert stats["documents"] == 10 and stats["kept"] + stats["dropped"] == 10 and stats["kept"] == len(spans)
    assert stats["spans"] == sum(len(d) for d in spans)
    # a span-lists file of another format, one span too few, other columns: one line naming the file
    bad = tmp_path / "bad.arrow"
    bad.write_text('{"_id": "a", "spans": ["x", "y"]}\n')
    with pytest.raises(DataError, match=r"bad\.arrow: not an Arrow span file.*fix: write the spans again"):
        read_spans(bad)
    schema = pa.schema([("id", pa.large_string()), ("spans", pa.large_list(pa.large_string()))])
    with pa.OSFile(str(bad), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        writer.write_batch(pa.record_batch([pa.array(["a", "b"], pa.large_string()),
                                            pa.array([["x", "y"], ["only one"]], pa.large_list(pa.large_string()))],
                                           schema=schema))
    with pytest.raises(DataError, match=r"bad\.arrow: document 'b' \(row 1\) has 1 span\(s\).*fix"):
        read_spans(bad)
    other = pa.schema([("_id", pa.string()), ("spans", pa.list_(pa.string()))])
    with pa.OSFile(str(bad), "wb") as sink, pa.ipc.new_file(sink, other) as writer:
        writer.write_batch(pa.record_batch([pa.array(["a"]), pa.array([["x", "y"]])], schema=other))
    with pytest.raises(DataError, match=r"bad\.arrow: expected columns id .*found _id"):
        read_spans(bad)
    with pytest.raises(DataError, match=r"missing\.arrow: no such span file"):
        read_spans(tmp_path / "missing.arrow")
    with pytest.raises(ValueError, match="'c': a document needs at least two non-empty spans"):
        write_span_documents(tmp_path / "refused.arrow", [("a", ["x", "y"]), ("c", ["x", " "])])
    assert not (tmp_path / "refused.arrow").exists()                        # nothing written on failure


def test_shards_of_a_corpus_merge_into_the_one_pass_span_file(mini, tmp_path):
    """A corpus written in shards (contiguous rows of its store, each seeded by the document's position)
    and merged in order gives the same documents and spans as one pass over corpus.jsonl, with max_docs
    too; a shard past max_docs is an empty span file, which the merge passes through."""
    from transformers import AutoTokenizer

    from tests.conftest import texts_hidden
    from zsdr.data.store import build_store, shard_range
    from zsdr.pretrain.spans import merge_span_files

    tok = AutoTokenizer.from_pretrained(mini / "bert")
    src = mini / "data" / "src"
    build_store(src)
    whole = read_spans(mini / "spans-bert.arrow")
    for max_docs in (None, 50):
        one = tmp_path / f"one-{max_docs}.arrow"
        write_spans(src, one, tok, 30, 0.1, seed=0, max_docs=max_docs)
        parts, stats = [], []
        with texts_hidden(src):                              # the shards read the store only
            for k in range(3):
                part = tmp_path / f"part{k}-{max_docs}.arrow"
                stats.append(write_spans(src, part, tok, 30, 0.1, seed=0, max_docs=max_docs,
                                         rows=shard_range(120, k, 3)))
                parts.append(part)
        merged = tmp_path / f"merged-{max_docs}.arrow"
        n = merge_span_files(parts, merged)
        a, b = read_spans(one), read_spans(merged)
        assert n == len(a) == len(b) and list(a) == list(b) and [a.id(i) for i in range(n)] == [b.id(i) for i in range(n)]
        assert sum(x["documents"] for x in stats) == (120 if max_docs is None else 50)
        if max_docs is None:
            assert list(a) == list(whole)
        else:
            assert stats[-1]["documents"] == 0 and len(read_spans(parts[-1])) == 0


def test_span_files_map_lazily_across_record_batches_and_files(tmp_path):
    rng = np.random.default_rng(3)
    docs = [(f"d{i}", [f"span {i}.{k} é" for k in range(int(rng.integers(2, 6)))]) for i in range(23)]
    with SpanWriter(tmp_path / "a.arrow", batch_rows=4) as writer:          # six record batches
        for rid, spans in docs[:17]:
            writer.add(rid, spans)
    write_span_documents(tmp_path / "b.arrow", docs[17:])
    a = read_spans(tmp_path / "a.arrow")
    assert len(a) == 17 and [a[i] for i in range(17)] == [s for _, s in docs[:17]] and a[-1] == docs[16][1]
    assert [a.id(i) for i in (0, 4, 16)] == ["d0", "d4", "d16"] and a[3:6] == [s for _, s in docs[3:6]]
    both = open_spans([tmp_path / "a.arrow", tmp_path / "b.arrow"])
    assert list(both) == [s for _, s in docs]
    capped = open_spans([tmp_path / "a.arrow", tmp_path / "b.arrow"], limit=5)   # max_examples: per file
    assert list(capped) == [s for _, s in docs[:5]] + [s for _, s in docs[17:22]]
    with pytest.raises(IndexError):
        capped[10]


# ------------------------------------------------------------------------------------------- loss
H = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]]


def test_span_contrastive_by_hand():
    # h h^T, own column out, partner (1, 0, 3, 2) as the target, no temperature
    rows = [([0, 1, 2], 0), ([0, 1, 0], 0), ([1, 1, 2], 2), ([2, 0, 2], 2)]  # remaining logits, target's logit
    expected = sum(-t + math.log(sum(math.exp(v) for v in logits)) for logits, t in rows) / 4
    local = torch.tensor(H, requires_grad=True)
    loss = span_contrastive(local)
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-6)
    assert float(span_contrastive(local, gather=False).detach()) == pytest.approx(expected, abs=1e-6)
    # row 3's self-similarity (4) is the largest of its row: unmasked, the loss would differ
    plain = local.detach()
    unmasked = torch.nn.functional.cross_entropy(plain @ plain.T, torch.tensor([1, 0, 3, 2]))
    assert float(unmasked) > expected + 0.1
    assert float(span_contrastive(2 * local).detach()) != pytest.approx(expected, abs=1e-3)  # scale matters: no temperature
    with pytest.raises(ValueError, match="2B"):
        span_contrastive(torch.zeros(3, 2))


def _gloo_worker(rank, world, port, folder):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        data = torch.load(os.path.join(folder, "inputs.pt"))
        n = data["x"].shape[0] // world
        x = data["x"][rank * n:(rank + 1) * n].clone().requires_grad_(True)
        w = data["w"].clone().requires_grad_(True)
        loss = span_contrastive(x @ w)
        loss.backward()
        torch.save({"loss": loss.detach(), "x": x.grad, "w": w.grad}, os.path.join(folder, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_processes_match_one_process(tmp_path):
    """Each process holds half of the pairs: the mean of the losses and the DDP-averaged gradients
    equal one process holding every pair (so no world-size factor, unlike the official code)."""
    import torch.multiprocessing as mp

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 5, generator=g), torch.randn(5, 4, generator=g)
    torch.save({"x": x, "w": w}, tmp_path / "inputs.pt")
    mp.spawn(_gloo_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    parts = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    xs, ws = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    single = span_contrastive(xs @ ws)
    single.backward()
    assert float(sum(p["loss"] for p in parts) / 2) == pytest.approx(float(single.detach()), rel=1e-6)
    # DDP averages the gradients of the per-process mean losses over the 2 processes
    assert torch.allclose(torch.cat([p["x"] for p in parts]) / 2, xs.grad, atol=1e-6)
    assert torch.allclose(sum(p["w"] for p in parts) / 2, ws.grad, atol=1e-6)
    assert not torch.allclose(parts[0]["loss"], span_contrastive(x[:4] @ w, gather=False))  # other spans count


# ------------------------------------------------------------------------------------------- task
def test_whole_word_selection_takes_whole_words_within_the_budget():
    words = [None, 0, 0, 1, 2, 2, 2, 3, 4, None]                                  # 8 word tokens
    groups = {0: [1, 2], 1: [3], 2: [4, 5, 6], 3: [7], 4: [8]}
    for s in range(20):
        chosen = whole_word_selection(words, 0.25, np.random.default_rng(s))       # budget round(2) = 2
        assert 1 <= len(chosen) <= 2
        assert all(set(g) <= set(chosen) or not set(g) & set(chosen) for g in groups.values())
    assert whole_word_selection(words, 0.0, np.random.default_rng(0)) == []
    assert whole_word_selection(words, 1.0, np.random.default_rng(0)) == list(range(1, 9))
    assert len(whole_word_selection(words, 0.01, np.random.default_rng(0))) == 1    # at least one token
    # the budget counts the span's tokens only, as COCO-DR's CondenserCollator (its mask is computed before
    # [CLS] / [SEP] are added): a 30-token span at 15 % predicts round(4.5) = 4 tokens; Hugging Face's
    # DataCollatorForWholeWordMask, counting the 2 special tokens, would allow round(4.8) = 5
    framed = [None] + list(range(30)) + [None]                                     # 30 one-token words
    assert {len(whole_word_selection(framed, 0.15, np.random.default_rng(s))) for s in range(10)} == {4}


def test_the_task_reads_spans_from_the_mapped_files_as_the_lists_gave_them(mini):
    """COCO draws its documents from the memory-mapped span files (no list of span lists in the
    process) and makes the very batches the lists of the same spans make."""
    from zsdr.pretrain.coco import CocoTask

    task = build_coco_task(coco_spec(mini, spans=[str(mini / "spans-bert.arrow")] * 2, max_examples=60))
    assert isinstance(task.documents, SpanDocuments) and len(task.documents) == 120
    lists = list(read_spans(mini / "spans-bert.arrow"))[:60] * 2
    plain = CocoTask(task.model, task.tokenizer, lists, max_length=32, head_layers=2, skip_from=1, seed=7)
    assert isinstance(plain.documents, list) and plain.documents == list(task.documents)
    for epoch in (0, 3):
        indices = [0, 59, 60, 119, 17]
        a, b = task.make_batch(indices, epoch), plain.make_batch(indices, epoch)
        assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_batches_pair_two_distinct_spans_mask_whole_words_and_are_pure(mini, kind):
    task = build_coco_task(coco_spec(mini, kind))
    tok = task.tokenizer
    assert task.num_examples == len(read_spans(mini / f"spans-{kind}.arrow"))
    indices = [0, 5, 9, 3]
    batch = task.make_batch(indices, 0)
    ids, att, lab = batch["input_ids"], batch["attention_mask"], batch["labels"]
    assert ids.shape == att.shape == lab.shape and ids.shape[0] == 8 and ids.shape[1] <= 32
    selected_total = 0
    for j in range(8):
        i, slot = indices[j // 2], j % 2
        a, b = sample_pair(len(task.documents[i]), 7, 0, i)
        assert a != b
        span = task.documents[i][(a, b)[slot]]
        enc = tok(span, add_special_tokens=False, truncation=True, max_length=30)
        n = int(att[j].sum())
        row, labels = ids[j, :n].tolist(), lab[j, :n].tolist()
        assert row[0] == tok.cls_token_id and row[-1] == tok.sep_token_id
        assert [y if y != IGNORE else x for x, y in zip(row, labels)][1:-1] == enc["input_ids"]
        chosen = {p - 1 for p, y in enumerate(labels) if y != IGNORE}
        assert chosen and chosen <= set(range(len(enc["input_ids"])))
        word_ids = enc.word_ids()
        for word in set(word_ids):
            members = {p for p, w in enumerate(word_ids) if w == word}
            assert members <= chosen or not members & chosen                  # whole words
        selected_total += len(chosen)
    assert 0.1 < selected_total / (att.sum() - 16) < 0.25
    again = task.make_batch(indices, 0)
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    alone = task.make_batch([9], 0)                                             # rows do not depend on the batch
    width = alone["input_ids"].shape[1]
    assert torch.equal(alone["input_ids"], ids[4:6, :width]) and torch.equal(alone["labels"], lab[4:6, :width])
    other = task.make_batch(indices, 1)
    assert not torch.equal(other["input_ids"], ids) or not torch.equal(other["labels"], lab)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_forward_sums_the_three_losses_and_reaches_every_parameter(mini, kind):
    task = build_coco_task(coco_spec(mini, kind))
    batch = task.make_batch([1, 2, 3, 4], 0)
    loss, logs = task(batch)
    assert set(logs) == {"mlm_head", "mlm_backbone", "contrastive", "contrastive_accuracy"}
    # logs stay on the device (0-d tensors, no gradient): the trainer reads them every log_every steps
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in logs.values())
    logs = {k: float(v) for k, v in logs.items()}
    assert all(math.isfinite(v) for v in logs.values())
    assert float(loss.detach()) == pytest.approx(logs["mlm_head"] + logs["mlm_backbone"] + logs["contrastive"], rel=1e-5)
    assert logs["contrastive"] == pytest.approx(math.log(7), abs=0.3)       # near chance at initialisation
    loss.backward()
    assert all(p.grad is not None for p in task.parameters() if p.requires_grad)
    assert not task.model.training and task.head.training                  # backbone without dropout
    for over, parts in [({"contrastive_weight": 0.0}, ("mlm_head", "mlm_backbone")),
                        ({"late_mlm": False}, ("mlm_head", "contrastive"))]:
        t = build_coco_task(coco_spec(mini, kind, **over))
        loss, logs = t(batch)
        assert float(loss.detach()) == pytest.approx(sum(float(logs[k]) for k in parts), rel=1e-5)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_head_reads_the_skip_layer_under_the_padding_mask(mini, kind):
    """By hand, one unpadded row at a time: [CLS] of the last layer + hidden_states[skip_from][1:] through
    the head layers; the padded batch gives the same states at the real positions."""
    task = build_coco_task(coco_spec(mini, kind)).eval()
    batch = task.make_batch([1, 2, 3, 4], 0)
    ids, att = batch["input_ids"], batch["attention_mask"]
    assert (att == 0).any()                                                  # rows of several lengths
    with torch.no_grad():
        last, head = task.encode(ids, att)
        for j in range(ids.shape[0]):
            n = int(att[j].sum())
            states = task.model.base_model(input_ids=ids[j:j + 1, :n], output_hidden_states=True).hidden_states
            hidden = torch.cat([states[-1][:, :1], states[1][:, 1:]], dim=1)  # skip_from = 1
            for layer in task.head:
                out = layer(hidden, None)
                hidden = out[0] if isinstance(out, tuple) else out
            assert torch.allclose(last[j, :n], states[-1][0], atol=1e-5)
            assert torch.allclose(head[j, :n], hidden[0], atol=1e-5)


def test_backbone_dropout_is_off_unless_asked(mini):
    batch = None
    for backbone_dropout in (False, True):
        task = build_coco_task(coco_spec(mini, dropout=0.5, backbone_dropout=backbone_dropout))
        batch = batch or task.make_batch([1, 2, 3, 4], 0)
        torch.manual_seed(0)
        _, a = task(batch)
        _, b = task(batch)
        assert a["mlm_head"] != b["mlm_head"]                                # the head keeps its dropout
        assert (a["contrastive"] == b["contrastive"]) is not backbone_dropout
        assert task.model.training is backbone_dropout


def test_skip_from_beyond_the_layers_is_refused(mini):
    with pytest.raises(ValueError, match=r"skip_from 3: .*has 2 layers.*at most 2"):
        build_coco_task(coco_spec(mini, skip_from=3))


def test_coco_training_learns_saves_and_continues(mini, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModel

    from zsdr.models.encoder import Encoder
    from zsdr.training.trainer import TrainConfig, Trainer

    task = build_coco_task(coco_spec(mini))
    assert task.head_source is None                                          # the tiny backbone has no head
    cfg = TrainConfig(batch_size=8, max_steps=30, lr=3e-3, warmup_steps=0, seed=7, save_every=100, log_every=1)
    out = Trainer(task, cfg, tmp_path / "coco", cpu=True, progress=False).train()
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    mean = lambda rows, k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    assert mean(log[-5:], "loss") < mean(log[:5], "loss") - 1.0, (log[0], log[-1])
    assert mean(log[-5:], "mlm_head") < mean(log[:5], "mlm_head")
    assert {"mlm_head", "mlm_backbone", "contrastive", "contrastive_accuracy"} <= set(log[-1])

    assert json.loads((out / HEAD_CONFIG).read_text()) == {"head_layers": 2, "skip_from": 1}
    saved_head = load_file(str(out / HEAD_WEIGHTS))
    assert all(torch.equal(saved_head[k], v) for k, v in task.head.state_dict().items())
    backbone = AutoModel.from_pretrained(out).state_dict()
    trained = task.model.base_model.state_dict()
    assert all(torch.equal(trained[k], backbone[k]) for k in trained)
    encoder = Encoder.from_pretrained(out, pooling="cls", similarity="dot")
    assert encoder.encode_queries(["a query"]).shape == (1, 32)

    again = build_coco_task(coco_spec(mini, init=str(out), head=None))      # continued pretraining
    assert again.head_source == str(out / HEAD_WEIGHTS)
    assert all(torch.equal(again.head.state_dict()[k], v) for k, v in task.head.state_dict().items())
    with pytest.raises(DataError, match=r"condenser_head\.safetensors: the Condenser head does not fit 1 layer"):
        build_coco_task(coco_spec(mini, init=str(out), head=None, head_layers=1))
    with pytest.raises(DataError, match="carries a Condenser head, which head 'new' would discard"):
        build_coco_task(coco_spec(mini, init=str(out)))


def test_released_condenser_head_loads_from_model_pt_by_hub_id(mini, tmp_path, offline_hub):
    """A checkpoint that ships the masked LM plus model.pt holding ``c_head.{i}.*`` (the official
    CondenserForPretraining.save_pretrained, as in condenser.tar.gz): the head must come from there, offline, by
    hub id as from a folder."""
    fresh = build_coco_task(coco_spec(mini))
    g = torch.Generator().manual_seed(11)
    released = {f"c_head.{k}": v + torch.randn(v.shape, generator=g) for k, v in fresh.head.state_dict().items()}
    torch.save(released, tmp_path / "model.pt")
    files = {p.name: p for p in (mini / "bert").iterdir() if p.is_file()}
    offline_hub("someone/condenser-with-head", {**files, "model.pt": tmp_path / "model.pt"})
    task = build_coco_task(coco_spec(mini, init="someone/condenser-with-head", head=None))
    assert task.head_source.endswith("model.pt")
    for key, value in task.head.state_dict().items():
        assert torch.equal(value, released[f"c_head.{key}"]), key
    offline_hub("Luyu/plain-bert", files)                                    # a checkpoint without the head
    with pytest.raises(DataError, match=r"Luyu/plain-bert carries no Condenser head.*head: new"):
        build_coco_task(coco_spec(mini, init="Luyu/plain-bert", head=None))
    assert build_coco_task(coco_spec(mini, init="Luyu/plain-bert")).head_source is None   # head: new, on purpose


def test_the_condenser_release_converts_with_its_head_and_pretraining_continues_it(mini, tmp_path):
    """condenser.tar.gz (a masked-LM folder and model.pt with the head) becomes a model folder whose head COCO
    pretraining continues; an archive without the head, or with a link, is refused naming it."""
    import tarfile

    from zsdr.models.released import convert

    fresh = build_coco_task(coco_spec(mini))
    head = {f"c_head.{k}": v + 1.0 for k, v in fresh.head.state_dict().items()}
    folder = tmp_path / "condenser"
    folder.mkdir()
    for p in (mini / "bert").iterdir():
        if p.is_file():
            (folder / p.name).write_bytes(p.read_bytes())
    torch.save(head, folder / "model.pt")
    archive = tmp_path / "condenser.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname="condenser")
    out = convert("condenser", archive, tmp_path / "converted")
    assert (out / "config.json").is_file() and (out / "model.pt").is_file()
    task = build_coco_task(coco_spec(mini, init=str(out), head=None))
    assert task.head_source == str(out / "model.pt")
    assert all(torch.equal(task.head.state_dict()[k], head[f"c_head.{k}"]) for k in task.head.state_dict())
    torch.save({"lm.weight": torch.zeros(1)}, folder / "model.pt")                 # no c_head tensors
    with tarfile.open(tmp_path / "headless.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname="condenser")
    with pytest.raises(DataError, match=r"model\.pt: holds no c_head\.\* tensors"):
        convert("condenser", tmp_path / "headless.tar.gz", tmp_path / "bad")
    link = tmp_path / "evil"
    link.mkdir()
    (link / "model.pt").symlink_to("/etc/passwd")
    with tarfile.open(tmp_path / "evil.tar.gz", "w:gz") as tar:
        tar.add(link, arcname="condenser")
    with pytest.raises(DataError, match="is a link or points outside the archive"):
        convert("condenser", tmp_path / "evil.tar.gz", tmp_path / "evil-out")


def test_contrastive_loss_on_a_plain_backbone(mini):
    spans = mini / "spans-roberta.arrow"
    a = contrastive_loss_on(mini / "roberta", spans, docs=40, batch_size=16, seed=0, max_length=128)
    assert a["documents"] == 32 and a["batch_size"] == 16                   # two full batches, the rest left out
    assert math.isfinite(a["contrastive_loss"]) and 0 < a["contrastive_loss"] < 2 * math.log(31)
    assert a == contrastive_loss_on(mini / "roberta", spans, docs=40, batch_size=16, seed=0)
    small = contrastive_loss_on(mini / "bert", mini / "spans-bert.arrow", docs=5, batch_size=16)
    assert small["documents"] == 5 and small["batch_size"] == 5
