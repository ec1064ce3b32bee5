"""Every ``zsdr`` command against damaged, foreign and repeated inputs of every artifact kind: each is refused
with one line naming the file (or argument) and a fix, never an "unexpected" error, and nothing is written.

The artifacts are tiny and made without a model where they can be (embeddings folders are written from arrays,
with the provenance a real encode records); every command runs in this process (tests.test_reliability.zsdr)."""

import json
import os
import shutil

import numpy as np
import pytest

from .test_formats import make_dataset
from .test_reliability import the_error_line, zsdr

DIM = 4


def _embeddings(folder, ds, ids, seed, model_sha="m" * 64, start=None, total=None):
    """An embeddings folder of ``ids`` (random rows) recording ``ds``'s corpus and a model digest, as an encode
    job writes it (``start``: a range shard of a corpus of ``total`` rows)."""
    from zsdr.provenance import corpus_identity
    from zsdr.retrieval.encode import write_query_embeddings

    extra = {} if start is None else {"assignment": "range", "start": start, "stop": start + len(ids), "shard": 0,
                                      "num_shards": 1}
    rows = np.random.default_rng(seed).standard_normal((len(ids), DIM)).astype(np.float32)
    return write_query_embeddings(folder, ids, rows, corpus=corpus_identity(ds), model="m", model_sha256=model_sha,
                                  encoder={"pooling": "cls", "similarity": "dot"}, **extra)


