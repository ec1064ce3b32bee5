"""The `zsdr` command as a user meets it: --version, a help text for everything, -v anywhere, doctor, and a
folder that is missing or is not a dataset named in one line."""

import argparse
import json
from importlib import metadata

import pytest

from zsdr.cli import DOCTOR_PACKAGES, build_parser, main

from .test_formats import make_dataset
from .test_reliability import the_error_line, zsdr


def _actions(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("zsdr",)):
    """(command path, action) of every argument of the parser and of its subcommands, recursively; a
    subcommand is an action of its parent's subparsers (its help is the line in the parent's list)."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            listed = {a.dest: a for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield (*path, name), listed.get(name, argparse.Action([], name))
                yield from _actions(sub, (*path, name))
        else:
            yield path, action


def test_every_option_positional_and_command_has_a_help_text():
    parser = build_parser(["--help"])  # every module's commands
    seen, bare = 0, []
    for path, action in _actions(parser):
        seen += 1
        if not action.help or action.help == argparse.SUPPRESS or not action.help.strip():
            bare.append(f"{' '.join(path)}: {'/'.join(action.option_strings) or action.dest}")
    assert seen > 150, seen  # the walk reached the subcommands
    assert not bare, "arguments without a help text:\n" + "\n".join(bare)


def test_the_walk_finds_an_argument_without_help():
    parser = build_parser(["validate"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices["validate"].add_argument("--undocumented")
    assert [a.dest for _, a in _actions(parser) if not a.help] == ["undocumented"]


def test_version_comes_from_the_package_metadata(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"zsdr {metadata.version('zsdr')}"


@pytest.mark.parametrize("argv, verbose", [
    (["-v", "validate", "d"], True),
    (["validate", "d", "-v"], True),
    (["validate", "--verbose", "d"], True),
    (["validate", "d"], False),
    (["--verbose", "stats", "d", "--split", "dev"], True),
])
def test_verbose_is_accepted_before_and_after_the_command(argv, verbose):
    args = build_parser(argv).parse_args(argv)
    assert args.verbose is verbose


def test_verbose_after_the_command_turns_on_debug_logging(tmp_path, capsys, monkeypatch):
    import logging

    levels = []
    monkeypatch.setattr("zsdr.logs.setup_logging", lambda level=None, **kw: levels.append(level))
    code, out, _ = zsdr(capsys, "validate", make_dataset(tmp_path / "ds"), "-v")
    assert code == 0 and json.loads(out) and levels == [logging.DEBUG]


def test_doctor_reports_the_libraries_java_and_snakemake(capsys):
    code, out, err = zsdr(capsys, "doctor")
    report = json.loads(out)
    assert code == 0, err
    for name in ("torch", "transformers", "peft", "pyserini", "ranx", "snakemake"):
        assert report["packages"][name] == metadata.version(name)
    assert report["faiss"] and report["java"].split()[0] in ("openjdk", "java")
    for optional in ("sentence-transformers",):  # reported only when installed
        try:
            assert report["packages"][optional] == metadata.version(optional)
        except metadata.PackageNotFoundError:
            assert optional not in report["packages"]
    assert set(report["packages"]) <= set(DOCTOR_PACKAGES)


def test_doctor_names_a_missing_library_and_fails(capsys, monkeypatch):
    real = metadata.version

    def version(name):
        if name == "peft":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    code, out, _ = zsdr(capsys, "doctor")
    assert code == 1 and "peft" in json.loads(out)["missing"] and "peft" not in json.loads(out)["packages"]


@pytest.mark.parametrize("command, missing", [
    (["stats"], "dataset folder not found"),
    (["stats", "--split", "dev"], "dataset folder not found"),
    (["shift", "--source-split", "test", "SRC"], "dataset folder not found"),
    (["bm25", "--dataset"], "dataset folder not found"),
    (["evaluate", "--run", "RUN", "--qrels"], "file not found"),  # --qrels: a file or a dataset folder
])
def test_a_missing_or_non_dataset_folder_is_one_line_naming_it(tmp_path, capsys, command, missing):
    ds = make_dataset(tmp_path / "ds")
    (tmp_path / "run.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    fill = {"SRC": ds, "RUN": tmp_path / "run.trec"}
    for folder, problem in [(tmp_path / "missing", missing), (tmp_path, "not a BEIR dataset folder")]:
        argv = [fill.get(a, a) for a in command] + [folder]
        if command[0] == "bm25":
            argv += ["--out", tmp_path / "r.trec"]
        code, out, err = zsdr(capsys, *argv)
        assert code == 1 and out == ""
        line = the_error_line(err)
        assert line.startswith(f"zsdr {command[0]}: error: {folder}: {problem}") and "(fix: " in line, line


@pytest.mark.parametrize("argv, message", [
    (["bm25", "--dataset", "DS", "--out", "r.trec", "--fb-terms", "20"],
     "argument --fb-terms: applies only with --rm3, which is not given (fix: add --rm3, or drop --fb-terms)"),
    (["bm25", "--dataset", "DS", "--out", "r.trec", "--fb-docs", "5", "--k1", "1.2"],
     "argument --fb-docs: applies only with --rm3, which is not given (fix: add --rm3, or drop --fb-docs)"),
    (["bm25", "--dataset", "DS", "--out", "r.trec", "--original-query-weight", "0.3"],
     "argument --original-query-weight: applies only with --rm3"),
    (["evaluate", "--qrels", "DS/qrels/test.tsv", "--run", "r.trec", "--split", "dev"],
     "argument --split: applies only to a dataset folder given to --qrels; DS/qrels/test.tsv is a qrels file "
     "(fix: drop --split, or pass the dataset folder)"),
    (["fetch", "robust04", "--mirror", "http://mirror"],
     "argument --mirror: dataset 'robust04' is bring-your-own: nothing is downloaded (fix: drop --mirror)"),
    (["fetch", "robust04", "--no-extras"], "argument --no-extras: dataset 'robust04' is bring-your-own"),
    (["fetch", "scifact", "--byo", "mine"],
     "argument --byo: dataset 'scifact' is downloaded: no --byo folder is read (fix: drop --byo)"),
])
def test_an_option_that_means_nothing_without_another_is_refused_not_ignored(tmp_path, capsys, monkeypatch,
                                                                            argv, message):
    """`zsdr bm25 --fb-terms 20` without --rm3 ran plain BM25 and said nothing."""
    from .test_reliability import the_error_line

    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "DS")
    (tmp_path / "r.trec").write_text("q1 Q0 d1 1 1.0 t\n")
    code, out, err = zsdr(capsys, *argv)
    assert code == 2 and out == ""
    assert the_error_line(err).startswith(f"zsdr {argv[0]}: error: {message}")
    assert not (tmp_path / "downloads").exists()


def test_every_dependent_option_is_refused_alone_and_defaults_with_its_switch():
    from zsdr.argtypes import DEPENDENT, UsageError, check_dependent

    parser = build_parser(["--help"])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    seen = 0
    for name, command in sub.choices.items():
        for dest, flag, requires, default in command.get_default(DEPENDENT) or ():
            seen += 1
            action = next(a for a in command._actions if a.dest == dest)
            value = str(action.type(str(default)) if action.type else default)
            required = [a.option_strings[0] for a in command._actions if a.required and a.option_strings]
            base = [x for r in required for x in (r, "x")]
            args = command.parse_args(base + [flag, value])
            args.command = name
            with pytest.raises(UsageError, match=f"argument {flag}: applies only with {requires}"):
                check_dependent(args)
            args = command.parse_args(base + [requires])
            check_dependent(args)
            assert getattr(args, dest) == default
    assert seen >= 3


def test_fetch_takes_retries_and_timeout(tmp_path, monkeypatch):
    import zsdr.data.fetch as fetch_module

    seen = {}
    monkeypatch.setattr(fetch_module, "download_all", lambda name, downloads, **kw: seen.update(kw) or [])
    monkeypatch.setattr(fetch_module, "convert_downloaded", lambda *a, **kw: (_ for _ in ()).throw(SystemExit(0)))
    with pytest.raises(SystemExit):
        main(["fetch", "scifact", "--data", str(tmp_path), "--retries", "0", "--timeout", "2.5"])
    assert seen["retries"] == 0 and seen["timeout"] == 2.5 and seen["mirror_setting"] == "`--mirror`"
    args = build_parser(["fetch", "x"]).parse_args(["fetch", "x"])
    assert args.retries is None and args.timeout is None       # the defaults: 5 and 60 s
    for bad in (["--retries", "-1"], ["--timeout", "0"]):
        with pytest.raises(SystemExit) as exit_:
            main(["fetch", "scifact", *bad])
        assert exit_.value.code == 2
    assert main(["fetch", "bioasq", "--timeout", "5"]) == 2     # bring-your-own: nothing is downloaded
