"""The extractive reader: passage-token start probabilities, answer positions, save/reload, training."""

import json

import pytest

from tests.conftest import mini_with_backbones
from zsdr.io import DataError
from zsdr.models.reader import META_FILE, Reader
from zsdr.training.launch import run_spec
from zsdr.training.data import read_units, reader_examples

MINI = {
    "seed": 5, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 320, "train_queries": 200, "dev_queries": 20}],
}
SIZE = {"hidden": 64, "layers": 2, "heads": 2, "intermediate": 128, "max_length": 128, "dropout": 0.0}
QUESTION = "what is the tixgrei of Grykgraxfie"
PASSAGE = "Quoorsteand belongs to the cilhiel point. The tixgrei of Grykgraxfie is flealtierdrind pryclie."


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    return mini_with_backbones(tmp_path_factory.mktemp("reader"), MINI, SIZE)


def passage_ids(reader, question, passage):
    enc = reader.tokenizer(question, passage, truncation="only_second", max_length=reader.max_length)
    return [i for i, s in zip(enc["input_ids"], enc.sequence_ids()) if s == 1]


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_start_probabilities_cover_the_passage_tokens_only(mini, kind):
    reader = Reader.from_pretrained(mini / kind, max_length=40)
    long = " ".join([PASSAGE] * 6)                           # cut by truncation
    questions, passages = [QUESTION, QUESTION, "Quoorsteand"], [PASSAGE, long, "Short one."]
    out = reader.start_probabilities(questions, passages, batch_size=2)
    assert len(out) == 3
    for q, p, tokens in zip(questions, passages, out):
        ids = passage_ids(reader, q, p)
        assert len(tokens) == len(ids) > 0
        assert sum(prob for _, _, prob in tokens) == pytest.approx(1.0, abs=1e-5)
        assert all(prob > 0 for _, _, prob in tokens)
        starts = [s for s, _, _ in tokens]
        assert starts == sorted(starts) and starts[0] == 0
        for (s, e, _), i in zip(tokens, ids):
            text = reader.tokenizer.decode([i]).strip().lower().removeprefix("##")
            assert 0 <= s < e <= len(p) and p[s:e].lower() == text, (p[s:e], text)
    assert out[1][-1][1] < len(long)                         # the tail of the long passage is absent


def test_answer_positions_follow_the_squad_convention(mini):
    start = PASSAGE.index("flealtierdrind")
    answer = "flealtierdrind pryclie"
    reader = Reader.from_pretrained(mini / "bert", max_length=96)
    f = reader.features([QUESTION], [PASSAGE], [start], [answer])
    offsets = reader.tokenizer(QUESTION, PASSAGE, return_offsets_mapping=True)["offset_mapping"]
    s, e = int(f["start_positions"][0]), int(f["end_positions"][0])
    assert f["passage_mask"][0, s] and f["passage_mask"][0, e] and s < e
    assert offsets[s][0] == start and offsets[e][1] == start + len(answer)
    assert int(f["passage_mask"][0].sum()) == len(passage_ids(reader, QUESTION, PASSAGE))
    # truncation cut the answer off: both positions point at [CLS]
    short = Reader.from_pretrained(mini / "bert", max_length=s + 1)
    f = short.features([QUESTION], [PASSAGE], [start], [answer])
    assert f["start_positions"].tolist() == [0] and f["end_positions"].tolist() == [0]


def test_save_and_reload_give_identical_probabilities(mini, tmp_path):
    reader = Reader.from_pretrained(mini / "roberta", max_length=48)
    reader.train()                                           # start_probabilities switches to eval itself
    before = reader.start_probabilities([QUESTION, "tixgrei"], [PASSAGE, PASSAGE])
    assert reader.training                                   # and restores the mode
    reader.save_pretrained(tmp_path / "r")
    assert json.loads((tmp_path / "r" / META_FILE).read_text()) == {"max_length": 48}
    again = Reader.from_pretrained(tmp_path / "r")
    assert again.max_length == 48
    assert again.start_probabilities([QUESTION, "tixgrei"], [PASSAGE, PASSAGE]) == before
    assert reader.start_probabilities([QUESTION, "tixgrei"], [PASSAGE, PASSAGE]) == before


def test_training_learns_the_answer_starts_of_the_training_pairs(mini):
    data = mini / "data" / "src"
    spec = {"kind": "reader", "init": str(mini / "bert"), "dataset": str(data), "units": str(data / "units.jsonl"),
            "max_length": 96, "out": str(mini / "out" / "reader"), "checkpoint_dir": str(mini / "ckpt" / "reader"),
            "dropout": 0.0, "info": {"reader": "test"},
            "train": {"batch_size": 16, "epochs": 12, "lr": 3e-3, "optimizer": "adamw", "warmup_steps": 10,
                      "seed": 3, "save_every": 1000, "log_every": 5}}
    out = run_spec(spec, cpu=True, progress=False)
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["loss"] < log[0]["loss"] * 0.5, (log[0]["loss"], log[-1]["loss"])
    info = json.loads((out / "training.json").read_text())
    assert info["examples"] == 200 and info["units"] == spec["units"] and info["negatives"] is None
    reader = Reader.from_pretrained(out)
    assert reader.max_length == 96
    examples = reader_examples(data, data / "units.jsonl")
    probs = reader.start_probabilities([e.question for e in examples], [e.passage for e in examples])
    hits = sum(max(tokens, key=lambda t: t[2])[0] == e.answer_start for e, tokens in zip(examples, probs))
    assert hits / len(examples) > 0.6, hits / len(examples)


