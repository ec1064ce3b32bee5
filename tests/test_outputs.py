"""Nothing zsdr did not write is ever replaced: an output folder is a new or empty one, or one zsdr wrote
as the same kind of output (zsdr.io.atomic_dir's marker); no output is, holds or lies inside an input
of its command; `--force` replaces only what the command itself made. Every refusal is one line naming
the folder, and nothing is deleted."""

import json
import sys
import types
from pathlib import Path

import pytest

from zsdr.io import OUTPUT_MARKER, DataError, atomic_dir, atomic_write, check_output_dir, reading

from .test_formats import make_dataset
from .test_reliability import the_error_line, zsdr


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> content)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------ the helper


def test_a_folder_holding_anything_zsdr_did_not_write_is_never_replaced(tmp_path):
    own = tmp_path / "notes"
    own.mkdir()
    (own / "mine.txt").write_text("keep me")
    with pytest.raises(DataError, match=r"notes: refusing to replace this folder: it holds mine.txt, which zsdr did not "
                                        r"write as a store \(fix: write the store to a new or empty folder"):
        with atomic_dir(own, kind="store") as tmp:
            (tmp / "x").write_text("1")
    assert tree(own) == {"mine.txt": b"keep me"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]   # no temporary left behind
    file = tmp_path / "file"
    file.write_text("a file")
    with pytest.raises(DataError, match="the output folder is a file"):
        with atomic_dir(file):
            pass
    assert file.read_text() == "a file"


