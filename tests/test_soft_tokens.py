"""RMSC's soft tokens: naming (zsdr.models.soft_tokens), placement around queries and documents in every
document format, truncation, seeded random embedding rows, save/load, and the errors."""

import json
import shutil

import numpy as np
import pytest
import torch

from tests.conftest import mini_with_backbones
from zsdr.data.formats import read_corpus, read_queries
from zsdr.io import DataError
from zsdr.models.encoder import Encoder, EncoderConfig
from zsdr.models.soft_tokens import SoftTokens

MINI = {
    "seed": 5, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 40, "train_queries": 8, "dev_queries": 4}],
}
SIZE = {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 64, "max_length": 32, "dropout": 0.0}
KINDS = ("bert", "roberta")
CASES = [("source", "human", "S", "H"), ("source", "weak", "S", "W"), ("target", "weak", "T", "W"),
         (None, None, "T", "H")]  # None: the inference context


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    """A tiny mini benchmark (one domain) with a tiny BERT and RoBERTa, plus some of its texts."""
    root = mini_with_backbones(tmp_path_factory.mktemp("soft"), MINI, SIZE, KINDS)
    docs = list(read_corpus(root / "data" / "src").values())[:6]
    queries = list(read_queries(root / "data" / "src").values())[:5]
    return {"root": root, "docs": docs, "queries": queries}


PLAIN = dict(pooling="cls", similarity="dot")  # a bare backbone's settings, said explicitly


def soft_encoder(mini, kind, k=1, seed=0, **overrides) -> Encoder:
    return Encoder.from_pretrained(mini["root"] / kind, **{**PLAIN, **overrides}).add_soft_tokens(k=k, seed=seed)


def ids_of(enc, *strings) -> list[int]:
    return enc.tokenizer.convert_tokens_to_ids(list(strings))


def bare(enc, text) -> list[int]:
    return enc.tokenizer(text, add_special_tokens=False)["input_ids"]


def by_hand(enc, text, domain, relevance) -> list[int]:
    """``[CLS] <domain> text <relevance> [SEP]`` assembled from the tokenizer (``<s> ... </s>`` for RoBERTa)."""
    tok = enc.tokenizer
    return [tok.cls_token_id] + ids_of(enc, *domain) + bare(enc, text) + ids_of(enc, *relevance) + [tok.sep_token_id]


# ------------------------------------------------------------------------------------------ naming
def test_soft_token_names_and_settings():
    one, two = SoftTokens(), SoftTokens(k=2, inference=["source", "weak"])
    assert one.tokens("source", "human") == (["[S]"], ["[H]"])
    assert one.all_tokens() == ["[S]", "[T]", "[H]", "[W]"]
    assert two.tokens("target", "weak") == (["[T1]", "[T2]"], ["[W1]", "[W2]"])
    assert two.all_tokens() == ["[S1]", "[S2]", "[T1]", "[T2]", "[H1]", "[H2]", "[W1]", "[W2]"]
    assert two.inference == ("source", "weak") and two.to_dict() == {"k": 2, "inference": ["source", "weak"]}
    assert SoftTokens.from_dict(two.to_dict()) == two and SoftTokens.from_dict({}) == one
    with pytest.raises(ValueError, match="source, target"):
        one.tokens("sauce", "human")
    with pytest.raises(ValueError, match="human, weak"):
        one.tokens("target", "strong")
    with pytest.raises(ValueError, match="k must be"):
        SoftTokens(k=0)
    for bad, what in (({"k": 1, "size": 2}, "unknown soft_tokens"), ({"k": True}, "k must be"),
                      ({"inference": ["target"]}, "pair"), ({"inference": ["target", "gold"]}, "human, weak"),
                      ([1], "object")):
        with pytest.raises(DataError, match=what) as err:
            SoftTokens.from_dict(bad, "x/zsdr.json")
        assert err.value.path == "x/zsdr.json" and "add_soft_tokens" in err.value.fix
    assert EncoderConfig(soft_tokens={"k": 2}).soft_tokens == {"k": 2, "inference": ["target", "human"]}
    with pytest.raises(DataError, match="m/zsdr.json: soft_tokens"):
        EncoderConfig.from_dict({"soft_tokens": {"k": -1}}, "m/zsdr.json")


