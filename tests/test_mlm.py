"""zsdr.pretrain.mlm (DDR's domain-adaption MLM) and the trainer's model snapshots."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import mini_with_backbones
from zsdr.pretrain.mlm import IGNORE, build_mlm_task, mask_tokens, random_crop
from zsdr.training.config import TrainConfig
from zsdr.training.trainer import Trainer

MINI = {
    "seed": 5, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 120, "train_queries": 20, "dev_queries": 5}],
}
SIZE = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "max_length": 32, "dropout": 0.0}


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    return mini_with_backbones(tmp_path_factory.mktemp("mlm"), MINI, SIZE)


def mlm_spec(mini, kind="bert", **over):
    return {"init": str(mini / kind), "dataset": str(mini / "data" / "src"), "max_length": 32,
            "mlm_probability": 0.15, "max_examples": None, "dropout": 0.0, "train": {"seed": 7}, **over}


def config(**over):
    return TrainConfig(**{"batch_size": 8, "max_steps": 10, "lr": 1e-3, "warmup_steps": 0, "seed": 7,
                          "save_every": 4, "log_every": 1, **over})


# -------------------------------------------------------------------------------------- masking
def test_masking_follows_bert_proportions_and_never_touches_specials():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (2000, 128), generator=g)
    lengths = torch.randint(20, 129, (2000,), generator=g)
    pos = torch.arange(128)[None]
    padding = pos >= lengths[:, None]
    ids[padding] = 0
    ids[:, 0] = 2
    ids[torch.arange(2000), lengths - 1] = 3
    special = padding | (pos == 0) | (pos == lengths[:, None] - 1)
    before = ids.clone()
    inputs, labels = mask_tokens(ids, special, vocab_size=1000, mask_id=4, generator=torch.Generator().manual_seed(1))
    assert torch.equal(ids, before)                                      # the input is not modified
    selected = labels != IGNORE
    assert not (selected & special).any()
    assert torch.equal(inputs[special], ids[special])
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(inputs[~selected], ids[~selected])
    assert selected.sum() / (~special).sum() == pytest.approx(0.15, abs=0.01)
    n = selected.sum()
    masked = (inputs == 4) & selected
    kept = (inputs == ids) & selected                                     # the unchanged 10 % keep their id
    assert masked.sum() / n == pytest.approx(0.8, abs=0.02)
    assert kept.sum() / n == pytest.approx(0.1, abs=0.02)
    assert (selected & ~masked & ~kept).sum() / n == pytest.approx(0.1, abs=0.02)
    again = mask_tokens(ids, special, 1000, 4, torch.Generator().manual_seed(1))
    assert torch.equal(again[0], inputs) and torch.equal(again[1], labels)
    other = mask_tokens(ids, special, 1000, 4, torch.Generator().manual_seed(2))
    assert not torch.equal(other[1], labels)


def test_masking_can_select_nothing():
    ids = torch.tensor([[2, 7, 8, 3, 0]])
    special = torch.tensor([[True, False, False, True, True]])
    inputs, labels = mask_tokens(ids, special, 10, 4, torch.Generator().manual_seed(0), probability=0.0)
    assert torch.equal(inputs, ids) and (labels == IGNORE).all()
    inputs, labels = mask_tokens(ids, special, 10, 4, torch.Generator().manual_seed(0), probability=1.0,
                                 mask_fraction=1.0, random_fraction=0.0)
    assert inputs.tolist() == [[2, 4, 4, 3, 0]] and labels.tolist() == [[IGNORE, 7, 8, IGNORE, IGNORE]]


def test_random_crop_is_a_seeded_contiguous_window():
    ids = list(range(100, 200))
    rng = lambda epoch, index: np.random.default_rng([7, epoch, index])  # noqa: E731
    for index in range(20):
        w = random_crop(ids, 10, rng(0, index))
        assert len(w) == 10 and w == list(range(w[0], w[0] + 10)) and w[0] >= 100 and w[-1] < 200
        assert w == random_crop(ids, 10, rng(0, index))
    starts = {e: [random_crop(ids, 10, rng(e, i))[0] for i in range(20)] for e in (0, 1)}
    assert starts[0] != starts[1] and len(set(starts[0])) > 5
    assert random_crop(ids[:10], 10, rng(0, 0)) == ids[:10] and random_crop(ids[:3], 10, rng(0, 0)) == ids[:3]


# ----------------------------------------------------------------------------------------- task
@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_batches_frame_a_cropped_window_and_are_pure(mini, kind):
    task = build_mlm_task(mlm_spec(mini, kind))
    tok = task.tokenizer
    assert task.num_examples == 120
    batch = task.make_batch([0, 5, 9, 3], 0)
    ids, att, lab = batch["input_ids"], batch["attention_mask"], batch["labels"]
    assert ids.shape == att.shape == lab.shape and ids.shape[0] == 4 and ids.shape[1] <= 32
    for j, i in enumerate([0, 5, 9, 3]):
        n = int(att[j].sum())
        row, labels = ids[j, :n].tolist(), lab[j].tolist()
        assert row[0] == tok.cls_token_id and row[-1] == tok.sep_token_id          # [CLS] x [SEP] / <s> x </s>
        assert ids[j, n:].eq(tok.pad_token_id).all() and all(x == IGNORE for x in labels[n:])
        assert labels[0] == labels[n - 1] == IGNORE
        original = [y if y != IGNORE else x for x, y in zip(row, labels[:n])][1:-1]
        full = tok(task.texts[i], add_special_tokens=False)["input_ids"]
        assert len(full) > 30 and len(original) == 30                                 # long documents are cropped
        assert any(full[s:s + 30] == original for s in range(len(full) - 29))         # to a contiguous window
    again = task.make_batch([0, 5, 9, 3], 0)
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    alone = task.make_batch([9], 0)                                                   # rows do not depend on the batch
    assert torch.equal(alone["input_ids"][0], ids[2, :alone["input_ids"].shape[1]])
    assert not torch.equal(task.make_batch([0, 5, 9, 3], 1)["labels"], lab)
    assert 0.05 < (lab != IGNORE).sum() / (att.sum() - 8) < 0.3


def test_zero_selected_tokens_give_a_zero_loss_with_a_graph(mini):
    task = build_mlm_task(mlm_spec(mini))
    batch = task.make_batch([0, 1], 0)
    batch["labels"][:] = IGNORE
    loss, logs = task(batch)
    assert float(loss.detach()) == 0.0 and loss.requires_grad and logs["accuracy"] == 0.0
    loss.backward()
    assert all(p.grad is not None and not p.grad.isnan().any() for p in task.parameters() if p.requires_grad)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_head_on_selected_positions_equals_the_full_forward(mini, kind):
    task = build_mlm_task(mlm_spec(mini, kind))
    task.eval()
    batch = task.make_batch([0, 1, 2], 0)
    with torch.no_grad():
        loss, _ = task(batch)
        full = task.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    assert float(loss) == pytest.approx(float(full.loss), rel=1e-5)


def test_a_tokenizer_without_mask_token_is_refused(mini, tmp_path):
    folder = tmp_path / "nomask"
    shutil.copytree(mini / "bert", folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg["mask_token"] = None
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"nomask.*no mask token"):
        build_mlm_task(mlm_spec(mini, init=str(folder)))


def test_mlm_training_learns_and_saves_the_encoder(mini, tmp_path):
    from transformers import AutoModel

    task = build_mlm_task(mlm_spec(mini, max_examples=64))
    assert task.num_examples == 64
    out = Trainer(task, config(max_steps=40, batch_size=16, lr=3e-3), tmp_path / "dam", cpu=True,
                  progress=False).train()
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    first, last = sum(r["loss"] for r in log[:5]) / 5, sum(r["loss"] for r in log[-5:]) / 5
    assert last < first - 0.5, (first, last)                                        # chance: log(600) = 6.4
    assert "accuracy" in log[-1]
    encoder = AutoModel.from_pretrained(out)
    trained = task.model.base_model.state_dict()
    loaded = encoder.state_dict()
    assert {k for k in trained} <= set(loaded)
    assert all(torch.equal(trained[k], loaded[k]) for k in trained)
    initial = load_file(str(mini / "bert" / "model.safetensors"))
    assert not torch.equal(initial["bert.encoder.layer.0.attention.self.query.weight"],
                           loaded["encoder.layer.0.attention.self.query.weight"])


# ------------------------------------------------------------------------------------ snapshots
def snapshot_weights(out, step):
    return load_file(str(Path(out) / "snapshots" / f"step-{step:09d}" / "model.safetensors"))


def test_snapshots_survive_a_kill_and_match_an_uninterrupted_run(mini, tmp_path):
    spec = mlm_spec(mini)
    cfg = config(snapshot_every=3)
    straight = Trainer(build_mlm_task(spec), cfg, tmp_path / "straight", checkpoint_dir=tmp_path / "ck1",
                       cpu=True, progress=False).train()
    listed = json.loads((straight / "snapshots" / "snapshots.json").read_text())
    assert [e["step"] for e in listed] == [3, 6, 9, 10]
    assert [e["path"] for e in listed] == ["snapshots/step-000000003", "snapshots/step-000000006",
                                           "snapshots/step-000000009", "."]
    seconds = [e["train_seconds"] for e in listed]
    assert all(0 < a < b for a, b in zip(seconds, seconds[1:]))
    for e in listed[:-1]:
        assert (straight / e["path"] / "model.safetensors").is_file() and (straight / e["path"] / "tokenizer.json").is_file()
    assert not (tmp_path / "ck1").exists()

    out, ckpt = tmp_path / "killed", tmp_path / "ck2"
    assert Trainer(build_mlm_task(spec), cfg, out, checkpoint_dir=ckpt, cpu=True, progress=False,
                   stop_after=7).train() is None
    staged = ckpt / "snapshots"
    assert sorted(p.name for p in staged.glob("step-*")) == ["step-000000003", "step-000000006"]
    state = json.loads((ckpt / "step-000000004" / "trainer_state.json").read_text())
    assert state["step"] == 4 and state["train_seconds"] > 0
    (staged / "step-000000003" / "marker").write_text("taken before the kill")
    Trainer(build_mlm_task(spec), cfg, out, checkpoint_dir=ckpt, cpu=True, progress=False).train()
    resumed = json.loads((out / "snapshots" / "snapshots.json").read_text())
    assert [e["step"] for e in resumed] == [3, 6, 9, 10]
    assert (out / "snapshots" / "step-000000003" / "marker").is_file()          # kept, not retaken
    assert resumed[0]["train_seconds"] < state["train_seconds"] < resumed[1]["train_seconds"]
    for step in (3, 6, 9):
        a, b = snapshot_weights(straight, step), snapshot_weights(out, step)
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert not ckpt.exists()


def test_snapshots_without_a_checkpoint_dir(mini, tmp_path):
    out = Trainer(build_mlm_task(mlm_spec(mini)), config(max_steps=4, snapshot_every=2), tmp_path / "m",
                  cpu=True, progress=False).train()
    listed = json.loads((out / "snapshots" / "snapshots.json").read_text())
    assert [(e["step"], e["path"]) for e in listed] == [(2, "snapshots/step-000000002"), (4, ".")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]                   # nothing staged is left behind
    assert not (Trainer(build_mlm_task(mlm_spec(mini)), config(max_steps=4), tmp_path / "n", cpu=True,
                        progress=False).train() / "snapshots").exists()


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_untied_output_layer_starts_as_the_input_embeddings_and_trains_apart(mini, kind, tmp_path):
    task = build_mlm_task({**mlm_spec(mini, kind), "tie_embeddings": False})
    inp, out = task.model.get_input_embeddings().weight, task.model.get_output_embeddings().weight
    assert inp is not out and torch.equal(inp, out)
    loss, _ = task(task.make_batch([0, 1, 2, 3], 0))
    loss.backward()
    # a token no batch shows gets no gradient in its input embedding (only the output layer's)
    shown = set(task.make_batch([0, 1, 2, 3], 0)["input_ids"].flatten().tolist())
    unseen = next(i for i in range(task.model.config.vocab_size) if i not in shown)
    assert inp.grad[unseen].abs().sum() == 0 and out.grad[unseen].abs().sum() > 0
    with torch.no_grad():
        out.add_(0.5)                                   # trained apart: the output layer differs now
    task.save(tmp_path / "dam")
    again = build_mlm_task({**mlm_spec(mini, kind), "init": str(tmp_path / "dam"), "tie_embeddings": False})
    kept = again.model.get_output_embeddings().weight
    assert torch.equal(kept, out) and not torch.equal(kept, again.model.get_input_embeddings().weight)


# -------------------------------------------------------------------------------------- texts
def test_corpus_texts_read_the_store_and_skip_what_strip_empties(tmp_path):
    """A DAM's texts: title + " " + text of every document whose stripped text is not empty (Python's
    whitespace, Unicode included), in corpus order, the first max_examples of them; read from the mapped
    store when drawn, the process holding only the kept rows."""
    from zsdr.data.store import build_store
    from zsdr.pretrain.mlm import CorpusTexts, corpus_texts

    docs = [("a", "", "hello"), ("b", "  ", " \t\n"), ("c", "\u3000", "\x1c\x85\u2028"), ("d", "T", ""),
            ("e", None, "\u00a0x\u2003"), ("f", None, ""), ("g", "Title", "  body  "), ("h", "\x0b", "\u200bz")]
    with (tmp_path / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for rid, title, text in docs:
            f.write(json.dumps({"_id": rid, **({} if title is None else {"title": title}), "text": text}) + "\n")
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "x"}) + "\n", encoding="utf-8")
    build_store(tmp_path)
    expected = [f"{t or ''} {x}".strip() for _, t, x in docs if f"{t or ''} {x}".strip()]
    assert expected == ["hello", "T", "x", "Title   body", "\u200bz"]
    texts = corpus_texts(tmp_path)
    assert isinstance(texts, CorpusTexts) and len(texts) == 5
    assert list(texts) == expected and texts[-1] == "\u200bz" and texts[1:3] == expected[1:3]
    assert texts.rows.dtype == np.int32 and texts.rows.tolist() == [0, 3, 4, 6, 7]
    assert list(corpus_texts(tmp_path, 2)) == expected[:2] and list(corpus_texts(tmp_path, 0)) == []
    with pytest.raises(IndexError):
        texts[5]


def test_mlm_task_keeps_the_store_backed_texts(mini):
    """The task draws from the store-backed sequence (no list of the corpus in the process), and its
    texts are those of the corpus file in order."""
    from zsdr.data.formats import iter_records
    from zsdr.pretrain.mlm import CorpusTexts

    task = build_mlm_task(mlm_spec(mini))
    assert isinstance(task.texts, CorpusTexts)
    path = mini / "data" / "src" / "corpus.jsonl"
    expected = [f"{o.get('title') or ''} {o['text']}".strip() for _, _, o in iter_records(path, "corpus")]
    assert list(task.texts) == [t for t in expected if t]
    assert build_mlm_task(mlm_spec(mini, max_examples=7)).num_examples == 7