def test_an_empty_folder_or_one_written_as_the_same_kind_is_replaced(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    with atomic_dir(target, kind="store") as tmp:
        (tmp / "a").write_text("1")
    marker = json.loads((target / OUTPUT_MARKER).read_text())
    assert {k: marker[k] for k in ("written_by", "kind")} == {"written_by": "zsdr", "kind": "store"}
    assert sorted(marker["files"]) == sorted(p.name for p in target.iterdir() if p.name != OUTPUT_MARKER)
    with atomic_dir(target, kind="store") as tmp:
        (tmp / "b").write_text("2")
    assert sorted(tree(target)) == [OUTPUT_MARKER, "b"]
    with pytest.raises(DataError, match="zsdr wrote it as a store, not as a Lucene index"):
        with atomic_dir(target, kind="Lucene index"):
            pass
    assert sorted(tree(target)) == [OUTPUT_MARKER, "b"]


def test_a_folder_that_appears_while_the_output_is_written_is_not_replaced(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(DataError, match="it holds theirs"):
        with atomic_dir(target) as tmp:
            (tmp / "a").write_text("1")
            target.mkdir()
            (target / "theirs").write_text("x")
    assert tree(target) == {"theirs": b"x"}


def test_a_snakemake_job_replaces_the_folders_of_its_declared_outputs(tmp_path, monkeypatch):
    """What an earlier zsdr wrote has no marker: the workflow's own job replaces it, nothing else does."""
    legacy = tmp_path / "data" / "mini-source"
    legacy.mkdir(parents=True)
    (legacy / "corpus.jsonl").write_text("old")
    other = tmp_path / "data" / "other"
    other.mkdir()
    (other / "x").write_text("x")
    job = types.SimpleNamespace(output=[str(legacy / "corpus.jsonl"), str(legacy / "dataset.json")])
    monkeypatch.setattr(sys.modules["__main__"], "snakemake", job, raising=False)
    monkeypatch.chdir(tmp_path)
    with atomic_dir("data/mini-source", kind="dataset") as tmp:
        (tmp / "corpus.jsonl").write_text("new")
    assert (legacy / "corpus.jsonl").read_text() == "new"
    with pytest.raises(DataError, match="refusing to replace"):
        check_output_dir(other, "dataset")
    # a process the job starts (torchrun's) learns the outputs from the environment
    from zsdr.io import job_outputs_environment

    env = job_outputs_environment()
    monkeypatch.delattr(sys.modules["__main__"], "snakemake")
    (legacy / OUTPUT_MARKER).unlink()   # as an earlier zsdr left it
    with pytest.raises(DataError, match="it holds corpus.jsonl"):
        check_output_dir(legacy, "dataset")   # outside the job
    monkeypatch.setenv(*env.popitem())
    check_output_dir(legacy, "dataset")
    with pytest.raises(DataError):
        check_output_dir(other, "dataset")


def test_no_output_is_holds_or_lies_inside_an_input(tmp_path):
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    corpus = tmp_path / "ds" / "corpus.jsonl"
    corpus.parent.mkdir()
    corpus.write_text("{}")
    before = tree(tmp_path)
    with reading([model, corpus]):
        for out, problem in ((model, "is an input"), (tmp_path / "models", "holds"), (model / "sub", "lies inside"),
                             (tmp_path / "ds", "holds"), (tmp_path, "holds")):
            with pytest.raises(DataError, match=f"the output folder {problem}"):
                with atomic_dir(out):
                    pass
        for out, problem in ((corpus, "is an input"), (model / "x.json", "lies inside")):
            with pytest.raises(DataError, match=f"the output file {problem}"):
                with atomic_write(out) as fh:
                    fh.write("x")
        with atomic_write(tmp_path / "ds" / "run.trec") as fh:   # beside an input file: allowed
            fh.write("x")
    assert tree(tmp_path) == {**before, "ds/run.trec": b"x"}
    with atomic_dir(model / "sub"):   # the declaration ends with the block
        pass


# ----------------------------------------------------------------------------- the commands


@pytest.mark.parametrize("out", ["ds", ".", "ds/qrels"])
def test_store_never_replaces_its_dataset_or_a_parent_folder(tmp_path, capsys, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    make_dataset(Path("ds"))
    Path("notes.txt").write_text("a sibling")
    before = tree(tmp_path)
    code, _, err = zsdr(capsys, "store", "ds", "--out", out)
    assert code == 1 and before == tree(tmp_path)
    line = the_error_line(err)
    assert line.startswith(f"zsdr store: error: {out}: the output folder ") and "an input" in line, line


def test_store_rebuilds_its_own_store_and_refuses_a_foreign_folder(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    assert zsdr(capsys, "store", ds)[0] == 0
    assert zsdr(capsys, "store", ds)[0] == 0   # its own store: rebuilt
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "results.csv").write_text("1,2")
    code, _, err = zsdr(capsys, "store", ds, "--out", foreign)
    assert code == 1 and tree(foreign) == {"results.csv": b"1,2"}
    assert the_error_line(err) == (f"zsdr store: error: {foreign}: refusing to replace this folder: it holds "
                                   "results.csv, which zsdr did not write as a store (fix: write the store to a new or "
                                   "empty folder, or remove this folder yourself if nothing in it is needed)")
    code, _, err = zsdr(capsys, "store", ds, "--out", ds / "store" / "x")   # inside its own earlier store: fine
    assert code == 0, err


def test_output_files_are_checked_against_the_inputs_before_any_work(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    before = tree(tmp_path)
    code, _, err = zsdr(capsys, "bm25", "--dataset", ds, "--out", ds / "queries.jsonl", "--index", tmp_path / "idx")
    assert code == 1 and tree(tmp_path) == before and not (tmp_path / "idx").exists()
    assert the_error_line(err) == (f"zsdr bm25: error: {ds / 'queries.jsonl'}: the output file is an input of this "
                                   "command (fix: write it to a file outside the inputs)")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    code, _, err = zsdr(capsys, "evaluate", "--qrels", ds, "--run", run, "--per-query", run)
    assert code == 1 and run.read_text() == "q1 Q0 d1 1 1.0 t\n"
    assert "the output file is an input of this command" in the_error_line(err)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A trained-looking model folder (training log and zsdr.json) beside a second model in `par/`."""
    from tests.test_encoder import TINY
    from tests.test_encoder import make_dataset as make_encoder_dataset
    from zsdr.models.encoder import Encoder
    from zsdr.models.tiny import build_tiny_backbone

    root = tmp_path_factory.mktemp("outputs")
    data = make_encoder_dataset(root / "data", docs=12, queries=3)
    build_tiny_backbone("bert", [data], root / "backbone", TINY, vocab_size=200, seed=1)
    for name in ("m", "sibling"):
        enc = Encoder.from_pretrained(root / "backbone", pooling="mean", similarity="cosine")
        enc.save_pretrained(root / "par" / name)
        (root / "par" / name / "training.log").write_text('{"step": 1}\n')
    return root


def test_export_never_replaces_its_model_a_parent_or_another_model(models, tmp_path, capsys):
    par, model = models / "par", models / "par" / "m"
    before = tree(par)
    for out in (par, model, model / "sub", par / "sibling"):
        code, _, err = zsdr(capsys, "export", model, out, "--force")
        assert code == 1, err
        line = the_error_line(err)
        assert line.startswith(f"zsdr export: error: {out}: "), line
        assert tree(par) == before, out
    assert "zsdr wrote it as a model, not as an export" in line   # par/sibling
    # what the command made itself: --force replaces it
    assert zsdr(capsys, "export", model, tmp_path / "x")[0] == 0
    code, _, err = zsdr(capsys, "export", model, tmp_path / "x")
    assert code == 1 and "the output folder exists" in the_error_line(err)
    assert zsdr(capsys, "export", model, tmp_path / "x", "--force")[0] == 0
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "notes").write_text("mine")
    code, _, err = zsdr(capsys, "export", model, tmp_path / "y", "--force")
    assert code == 1 and tree(tmp_path / "y") == {"notes": b"mine"}
    assert "it holds notes, which zsdr did not write as an export" in the_error_line(err)


def test_encode_refuses_an_output_inside_its_model_or_over_its_dataset(models, capsys):
    model, data = models / "par" / "m", models / "data"
    before = tree(models)
    for out in (model / "emb", data):
        code, _, err = zsdr(capsys, "encode", "--model", model, "--dataset", data, "--out", out, "--device", "cpu")
        assert code == 1 and tree(models) == before
        assert "an input" in the_error_line(err)


def test_fetch_refuses_a_data_folder_it_did_not_write_before_downloading(tmp_path, capsys):
    mine = tmp_path / "data" / "scifact"
    mine.mkdir(parents=True)
    (mine / "notes.md").write_text("my own copy")
    code, _, err = zsdr(capsys, "fetch", "scifact", "--data", tmp_path / "data", "--downloads", tmp_path / "dl",
                        "--mirror", tmp_path / "no-mirror", "--quiet")
    assert code == 1 and tree(mine) == {"notes.md": b"my own copy"} and not (tmp_path / "dl").exists()
    assert the_error_line(err).startswith(f"zsdr fetch: error: {mine}: refusing to replace this folder: it holds "
                                          "notes.md, which zsdr did not write as a dataset")


def test_mini_refuses_a_domain_folder_it_did_not_write(tmp_path, capsys):
    from zsdr.data.mini import generate
    from zsdr.workflow import load_yaml

    config = load_yaml(Path(__file__).resolve().parents[1] / "config.yaml")["mini"]
    first = config["domains"][0]["name"]
    mine = tmp_path / "data" / first
    mine.mkdir(parents=True)
    (mine / "corpus.jsonl").write_text('{"_id": "mine", "text": "mine"}\n')
    with pytest.raises(DataError, match=f"{mine}: refusing to replace this folder: it holds corpus.jsonl"):
        generate(config, tmp_path / "data")
    assert tree(mine) == {"corpus.jsonl": b'{"_id": "mine", "text": "mine"}\n'}


def test_the_kinds_the_command_checks_first_are_those_its_writers_mark(models, tmp_path, capsys):
    """A command checks its output folder before loading a model, as its writer checks it again: with the
    same kind, or it would refuse to replace its own earlier output."""
    from zsdr.cli import OUTPUT_DIRS

    model, data, out = models / "par" / "m", models / "data", tmp_path / "emb"
    for _ in range(2):   # the second time over its own output
        code, _, err = zsdr(capsys, "encode", "--model", model, "--dataset", data, "--out", out, "--device", "cpu",
                            "--quiet")
        assert code == 0, err
    assert json.loads((out / OUTPUT_MARKER).read_text())["kind"] == OUTPUT_DIRS["encode"][0][1]
    ds = make_dataset(tmp_path / "ds")
    assert zsdr(capsys, "store", ds, "--out", tmp_path / "st")[0] == 0
    assert json.loads((tmp_path / "st" / OUTPUT_MARKER).read_text())["kind"] == OUTPUT_DIRS["store"][0][1]
    assert zsdr(capsys, "export", model, tmp_path / "x")[0] == 0
    assert json.loads((tmp_path / "x" / OUTPUT_MARKER).read_text())["kind"] == OUTPUT_DIRS["export"][0][1]