# ------------------------------------------------------------------------------------- placement
@pytest.mark.parametrize("kind", KINDS)
def test_four_contexts_by_hand(mini, kind):
    enc = soft_encoder(mini, kind, doc_format="text")
    q, doc = mini["queries"][0], {"title": "", "text": " ".join(mini["docs"][0]["text"].split()[:6])}
    for domain, relevance, d, r in CASES:
        context = None if domain is None else (domain, relevance)
        got_q = enc.tokenize_queries([q], contexts=context)["input_ids"][0]
        assert got_q == by_hand(enc, q, [f"[{d}]"], [f"[{r}]"])
        got_d = enc.tokenize_docs([doc], contexts=context)["input_ids"][0]
        assert got_d == by_hand(enc, doc["text"], [f"[{d}]"], [f"[{r}]"])
        special = ("[CLS]", "[SEP]") if kind == "bert" else ("<s>", "</s>")
        words = enc.tokenizer.convert_ids_to_tokens(got_q)
        assert words[:2] == [special[0], f"[{d}]"] and words[-2:] == [f"[{r}]", special[1]]
    # One context per text, mixed in one call; contexts=None is the inference context [T] x [H].
    contexts = [("source", "human"), ("source", "weak"), ("target", "weak"), ("target", "human")]
    mixed = enc.tokenize_queries(mini["queries"][:4], contexts=contexts)["input_ids"]
    for text, (domain, relevance), ids in zip(mini["queries"], contexts, mixed):
        assert ids == by_hand(enc, text, *enc.config.soft.tokens(domain, relevance))
    assert enc.tokenize_docs(mini["docs"])["input_ids"] == \
        enc.tokenize_docs(mini["docs"], contexts=("target", "human"))["input_ids"]
    if kind == "bert":  # single sequences: every token has type 0
        feats = enc.tokenize_queries([q], contexts=("source", "weak"))
        assert feats["token_type_ids"][0] == [0] * len(feats["input_ids"][0])
    # Encoding follows the contexts: an input's vector changes with its tokens.
    assert not np.array_equal(enc.encode_queries([q], contexts=("source", "human")), enc.encode_queries([q]))
    np.testing.assert_array_equal(enc.encode_queries([q]), enc.encode_queries([q], contexts=("target", "human")))


@pytest.mark.parametrize("kind", KINDS)
def test_k_tokens_per_slot(mini, kind):
    enc = soft_encoder(mini, kind, k=2)
    q = mini["queries"][1]
    assert enc.tokenize_queries([q], contexts=("source", "human"))["input_ids"][0] == \
        by_hand(enc, q, ["[S1]", "[S2]"], ["[H1]", "[H2]"])
    assert enc.tokenize_queries([q])["input_ids"][0] == by_hand(enc, q, ["[T1]", "[T2]"], ["[H1]", "[H2]"])
    assert enc.describe()["soft_tokens"]["tokens"] == SoftTokens(k=2).all_tokens()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("doc_format", ["title_space_text", "text", "lower_title_text", "title_sep_text"])
