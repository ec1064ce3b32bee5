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
from zsdr.models.st_files import ST_MODULES, st_loads, st_refusal
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
    assert "zsdr export" in st_refusal(folder)  # the folder's weights alone are the bare DAM
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
    assert "zsdr export" in st_refusal(folder)  # the plain tokenizer would leave the soft tokens out
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
    assert "TCT-ColBERT" in st_refusal(folder) and not st_loads(folder)
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
    assert "| this folder, loaded as it is | 0.2500 | 0.5000 |" in card  # the source first, then the targets
    assert "`dpr-berm` load it so" in card and "(table 1's system" not in card
    assert "BERM: Xu et al., ACL 2023" in card and '"r2_weight": 0.1' in card
    assert "at most 30 tokens" in card and "model.max_seq_length = 12" in card
    index = json.loads((tmp_path / "results" / "model_cards.json").read_text())
    assert index["cards"][str(folder)]["scores"] == {"dpr-berm": {"src": 0.25, "alpha": 0.5}}


# ------------------------------------------------------------------ every kind of folder, everywhere
def folder_of_kind(tiny, tmp_path, kind: str):
    """A trained folder of each kind the pipeline writes: plain, ANCE head, DDR (DAM + REM), RMSC (soft tokens)."""
    if kind == "plain":
        return perturbed(Encoder.from_pretrained(tiny["bert"], **SETTINGS)).save_pretrained(tmp_path / kind)
    if kind == "ance":
        enc = Encoder.from_pretrained(tiny["roberta"], **{**SETTINGS, "pooling": "cls_linear_ln",
                                                          "similarity": "dot"}, head="new")
        with torch.no_grad():
            enc.head.norm.weight.uniform_(0.5, 1.5)
        return perturbed(enc).save_pretrained(tmp_path / kind)
    if kind == "rem":
        enc = Encoder.from_pretrained(tiny["roberta"], **SETTINGS).add_rem(BOTH)
        perturb(enc.rem, seed=1)
        return enc.save_pretrained(tmp_path / kind)
    enc = perturbed(Encoder.from_pretrained(tiny["bert"], **SETTINGS)).add_soft_tokens(k=1, seed=2)
    return enc.save_pretrained(tmp_path / kind)


KINDS = ["plain", "ance", "rem", "soft"]


@pytest.mark.parametrize("kind", KINDS)
def test_sentence_transformers_reproduces_or_refuses_every_kind_of_folder(tiny, tmp_path, kind):
    """SentenceTransformer(folder) either gives zsdr's vectors or refuses the folder naming `zsdr export`;
    it never loads a DDR or RMSC folder without its REM or soft tokens."""
    folder = folder_of_kind(tiny, tmp_path, kind)
    enc = Encoder.from_pretrained(folder)
    docs = [{"title": "t", "text": "alpha beta gamma delta " * 3}, {"title": "", "text": "epsilon zeta eta"}]
    st = pytest.importorskip("sentence_transformers")
    try:
        model = st.SentenceTransformer(str(folder), device="cpu")
    except ImportError as exc:
        assert kind in ("rem", "soft"), exc
        assert "zsdr export" in str(exc) and str(folder) in str(exc)
        return
    assert kind in ("plain", "ance"), "sentence-transformers loaded a folder it cannot encode as zsdr does"
    assert cosines(model.encode([text(d) for d in docs]), enc.encode_docs(docs)).min() > MIN_COSINE


@pytest.mark.parametrize("kind", KINDS)
def test_zsdr_reads_its_own_exports_with_their_settings_and_runs_no_code(tiny, tmp_path, kind, monkeypatch):
    folder = folder_of_kind(tiny, tmp_path, kind)
    out = export_model(folder, tmp_path / "export")
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("asked on stdin"))
    exported, original = Encoder.from_pretrained(out), Encoder.from_pretrained(folder)
    # the export's own settings, not the sentence-transformers files' single length (the documents')
    assert exported.config.query_max_length == SETTINGS["query_max_length"]
    assert exported.config.soft_tokens is None  # its tokenizer writes them
    docs = [{"title": "t", "text": "alpha beta gamma delta " * 9}, {"title": "", "text": "epsilon zeta eta"}]
    queries = ["alpha beta gamma " * 8, "delta"]
    assert cosines(exported.encode_docs(docs), original.encode_docs(docs)).min() > MIN_COSINE
    assert cosines(exported.encode_queries(queries), original.encode_queries(queries)).min() > MIN_COSINE
    info = json.loads((out / EXPORT_FILE).read_text())
    assert info["rem"] == (str(folder / "rem") if kind == "rem" else None)
    assert info["trust_remote_code"] == (kind == "rem")


