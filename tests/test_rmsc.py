"""RMSC's joint training (zsdr.training.rmsc): supervision sets, group-restricted in-batch negatives,
soft-token contexts, random negatives, and a trained model that reloads to identical embeddings."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.conftest import mini_with_backbones, texts_hidden
from zsdr.io import DataError
from zsdr.models.encoder import Encoder
from zsdr.training.rmsc import MixtureTask, StoredItem, build_mixture_task, group_mask, load_sets

MINI = {
    "seed": 3, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 120, "train_queries": 30, "dev_queries": 5}],
}
SIZE = {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 64, "max_length": 64, "dropout": 0.0}
FOUR = [("source", "human"), ("source", "weak"), ("target", "human"), ("target", "weak")]


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    root = mini_with_backbones(tmp_path_factory.mktemp("rmsc"), MINI, SIZE, kinds=("bert",))
    corpus = [json.loads(line) for line in (root / "data" / "src" / "corpus.jsonl").read_text().splitlines()]
    with open(root / "weak.jsonl", "w", encoding="utf-8") as fh:
        for k, doc in enumerate(corpus[:40]):
            words = doc["text"].split()
            fh.write(json.dumps({"_id": f"ict-{doc['_id']}-0", "doc_id": doc["_id"], "query": " ".join(words[:6]),
                                 "positive": {"title": "", "text": " ".join(words[6:])}, "method": "ict"}) + "\n")
    return root


def sets_of(mini, pairs=FOUR, **over):
    data = str(mini / "data" / "src")
    out = []
    for domain, relevance in pairs:
        entry = {"name": f"{domain}-{relevance}", "domain": domain, "relevance": relevance, "dataset": data}
        if relevance == "weak":
            entry["pairs"] = str(mini / "weak.jsonl")
        out.append({**entry, **over})
    return out


def spec_of(mini, tmp_path, sets, soft=True, **over):
    return {"kind": "mixture", "init": str(mini / "bert"), "encoder": {"pooling": "cls", "similarity": "dot",
            "query_max_length": 24, "doc_max_length": 48}, "sets": sets, "scale": 1.0, "group_negatives": True,
            "soft_tokens": {"k": 1} if soft else None, "dropout": None, "out": str(tmp_path / "model"),
            "checkpoint_dir": str(tmp_path / "ckpt"),
            "train": {"seed": 5, "batch_size": 8, "max_steps": 3, "epochs": None, "lr": 1e-3, "save_every": 100,
                      "log_every": 1}, **over}


def test_group_mask_with_four_groups():
    groups = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    doc_groups = groups.repeat_interleave(2)  # each item brings its positive and its random negative
    mask = group_mask(groups, doc_groups)
    assert mask.shape == (8, 16)
    for i in range(8):
        for j in range(16):
            assert bool(mask[i, j]) == (int(groups[i]) != int(doc_groups[j]))
    # every query keeps exactly the four documents of its group (two items x positive + negative)
    assert (~mask).sum(dim=1).tolist() == [4] * 8


def test_loss_takes_in_batch_negatives_only_from_the_same_group(mini, tmp_path):
    task = build_mixture_task(spec_of(mini, tmp_path, sets_of(mini)))
    task.eval()
    sizes = [len(s.items) for s in task.sets]
    starts = np.cumsum([0] + sizes)
    indices = [int(starts[k]) + i for i in range(2) for k in range(4)]  # two items of each of the four groups
    batch = task.make_batch(indices, epoch=0)
    assert batch["groups"] == [0, 1, 2, 3, 0, 1, 2, 3]
    with torch.no_grad():
        loss, logs = task(batch)
        q = task.encoder(**batch["q"])
        d = task.encoder(**batch["d"])
    expected = []
    for i in range(8):
        own = [2 * i] + [j for j in range(16) if batch["groups"][j // 2] == batch["groups"][i] and j != 2 * i
                         and batch["doc_keys"][j] not in batch["relevant"][i]]
        logits = q[i] @ d[own].T
        expected.append(-F.log_softmax(logits, dim=0)[0])
    assert float(loss) == pytest.approx(float(torch.stack(expected).mean()), rel=1e-5)
    assert set(logs) >= {"accuracy", "loss_source-human", "loss_source-weak", "loss_target-human", "loss_target-weak"}


def test_without_group_restriction_every_batch_document_is_a_negative(mini, tmp_path):
    task = build_mixture_task(spec_of(mini, tmp_path, sets_of(mini), group_negatives=False))
    task.eval()
    batch = task.make_batch(list(range(0, 8)), epoch=0)
    with torch.no_grad():
        loss, _ = task(batch)
        q, d = task.encoder(**batch["q"]), task.encoder(**batch["d"])
    rows = []
    for i in range(8):
        keep = [j for j in range(16) if j == 2 * i or batch["doc_keys"][j] not in batch["relevant"][i]]
        rows.append(-F.log_softmax(q[i] @ d[keep].T, dim=0)[keep.index(2 * i)])
    assert float(loss) == pytest.approx(float(torch.stack(rows).mean()), rel=1e-5)


def test_inputs_carry_each_sets_soft_tokens(mini, tmp_path):
    task = build_mixture_task(spec_of(mini, tmp_path, sets_of(mini)))
    tok = task.encoder.tokenizer
    ids = {name: tok.convert_tokens_to_ids(name) for name in ("[S]", "[T]", "[H]", "[W]")}
    sizes = np.cumsum([0] + [len(s.items) for s in task.sets])
    batch = task.make_batch([int(sizes[k]) for k in range(4)], epoch=0)
    for row, (domain, relevance) in enumerate(FOUR):
        for key, n in (("q", row), ("d", 2 * row), ("d", 2 * row + 1)):
            seq = batch[key]["input_ids"][n][batch[key]["attention_mask"][n].bool()].tolist()
            assert seq[0] == tok.cls_token_id and seq[-1] == tok.sep_token_id
            assert seq[1] == ids[f"[{domain[0].upper()}]"], (key, domain)
            assert seq[-2] == ids[f"[{relevance[0].upper()}]"], (key, relevance)


def test_sizes_random_negatives_and_set_errors(mini):
    sets = load_sets(sets_of(mini, [("source", "human"), ("target", "weak")], size=None), seed=1)
    human, weak = len(sets[0].items), len(sets[1].items)
    assert weak == 40 and human > 10
    assert sets[0].corpus is sets[1].corpus  # one dataset, one read of its corpus
    capped = load_sets([sets_of(mini, [("source", "human")])[0],
                        {**sets_of(mini, [("target", "weak")])[0], "size": "supervised"}], seed=1)
    assert len(capped[1].items) == min(human, 40)
    again = load_sets([sets_of(mini, [("source", "human")])[0],
                       {**sets_of(mini, [("target", "weak")])[0], "size": 7}], seed=1)
    assert [i.query for i in again[1].items] == [i.query for i in load_sets(
        [sets_of(mini, [("source", "human")])[0], {**sets_of(mini, [("target", "weak")])[0], "size": 7}],
        seed=1)[1].items]
    assert len(again[1].items) == 7
    with pytest.raises(ValueError, match="supervised"):
        load_sets([{**sets_of(mini, [("target", "weak")])[0], "size": "supervised"}], seed=1)
    with pytest.raises(ValueError, match="unknown keys"):
        load_sets([{**sets_of(mini, [("source", "human")])[0], "colour": 1}], seed=1)
    with pytest.raises(ValueError, match="pairs"):
        load_sets([{"domain": "target", "relevance": "weak", "dataset": str(mini / "data" / "src")}], seed=1)


def test_weak_sets_map_a_table_of_their_pairs_shared_by_the_jobs_processes(mini, tmp_path):
    """A weak set's examples are read on use from a mapped Arrow table of its pairs file, converted once into
    the training's checkpoint folder (the launcher does it before the processes start) and found there by
    every process; the examples, and a seeded subset of them, are those the pairs file gives."""
    from zsdr.training.rmsc import PAIRS_TABLES, Item, WeakItems, pairs_table_path, prepare_pairs_tables
    from zsdr.training.weak.format import read_weak_pairs
    from zsdr.training.weak.table import PairsTable

    pairs = read_weak_pairs(mini / "weak.jsonl")
    want = [Item(1, p.query, p.positive, p.id, frozenset({p.id, p.doc_id})) for p in pairs]
    spec = spec_of(mini, tmp_path, sets_of(mini, [("source", "human"), ("target", "weak")], size=None))
    prepare_pairs_tables(spec)
    [table] = (tmp_path / "ckpt" / PAIRS_TABLES).iterdir()
    assert table == pairs_table_path(mini / "weak.jsonl", tmp_path / "ckpt" / PAIRS_TABLES)
    assert list(PairsTable(table)) == pairs
    stamp = table.stat().st_mtime_ns
    task = build_mixture_task(spec)
    weak = task.sets[1].items
    assert isinstance(weak, WeakItems) and weak.table.path == table and table.stat().st_mtime_ns == stamp
    assert list(weak) == want
    sub = load_sets([sets_of(mini, [("source", "human")])[0], {**sets_of(mini, [("target", "weak")])[0], "size": 7}],
                    seed=1, tables=tmp_path / "ckpt" / PAIRS_TABLES)[1].items
    keep = np.sort(np.random.default_rng([1, 77, 1]).choice(len(want), size=7, replace=False))
    assert list(sub) == [want[int(i)] for i in keep]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_id": "x", "doc_id": "d", "query": "q", "positive": {"title": "", "text": "t"}, '
                   '"method": "nope"}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:1: .*method"):
        load_sets([{**sets_of(mini, [("target", "weak")])[0], "pairs": str(bad)}], seed=1, tables=tmp_path / "t")
    assert not [p for p in (tmp_path / "t").glob("*") if p.is_file() and not p.name.startswith(".")]


def test_sets_read_their_texts_from_the_store_as_the_dicts_gave_them(mini):
    """A human set's queries and positives and every set's random negatives come from the dataset's
    store (corpus.jsonl and queries.jsonl unreadable), equal to what the corpus and queries read as
    dicts gave: the first judged positive in id order, a negative drawn from the ids sorted."""
    from zsdr.data.formats import read_corpus, read_qrels, read_queries

    src = mini / "data" / "src"
    corpus, queries, qrels = read_corpus(src), read_queries(src), read_qrels(src, "train")
    ids = sorted(corpus)
    expected = []
    for qid, row in qrels.items():
        positives = sorted(d for d, g in row.items() if g > 0 and d in corpus)
        if qid in queries and positives:
            expected.append((queries[qid], corpus[positives[0]], positives[0], frozenset(positives)))

    def negative(item, index, epoch, seed):           # MixtureTask.negative over the corpus as a dict
        rng = np.random.default_rng([seed, epoch, index, 11])
        while True:
            did = ids[int(rng.integers(len(ids)))]
            if did not in item.relevant and did != item.positive_key:
                return corpus[did], did

    with texts_hidden(src):
        sets = load_sets(sets_of(mini, [("source", "human"), ("target", "weak")]), seed=1)
        task = MixtureTask(None, sets, seed=4, soft_tokens=False)
        human = sets[0].items
        assert all(isinstance(i, StoredItem) for i in human)
        assert [(i.query, i.positive, i.positive_key, i.relevant) for i in human] == expected
        for index in range(0, task.num_examples, 3):
            s, i = task.locate(index)
            assert task.negative(index, 2) == negative(s.items[i], index, 2, 4)


@pytest.mark.parametrize("negatives", ["corpus", "pseudo"])
def test_random_negatives_are_pure_and_never_relevant(mini, tmp_path, negatives):
    task = build_mixture_task(spec_of(mini, tmp_path, sets_of(mini, negatives=negatives)))
    for index in range(0, task.num_examples, 7):
        s, i = task.locate(index)
        doc, key = task.negative(index, epoch=2)
        assert (doc, key) == task.negative(index, epoch=2)
        assert key not in s.items[i].relevant and key != s.items[i].positive_key
        if negatives == "pseudo" and s.relevance == "weak":
            assert key.startswith("ict-")
    draws = {task.negative(3, epoch=e)[1] for e in range(6)}
    assert len(draws) > 1


def test_pair_negatives_are_the_pairs_own_and_an_old_file_is_refused(mini, tmp_path):
    """``negatives: pair``: a weak example's negative is the one drawn with its pair (the positive's format),
    the same every epoch; the labelled set keeps its random documents; pairs without negatives are refused."""
    from zsdr.training.weak.format import read_weak_pairs
    from zsdr.training.weak.scl_ict import write_weak_pairs

    pairs = tmp_path / "ict.jsonl"
    write_weak_pairs(mini / "data" / "src", pairs, "ict", max_pairs=30, seed=2)
    entries = sets_of(mini, [("source", "human"), ("target", "weak")], negatives="pair")
    entries[1]["pairs"] = str(pairs)
    task = MixtureTask(torch.nn.Identity(), load_sets(entries, seed=1), soft_tokens=False, seed=3)
    stored = read_weak_pairs(pairs)
    for index in range(task.num_examples):
        s, i = task.locate(index)
        doc, key = task.negative(index, epoch=0)
        if s.relevance == "weak":
            p = stored[int(s.items.rows[i]) if s.items.rows is not None else i]
            assert doc == {"title": p.negative["title"], "text": p.negative["text"]} and key == f"{p.id}#negative"
            assert (doc, key) == task.negative(index, epoch=5) and p.negative["doc_id"] != p.doc_id
        else:                                        # a whole document of the corpus, never a relevant one
            assert s.corpus.store.find(key) is not None and key not in s.items[i].relevant
    old = sets_of(mini, [("target", "weak")], negatives="pair")
    with pytest.raises(DataError, match="carry no negative"):
        load_sets(old, seed=1)


def test_trained_rmsc_model_reloads_to_identical_embeddings(mini, tmp_path):
    from zsdr.training.launch import run_spec

    spec = spec_of(mini, tmp_path, sets_of(mini, [("source", "human"), ("source", "weak"), ("target", "weak")]))
    out = run_spec(spec, cpu=True, progress=False)
    saved = json.loads((out / "zsdr.json").read_text())
    assert saved["soft_tokens"]["k"] == 1
    training = json.loads((out / "training.json").read_text())
    assert training["steps"] == 3 and training["examples"] == sum(
        len(s.items) for s in load_sets(spec["sets"], seed=5))
    a = Encoder.from_pretrained(out)
    b = Encoder.from_pretrained(out)
    queries = ["what colour is the sky", "who wrote it"]
    docs = [{"title": "t", "text": "the sky is blue today"}, {"title": "", "text": "someone wrote it"}]
    assert np.array_equal(a.encode_queries(queries), b.encode_queries(queries))
    assert np.array_equal(a.encode_docs(docs), b.encode_docs(docs))
    # inference reads [T] x [H]: the same ids as asking for the target/human context explicitly
    assert a.tokenize_queries(queries) == a.tokenize_queries(queries, contexts=("target", "human"))
    assert a.tokenize_queries(queries) != a.tokenize_queries(queries, contexts=("source", "weak"))


def test_curves_figure_rows_and_errors(tmp_path):
    from tests.test_tables import write_metrics
    from zsdr.tables.rmsc_figures import render_curves

    points = [{"recipe": r, "label": r, "step": n, "dataset": d, "in_domain": d == "mini-source",
               "metrics": str(write_metrics(tmp_path, d, f"{r}.step{n}", {"q1": 0.1 * n / 50, "q2": 0.2}))}
              for r in ("rmsc-cd", "rmsc-co") for n in (100, 50) for d in ("mini-source", "mini-alpha")]
    rows = render_curves(points, tmp_path / "f.png", tmp_path / "f.csv", figure=3, scale="mini")
    assert (tmp_path / "f.png").read_bytes().startswith(b"\x89PNG")
    assert [(r["recipe"], r["dataset"], r["step"]) for r in rows[:4]] == [
        ("rmsc-cd", "mini-source", 50), ("rmsc-cd", "mini-source", 100), ("rmsc-cd", "mini-alpha", 50),
        ("rmsc-cd", "mini-alpha", 100)]
    assert rows[0]["in_domain"] and not rows[2]["in_domain"]
    assert rows[1]["ndcg@10"] == pytest.approx(0.2)
    header = (tmp_path / "f.csv").read_text().splitlines()[0]
    assert header == "recipe,label,dataset,in_domain,step,ndcg@10"
    with pytest.raises(ValueError, match="two curve points"):
        render_curves(points + points[:1], tmp_path / "x.png", tmp_path / "x.csv")


def test_a_two_process_mixture_maps_one_table_converted_by_the_launcher(mini, tmp_path, monkeypatch):
    """torchrun with two processes (gloo on the CPU), as an 8-GPU RMSC job runs: the launcher converts the
    weak pairs once into the checkpoint folder before the processes start (they map that table), and the
    training's losses match the one-process run of the same global batch."""
    import zsdr.training.rmsc as rmsc
    from zsdr.training.launch import launch, run_spec

    sets = sets_of(mini, [("source", "human"), ("source", "weak"), ("target", "weak")])
    one = spec_of(mini, tmp_path / "one", sets, dropout=0.0)
    two = spec_of(mini, tmp_path / "two", sets, dropout=0.0, train={**one["train"], "batch_size": 4})
    run_spec(one, cpu=True, progress=False)
    converted = []

    def prepare(spec):
        rmsc_prepare(spec)
        converted.append(sorted(p.name for p in (Path(spec["checkpoint_dir"]) / rmsc.PAIRS_TABLES).iterdir()))

    rmsc_prepare = rmsc.prepare_pairs_tables
    monkeypatch.setattr(rmsc, "prepare_pairs_tables", prepare)
    launch(two, processes=2, spec_path=tmp_path / "two.json", log_file=tmp_path / "two.log")
    table = rmsc.pairs_table_path(mini / "weak.jsonl", Path(two["checkpoint_dir"]) / rmsc.PAIRS_TABLES)
    assert converted == [[table.name]]             # one weak-pair file (two sets), one table
    losses = [[json.loads(line)["loss"] for line in (Path(s["out"]) / "train_log.jsonl").read_text().splitlines()]
              for s in (one, two)]
    assert len(losses[0]) == len(losses[1]) == 3 and losses[1] == pytest.approx(losses[0], rel=1e-4, abs=1e-5)
    # (the weights after the last step are not compared: Adam turns the last bits of near-zero gradients,
    # which the all-reduce sums in another order, into updates of up to lr)
    assert np.isfinite(Encoder.from_pretrained(two["out"]).encode_queries(["what colour is the sky"])).all()


