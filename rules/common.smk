# Helpers and target builders shared by every rule file. No rules here.

import os
import re

from zsdr.data import registry
from zsdr.tables.figures import FIGURES as FIGURE_SPECS
from zsdr.tables.render import required_cells, required_statistics, spec_files
from zsdr.tables.spec import all_specs
from zsdr.workflow import code_files

PATHS = config["paths"]
DOWNLOADS = PATHS["downloads"]
DATA = PATHS["data"]
MODELS = PATHS["models"]
INDEXES = PATHS["indexes"]
EMBEDDINGS = PATHS["embeddings"]
RUNS = PATHS["runs"]
METRICS = PATHS["metrics"]
STATS = PATHS["stats"]
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


# Retrieval systems (config `systems`), by kind.
SYSTEMS = config["systems"]
BM25_SYSTEMS = [n for n, s in SYSTEMS.items() if s["kind"] == "bm25"]
DENSE_SYSTEMS = [n for n, s in SYSTEMS.items() if s["kind"] == "dense"]


def language(name):
    """Analyzer language of a dataset (the registry's; mini domains are English)."""
    return registry.REGISTRY[name].language if name in registry.REGISTRY else "en"


def check_system(name, where):
    if name not in SYSTEMS:
        raise ValueError(
            f"config key {where}: system {name!r} is not defined under `systems` "
            f"(defined: {', '.join(SYSTEMS)})"
        )
    return name


def dense_model(system):
    """What a dense system loads: a backbone folder the DAG builds, a model folder, or an HF id."""
    spec = SYSTEMS[system]
    if "backbone" in spec:
        name = spec["backbone"]
        if name not in config["backbones"]:
            raise ValueError(
                f"config key systems.{system}.backbone: {name!r} is not a key of `backbones`"
            )
        backbone = config["backbones"][name]
        return f"{MODELS}/backbones/{name}" if "build" in backbone else backbone["hf"]
    return spec["model"]


def dense_model_input(wc):
    """The model files a dense job waits for (none for a Hugging Face id)."""
    model = dense_model(wc.system)
    return [f"{model}/config.json"] if model.startswith(f"{MODELS}/") else []


def encoder_options(system):
    """The Encoder settings of a dense system (everything but kind/backbone/model/description)."""
    skip = {"kind", "backbone", "model", "description"}
    return {k: v for k, v in SYSTEMS[system].items() if k not in skip}


# GPU jobs request `dense.gpus` GPUs (a SLURM profile maps it) and, with conda, the CUDA env.
DENSE_ENV = "../envs/gpu.yaml" if config["dense"]["gpus"] else "../envs/cpu.yaml"


def shards(dataset):
    """The corpus shard folders of a dataset: `dense.dataset_shards` or else `dense.shards`."""
    n = config["dense"]["dataset_shards"].get(dataset, config["dense"]["shards"])
    return [f"shard{i}-of-{n}" for i in range(n)]


TABLE1_SYSTEMS = [
    check_system(s, "table1.systems") for s in config["table1"]["systems"]
]
TABLE1_BASELINES = [
    check_system(s, "table1.baselines") for s in config["table1"]["baselines"]
]
# The paper tables. At mini scale their dataset rows are the mini targets; elsewhere the cells
# of datasets this config does not fetch show why they are empty.
TABLE_SPECS = all_specs()
CONFIGURED_DATASETS = list(
    dict.fromkeys([SOURCE, *TARGETS, *config["datasets"]["extra"]])
)
for _name in config["dense"]["dataset_shards"]:
    if _name not in CONFIGURED_DATASETS:
        raise ValueError(
            f"config key dense.dataset_shards.{_name}: {_name!r} is not a configured dataset "
            f"(datasets.source, datasets.targets or datasets.extra)"
        )
TABLE_DATASETS_OVERRIDE = TARGETS if MINI_DATASETS else None
TABLE_AVAILABLE_DATASETS = None if MINI_DATASETS else CONFIGURED_DATASETS
TABLE_CELLS = {
    key: required_cells(
        spec,
        set(SYSTEMS),
        TABLE_DATASETS_OVERRIDE,
        available_datasets=TABLE_AVAILABLE_DATASETS,
    )
    for key, spec in TABLE_SPECS.items()
}
TABLE_STATS = {
    key: required_statistics(
        spec, TABLE_DATASETS_OVERRIDE, available_datasets=TABLE_AVAILABLE_DATASETS
    )
    for key, spec in TABLE_SPECS.items()
}


def table_inputs(wc):
    """The spec, systems.yaml and published CSVs of a paper table (edits re-render it)."""
    files = spec_files(TABLE_SPECS[(wc.paper, int(wc.n))])
    return [os.path.relpath(f, workflow.basedir) for f in files]


# Systems whose runs every evaluated dataset gets (one evaluate job covers them all at once):
# table 1's and every system a paper table needs.
EVAL_SYSTEMS = list(
    dict.fromkeys(
        TABLE1_SYSTEMS + sorted({s for cells in TABLE_CELLS.values() for _, s in cells})
    )
)
