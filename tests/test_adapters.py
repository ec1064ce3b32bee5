"""DDR's REM: LoRA + parallel adapter over a frozen backbone; attach, train, merge, save, move between DAMs."""

import json

import numpy as np
import pytest
import torch

from tests.test_encoder import TINY, docs_of, make_dataset
from zsdr.io import DataError
from zsdr.models.adapters import (ParallelAdapter, Rem, RemConfig, architecture, attach_rem, count_parameters,
                                  encoder_layers, load_rem)
from zsdr.models.encoder import Encoder, EncoderConfig, load_encoder
from zsdr.models.tiny import build_tiny_backbone

BOTH = RemConfig(lora_r=4, adapter_bottleneck=8)
CONFIGS = {"lora": RemConfig(lora_r=4), "adapter": RemConfig(adapter_bottleneck=8), "both": BOTH}


@pytest.fixture(scope="module")
def dams(tmp_path_factory):
    """Tiny BERT and RoBERTa backbones, and a second BERT (same tokenizer, other weights): another DAM."""
    root = tmp_path_factory.mktemp("dams")
    data = make_dataset(root / "data", docs=20, queries=4)
    out = {"data": data, "docs": docs_of(data)[:6]}
    for name, kind, seed in (("bert", "bert", 3), ("bert2", "bert", 11), ("roberta", "roberta", 3)):
        build_tiny_backbone(kind, [data], root / name, TINY, vocab_size=300, seed=seed)
        out[name] = root / name
    return out