def test_the_weak_set_size_table_of_the_note_follows_the_config_and_the_corpora():
    """docs/methods/rmsc.md#weak-set-sizes: every weak set is the labelled set's size at each scale, and the
    paper plan's table gives each target's documents (published statistics), the pairs per document that size
    needs, and the method the paper config gives it."""
    import re

    import yaml

    from zsdr.data.sizes import published_sizes

    root = Path(__file__).resolve().parents[1]
    rmsc = yaml.safe_load((root / "configs" / "papers" / "rmsc.yaml").read_text())
    config = yaml.safe_load((root / "config.yaml").read_text())
    source = next(d for d in config["mini"]["domains"] if d["role"] == "source")
    assert rmsc["rmsc"]["weak"]["max_pairs"] == source["train_queries"]            # mini: 1,200 labelled queries
    small = rmsc["by_scale"]["small"]
    assert small["rmsc"]["weak"]["max_pairs"] == small["recipes"]["rmsc-cd"]["mixture"]["sets"][0]["size"]
    paper = rmsc["by_scale"]["paper"]["rmsc"]["weak"]
    assert paper["max_pairs"] == 502939 and paper["pairs_per_document"] is None
    assert rmsc["rmsc"]["weak"]["pairs_per_document"] is None and small["rmsc"]["weak"]["pairs_per_document"] is None
    note = (root / "docs" / "methods" / "rmsc.md").read_text()
    rows = re.findall(r"^\| ([a-z0-9-]+) \| (SCL|ICT) \| ([\d,]+) \| ([\d.]+) \|", note, re.M)
    targets = rmsc["by_scale"]["paper"]["recipes"]["rmsc-cd"]["targets"]
    sizes = published_sizes()
    assert len(rows) == 11
    for name, method, docs, needed in rows:
        assert name in targets
        assert method.lower() == paper["methods"].get(name, paper["method"])
        assert int(docs.replace(",", "")) == sizes[name]["docs"]
        assert float(needed) == round(502939 / sizes[name]["docs"], 1)
    # the targets left out of the table are those of at least 502,939 documents, named in the text above it
    for name in set(targets) - {r[0] for r in rows}:
        assert sizes[name]["docs"] >= 502939 and f"`{name}`" in note
