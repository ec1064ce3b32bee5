"""Model folders outside the pipeline: no-argument loading, sentence-transformers, `zsdr export`.

Every check compares against the embeddings the pipeline's encode job writes
(:func:`zsdr.retrieval.encode.encode_corpus_shard` with the options the plan gives it).
"""

import json
import os

import numpy as np
import pytest
import torch

from tests.test_adapters import BOTH, perturb
from tests.test_encoder import TINY, make_dataset
from zsdr.io import DataError
from zsdr.models.encoder import Encoder
from zsdr.models.export import EXPORT_FILE, REM_CODE, export_model
from zsdr.models.st_files import ST_MODULES
from zsdr.models.tiny import build_tiny_backbone
from zsdr.retrieval.encode import encode_corpus_shard, load_embeddings

SETTINGS = dict(pooling="mean", similarity="cosine", query_max_length=12, doc_max_length=40)
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A small dataset, tiny BERT and RoBERTa backbones and a second RoBERTa (another DAM)."""
    root = tmp_path_factory.mktemp("export")
    data = make_dataset(root / "data", docs=24, queries=4)
    out = {"root": root, "data": data}
    for name, kind, seed in (("bert", "bert", 3), ("roberta", "roberta", 3), ("roberta2", "roberta", 11)):
        build_tiny_backbone(kind, [data], root / name, TINY, vocab_size=300, seed=seed)
        out[name] = root / name
    return out


def perturbed(enc: Encoder, seed: int = 0) -> Encoder:
    """Move every backbone weight a little, as training would (distinct from the backbone folder)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in enc.backbone.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.02)
    return enc


def pipeline(model, data, out, **options) -> tuple[list[dict], np.ndarray]:
    """The documents and the embeddings the pipeline's encode job writes for them, in corpus order."""
    encode_corpus_shard(model, data, out, dtype="float32", show_progress=False, **options)
    emb, ids, _ = load_embeddings(out)
    from zsdr.data.formats import read_corpus

    docs = read_corpus(data)
    return [docs[i] for i in ids], np.asarray(emb, dtype=np.float32)


def cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def text(doc: dict) -> str:
    """The string a sentence-transformers user passes for a title_space_text document."""
    return f"{doc.get('title') or ''} {doc['text']}".strip()


def sentence_transformer(folder, **kwargs):
    st = pytest.importorskip("sentence_transformers")
    return st.SentenceTransformer(str(folder), device="cpu", **kwargs)


def plain_hf(folder, docs, pooling: str, max_length: int, normalize: bool, remote: bool = False) -> np.ndarray:
    """AutoTokenizer + AutoModel on an exported folder, pooled as its card documents."""
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModel.from_pretrained(str(folder), trust_remote_code=remote).eval()
    batch = tok([text(d) for d in docs], padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    if pooling == "mean":
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1)
    else:
        pooled = hidden[:, 0]
    return torch.nn.functional.normalize(pooled, dim=-1).numpy() if normalize else pooled.numpy()


@pytest.mark.parametrize("kind,pooling,similarity", [("bert", "mean", "cosine"), ("roberta", "cls", "dot")])
def test_plain_encoder_folder_loads_everywhere_as_encoded(tiny, tmp_path, kind, pooling, similarity):
    settings = {**SETTINGS, "pooling": pooling, "similarity": similarity}
    folder = perturbed(Encoder.from_pretrained(tiny[kind], **settings)).save_pretrained(tmp_path / "model")
    assert (folder / ST_MODULES).is_file()
    docs, ref = pipeline(folder, tiny["data"], tmp_path / "emb")
    assert cosines(Encoder.from_pretrained(folder).encode_docs(docs), ref).min() > MIN_COSINE
    # a MoDIR / COCO-DR snapshot is the same kind of folder, written by the same save_pretrained
    snapshot = Encoder.from_pretrained(folder).save_pretrained(tmp_path / "model2" / "snapshots" / "step-000000010")
    assert cosines(Encoder.from_pretrained(snapshot).encode_docs(docs), ref).min() > MIN_COSINE

    st = sentence_transformer(folder)
    assert st.max_seq_length == settings["doc_max_length"]
    assert cosines(st.encode([text(d) for d in docs]), ref).min() > MIN_COSINE
    queries = ["alpha beta gamma " * 6, "delta"]
    st.max_seq_length = settings["query_max_length"]  # the card's query setting
    assert cosines(st.encode(queries), Encoder.from_pretrained(folder).encode_queries(queries)).min() > MIN_COSINE

    out = export_model(folder, tmp_path / "export")
    got = plain_hf(out, docs, pooling, settings["doc_max_length"], similarity == "cosine")
    assert cosines(got, ref).min() > MIN_COSINE


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
def test_ance_head_folder_loads_through_sentence_transformers(tiny, tmp_path, similarity):
    """ANCE's cls_linear_ln head: CLS pooling, a Dense module (identity) and a LayerNorm module."""
    enc = Encoder.from_pretrained(tiny["roberta"], **{**SETTINGS, "pooling": "cls_linear_ln",
                                                      "similarity": similarity}, head="new")
    with torch.no_grad():
        enc.head.norm.weight.uniform_(0.5, 1.5)
        enc.head.norm.bias.uniform_(-0.1, 0.1)
    folder = perturbed(enc).save_pretrained(tmp_path / "ance")
    docs, ref = pipeline(folder, tiny["data"], tmp_path / "emb")
    assert cosines(Encoder.from_pretrained(folder).encode_docs(docs), ref).min() > MIN_COSINE
    st = sentence_transformer(folder)
    got = st.encode([text(d) for d in docs])
    assert cosines(got, ref).min() > MIN_COSINE
    if similarity == "dot":  # the same vectors, not only the same directions
        assert np.allclose(got, ref, atol=1e-4)
    out = export_model(folder, tmp_path / "export")
    assert cosines(sentence_transformer(out).encode([text(d) for d in docs]), ref).min() > MIN_COSINE