def perturb(rem: Rem, seed: int = 0, scale: float = 0.3) -> None:
    """Random values in every REM weight (LoRA B and the adapters' up-projections start at zero)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in rem.named_rem_parameters():
            p.add_(torch.randn(p.shape, generator=generator) * scale)


def rem_names(enc: Encoder) -> set[str]:
    names = {f"backbone.{n}" for n, _ in enc.rem.named_lora_parameters()}
    if enc.rem.adapters is not None:
        names |= {f"rem.{n}" for n, _ in enc.rem.adapters.named_parameters(prefix="adapters")}
    return names


def with_rem(path, config=BOTH, seed=0, **kw) -> Encoder:
    enc = Encoder.from_pretrained(path, pooling="mean", similarity="dot", **kw).add_rem(config)
    perturb(enc.rem, seed)
    return enc


# -------------------------------------------------------------------------------- config
def test_rem_config_validation_and_round_trip():
    cfg = RemConfig(lora_r=8, lora_alpha=16, adapter_bottleneck=4, lora_targets=["query", "key"])
    assert cfg.lora_targets == ("query", "key") and cfg.alpha == 16.0
    assert RemConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert RemConfig(lora_r=6).alpha == 6.0
    with pytest.raises(DataError, match=r"unknown REM settings \['bottleneck', 'rank'\]"):
        RemConfig.from_dict({"rank": 4, "bottleneck": 2})
    with pytest.raises(ValueError, match="needs LoRA"):
        RemConfig()
    for bad in ({"lora_r": -1}, {"lora_r": 2.5}, {"adapter_bottleneck": True}, {"lora_r": 4, "lora_alpha": 0},
                {"lora_r": 4, "lora_dropout": 1.0}, {"adapter_bottleneck": 4, "adapter_scaling": -1},
                {"lora_r": 4, "lora_targets": "query"}, {"lora_r": 4, "lora_targets": []}):
        with pytest.raises(ValueError):
            RemConfig(**bad)
    # the model folder's zsdr.json names its REM
    assert EncoderConfig.from_dict({"pooling": "cls", "rem": "rem", "version": 1}).pooling == "cls"


# ----------------------------------------------------------------------------- the maths
def test_parallel_adapter_matches_hand_computation():
    pa = ParallelAdapter(3, 2, scaling=4.0)
    assert torch.equal(pa.up.weight, torch.zeros(3, 2)) and torch.equal(pa.up.bias, torch.zeros(3))
    assert torch.equal(pa.down.bias, torch.zeros(2)) and pa.down.weight.abs().sum() > 0
    assert torch.equal(pa(torch.randn(5, 3)), torch.zeros(5, 3))  # a fresh adapter adds nothing
    with torch.no_grad():
        pa.down.weight.copy_(torch.tensor([[1.0, -1.0, 0.0], [0.5, 0.5, 0.5]]))
        pa.down.bias.copy_(torch.tensor([0.0, -1.0]))
        pa.up.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0], [-1.0, 1.0]]))
        pa.up.bias.copy_(torch.tensor([0.1, 0.2, 0.3]))
    # down: [1 - 2, 0.5 + 1 + 1.5 - 1] = [-1, 2]; relu: [0, 2]; up: [0, 4, 2] + b = [0.1, 4.2, 2.3]; x4
    want = torch.tensor([[0.4, 16.8, 9.2]])
    torch.testing.assert_close(pa(torch.tensor([[1.0, 2.0, 3.0]])), want)
    assert sum(p.numel() for p in ParallelAdapter(768, 192).parameters()) == 768 * 192 + 192 + 192 * 768 + 768


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_hooked_layer_is_layernorm_of_ffn_plus_adapter_plus_residual(dams, kind):
    enc = with_rem(dams[kind]).eval()
    feats = enc.tokenize_docs(dams["docs"][:3])
    batch = enc.collate(feats)
    seen = {}
    for i, layer in enumerate(encoder_layers(enc.backbone)):
        layer.intermediate.register_forward_hook(lambda m, a, out, i=i: seen.update({("x", i): a[0], ("h", i): out}))
        layer.output.register_forward_hook(lambda m, a, out, i=i: seen.update({("out", i): out}))
    with torch.no_grad():
        enc(**batch)
        for i, layer in enumerate(encoder_layers(enc.backbone)):
            x, h, pa, ffn_out = seen["x", i], seen["h", i], enc.rem.adapters[i], layer.output
            adapter = 4.0 * (x @ pa.down.weight.T + pa.down.bias).relu() @ pa.up.weight.T + 4.0 * pa.up.bias
            want = ffn_out.LayerNorm(h @ ffn_out.dense.weight.T + ffn_out.dense.bias + adapter + x)
            assert adapter.abs().max() > 1e-2  # the adapter does contribute
            torch.testing.assert_close(seen["out", i], want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_fresh_rem_leaves_the_dam_unchanged_and_merging_changes_nothing(dams, kind):
    docs = dams["docs"]
    enc = Encoder.from_pretrained(dams[kind], pooling="mean", similarity="dot")
    bare = enc.encode_docs(docs)
    keys = list(enc.backbone.state_dict())
    enc.add_rem(BOTH)
    assert np.array_equal(enc.encode_docs(docs), bare)  # LoRA B = 0, adapter up = 0
    perturb(enc.rem)
    unmerged = enc.encode_docs(docs)
    assert np.abs(unmerged - bare).max() > 1e-2
    enc.merge_rem()
    assert enc.rem.lora_merged and not list(enc.rem.named_lora_parameters())
    assert list(enc.backbone.state_dict()) == keys  # merged: the plain model's keys again
    np.testing.assert_allclose(enc.encode_docs(docs), unmerged, atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "cls_linear_ln"])
def test_training_step_reaches_rem_parameters_only(dams, pooling):
    head = "new" if pooling == "cls_linear_ln" else None  # a DAM has no ANCE head: start one on purpose
    enc = Encoder.from_pretrained(dams["bert"], pooling=pooling, similarity="dot", head=head).add_rem(BOTH)
    perturb(enc.rem)
    trainable = [n for n, p in enc.named_parameters() if p.requires_grad]
    assert set(trainable) == rem_names(enc) and len(trainable) == len(set(trainable))
    assert len(trainable) == 2 * 2 * 2 + 2 * 4  # 2 layers x (query, value) x (A, B) + 2 adapters x 4
    enc.train()
    batch = enc.collate(enc.tokenize_queries(["w1 w2 protein", "Alpha gene w7 w8"]))
    emb = enc(**batch)
    loss = -torch.log_softmax(emb @ emb.T, dim=1).diagonal().mean() + emb.pow(2).mean()
    loss.backward()
    rem_ids = {id(p) for _, p in enc.rem.named_rem_parameters()}
    for name, p in enc.named_parameters():
        if id(p) in rem_ids:
            assert p.grad is not None and p.grad.abs().max() > 0, name
        else:
            assert p.grad is None, name
    opt = torch.optim.SGD([p for p in enc.parameters() if p.requires_grad], lr=0.1)
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == enc.rem.parameter_counts()["trainable"]


# -------------------------------------------------------------------- save / load / move
def test_saved_rem_plugs_into_another_dam_and_back(dams, tmp_path):
    docs = dams["docs"]
    enc = with_rem(dams["bert"])
    first = enc.encode_docs(docs)
    folder = enc.rem.save(tmp_path / "rem")
    info = json.loads((folder / "rem.json").read_text())
    assert info["architecture"] == {"model_type": "bert", "hidden_size": 32, "num_layers": 2}
    assert info["config"] == BOTH.to_dict() and info["parameters"]["lora"] == 2 * 2 * (32 * 4 + 4 * 32)
    counts = enc.rem.parameter_counts()
    assert info["train_pct"] == counts["train_pct"] and info["infer_pct"] == counts["infer_pct"] > 0
    assert {p.name for p in folder.iterdir()} == {"adapter_config.json", "adapter_model.safetensors",
                                                  "parallel_adapter.safetensors", "rem.json", ".zsdr-output.json"}

    other_bare = Encoder.from_pretrained(dams["bert2"], pooling="mean", similarity="dot").encode_docs(docs)
    state = torch.get_rng_state()
    other = Encoder.from_pretrained(dams["bert2"], pooling="mean", similarity="dot", rem=folder, merge_rem=False)
    assert torch.equal(torch.get_rng_state(), state)  # loading draws nothing from the global RNG
    moved = other.encode_docs(docs)
    assert np.abs(moved - other_bare).max() > 1e-2 and np.abs(moved - first).max() > 1e-2

    back = Encoder.from_pretrained(dams["bert"], pooling="mean", similarity="dot", rem=folder, merge_rem=False)
    assert {n for n, p in back.named_parameters() if p.requires_grad} == rem_names(back)  # unmerged: trainable
    assert np.array_equal(back.encode_docs(docs), first)
    merged = load_encoder(dams["bert"], pooling="mean", similarity="dot", rem=folder)
    assert merged.rem.lora_merged and not any(p.requires_grad for p in merged.parameters())
    np.testing.assert_allclose(merged.encode_docs(docs), first, atol=1e-5)
    with pytest.raises(ValueError, match="load_rem"):
        load_encoder(merged, rem=folder)


@pytest.mark.parametrize("kind,part", [("bert", "both"), ("bert", "lora"), ("bert", "adapter"), ("roberta", "both")])
def test_encoder_save_writes_bare_dam_and_rem(dams, tmp_path, kind, part):
    from safetensors import safe_open

    docs = dams["docs"]
    enc = with_rem(dams[kind], CONFIGS[part])
    live = enc.encode_docs(docs)
    plain_keys = set(Encoder.from_pretrained(dams[kind], pooling="cls", similarity="dot").backbone.state_dict())
    out = enc.save_pretrained(tmp_path / "model")
    assert json.loads((out / "zsdr.json").read_text())["rem"] == "rem"
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        assert set(f.keys()) == plain_keys  # the DAM alone, under the plain model's keys
    assert np.array_equal(enc.encode_docs(docs), live)  # saving did not touch the live model
    assert set(n for n, p in enc.named_parameters() if p.requires_grad) == rem_names(enc)

    dam = Encoder.from_pretrained(out, rem=False)
    assert dam.rem is None
    assert np.array_equal(dam.encode_docs(docs), Encoder.from_pretrained(dams[kind], pooling="mean", similarity="dot").encode_docs(docs))
    np.testing.assert_allclose(Encoder.from_pretrained(out).encode_docs(docs), live, atol=1e-5)
    unmerged = Encoder.from_pretrained(out, merge_rem=False)
    assert np.array_equal(unmerged.encode_docs(docs), live)
    unmerged.save_pretrained(tmp_path / "again")  # an unmerged loaded REM saves again
    assert np.array_equal(Encoder.from_pretrained(tmp_path / "again", merge_rem=False).encode_docs(docs), live)
    assert not list(tmp_path.glob(".*"))


# ------------------------------------------------------------------------------ accounting
@pytest.mark.parametrize("config,trainable,extra", [
    (RemConfig(lora_r=192), 6.5, 0.0),
    (RemConfig(adapter_bottleneck=192), 3.2, 3.2),
    (RemConfig(lora_r=192, adapter_bottleneck=192), 9.7, 3.2),
    (RemConfig(lora_r=96), 3.2, 0.0),
])
def test_parameter_shares_match_ddr_table5(config, trainable, extra):
    from transformers import BertConfig, BertModel

    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        backbone = BertModel(BertConfig(), add_pooling_layer=False)
    n = sum(p.numel() for p in backbone.parameters())
    rem = attach_rem(backbone, config)
    counts = count_parameters(backbone, rem)
    assert counts["backbone"] == n
    assert counts["lora"] == 12 * 2 * 2 * 768 * config.lora_r
    assert counts["adapter"] == 12 * (2 * 768 * config.adapter_bottleneck + config.adapter_bottleneck + 768) * \
        bool(config.adapter_bottleneck)
    assert counts["trainable"] == sum(p.numel() for p in backbone.parameters() if p.requires_grad) + \
        (sum(p.numel() for p in rem.adapters.parameters()) if rem.adapters is not None else 0)
    assert abs(counts["train_pct"] - trainable) < 0.1 and abs(counts["infer_pct"] - extra) < 0.1
    assert rem.merge().parameter_counts() == counts  # LoRA merged: still reported, no extra at inference


# ----------------------------------------------------------------------------------- errors
def test_clear_errors(dams, tmp_path):
    from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel

    enc = with_rem(dams["bert"])
    folder = enc.rem.save(tmp_path / "rem")
    with pytest.raises(ValueError, match="already has a REM"):
        enc.add_rem(BOTH)
    wide = BertModel(BertConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                vocab_size=50), add_pooling_layer=False)
    with pytest.raises(DataError, match=r"hidden_size 32 \(this backbone: 48\)"):
        load_rem(wide, folder)
    deep = BertModel(BertConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64,
                                vocab_size=50), add_pooling_layer=False)
    with pytest.raises(DataError, match=r"num_layers 2 \(this backbone: 3\)"):
        load_rem(deep, folder)
    distil = DistilBertModel(DistilBertConfig(dim=32, n_layers=1, n_heads=2, hidden_dim=64, vocab_size=50))
    with pytest.raises(ValueError, match="distilbert"):
        attach_rem(distil, BOTH)
    assert architecture(deep)["num_layers"] == 3

    from safetensors.torch import load_file, save_file

    pa_file = folder / "parallel_adapter.safetensors"
    weights = load_file(str(pa_file))
    save_file({k: v for k, v in weights.items() if k != "1.up.bias"}, str(pa_file))
    fresh = Encoder.from_pretrained(dams["bert"], pooling="cls", similarity="dot")
    with pytest.raises(DataError, match="1.up.bias: saved None, expected"):
        fresh.load_rem(folder)
    assert fresh.rem is None and not hasattr(fresh.backbone, "peft_config")  # checked before any change
    assert all(p.requires_grad for p in fresh.parameters())
    save_file(weights, str(pa_file))

    rem_json = folder / "rem.json"
    info = json.loads(rem_json.read_text())
    rem_json.write_text(json.dumps({**info, "config": {**info["config"], "rank": 3}}))
    with pytest.raises(DataError, match=r"unknown REM settings \['rank'\]"):
        Encoder.from_pretrained(dams["bert"], pooling="cls", similarity="dot", rem=folder)

    enc.merge_rem()
    with pytest.raises(ValueError, match="merged"):
        enc.save_pretrained(tmp_path / "model")
    with pytest.raises(ValueError, match="merged"):
        enc.rem.save(tmp_path / "rem2")
    assert not (tmp_path / "model").exists() and not (tmp_path / "rem2").exists()
    with pytest.raises(ValueError, match="no REM"):
        Encoder.from_pretrained(dams["bert"], pooling="cls", similarity="dot").merge_rem()
