# Helpers and target builders shared by every rule file. No rules here.

import re

from zsdr.data import registry
from zsdr.workflow import code_files

PATHS = config["paths"]
DOWNLOADS = PATHS["downloads"]
DATA = PATHS["data"]
MODELS = PATHS["models"]
RUNS = PATHS["runs"]
METRICS = PATHS["metrics"]
RESULTS = PATHS["results"]
LOGS = "logs"

SOURCE = config["datasets"]["source"]
TARGETS = list(config["datasets"]["targets"])
MINI_DATASETS = [d["name"] for d in config["mini"]["domains"]]
# Tiny backbones are built from the mini corpora, so only a config with mini domains builds them
# (Snakemake merges --configfile over config.yaml, so the paper config still lists them).
BUILT_BACKBONES = [
    n for n, b in config["backbones"].items() if "build" in b and MINI_DATASETS
]


def code(*modules):
    """The source files of the zsdr modules a rule runs (as inputs, so code edits re-plan it)."""
    return code_files("zsdr.io", *modules, root=workflow.basedir)


def alternation(names):
    """A wildcard constraint that matches exactly one of ``names``."""
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


def dataset_marker(name):
    """``data/<name>/dataset.json`` is written last, once the folder is complete and valid."""
    return f"{DATA}/{name}/dataset.json"


def eval_split(name):
    return config["datasets"]["eval_splits"].get(name, "test")


def check_dataset(name):
    if name not in MINI_DATASETS and name not in registry.REGISTRY:
        raise ValueError(
            f"config key datasets: {name!r} is neither a mini domain nor a registry dataset; "
            f"use one of: {', '.join(MINI_DATASETS + sorted(registry.REGISTRY))} "
            f"(see `zsdr datasets`)"
        )
    return name


EVAL_DATASETS = [check_dataset(SOURCE)] + [check_dataset(t) for t in TARGETS]
FETCHED = [
    check_dataset(d)
    for d in dict.fromkeys([SOURCE, *TARGETS, *config["datasets"]["extra"]])
    if d not in MINI_DATASETS
]
REMOTE = registry.remote_files()


def downloads_of(name, extras=False):
    ds = registry.get(name)
    files = list(ds.files) + (list(ds.extras) if extras else [])
    return [f"{DOWNLOADS}/{f.local_path}" for f in files]