def test_an_exported_ddr_folder_searched_with_no_settings_scores_the_pipelines_run(tiny, ddr, tmp_path):
    from zsdr.cli import main

    folder, _, _ = ddr
    out = export_model(folder, tmp_path / "export")
    runs = {}
    for name, model in (("pipeline", folder), ("export", out)):
        path = tmp_path / f"{name}.trec"
        assert main(["encode-search", "--model", str(model), "--dataset", str(tiny["data"]), "--out", str(path),
                     "--quiet"]) == 0
        runs[name] = sorted(line.split()[:5] for line in path.read_text().splitlines())
    assert [r[:3] for r in runs["export"]] == [r[:3] for r in runs["pipeline"]]
    assert np.allclose([float(r[4]) for r in runs["export"]], [float(r[4]) for r in runs["pipeline"]], atol=1e-4)


def test_code_a_folder_asks_for_runs_only_with_the_flag(tiny, ddr, tmp_path, monkeypatch, capsys):
    """A folder not written by zsdr whose config.json names its own code: one line, never a question on
    stdin; --trust-remote-code runs it."""
    import shutil

    from zsdr.cli import main

    folder, docs, _ = ddr
    foreign = tmp_path / "foreign"
    shutil.copytree(export_model(folder, tmp_path / "export"), foreign)
    (foreign / EXPORT_FILE).unlink()  # no longer zsdr's own export: only its code knows the adapter
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("asked on stdin"))
    with pytest.raises(DataError, match="asks to run the checkpoint's own code.*--trust-remote-code"):
        Encoder.from_pretrained(foreign)
    args = ["encode-search", "--model", str(foreign), "--dataset", str(tiny["data"]), "--out",
            str(tmp_path / "run.trec"), "--quiet", "--max-length", "40"]
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--trust-remote-code" in err
    assert main([*args, "--trust-remote-code"]) == 0
    trusted = Encoder.from_pretrained(foreign, trust_remote_code=True, max_length=40)
    assert cosines(trusted.encode_docs(docs), Encoder.from_pretrained(folder).encode_docs(docs)).min() > MIN_COSINE


def test_export_writes_its_own_card_and_metadata(tiny, ddr, tmp_path):
    from zsdr.models.cards import write_cards

    folder, _, _ = ddr
    trained = tmp_path / "models" / "trained" / "ddr-x"
    import shutil

    shutil.copytree(folder, trained)
    (trained / "training.json").write_text(json.dumps({"init": "../../dams/x", "steps": 4, "recipe": {}}))
    files = {}
    for dataset, value in (("src", 0.25), ("alpha", 0.5), ("alpha-own", 0.55)):
        path = tmp_path / "metrics" / f"{dataset}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"aggregate": {"ndcg@10": value}}))
        files[dataset] = str(path)
    entry = {"run": "ddr-x", "recipe": "ddr-x", "paper": "ddr", "sections": {},
             "metrics": {"ddr-x": {"src": files["src"], "alpha": files["alpha"]}},
             "own": {"src": files["src"], "alpha": files["alpha-own"]},
             "why": {"ddr-x": "the REM on each dataset's own DAM"}}
    write_cards({str(trained): entry}, "ndcg@10", "mini", "src", tmp_path / "cards.json")
    card = (trained / "README.md").read_text()
    assert "| this folder, loaded as it is | 0.2500 | 0.5500 |" in card
    assert "| `ddr-x` (table 1's system: the REM on each dataset's own DAM) | 0.2500 | 0.5000 |" in card
    assert "sentence-transformers refuses this folder" in card and "library_name: transformers" in card
    assert json.loads((tmp_path / "cards.json").read_text())["cards"][str(trained)]["own"] == {"src": 0.25,
                                                                                                "alpha": 0.55}
    out = export_model(trained, tmp_path / "exported")
    exported = (out / "README.md").read_text()
    assert exported != card
    front = exported.split("---")[1]
    assert "library_name: sentence-transformers" in front and "base_model" not in front
    assert "rem=" not in exported and "trust_remote_code=True" in exported
    assert "| the exported folder (and this one) | 0.2500 | 0.5500 |" in exported  # the folder's own scores
    info = json.loads((out / EXPORT_FILE).read_text())
    assert info["rem"] == str(trained / "rem") and info["lora_merged"] and info["encoder"]["pooling"] == "mean"
