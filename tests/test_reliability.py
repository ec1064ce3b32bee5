"""Issue 24, as a new user meets it through the `zsdr` command: conflicting judgements, repeated and
empty runs, one clear line per mistake (never a traceback), outputs readable under the umask, and no
temporaries left by a killed process."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_workflow import snakemake
from zsdr.cli import main

from .test_formats import make_dataset


def zsdr(capsys, *argv) -> tuple[int, str, str]:
    """Run `zsdr ARGV` in this process: (exit status, stdout, stderr)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING) ")


def error_lines(err: str) -> list[str]:
    """stderr without the log records below ERROR (``<date> <time> LEVEL logger: ...``), the lines that
    continue one included (a logged Python warning's source line, a traceback)."""
    lines, in_record = [], False
    for line in err.splitlines():
        if LOG_RECORD.match(line):
            in_record = True
        elif line.startswith("zsdr ") or re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ", line):
            in_record = False
        if not in_record and line.strip():
            lines.append(line)
    return lines


def the_error_line(err: str) -> str:
    """The one error line stderr must hold (besides log records); all of stderr in the failure otherwise."""
    lines = error_lines(err)
    assert len(lines) == 1, f"expected one error line on stderr, got {len(lines)}:\n{err}"
    return lines[0]


# ------------------------------------------------------------------- 1. silent wrong results

def test_validate_refuses_a_conflicting_duplicate_grade_but_accepts_an_identical_one(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    qrels = ds / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q1\td1\t1\n", encoding="utf-8")   # identical repeat of line 2
    code, out, err = zsdr(capsys, "validate", ds)
    assert code == 0 and json.loads(out)["qrels"] == {"test": 4}, err
    qrels.write_text(qrels.read_text() + "q2\td3\t2\n", encoding="utf-8")   # line 4 said 0
    code, out, err = zsdr(capsys, "validate", ds)
    assert code == 1 and out == ""
    assert error_lines(err) == [f"zsdr validate: error: {qrels}:6: query 'q2', document 'd3' is judged 2 here and 0 "
                                "on line 4 (fix: keep one grade per (query, document) pair)"]
    # the evaluator refuses the same qrels instead of keeping the last grade
    run = tmp_path / "run.trec"
    run.write_text("q2 Q0 d3 1 2.0 t\nq2 Q0 d2 2 1.0 t\nq1 Q0 d1 1 1.0 t\n", encoding="utf-8")
    code, out, err = zsdr(capsys, "evaluate", "--qrels", ds, "--run", run, "--metrics", "ndcg@10")
    assert code == 1 and f"{qrels}:6:" in err and "Traceback" not in err


def test_trec_qrels_with_a_conflicting_grade_are_refused(tmp_path, capsys):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq1 0 d2 2\nq1 0 d1 2\n", encoding="utf-8")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\n", encoding="utf-8")
    code, out, err = zsdr(capsys, "evaluate", "--qrels", qrels, "--run", run)
    assert code == 1 and error_lines(err) == [
        f"zsdr evaluate: error: {qrels}:3: query 'q1', document 'd1' is judged 2 here and 1 on line 1 "
        "(fix: keep one grade per (query, document) pair)"]


@pytest.mark.parametrize("sep", [" ", "\t"])   # the fast (Arrow) and the line-by-line reader
def test_a_document_repeated_in_a_ranking_is_scored_once_with_a_warning(tmp_path, capsys, sep):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq1 0 d2 2\n", encoding="utf-8")
    once, twice = tmp_path / "once.trec", tmp_path / "twice.trec"
    once.write_text(sep.join("q1 Q0 d2 1 3.0 t".split()) + "\n" + sep.join("q1 Q0 d1 2 0.5 t".split()) + "\n")
    twice.write_text("\n".join(sep.join(line.split()) for line in
                               ["q1 Q0 d1 1 9.0 t", "q1 Q0 d2 2 3.0 t", "q1 Q0 d1 3 0.5 t"]) + "\n")
    code, out, err = zsdr(capsys, "evaluate", "--qrels", qrels, "--run", once, "--metrics", "ndcg@10,recall@10")
    assert code == 0 and "repeated" not in err
    expected = json.loads(out)
    code, out, err = zsdr(capsys, "evaluate", "--qrels", qrels, "--run", twice, "--metrics", "ndcg@10,recall@10")
    assert code == 0 and json.loads(out) == expected   # d1 keeps the score of its last line, 0.5
    assert f"{twice}:3: document 'd1' is listed again for query 'q1'" in err and "trec_eval refuses" in err