@pytest.fixture
def ddr(tiny, tmp_path):
    """A trained DDR folder (DAM + REM with LoRA and a parallel adapter) and the pipeline's embeddings of
    its REM on another DAM (the options the plan gives a target's encode job)."""
    enc = Encoder.from_pretrained(tiny["roberta"], **SETTINGS).add_rem(BOTH)
    perturb(enc.rem, seed=1)
    folder = enc.save_pretrained(tmp_path / "ddr")
    docs, ref = pipeline(tiny["roberta2"], tiny["data"], tmp_path / "emb", rem=folder / "rem", **SETTINGS)
    return folder, docs, ref


def test_dam_with_rem_loads_with_no_arguments(tiny, ddr, tmp_path):
    folder, docs, ref = ddr
    assert json.loads((folder / "rem" / "rem.json").read_text())["encoder"]["pooling"] == "mean"
    assert not (folder / ST_MODULES).exists()  # the folder's weights alone are the bare DAM
    enc = Encoder.from_pretrained(tiny["roberta2"], rem=folder / "rem")
    assert (enc.config.pooling, enc.config.query_max_length, enc.config.doc_max_length) == ("mean", 12, 40)
    assert cosines(enc.encode_docs(docs), ref).min() > MIN_COSINE
    # explicit arguments still win
    assert Encoder.from_pretrained(tiny["roberta2"], rem=folder / "rem", doc_max_length=20).config.doc_max_length == 20
    # a REM saved before rem.json recorded the settings: its model folder's zsdr.json says them
    info = json.loads((folder / "rem" / "rem.json").read_text())
    del info["encoder"]
    (folder / "rem" / "rem.json").write_text(json.dumps(info))
    assert Encoder.from_pretrained(tiny["roberta2"], rem=folder / "rem").config.doc_max_length == 40


def test_exported_rem_reproduces_the_pipeline(tiny, ddr, tmp_path):
    folder, docs, ref = ddr
    out = export_model(tiny["roberta2"], tmp_path / "export", rem=folder / "rem")
    assert (out / REM_CODE).is_file() and json.loads((out / EXPORT_FILE).read_text())["trust_remote_code"]
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "zsdr-rem-roberta" and not str(config.get("_name_or_path", "")).startswith("/")
    got = plain_hf(out, docs, "mean", SETTINGS["doc_max_length"], True, remote=True)
    assert cosines(got, ref).min() > MIN_COSINE
    st = sentence_transformer(out, trust_remote_code=True)
    assert cosines(st.encode([text(d) for d in docs]), ref).min() > MIN_COSINE
    # without trust_remote_code transformers refuses the folder rather than dropping the adapter
    from transformers import AutoModel

    with pytest.raises(ValueError, match="trust_remote_code"):
        AutoModel.from_pretrained(str(out))
    # the model's own REM is exported without --rem
    own = export_model(folder, tmp_path / "own")
    own_docs, own_ref = pipeline(folder, tiny["data"], tmp_path / "emb-own")  # the REM on its training DAM
    assert cosines(plain_hf(own, own_docs, "mean", 40, True, remote=True), own_ref).min() > MIN_COSINE


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_soft_token_model_exports_its_inference_context(tiny, tmp_path, kind):
    enc = perturbed(Encoder.from_pretrained(tiny[kind], **SETTINGS)).add_soft_tokens(k=1, seed=2)
    folder = enc.save_pretrained(tmp_path / "rmsc")
    assert not (folder / ST_MODULES).exists()  # the plain tokenizer would leave the soft tokens out
    docs, ref = pipeline(folder, tiny["data"], tmp_path / "emb")
    assert cosines(Encoder.from_pretrained(folder).encode_docs(docs), ref).min() > MIN_COSINE
    out = export_model(folder, tmp_path / "export")
    assert json.loads((out / EXPORT_FILE).read_text())["soft_token_context"] == ["target", "human"]
    assert cosines(plain_hf(out, docs, "mean", SETTINGS["doc_max_length"], True), ref).min() > MIN_COSINE
    st = sentence_transformer(out)
    assert cosines(st.encode([text(d) for d in docs]), ref).min() > MIN_COSINE