def test_truncation_keeps_the_relevance_tokens_and_the_final_special(mini, kind, doc_format):
    k, length = 2, 24  # the title survives longest_first truncation whole
    enc = soft_encoder(mini, kind, k=k, doc_format=doc_format, max_length=length)
    tok = enc.tokenizer
    words = " ".join(mini["docs"][0]["text"].split() * 8)
    doc = {"title": "Alpha", "text": words}
    dom, rel = ids_of(enc, "[S1]", "[S2]"), ids_of(enc, "[W1]", "[W2]")
    ids = enc.tokenize_docs([doc], contexts=("source", "weak"))["input_ids"][0]
    assert len(ids) == length
    assert ids[:1 + k] == [tok.cls_token_id] + dom and ids[-1 - k:] == rel + [tok.sep_token_id]
    plain = Encoder.from_pretrained(mini["root"] / kind, **PLAIN, doc_format=doc_format, max_length=length - 2 * k)
    assert ids[1 + k:-1 - k] == plain.tokenize_docs([doc])["input_ids"][0][1:-1]  # the text, truncated
    if doc_format == "title_sep_text":  # [CLS] [S1] [S2] title [SEP] text [W1] [W2] [SEP]
        title = bare(enc, doc["title"])
        assert ids[1 + k:1 + k + len(title)] == title and ids[1 + k + len(title)] == tok.sep_token_id
    if doc_format != "lower_title_text":
        with_offsets = enc.tokenize_docs([doc], offsets=True, contexts=("source", "weak"))
        assert with_offsets["input_ids"][0] == ids
        offsets, seq = with_offsets["offset_mapping"][0], with_offsets["sequence_ids"][0]
        assert [tuple(o) for o in offsets[1:1 + k]] == [(0, 0)] * k and seq[1:1 + k] == [None] * k
        assert [tuple(o) for o in offsets[-1 - k:-1]] == [(0, 0)] * k and seq[-1 - k:] == [None] * (k + 1)
        assert seq[1 + k] == 0 and seq[-2 - k] == (1 if doc_format == "title_sep_text" else 0)
    if kind == "bert":
        types = enc.tokenize_docs([doc], contexts=("source", "weak"))["token_type_ids"][0]
        second = doc_format == "title_sep_text"
        assert types[1:1 + k] == [0] * k and types[-1 - k:-1] == [int(second)] * k
        assert types == plain_types(plain, doc, dom, rel, k)
    # A long query too; and a length that leaves the text no room is refused.
    long_q = enc.tokenize_queries([words])["input_ids"][0]
    assert len(long_q) == length and long_q[-1 - k:] == ids_of(enc, "[H1]", "[H2]") + [tok.sep_token_id]
    enc.configure(query_max_length=2 * k + 2)
    with pytest.raises(ValueError, match="query_max_length 6 leaves no room"):
        enc.tokenize_queries(["w"])


def plain_types(plain, doc, dom, rel, k):
    """The token types of ``plain``'s tokenisation with types for the soft tokens put in by hand."""
    t = plain.tokenize_docs([doc])["token_type_ids"][0]
    return t[:1] + [t[1]] * k + t[1:-1] + [t[-2]] * k + t[-1:]


# ------------------------------------------------------------------------------------ embeddings
@pytest.mark.parametrize("kind", KINDS)
def test_new_embedding_rows_are_seeded_random(mini, kind):
    base = Encoder.from_pretrained(mini["root"] / kind, **PLAIN)
    old = base.backbone.get_input_embeddings().weight.detach().clone()
    enc = base.add_soft_tokens(k=1, seed=3)
    weight = enc.backbone.get_input_embeddings().weight.detach()
    ids = ids_of(enc, *SoftTokens().all_tokens())
    assert weight.shape[0] == len(enc.tokenizer) == old.shape[0] + 4 and ids == list(range(old.shape[0], weight.shape[0]))
    assert torch.equal(weight[:old.shape[0]], old)
    new = weight[ids]
    std = enc.backbone.config.initializer_range
    assert torch.equal(new, torch.randn(4, old.shape[1], generator=torch.Generator().manual_seed(3)) * std)
    assert not torch.allclose(new, old.mean(0).expand_as(new), atol=1e-3)
    assert all(not torch.equal(new[i], new[j]) for i in range(4) for j in range(i + 1, 4))
    again = soft_encoder(mini, kind, seed=3).backbone.get_input_embeddings().weight.detach()
    other = soft_encoder(mini, kind, seed=4).backbone.get_input_embeddings().weight.detach()
    assert torch.equal(again, weight) and not torch.equal(other[ids], new)
    assert enc.backbone.get_input_embeddings().weight.requires_grad