def _model(folder):
    """A model folder as zsdr writes one (stamped): enough for the commands' checks before any loading."""
    from safetensors.numpy import save_file

    from zsdr.io import atomic_dir

    with atomic_dir(folder) as tmp:
        save_file({"w": np.arange(64, dtype=np.float32)}, str(tmp / "model.safetensors"))
        (tmp / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n", encoding="utf-8")
        (tmp / "config.json").write_text(json.dumps({"model_type": "bert"}), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Two datasets (alpha and beta: other documents), their query and corpus embeddings, shard top-k parts,
    runs, a store and a model, and damaged copies of each."""
    from zsdr.data.store import build_store
    from zsdr.retrieval.scatter import search_shard_topk
    from zsdr.retrieval.search import search_folders

    root = tmp_path_factory.mktemp("sweep")
    a = make_dataset(root / "alpha")
    b = make_dataset(root / "beta")
    corpus = (b / "corpus.jsonl").read_text(encoding="utf-8").replace('"d', '"beta-d')
    (b / "corpus.jsonl").write_text(corpus, encoding="utf-8")
    (b / "qrels" / "test.tsv").write_text((b / "qrels" / "test.tsv").read_text().replace("\td", "\tbeta-d"))
    docs_a, docs_b = ["d1", "d2", "d3"], ["beta-d1", "beta-d2", "beta-d3"]
    p = {"root": root, "a": a, "b": b}
    p["qa"] = _embeddings(root / "qa", a, ["q1", "q2"], 0)
    p["qb"] = _embeddings(root / "qb", b, ["q1", "q2"], 1)
    p["qa_other_model"] = _embeddings(root / "qa2", a, ["q1", "q2"], 0, model_sha="n" * 64)
    p["ea0"] = _embeddings(root / "ea0", a, docs_a[:2], 2, start=0)
    p["ea1"] = _embeddings(root / "ea1", a, docs_a[2:], 3, start=2)
    p["eb1"] = _embeddings(root / "eb1", b, docs_b[2:], 4, start=2)
    p["run_a"] = root / "run-a.trec"
    search_folders(p["qa"], [p["ea0"], p["ea1"]], p["run_a"], k=3)
    p["run_b"] = root / "run-b.trec"
    search_folders(p["qb"], [_embeddings(root / "eb", b, docs_b, 5)], p["run_b"], k=3)
    p["pa0"] = search_shard_topk(p["qa"], p["ea0"], root / "pa0.npz", k=3)
    p["pa1"] = search_shard_topk(p["qa"], p["ea1"], root / "pa1.npz", k=3)
    p["pb1"] = search_shard_topk(p["qb"], p["eb1"], root / "pb1.npz", k=3)
    build_store(a)
    p["model"] = _model(root / "model")

    def damaged(name, src, change):
        out = root / name
        shutil.copytree(src, out) if src.is_dir() else shutil.copy2(src, out)
        target = out / change[0] if change[0] else out
        st = os.stat(target)
        change[1](target)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))   # the times kept: only the bytes tell
        return out

    def swap_rows(path):
        emb = np.load(path)
        emb[[0, 1]] = emb[[1, 0]]
        np.save(path, emb)

    def swap_ids(path):
        lines = path.read_text().splitlines()
        path.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")

    def cut(path):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    def flip(path):
        data = bytearray(path.read_bytes())
        data[-5] ^= 0x40   # one exponent bit of the last weight
        path.write_bytes(bytes(data))

    def no_checksums(path):
        meta = json.loads(path.read_text())
        del meta["checksums"]
        path.write_text(json.dumps(meta))

    def store_no_checksums(path):
        meta = json.loads(path.read_text())
        del meta["files"]
        path.write_text(json.dumps(meta))

    def garbage(path):
        path.write_text("{not json")

    p["ea0_rows"] = damaged("ea0-rows", p["ea0"], ("embeddings.npy", swap_rows))
    p["ea0_ids"] = damaged("ea0-ids", p["ea0"], ("ids.txt", swap_ids))
    p["ea0_cut"] = damaged("ea0-cut", p["ea0"], ("embeddings.npy", cut))
    p["ea0_nosum"] = damaged("ea0-nosum", p["ea0"], ("meta.json", no_checksums))
    p["ea0_meta"] = damaged("ea0-meta", p["ea0"], ("meta.json", garbage))
    p["qa_rows"] = damaged("qa-rows", p["qa"], ("embeddings.npy", swap_rows))
    p["pa1_cut"] = damaged("pa1-cut.npz", p["pa1"], (None, cut))
    p["run_cut"] = damaged("run-cut.trec", p["run_a"], (None, lambda f: f.write_bytes(f.read_bytes()[:-12])))
    p["model_flip"] = damaged("model-flip", p["model"], ("model.safetensors", flip))
    p["a_store_nosum"] = damaged("alpha-nosum", a, ("store/store.json", store_no_checksums))
    p["a_store_rows"] = damaged("alpha-rows", a, ("store/corpus.order.npy", swap_ids_npy))
    return p


def swap_ids_npy(path):
    order = np.load(path)
    order[[0, 1]] = order[[1, 0]]
    np.save(path, order)


# (name, argv with {placeholders}, what the one line must name)
CASES = [
    # a run of another corpus; a folder given for a run; a run cut short
    ("evaluate another corpus's run", "evaluate --qrels {a} --run {run_b}", "run-b.trec"),
    ("evaluate a run against a qrels file of another dataset", "evaluate --qrels {a}/qrels/test.tsv --run {run_b}",
     "run-b.trec"),
    ("evaluate a folder as the run", "evaluate --qrels {a} --run {ea0}", "ea0"),
    ("evaluate a run cut short", "evaluate --qrels {a} --run {run_cut}", "run-cut.trec"),
    # search: corpus mix, model mix, repeated shards, changed files, folders for files
    ("search queries of another dataset", "search --queries {qa} --shards {eb1} --out {root}/o.trec --gpu no --quiet", "eb1"),
    ("search shards of two corpora", "search --queries {qa} --shards {ea0} {eb1} --out {root}/o.trec --gpu no --quiet",
     "eb1"),
    ("search queries of another model", "search --queries {qa_other_model} --shards {ea0} {ea1} --out {root}/o.trec "
     "--gpu no --quiet", "ea0"),
    ("search a shard twice", "search --queries {qa} --shards {ea0} {ea0} --out {root}/o.trec --gpu no --quiet", "ea0"),
    ("search a copy of a shard", "search --queries {qa} --shards {ea0} {ea0_ids} --out {root}/o.trec --gpu no --quiet",
     "ea0"),
    ("search reordered rows", "search --queries {qa} --shards {ea0_rows} {ea1} --out {root}/o.trec --gpu no --quiet",
     "ea0-rows/embeddings.npy"),
    ("search shuffled ids", "search --queries {qa} --shards {ea0_ids} {ea1} --out {root}/o.trec --gpu no --quiet",
     "ea0-ids/ids.txt"),
    ("search embeddings cut short", "search --queries {qa} --shards {ea0_cut} {ea1} --out {root}/o.trec --gpu no --quiet",
     "ea0-cut/embeddings.npy"),
    ("search a record without checksums", "search --queries {qa} --shards {ea0_nosum} {ea1} --out {root}/o.trec "
     "--gpu no --quiet", "ea0-nosum/meta.json"),
    ("search a garbled record", "search --queries {qa} --shards {ea0_meta} {ea1} --out {root}/o.trec --gpu no --quiet",
     "ea0-meta/meta.json"),
    ("search changed queries", "search --queries {qa_rows} --shards {ea0} {ea1} --out {root}/o.trec --gpu no --quiet",
     "qa-rows/embeddings.npy"),
    ("search a file as a shard", "search --queries {qa} --shards {ea0}/meta.json --out {root}/o.trec --gpu no --quiet",
     "meta.json"),
    ("search-shard of another corpus", "search-shard --queries {qa} --shard {eb1} --out {root}/o.npz --gpu no --quiet", "eb1"),
    ("search-shard changed rows", "search-shard --queries {qa} --shard {ea0_rows} --out {root}/o.npz --gpu no --quiet",
     "ea0-rows/embeddings.npy"),
    # merge: repeated parts, parts of two corpora, a part cut short, a folder
    ("merge a part twice", "merge-shards --parts {pa0} {pa0} --out {root}/o.trec", "pa0.npz"),
    ("merge parts of two corpora", "merge-shards --parts {pa0} {pb1} --out {root}/o.trec", "pb1.npz"),
    ("merge a part cut short", "merge-shards --parts {pa0} {pa1_cut} --out {root}/o.trec", "pa1-cut.npz"),
    ("merge a folder as a part", "merge-shards --parts {pa0} {ea0} --out {root}/o.trec", "ea0"),
    # models: weights changed on disk, for every command that loads one
    ("encode a changed model", "encode --model {model_flip} --dataset {a} --out {root}/o", "model-flip"),
    ("encode-queries a changed model", "encode-queries --model {model_flip} --dataset {a} --out {root}/o",
     "model-flip"),
    ("encode-search a changed model", "encode-search --model {model_flip} --dataset {a} --out {root}/o.trec",
     "model-flip"),
    ("mine with a changed model", "mine {model_flip} {a} {root}/o.jsonl --shards {ea0}", "model-flip"),
    ("score-pairs with a changed model", "score-pairs {model_flip} {a} {run_a} {root}/o.tsv", "model-flip"),
    ("export a changed model", "export {model_flip} {root}/o", "model-flip"),
    # stores: a record without checksums, a file changed with its time kept
    ("validate a store without checksums", "validate {a_store_nosum}", "store.json"),
    ("validate a changed store", "validate {a_store_rows}", "corpus.order.npy"),
    ("stats over a file", "stats {run_a}", "run-a.trec"),
]


@pytest.mark.parametrize("name, argv, names", CASES, ids=[c[0] for c in CASES])
def test_every_command_refuses_damaged_foreign_and_repeated_inputs_in_one_line(made, capsys, name, argv, names):
    args = argv.format(**{k: str(v) for k, v in made.items()}).split()
    before = sorted(os.listdir(made["root"]))
    code, out, err = zsdr(capsys, *args)
    line = the_error_line(err)
    assert code in (1, 2), (name, code, err)
    assert "unexpected" not in line, line
    assert names in line and "(fix: " in line, line
    assert sorted(os.listdir(made["root"])) == before, f"{name}: something was written"


def test_the_sweep_reaches_every_command_that_reads_an_artifact():
    """A command added later that reads runs, embeddings, parts, models or stores joins the sweep."""
    from zsdr.cli import READS

    swept = {c[1].split()[0] for c in CASES}
    reads_artifacts = {c for c in READS if c not in ("train", "mini", "shift", "bm25", "store")}
    assert reads_artifacts <= swept, sorted(reads_artifacts - swept)


def test_a_folder_zsdr_wrote_keeps_the_files_a_user_put_there_unless_forced(made, capsys):
    store = made["a"] / "store"
    (store / "notes.txt").write_text("mine")
    code, _, err = zsdr(capsys, "store", made["a"])
    assert code == 1 and "notes.txt" in the_error_line(err) and "--force" in err
    assert (store / "notes.txt").is_file()
    code, _, err = zsdr(capsys, "store", made["a"], "--force")
    assert code == 0, err
    assert not (store / "notes.txt").exists()


def test_the_clean_artifacts_pass(made, capsys):
    """The sweep's refusals are the damage's, not the artifacts': the same commands on the clean ones work,
    and the run scores the same as before the checks (nothing silently dropped)."""
    code, out, err = zsdr(capsys, "search", "--queries", made["qa"], "--shards", made["ea0"], made["ea1"], "--out",
                          made["root"] / "clean.trec", "--gpu", "no", "--quiet")
    assert code == 0, err
    assert (made["root"] / "clean.trec").read_bytes() == made["run_a"].read_bytes()
    code, out, err = zsdr(capsys, "merge-shards", "--parts", made["pa0"], made["pa1"], "--out",
                          made["root"] / "merged.trec")
    assert code == 0, err
    assert (made["root"] / "merged.trec").read_bytes() == made["run_a"].read_bytes()
    for name in ("clean.trec", "clean.trec.provenance.json", "merged.trec", "merged.trec.provenance.json"):
        (made["root"] / name).unlink()


def test_a_few_unknown_ids_are_counted_and_more_are_refused(tmp_path, caplog):
    from zsdr.io import DataError
    from zsdr.provenance import UNKNOWN_IDS_MAX, check_known_ids

    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": "t"}) + "\n" for i in range(200)))
    assert check_known_ids([f"d{i}" for i in range(200)], ds, "run", "run", "fix") == 0
    assert check_known_ids([f"d{i}" for i in range(199)] + ["gone"], ds, "run", "run", "fix") == 1   # 0.5%
    assert "1 of the 200 document ids" in caplog.text
    with pytest.raises(DataError, match=r"3 of the 200 document ids of the run \(1.5%, more than the 1% allowed\)"):
        check_known_ids([f"d{i}" for i in range(197)] + ["x", "y", "z"], ds, "run", "run", "fix")
    assert UNKNOWN_IDS_MAX == 0.01


def test_a_symlinked_output_folder_is_replaced_through_the_link(tmp_path):
    from zsdr.data.store import build_store

    ds = make_dataset(tmp_path / "ds")
    real = tmp_path / "real-store"
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    build_store(ds, real)
    build_store(ds, tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and (real / "store.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "link", "real-store"]   # no stray .old


def test_a_table_refuses_a_metrics_file_of_another_cell(tmp_path):
    from zsdr.io import DataError
    from zsdr.tables.inputs import check_metrics_cell

    check_metrics_cell({"dataset": "mini-alpha", "system": "bm25-flat"}, "m.json", "mini-alpha", "bm25-flat")
    check_metrics_cell({}, "m.json", "mini-alpha", "bm25-flat")   # a file that records neither
    with pytest.raises(DataError, match="scores dataset 'mini-beta', but the table reads it as dataset 'mini-alpha'"):
        check_metrics_cell({"dataset": "mini-beta", "system": "bm25-flat"}, "m.json", "mini-alpha", "bm25-flat")


def test_a_model_changed_on_disk_is_refused_when_loaded(made):
    from zsdr.io import DataError, verify_model_contents

    verify_model_contents(made["model"])
    with pytest.raises(DataError, match="model-flip: the model's files are not those it was written with"):
        verify_model_contents(made["model_flip"])
    edited = made["root"] / "model-config"
    shutil.copytree(made["model"], edited)
    (edited / "config.json").write_text((edited / "config.json").read_text().replace("bert", "roberta"))
    with pytest.raises(DataError, match="model-config: the model's files are not those"):
        verify_model_contents(edited)
    saved = made["root"] / "saved-elsewhere"   # another program's save: config.json keeps the stamp, no marker
    shutil.copytree(made["model"], saved)
    (saved / ".zsdr-output.json").unlink()
    (saved / "model.safetensors").write_bytes((made["model_flip"] / "model.safetensors").read_bytes())
    verify_model_contents(saved)
    card = made["model"] / "README.md"   # the model card, written after the evaluations, is not the model
    card.write_text("# card")
    verify_model_contents(made["model"])
    card.unlink()