def test_export_errors(tiny, tmp_path):
    from zsdr.cli import main

    folder = Encoder.from_pretrained(tiny["bert"], pooling="mean", similarity="dot", pool_skip=1,
                                     special_tokens=False).save_pretrained(tmp_path / "tct")
    assert not (folder / ST_MODULES).exists()
    with pytest.raises(DataError, match="cannot export: TCT-ColBERT"):
        export_model(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    plain = Encoder.from_pretrained(tiny["bert"], **SETTINGS).save_pretrained(tmp_path / "plain")
    assert main(["export", str(plain), str(tmp_path / "x")]) == 0
    assert main(["export", str(plain), str(tmp_path / "x")]) == 1  # exists: --force replaces it
    assert main(["export", str(plain), str(tmp_path / "x"), "--force"]) == 0
    assert main(["export", str(plain), str(tmp_path / "y"), "--rem", str(tmp_path / "nope")]) == 1


def test_retrieval_settings_apply_on_load_and_reach_st_and_the_rem(tiny, tmp_path):
    """A recipe's `system:` settings (what its retrieval system encodes with) are saved beside the
    training settings: loading applies them, a recipe continuing from the model does not."""
    enc = Encoder.from_pretrained(tiny["roberta"], **SETTINGS)
    enc.retrieval = {"doc_max_length": 30}
    folder = enc.save_pretrained(tmp_path / "model")
    assert json.loads((folder / "zsdr.json").read_text())["doc_max_length"] == 40
    assert Encoder.from_pretrained(folder).config.doc_max_length == 30
    assert Encoder.from_pretrained(folder, retrieval=False).config.doc_max_length == 40
    assert Encoder.from_pretrained(folder, doc_max_length=20).config.doc_max_length == 20
    assert json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"] == 30
    # saved again after a plain load: the training settings stay those, the retrieval ones stay apart
    again = Encoder.from_pretrained(folder).save_pretrained(tmp_path / "again")
    saved = json.loads((again / "zsdr.json").read_text())
    assert (saved["doc_max_length"], saved["retrieval"]) == (40, {"doc_max_length": 30})
    with_rem = Encoder.from_pretrained(folder, retrieval=False).add_rem(BOTH)
    with_rem.retrieval = {"doc_max_length": 30}
    ddr = with_rem.save_pretrained(tmp_path / "ddr")
    assert json.loads((ddr / "rem" / "rem.json").read_text())["encoder"]["doc_max_length"] == 30
    assert Encoder.from_pretrained(tiny["roberta2"], rem=ddr / "rem").config.doc_max_length == 30


def test_model_card_from_training_metadata_and_metrics(tiny, tmp_path):
    from zsdr.models.cards import write_cards

    enc = Encoder.from_pretrained(tiny["bert"], **SETTINGS)
    enc.retrieval = {"doc_max_length": 30}
    folder = enc.save_pretrained(tmp_path / "models" / "trained" / "dpr-berm")
    (folder / "training.json").write_text(json.dumps({
        "steps": 50, "processes": 1, "global_batch": 8, "examples": 100, "init": str(tiny["bert"]),
        "dataset": "data/src", "negatives": "data/src/negatives.jsonl", "loss": "pairwise_nll",
        "negatives_per_query": 1, "train": {"batch_size": 8, "grad_accum": 1, "lr": 1e-4, "optimizer": "adamw",
                                            "schedule": "linear", "warmup_steps": 5},
        "recipe": {"recipe": "dpr-berm", "episode": 1, "episodes": 1, "description": "DPR + BERM",
                   "provenance": "test"}}))
    metrics = {}
    for dataset, value in (("src", 0.25), ("alpha", 0.5)):
        path = tmp_path / "metrics" / dataset / "dpr-berm.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"aggregate": {"ndcg@10": value}}))
        metrics[dataset] = str(path)
    entry = {"run": "dpr-berm", "recipe": "dpr-berm", "paper": "berm", "description": "DPR + BERM",
             "sections": {"berm": {"r1_weight": 1.0, "r2_weight": 0.1}}, "metrics": {"dpr-berm": metrics}}
    write_cards({str(folder): entry}, "ndcg@10", "mini", "src", tmp_path / "results" / "model_cards.json")
    card = (folder / "README.md").read_text()
    front = card.split("---")[1]
    assert "library_name: sentence-transformers" in front and "pipeline_tag: sentence-similarity" in front
    assert f"base_model: {os.path.relpath(tiny['bert'], folder)}" in front
    assert "| `dpr-berm` | 0.2500 | 0.5000 |" in card  # the source first, then the targets
    assert "BERM: Xu et al., ACL 2023" in card and '"r2_weight": 0.1' in card
    assert "at most 30 tokens" in card and "model.max_seq_length = 12" in card
    index = json.loads((tmp_path / "results" / "model_cards.json").read_text())
    assert index["cards"][str(folder)]["scores"] == {"dpr-berm": {"src": 0.25, "alpha": 0.5}}