def test_runs_that_miss_queries_warn_and_a_run_sharing_none_is_an_error(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")   # test qrels: q1 -> d1 (1), q2 -> d2 (2), d3 (0)
    partial, other, empty = tmp_path / "partial.trec", tmp_path / "other.trec", tmp_path / "empty.trec"
    partial.write_text("q1 Q0 d1 1 1.0 t\n")
    other.write_text("x1 Q0 d1 1 1.0 t\nx2 Q0 d2 1 1.0 t\n")
    empty.write_text("")
    code, out, err = zsdr(capsys, "evaluate", "--qrels", ds, "--run", partial, "--metrics", "ndcg@10")
    assert code == 0 and json.loads(out) == {"ndcg@10": 0.5}
    assert "the run has no ranking for 1 of the 2 evaluated queries" in err and "each scores 0" in err
    for run in (other, empty):
        code, out, err = zsdr(capsys, "evaluate", "--qrels", ds, "--run", run, "--metrics", "ndcg@10")
        assert code == 1 and out == ""
        assert error_lines(err) == [f"zsdr evaluate: error: {run}: the run answers none of the 2 evaluated queries "
                                    f"of {ds} (split test) (fix: check that the run was made for this dataset and "
                                    "split (its first column is the query id))"]


def test_a_nan_score_in_a_run_names_its_line(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\nq2 Q0 d2 1 nan t\n")
    code, out, err = zsdr(capsys, "evaluate", "--qrels", ds, "--run", run)
    assert code == 1 and len(error_lines(err)) == 1
    assert f"{run}:2: score 'nan' of document 'd2' is not a finite number" in err


# ------------------------------------------------------------------- 2. errors a person can act on

def test_one_bad_corpus_record_is_one_error_not_a_cascade(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    corpus = ds / "corpus.jsonl"
    lines = corpus.read_text().splitlines()
    lines[0] = json.dumps({"_id": "d1", "title": 5, "text": "first document"})
    lines += [json.dumps({"_id": f"x{i}", "title": "", "text": "more"}) for i in range(30)]
    corpus.write_text("\n".join(lines) + "\n")
    qrels = ds / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "".join(f"q1\tx{i}\t0\n" for i in range(30)))
    code, out, err = zsdr(capsys, "validate", ds)
    assert code == 1
    assert error_lines(err) == [f"zsdr validate: error: {corpus}:1: \"title\" of 'd1' must be a string "
                                "(fix: use \"\" for no title)"]
    # a real unknown id is still reported beside it
    qrels.write_text(qrels.read_text() + "q1\tnope\t1\n")
    code, out, err = zsdr(capsys, "validate", ds)
    assert code == 1 and error_lines(err)[0] == "zsdr validate: 2 errors:"
    assert error_lines(err)[2] == (f"{qrels}:35: corpus id 'nope' is not in corpus.jsonl "
                                   "(fix: drop the judgement or add the document)")


def _typed_options():
    """(command, option, bad value) for every option of every subcommand whose type refuses values."""
    import argparse

    from zsdr import argtypes
    from zsdr.cli import build_parser

    bad_values = {argtypes.positive_int: ["0", "-1", "2.5", "many"], argtypes.nonnegative_int: ["-1", "x"],
                  argtypes.nonnegative_float: ["-0.5", "nan"], argtypes.unit_float: ["1.5", "-1", "inf"],
                  argtypes.device: ["gpu", "cuda:x"]}
    parser = build_parser([])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cases = []
    for command, p in sub.choices.items():
        required = []
        for action in p._actions:
            if not action.option_strings and action.dest != "help":
                required.append("x")
            elif action.required:
                required += [action.option_strings[0], "x"]
        for action in p._actions:
            for value in bad_values.get(action.type, []):
                cases.append((command, [*required, action.option_strings[0], value]))
    return cases


TYPED = _typed_options()


def test_the_sweep_covers_the_sizes_users_get_wrong():
    flat = {(c, argv[-2]) for c, argv in TYPED}
    assert {("encode-search", "--max-length"), ("encode-search", "--batch-size"), ("encode-search", "--depth"),
            ("encode-search", "--shards"), ("bm25", "--depth"), ("search", "--depth"), ("mine", "--sample"),
            ("score-pairs", "--batch-size"), ("encode", "--chunk-size"), ("shift", "--max-docs")} <= flat


@pytest.mark.parametrize("command,argv", TYPED, ids=[f"{c} {' '.join(a[-2:])}" for c, a in TYPED])
def test_every_bad_size_is_one_usage_line_before_any_work(capsys, command, argv):
    code, out, err = zsdr(capsys, command, *argv)
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith(f"zsdr {command}: error: argument {argv[-2]}") and argv[-1] in lines[0]


def _truncated_model(tmp_path: Path) -> Path:
    import struct

    folder = tmp_path / "truncated-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    header = json.dumps({"w": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 1000)
    return folder


def test_model_weights_checks_accept_complete_files_and_name_truncated_ones(tmp_path):
    import torch

    from zsdr.models.checkpoints import weights_problem

    torch.save({"w": torch.zeros(100)}, tmp_path / "pytorch_model.bin")
    torch.save({"w": torch.zeros(100)}, tmp_path / "legacy.bin", _use_new_zipfile_serialization=False)
    whole = (tmp_path / "pytorch_model.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(whole[:len(whole) // 2])
    assert weights_problem(tmp_path / "pytorch_model.bin") is None
    assert weights_problem(tmp_path / "legacy.bin") is None   # pre-1.6 pickles cannot be checked: accepted
    assert weights_problem(tmp_path / "cut.bin") == "not a complete PyTorch (zip) archive"
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(100)}, tmp_path / "model.safetensors")
    assert weights_problem(tmp_path / "model.safetensors") is None
    assert "the tensors need" in weights_problem(_truncated_model(tmp_path) / "model.safetensors")


def _file_mistakes(tmp_path: Path) -> list[tuple[list[str], int, str]]:
    """(argv, exit status, text the line must hold) for mistakes about files and argument combinations."""
    ds = make_dataset(tmp_path / "ds")
    empty_model = tmp_path / "empty-model"
    empty_model.mkdir()
    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text("{}")
    truncated = _truncated_model(tmp_path)
    missing = tmp_path / "missing"
    empty_spec = tmp_path / "spec.json"
    empty_spec.write_text("{}")
    bad_reference = tmp_path / "reference.yaml"
    bad_reference.write_text("dpr: 3\n")
    negatives = tmp_path / "negatives.jsonl"
    negatives.write_text("")
    return [
        (["validate", missing], 1, f"{missing}: dataset folder not found"),
        (["fetch", "no-such-set"], 2, "unknown dataset 'no-such-set'"),
        (["mini", "--config", missing], 1, f"{missing}: cannot read config"),
        (["evaluate", "--qrels", missing, "--run", missing], 1, f"{missing}"),
        (["evaluate", "--qrels", ds, "--run", missing], 1, f"{missing}: file not found"),
        (["evaluate", "--qrels", ds, "--run", missing, "--metrics", "ndcg@ten"], 2,
         "argument --metrics: metric 'ndcg@ten': the cut-off after '@' must be an integer from 1 to 1,000,000,000"),
        (["evaluate", "--qrels", ds, "--run", missing, "--missing", "drop"], 2, "argument --missing"),
        (["bm25", "--dataset", missing, "--out", tmp_path / "r.trec"], 1, f"{missing}: dataset folder not found"),
        (["stats", missing], 1, f"{missing}: dataset folder not found"),
        (["train", missing], 1, f"{missing}: file not found"),
        (["encode-search", "--model", empty_model, "--dataset", ds, "--out", tmp_path / "r"], 1,
         f"{empty_model}: the model folder is empty"),
        (["encode-search", "--model", no_weights, "--dataset", ds, "--out", tmp_path / "r"], 1,
         f"{no_weights}: the model folder has no weights"),
        (["encode", "--model", truncated, "--dataset", ds, "--out", tmp_path / "e"], 1,
         f"{truncated / 'model.safetensors'}: the model weights are incomplete or damaged: the tensors need 4"),
        (["mine", truncated, ds, tmp_path / "n.jsonl", "--shards", tmp_path], 1, "incomplete or damaged"),
        (["encode", "--model", "org/never-loaded", "--dataset", ds, "--out", tmp_path / "e", "--shard", "2",
          "--num-shards", "2"], 2, "argument --shard: shard 2 does not exist among --num-shards 2"),
        (["doctor", "--wam"], 2, "unrecognized arguments: --wam"),
        (["check-config", missing], 1, f"{missing}: config file not found"),
        (["hparams", "--configfile", missing], 1, f"{missing}: config file not found"),
        (["hparams", "--reference", missing], 1, f"{missing}: reference file not found"),
        (["hparams", "--reference", bad_reference], 1, f"{bad_reference}: entry 'dpr' must map fields"),
        (["encode-search", "--model", "m", "--dataset", ds, "--out", tmp_path / "r", "--device", "cuda:99"], 2,
         "argument --device: cuda:99 is not available, this machine has"),
        (["train", tmp_path / "ds" / "queries.jsonl"], 1, "not readable as JSON"),
        (["train", empty_spec], 1, f"{empty_spec}: the spec has no 'init', 'out', 'train'"),
        (["datasets", "--all"], 2, "unrecognized arguments: --all"),
        (["stats", ds, "--doc-fields", "abstract"], 2, "argument --doc-fields: invalid choice"),
        (["shift", missing, ds], 1, f"{missing}: dataset folder not found"),
        (["encode-queries", "--model", empty_model, "--dataset", ds, "--out", tmp_path / "q"], 1,
         "the model folder is empty"),
        (["score-pairs", no_weights, ds, negatives, tmp_path / "scores.jsonl"], 1, "the model folder has no weights"),
        (["score-pairs", no_weights, ds, missing, tmp_path / "scores.jsonl"], 1,
         f"{missing}: negatives file not found (fix: check the path given to the negatives argument"),
        (["search", "--queries", missing, "--shards", missing, "--out", tmp_path / "r.trec"], 1,
         f"{missing}: embeddings folder not found (fix: check the path given to --queries, or build it first)"),
        (["search-shard", "--queries", missing, "--shard", missing, "--out", tmp_path / "s.npz"], 1,
         f"{missing}: embeddings folder not found"),
        (["merge-shards", "--parts", missing, "--out", tmp_path / "r.trec"], 1,
         f"{missing}: shard top-k file not found (fix: check the path given to --parts"),
        (["mine", "org/never-loaded", ds, tmp_path / "n.jsonl", "--shards", tmp_path, missing], 1,
         f"{missing}: embeddings folder not found (fix: check the path given to --shards"),
        (["encode", "--model", "org/never-loaded", "--dataset", missing, "--out", tmp_path / "e"], 1,
         f"{missing}: dataset folder not found (fix: check the path given to --dataset"),
        (["encode-search", "--model", "m", "--dataset", ds, "--out", tmp_path / "r", "--gpu", "maybe"], 2,
         "argument --gpu: invalid choice"),
        (["store", missing], 1, f"{missing}: dataset folder not found (fix: check the path given to the dataset"),
        (["export", missing, tmp_path / "exported"], 1, f"{missing}: no such model folder"),
        (["export", empty_model, tmp_path / "exported"], 1, f"{empty_model}: the model folder is empty"),
    ]


def test_file_and_combination_mistakes_are_one_line(tmp_path, capsys):
    from zsdr.cli import BUILTIN_COMMANDS, MODULE_COMMANDS

    mistakes = _file_mistakes(tmp_path)
    assert {m[0][0] for m in mistakes} == {*BUILTIN_COMMANDS, *MODULE_COMMANDS}   # every subcommand
    for argv, status, text in mistakes:
        code, out, err = zsdr(capsys, *argv)
        lines = error_lines(err)
        assert (code, len(lines)) == (status, 1), (argv, err)
        assert lines[0].startswith(f"zsdr {argv[0]}: error: ") and text in lines[0], (argv, err)
        assert "Traceback" not in err


def test_a_full_disk_is_one_line_naming_the_file(tmp_path, capsys, monkeypatch):
    import errno

    from zsdr.evaluation import metrics

    ds = make_dataset(tmp_path / "ds")
    run, out = tmp_path / "run.trec", tmp_path / "metrics.json"
    run.write_text("q1 Q0 d1 1 1.0 t\nq2 Q0 d2 1 1.0 t\n")

    def full(*args, **kwargs):   # the disk fills while the JSON is written (the error names no file)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    import types

    monkeypatch.setattr(metrics, "json", types.SimpleNamespace(dump=full, dumps=json.dumps))
    code, _, err = zsdr(capsys, "evaluate", "--qrels", ds, "--run", run, "--per-query", out)
    assert code == 1 and error_lines(err) == [
        f"zsdr evaluate: error: {out}: No space left on device (fix: free space on that file system, or point "
        "the output (or `paths:` in the config) at a larger one)"]
    code, _, err = zsdr(capsys, "--debug", "evaluate", "--qrels", ds, "--run", run, "--per-query", out)
    assert code == 1 and "Traceback (most recent call last)" in err and "OSError" in err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # no half-written temporary


def test_the_real_command_prints_one_line_and_debug_shows_the_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    env.pop("ZSDR_DEBUG", None)
    usage = subprocess.run([sys.executable, "-m", "zsdr", "encode-search", "--model", "m", "--dataset", "d",
                            "--out", "o", "--max-length", "0"], capture_output=True, text=True, env=env, timeout=120)
    assert usage.returncode == 2 and usage.stderr == (
        "zsdr encode-search: error: argument --max-length: must be a positive integer, got '0' "
        "(see `zsdr encode-search --help`)\n")
    missing = tmp_path / "missing"
    data = subprocess.run([sys.executable, "-m", "zsdr", "validate", str(missing)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert data.returncode == 1 and data.stderr.splitlines() == [
        f"zsdr validate: error: {missing}: dataset folder not found (fix: run the fetch/convert step first)"]
    debug = subprocess.run([sys.executable, "-m", "zsdr", "validate", str(missing)], capture_output=True, text=True,
                           env={**env, "ZSDR_DEBUG": "1"}, timeout=120)
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.splitlines()[-1] == data.stderr.splitlines()[-1]


# ------------------------------------------------------------------- config mistakes (Snakemake)

ROOT = Path(__file__).resolve().parents[1]


def plan(configfile: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """`snakemake -n results/table1.csv --configfile CONFIGFILE` from the project folder."""
    return snakemake("-n", "results/table1.csv", "--configfile", str(configfile), check=False, env=env)


def mini_config(tmp_path: Path, edit) -> Path:
    import yaml

    from zsdr.workflow import read_config

    cfg = read_config(ROOT)
    edit(cfg)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_an_unknown_config_key_is_named_with_the_nearest_valid_one(tmp_path):
    path = mini_config(tmp_path, lambda c: c["recipes"]["dpr"]["train"].update(batchsize=8))
    proc = plan(path)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and len(text.splitlines()) < 15, text   # not the ~4,900 lines of schema
    assert ("config key recipes.dpr.train.batchsize: unknown key (did you mean 'batch_size'? allowed at "
            "recipes.dpr.train: adam_eps, batch_size, cpu_chunk_tokens, epoch_size, epochs,") in text


def test_yaml_syntax_errors_name_file_line_and_column(tmp_path, capsys):
    from zsdr.workflow import ConfigError, load_yaml

    bad = tmp_path / "bad.yaml"
    bad.write_text("offline: true\nmini:\n  seed: [1, 2\n  domains: 3\n")
    with pytest.raises(ConfigError, match=rf"^{bad}:4:\d+: YAML syntax error: "):
        load_yaml(bad)
    code, _, err = zsdr(capsys, "mini", "--config", bad, "--out", tmp_path / "data")
    assert code == 1 and error_lines(err)[0].startswith(f"zsdr mini: error: {bad}:4:")
    # Snakemake reads --configfile files itself (no line number): `zsdr check-config` shows it
    code, _, err = zsdr(capsys, "check-config", bad)
    assert code == 1 and error_lines(err) == [
        f"zsdr check-config: error: {bad}:4:10: YAML syntax error: while parsing a flow sequence (line 3, column 9), "
        "expected ',' or ']', but got ':' (fix: correct the line; indent with spaces, close every bracket and "
        "quote)"]


def test_a_key_given_twice_is_refused_naming_file_line_and_key(tmp_path, capsys):
    """YAML keeps the last of two equal keys silently: `lr` set twice trained with the second."""
    from zsdr.workflow import ConfigError, load_yaml

    twice = tmp_path / "twice.yaml"
    twice.write_text("recipes:\n  dpr:\n    train:\n      lr: 1.0e-5\n      epochs: 2\n      lr: 2.0e-5\n"
                     "base: &base {a: 1, b: 2}\nmerged:\n  <<: *base\n  a: 3\n")   # a merge key may be overridden
    message = (f"{twice}:6:7: key 'lr' is given twice in the same mapping (first on line 4), and YAML keeps only the "
               "last (fix: remove one of them)")
    with pytest.raises(ConfigError) as err:
        load_yaml(twice)
    assert str(err.value) == message
    code, out, err = zsdr(capsys, "check-config", twice)
    assert code == 1 and out == "" and the_error_line(err) == f"zsdr check-config: error: {message}"
    twice.write_text("recipes:\n  dpr: {init: a}\nbase: &base {a: 1, b: 2}\nmerged:\n  <<: *base\n  a: 3\n"
                     "other: {x: 1, y: {x: 2}}\n")   # the same key in different mappings is fine
    assert load_yaml(twice)["merged"] == {"a": 3, "b": 2}


def test_check_config_reads_configs_as_the_workflow_does(tmp_path, capsys):
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("offlien: true\nbm25: {k11: 3}\n")
    code, out, err = zsdr(capsys, "check-config", unknown)
    assert code == 1 and error_lines(err) == [
        "zsdr check-config: 2 errors:",
        "config key offlien: unknown key (did you mean 'offline'? allowed at the top level: backbones, berm, bm25, "
        "cluster, cocodr, cross_encoders, datasets, ddr, dense, download, evaluation, mini, mini_zh, mirror, modir, offline, "
        f"paths, readers, recipes, regressions, rmsc, scale, seed, site, statistics, systems, table1, training, warm_start) (set in "
        f"{unknown})",
        "config key bm25.k11: unknown key (did you mean 'k1'? allowed at bm25: b, depth, k1, remove_query, rm3, "
        f"threads) (set in {unknown})"]
    for name in ("small.yaml", "paper.yaml"):
        code, out, err = zsdr(capsys, "check-config", ROOT / "configs" / name)
        assert code == 0 and json.loads(out)["ok"], err


@pytest.mark.parametrize("overlay, line", [
    ({"evaluation": {"metrics": ["ndgc@10"]}}, "config key evaluation.metrics: unknown metric 'ndgc@10'"),
    ({"table1": {"metric": "ndcg@5"}}, "config key table1.metric: 'ndcg@5' is not computed; add it to evaluation.metrics"),
    ({"table1": {"systems": ["bm25-flat", "no-such-system"]}},
     "config key table1.systems: system 'no-such-system' is not defined under `systems`"),
    ({"recipes": {"dpr": {"init": "./no/such/folder"}}}, "./no/such/folder"),
    ({"datasets": {"eval_splits": {"mini-alpha": "dev"}}},
     "config key datasets.eval_splits.mini-alpha: mini-alpha has no split 'dev' (its splits: test)"),
])
def test_check_config_catches_at_plan_time_what_jobs_would_fail_on(tmp_path, capsys, overlay, line):
    """`zsdr check-config` makes the plan as the workflow does: what the schema allows but a job would trip on is
    one line naming its key, not an OK followed by a failed job."""
    import yaml

    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(overlay))
    code, out, err = zsdr(capsys, "check-config", path)
    assert code == 1 and line in err, err
    assert len(error_lines(err)) == 1, err


def test_check_config_knows_the_splits_of_registry_datasets(tmp_path, capsys):
    import yaml

    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump({"datasets": {"eval_splits": {"scifact": "dev"}}}))
    code, out, err = zsdr(capsys, "check-config", ROOT / "configs" / "small.yaml", path)
    assert code == 1 and "config key datasets.eval_splits.scifact: scifact has no split 'dev' (its splits: train, test)" in err


def test_config_errors_name_the_paper_file_and_a_users_overlay_wins(tmp_path):
    """Settings live in config.yaml and one file per paper (configs/papers/); a mistake names the file that
    set the key (with its `by_scale` section at small and paper scale), and a --configfile overrides all."""
    import shutil

    import yaml

    from zsdr.workflow import (
        ConfigError,
        add_paper_configs,
        check_config,
        expand_recipes,
        load_yaml,
        read_config,
        update_config,
    )

    shutil.copy(ROOT / "config.yaml", tmp_path / "config.yaml")
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    cocodr = tmp_path / "configs" / "papers" / "cocodr.yaml"
    text = cocodr.read_text()
    for line in ("  clustering: {niter: 100, nredo: 5}\n", "      clustering: {niter: 500, nredo: 5}\n"):
        assert text.count(line) == 1
        text = text.replace(line, line.replace("nredo:", "nredos:"))
    cocodr.write_text(text)
    schema = ROOT / "schemas" / "config.schema.yaml"
    for scale, where in (("mini", "configs/papers/cocodr.yaml"), ("paper", "configs/papers/cocodr.yaml by_scale.paper")):
        command_line = load_yaml(tmp_path / "configs" / "paper.yaml") if scale == "paper" else {}
        config = update_config(load_yaml(tmp_path / "config.yaml"), command_line)
        sources = add_paper_configs(config, tmp_path, command_line)
        expand_recipes(config)
        with pytest.raises(ConfigError) as err:
            check_config(config, schema, sources)
        assert str(err.value).splitlines()[1:] == [
            "config key cocodr.clustering.nredos: unknown key (did you mean 'nredo'? allowed at cocodr.clustering: "
            f"niter, nredo) (set in {where})"]
    cocodr.write_text(text.replace("by_scale:\n  small:", "by_scale:\n  smal:"))
    with pytest.raises(ConfigError, match=rf"^{cocodr}: config key by_scale.smal: not a scale"):
        read_config(tmp_path)
    cocodr.write_text(text.replace("by_scale:\n", "by_scale: [\n"))
    with pytest.raises(ConfigError, match=rf"^{cocodr}:\d+:\d+: YAML syntax error"):
        read_config(tmp_path)
    # a user's --configfile overrides a paper file's scale section (and merges key by key)
    overlay = tmp_path / "mine.yaml"
    overlay.write_text(yaml.safe_dump({"recipes": {"cocodr-base": {"dro": {"clusters": 7}}}}))
    config = read_config(ROOT, ROOT / "configs" / "paper.yaml", overlay)
    assert config["recipes"]["cocodr-base"]["dro"]["clusters"] == 7
    assert config["recipes"]["cocodr-base"]["dro"]["grad_layers"] == 3            # by_scale.paper's, kept
    assert read_config(ROOT, ROOT / "configs" / "paper.yaml")["recipes"]["cocodr-base"]["dro"]["clusters"] == 50


def test_offline_model_typos_fail_at_planning_naming_the_key(tmp_path):
    """With `offline: true`, a recipe's init or a system's model that is neither configured, a folder nor
    in the local Hugging Face cache stops `snakemake -n`; a cached hub id plans; a damaged folder stops it."""
    hub = tmp_path / "hub"
    snapshot = hub / "models--org--cached-model" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    env = {"HF_HUB_CACHE": str(hub)}
    typo = plan(mini_config(tmp_path, lambda c: c["recipes"]["dpr"].update(init="tiny-bret")), env)
    text = typo.stdout + typo.stderr
    assert typo.returncode != 0 and "config key recipes.dpr.init" in text
    assert f"model 'tiny-bret' is neither a folder nor a Hugging Face id in the local cache ({hub}) " \
           "(did you mean 'tiny-bert'?)" in text

    def system(model):
        return lambda c: c["systems"].update(hub={"kind": "dense", "model": model, "pooling": "mean",
                                                  "similarity": "cosine"})

    missing = plan(mini_config(tmp_path, system("org/not-cached")), env)
    assert missing.returncode != 0
    assert "config key systems.hub.model: model 'org/not-cached'" in missing.stdout + missing.stderr
    cached = plan(mini_config(tmp_path, system("org/cached-model")), env)
    assert cached.returncode == 0, cached.stderr[-3000:]
    # a model folder with truncated weights is named at planning time too
    truncated = _truncated_model(tmp_path)
    damaged = plan(mini_config(tmp_path, system(str(truncated))), env)
    assert damaged.returncode != 0
    assert (f"config key systems.hub.model: {truncated / 'model.safetensors'}: the model weights are incomplete or "
            "damaged") in damaged.stdout + damaged.stderr


# ------------------------------------------------------------------- 3. outputs a team can share

def test_workflow_outputs_follow_the_umask_and_leave_no_temporaries(tmp_path):
    """A small slice of the mini DAG (data, a tiny backbone, Lucene indexes, BM25 runs, metrics, table 1)
    run under umask 022: everything is readable by group and others, as normal files are (atomic writes
    went through tempfile's 0600 / 0700, safetensors writes 0600)."""
    import shutil

    for name in ("Snakefile", "config.yaml", "configs", "rules", "workflow_scripts", "schemas", "src", "profiles",
                 "envs", "report"):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, tmp_path / name)
    config = mini_config(tmp_path, lambda c: c["table1"].update(systems=["bm25-flat"], baselines=["bm25-flat"]))
    proc = snakemake("--cores", "2", "results/table1.csv", "models/backbones/tiny-bert/config.json", "--configfile",
                     str(config), cwd=tmp_path, timeout=900, check=False, preexec_fn=lambda: os.umask(0o022))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    checked, private, temporaries = 0, [], []
    for top in ("data", "models", "indexes", "runs", "metrics", "stats", "results"):
        if not (tmp_path / top).exists():
            continue
        for path in [tmp_path / top, *(tmp_path / top).rglob("*")]:
            mode = path.lstat().st_mode
            want = 0o755 if path.is_dir() else 0o644
            checked += 1
            if mode & want != want:
                private.append(f"{path.relative_to(tmp_path)} {oct(mode & 0o777)}")
            if path.name.endswith((".tmp", ".part")) or (path.suffix == ".lock" and path.name != "write.lock"):
                temporaries.append(path)
    assert checked > 30 and (tmp_path / "results" / "table1.csv").is_file()
    assert (tmp_path / "models" / "backbones" / "tiny-bert" / "model.safetensors").is_file()
    assert private == [], private
    assert temporaries == []   # (Lucene's own write.lock belongs to its index)


def test_a_conversion_killed_with_sigkill_leaves_temporaries_the_next_run_removes(tmp_path):
    """`zsdr fetch` killed during its conversion leaves `data/.<name>.raw.*.tmp` (gigabytes at paper scale);
    the next fetch of the same dataset removes them, and leaves alone those of a live process."""
    import signal
    import time
    import zipfile

    from zsdr.data import registry

    name = "trec-covid-beir"
    src = make_dataset(tmp_path / "src" / name)
    with open(src / "corpus.jsonl", "a", encoding="utf-8") as fh:
        for i in range(250_000):
            fh.write(json.dumps({"_id": f"x{i}", "title": "", "text": f"passage number {i}"}) + "\n")
    remote = registry.get(name).files[0]
    archive = tmp_path / "mirror" / remote.local_path
    archive.parent.mkdir(parents=True)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(src.rglob("*")):
            zf.write(p, p.relative_to(src.parent).as_posix())
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "zsdr", "fetch", name, "--mirror", str(tmp_path / "mirror"), "--quiet",
           "--downloads", str(tmp_path / "downloads"), "--data", str(data)]
    victim = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, left = time.monotonic() + 120, []
    while time.monotonic() < deadline and victim.poll() is None:
        left = [p for p in data.glob(f".{name}.*.tmp")] if data.exists() else []
        if any(p.name.startswith(f".{name}.tmp.") for p in left):   # converting: extracted, now writing
            break
        time.sleep(0.01)
    assert victim.poll() is None, "the conversion finished before it could be killed"
    victim.send_signal(signal.SIGKILL)
    victim.wait(30)
    left = sorted(data.glob(f".{name}.*.tmp"))
    assert left and all(f".{victim.pid}." in p.name for p in left)
    # a live process's temporary of the same output (this test's own pid) must survive
    host = left[0].name.split(".")[3]
    live = data / f".{name}.raw.{host}.{os.getpid()}.abcdefgh.tmp"
    live.mkdir()
    # and so must one of another host sharing the folder (its process cannot be looked up from here)
    elsewhere = data / f".{name}.raw.{host}x.{victim.pid}.abcdefgh.tmp"
    elsewhere.mkdir()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(data.glob(f".{name}.*.tmp")) == sorted([live, elsewhere])
    assert "left by a process that no longer runs" in done.stderr
    assert json.loads(done.stdout)["docs"] == 250_003


def test_a_downloaded_source_grading_one_pair_twice_is_named_in_a_warning(tmp_path, caplog):
    """Third-party qrels are converted (the first grade kept, as documented), but never silently."""
    import logging

    from zsdr.data.convert.beir import convert_beir

    src = make_dataset(tmp_path / "raw" / "set")
    qrels = src / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text() + "q1\td1\t1\nq2\td3\t2\n")
    with caplog.at_level(logging.WARNING, logger="zsdr"):
        counts = convert_beir(tmp_path / "raw", tmp_path / "out", subdir="set")
    assert counts.qrels == {"test": 3}
    assert f"1 judgements repeat a (query, document) pair with another grade; the first grade is kept (first: " \
           f"{qrels}:6: query 'q2', document 'd3' graded 2, first graded 0 at {qrels}:4)" in caplog.text