# ----------------------------------------------------------------------------------- save / load
@pytest.mark.parametrize("kind", KINDS)
def test_save_load_round_trip(mini, kind, tmp_path):
    enc = soft_encoder(mini, kind, k=2, seed=1, doc_format="title_sep_text")
    with torch.no_grad():  # "trained" soft tokens: the seed alone cannot reproduce them
        enc.backbone.get_input_embeddings().weight[-8:] += 0.5
    out = enc.save_pretrained(tmp_path / "saved")
    assert json.loads((out / "zsdr.json").read_text())["soft_tokens"] == {"k": 2, "inference": ["target", "human"]}
    back = Encoder.from_pretrained(out)
    assert back.config == enc.config
    assert ids_of(back, *SoftTokens(k=2).all_tokens()) == ids_of(enc, *SoftTokens(k=2).all_tokens())
    q, docs = mini["queries"], mini["docs"]
    for domain, relevance, _, _ in CASES:
        context = None if domain is None else (domain, relevance)
        assert back.tokenize_queries(q, contexts=context) == enc.tokenize_queries(q, contexts=context)
        assert back.tokenize_docs(docs, contexts=context) == enc.tokenize_docs(docs, contexts=context)
        assert np.array_equal(back.encode_queries(q, contexts=context), enc.encode_queries(q, contexts=context))
        assert np.array_equal(back.encode_docs(docs, contexts=context), enc.encode_docs(docs, contexts=context))
    assert back.describe()["soft_tokens"]["inference"] == ["target", "human"]
    # Overriding the inference context is fine; overriding in tokens the model lacks is not.
    weak = Encoder.from_pretrained(out, soft_tokens={"k": 2, "inference": ["target", "weak"]})
    assert weak.tokenize_queries(q)["input_ids"] == enc.tokenize_queries(q, contexts=("target", "weak"))["input_ids"]
    with pytest.raises(ValueError, match="only Encoder.add_soft_tokens"):
        Encoder.from_pretrained(out, soft_tokens={"k": 1})
    with pytest.raises(ValueError, match="only Encoder.add_soft_tokens"):
        back.configure(soft_tokens={"k": 3})
    assert back.config.soft_tokens["k"] == 2


# ------------------------------------------------------------------------------------------ errors
def test_errors(mini, tmp_path):
    plain = Encoder.from_pretrained(mini["root"] / "bert", **PLAIN)
    with pytest.raises(ValueError, match="no soft tokens|has none"):
        plain.tokenize_queries(["w"], contexts=("target", "human"))
    with pytest.raises(ValueError, match="has none"):
        plain.encode_docs(mini["docs"][:1], contexts=[("source", "weak")])
    enc = soft_encoder(mini, "bert")
    with pytest.raises(ValueError, match="already has soft tokens"):
        enc.add_soft_tokens()
    with pytest.raises(ValueError, match="2 contexts for 1 texts"):
        enc.tokenize_queries(["w"], contexts=[("source", "weak")] * 2)
    with pytest.raises(ValueError, match="source, target"):
        enc.tokenize_queries(["w"], contexts=("src", "weak"))
    clash = Encoder.from_pretrained(mini["root"] / "bert", **PLAIN)
    clash.tokenizer.add_tokens(["[W]"], special_tokens=True)
    with pytest.raises(ValueError, match=r"\['\[W\]'\] already exist"):
        clash.add_soft_tokens()
    # A zsdr.json naming soft tokens its tokenizer and weights lack (the bare model's files).
    folder = tmp_path / "broken"
    enc.save_pretrained(folder)
    bare_folder = plain.save_pretrained(tmp_path / "bare")
    for f in bare_folder.iterdir():
        if f.is_dir():  # 1_Pooling/: the bare model's sentence-transformers metadata
            shutil.copytree(f, folder / f.name)
        elif f.name != "zsdr.json":
            shutil.copy(f, folder / f.name)
    (folder / ".zsdr-output.json").unlink(missing_ok=True)   # a folder put together by hand, not one zsdr wrote
    with pytest.raises(DataError, match="zsdr.json: soft tokens .* not in the tokenizer") as err:
        Encoder.from_pretrained(folder)
    assert "add_soft_tokens" in err.value.fix
    (folder / "zsdr.json").write_text(json.dumps({"soft_tokens": {"k": 1, "domain": "x"}}))
    with pytest.raises(DataError, match="zsdr.json: unknown soft_tokens settings"):
        Encoder.from_pretrained(folder)