def test_reader_examples_take_only_the_split_queries(mini):
    data = mini / "data" / "src"
    units = read_units(data / "units.jsonl")
    assert len(units) == 220
    train = reader_examples(data, data / "units.jsonl")
    dev = reader_examples(data, data / "units.jsonl", split="dev")
    assert len(train) == 200 and len(dev) == 20
    assert not {e.question for e in train} & {e.question for e in dev}
    e = train[0]
    assert e.passage[e.answer_start:e.answer_start + len(e.answer)] == e.answer
    with pytest.raises(DataError, match="no qrels for split 'test'"):
        reader_examples(data, data / "units.jsonl", split="test")


def test_bad_units_lines_name_file_and_line(mini, tmp_path):
    data = mini / "data" / "src"
    first = json.loads((data / "units.jsonl").read_text().splitlines()[0])
    f = tmp_path / "units.jsonl"
    cases = [
        ({k: v for k, v in first.items() if k != "answer_start"}, r"units\.jsonl:2: missing 'answer_start'"),
        ({**first, "answer_start": "12"}, r"units\.jsonl:2: \"answer_start\" must be a character offset"),
        ({**first, "answer": ""}, r"units\.jsonl:2: \"answer\" must be a non-empty string"),
    ]
    for bad, message in cases:
        f.write_text(json.dumps(first) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(DataError, match=message):
            read_units(f)
    f.write_text(json.dumps(first) + "\n" + json.dumps({**first, "answer_start": first["answer_start"] + 1}) + "\n")
    with pytest.raises(DataError, match=r"units\.jsonl:2: answer .* is not at character"):
        reader_examples(data, f)
    f.write_text(json.dumps({**first, "corpus-id": "nope"}) + "\n")
    with pytest.raises(DataError, match=r"units\.jsonl:1: pair .* is not in"):
        reader_examples(data, f)
    f.write_text("\n")
    with pytest.raises(DataError, match="no units"):
        read_units(f)


def _reference_start_probabilities(reader, questions, passages, batch_size):
    """The per-batch CPU loop start_probabilities ran before it learnt the GPU's sorted batches."""
    import torch

    from zsdr.models.reader import PASSAGE as P

    out = []
    with torch.no_grad():
        for i in range(0, len(questions), batch_size):
            enc = reader._encode(questions[i:i + batch_size], passages[i:i + batch_size])
            offsets = enc.pop("offset_mapping").tolist()
            logits = reader.model(**dict(enc)).start_logits.float()
            for row, off in enumerate(offsets):
                cols = [j for j, s in enumerate(enc.sequence_ids(row)) if s == P]
                probs = torch.softmax(logits[row, cols], dim=0).tolist() if cols else []
                out.append([(off[j][0], off[j][1], p) for j, p in zip(cols, probs)])
    return out


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_cpu_probabilities_equal_the_reference_and_the_sorted_path_agrees(mini, kind):
    import torch

    reader = Reader.from_pretrained(mini / kind, max_length=40).for_inference("cpu", "bf16")
    assert next(reader.parameters()).dtype == torch.float32  # the CPU keeps float32, whatever is asked
    long = " ".join([PASSAGE] * 6)
    questions = [QUESTION, "Quoorsteand", QUESTION, "cilhiel point", QUESTION]
    passages = [PASSAGE, "Short one.", long, PASSAGE + " More.", "A"]
    reader.eval()
    ref = _reference_start_probabilities(reader, questions, passages, 2)
    assert reader.start_probabilities(questions, passages, batch_size=2) == ref  # identical on the CPU
    with torch.no_grad():  # the GPU's length-sorted batches, run on the CPU
        sorted_path = reader._start_probabilities_sorted(questions, passages, 2, torch.device("cpu"), False)
    assert [[(s, e) for s, e, _ in row] for row in sorted_path] == [[(s, e) for s, e, _ in row] for row in ref]
    for a, b in zip(sorted_path, ref):
        assert [p for _, _, p in a] == pytest.approx([p for _, _, p in b], abs=1e-6)


def test_label_shard_with_a_reader_writes_what_the_reference_reader_gives(mini, tmp_path, monkeypatch):
    from zsdr.training import unit_labels

    reader_dir = mini / "bert"
    dataset = mini / "data" / "src" if (mini / "data" / "src").is_dir() else next(p for p in mini.rglob("qrels")).parent
    stats = tmp_path / "stats.json"
    unit_labels.write_statistics(dataset, "train", stats, max_pairs=40)
    new = tmp_path / "new.jsonl"
    unit_labels.label_shard(dataset, "train", stats, new, shard=0, shards=1, reader=str(reader_dir), max_pairs=40,
                            batch_size=8, device="cpu", precision="bf16")
    monkeypatch.setattr(Reader, "start_probabilities",
                        lambda self, q, p, batch_size=64, show_progress=False:
                        _reference_start_probabilities(self.eval(), q, p, batch_size))
    old = tmp_path / "old.jsonl"
    unit_labels.label_shard(dataset, "train", stats, old, shard=0, shards=1, reader=str(reader_dir), max_pairs=40,
                            batch_size=8, device="cpu")
    assert new.read_bytes() == old.read_bytes()
    assert sum(1 for line in new.read_text().splitlines() if json.loads(line)["reader"]) > 10
