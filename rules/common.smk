# Helpers and target builders shared by every rule file. No rules here.

import os
import re

from zsdr.data import registry
from zsdr.tables.figures import FIGURES as FIGURE_SPECS
from zsdr.tables.inputs import cell_file
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


# Trained models (config `recipes`, `cross_encoders`, `readers`): every recipe is a dense system
# of the same name; a recipe with E > 1 episodes trains runs <name>-ep1 .. <name>-epE (each also a
# system, so the next episode can mine negatives with it) and the system <name> is its last episode.
TRAINING = config["training"]
RECIPES = config["recipes"]
CROSS_ENCODERS = config["cross_encoders"]
# Extractive QA readers (BERM's unit labels): the `hf` ones are used as released.
READERS = config.get("readers", {})
TRAINED_READERS = [n for n, r in READERS.items() if "hf" not in r]
TRAIN_RUNS = {}  # run name -> (recipe, episode)
for _name, _r in RECIPES.items():
    _e = _r.get("episodes", 1)
    if _e > 1 and _r["negatives"] != "ance":
        raise ValueError(
            f"config key recipes.{_name}.episodes: {_e} episodes need `negatives: ance`"
        )
    if _r["negatives"] == "ance" and _r["init"] not in RECIPES:
        raise ValueError(
            f"config key recipes.{_name}.init: ANCE episodes mine with the previous model, "
            f"so init must be another recipe (got {_r['init']!r})"
        )
    for _k in range(1, _e + 1):
        TRAIN_RUNS[_name if _e == 1 else f"{_name}-ep{_k}"] = (_name, _k)


def recipe_run(name, episode=None):
    """The run that trains episode ``episode`` (default: the last) of recipe ``name``."""
    e = RECIPES[name].get("episodes", 1)
    return name if e == 1 else f"{name}-ep{episode or e}"


def trained_model(name):
    return f"{MODELS}/trained/{recipe_run(name)}"


# Retrieval systems (config `systems` plus one per trained run), by kind.
SYSTEMS = dict(config["systems"])
for _run, (_name, _k) in TRAIN_RUNS.items():
    _r = RECIPES[_name]
    _sys = {
        "kind": "dense",
        "model": f"{MODELS}/trained/{_run}",
        "description": _r.get("description", f"trained by recipe {_name}"),
        **_r.get("system", {}),
    }
    SYSTEMS.setdefault(_run, _sys)
    if _run != _name and _k == _r.get("episodes", 1):
        SYSTEMS.setdefault(_name, _sys)
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


def table_cell_files(wc):
    """The cell files of a paper table: metrics/<d>/<s>.json, or <s>.units.json (`source: units`)."""
    key = (wc.paper, int(wc.n))
    return [
        cell_file(METRICS, d, s, TABLE_SPECS[key].source) for d, s in TABLE_CELLS[key]
    ]


# Systems evaluated on every dataset by one job per dataset (table 1's: the main target stays one
# job per dataset), and the further systems that paper tables and BERM's loss-weight grid need,
# evaluated one job per (dataset, system) so that table 1 never waits for them.
EVAL_SYSTEMS = list(dict.fromkeys(TABLE1_SYSTEMS))
EXTRA_EVAL_SYSTEMS = sorted(
    ({s for cells in TABLE_CELLS.values() for _, s in cells} | set(BERM_GRID.values()))
    - set(EVAL_SYSTEMS)
)


# Training (rules/finetune.smk): what each training job reads, how it is launched, what it runs.


def model_ref(name):
    """What `init` names: a backbone, a recipe's trained model, a cross-encoder, or an HF id/folder."""
    if name in config["backbones"]:
        b = config["backbones"][name]
        return f"{MODELS}/backbones/{name}" if "build" in b else b["hf"]
    if name in RECIPES:
        return trained_model(name)
    if name in CROSS_ENCODERS:
        return f"{MODELS}/cross-encoders/{name}"
    return name


def model_files(ref):
    """The files a job waits for before loading ``ref`` (none for a Hugging Face id)."""
    return [f"{ref}/config.json"] if ref.startswith(f"{MODELS}/") else []


def train_source(item):
    return check_dataset(item.get("dataset", SOURCE))


def side_file(source, key, where):
    path = TRAINING["sources"].get(source, {}).get(key)
    if not path:
        raise ValueError(
            f"config key {where} needs training.sources.{source}.{key} (the file is not configured)"
        )
    return path


def training_data(item, where, run=None):
    """``(dataset folder, negatives file)`` an item trains on, by its `negatives` kind."""
    src = train_source(item)
    kind = item["negatives"]
    if kind == "triples":
        side_file(src, "triples", where)
        return f"{DATA}/{src}-triples", f"{DATA}/{src}-triples/negatives.jsonl"
    if kind == "hard":
        return f"{DATA}/{src}", side_file(src, "hard_negatives", where)
    if kind == "bm25":
        return f"{DATA}/{src}", f"{DATA}/{src}/negatives/bm25.jsonl"
    return f"{DATA}/{src}", f"{DATA}/{src}/negatives/{run}.jsonl"


def teacher_file(item, where):
    name = item.get("teacher")
    if name is None:
        return None
    src = train_source(item)
    if name == "published":
        return side_file(src, "teacher_scores", where)
    if name not in CROSS_ENCODERS:
        raise ValueError(
            f"config key {where}.teacher: {name!r} is neither `published` nor a key of `cross_encoders`"
        )
    return f"{DATA}/{src}/teacher/{name}.jsonl"


def train_settings(item):
    """The recipe's `train` section over the shared `training` defaults."""
    shared = {k: TRAINING[k] for k in ("seed", "precision", "save_every", "log_every")}
    return {**shared, **item["train"]}


def train_spec(run):
    """The resolved spec (zsdr.training.recipes) of one training run."""
    name, k = TRAIN_RUNS[run]
    r = RECIPES[name]
    where = f"recipes.{name}"
    episodes = r.get("episodes", 1)
    init = model_ref(r["init"]) if k == 1 else f"{MODELS}/trained/{name}-ep{k - 1}"
    dataset, negatives = training_data(r, where, run)
    train = train_settings(r)
    if r.get("episode_lr_decay") and k > 1:
        train["lr"] = train["lr"] * max(0.2, 1 - (k - 1) / episodes)
    return {
        "kind": "bi_encoder",
        "init": init,
        "dataset": dataset,
        "negatives": negatives,
        "systems": r.get("systems"),
        "teacher": teacher_file(r, where),
        "out": f"{MODELS}/trained/{run}",
        "checkpoint_dir": f"{MODELS}/.checkpoints/{run}",
        "encoder": r.get("encoder", {}),
        "loss": r["loss"],
        "negatives_per_query": r.get("negatives_per_query", 1),
        "scale": r.get("scale", 1.0),
        "dropout": TRAINING["dropout"],
        "max_examples": r.get("max_examples"),
        "berm": berm_spec(r, dataset),
        "train": train,
        "info": {
            "recipe": name,
            "episode": k,
            "episodes": episodes,
            "description": r.get("description", ""),
            "provenance": r.get("provenance", ""),
        },
    }


def cross_encoder_spec(name):
    c = CROSS_ENCODERS[name]
    dataset, negatives = training_data(c, f"cross_encoders.{name}")
    return {
        "kind": "cross_encoder",
        "init": model_ref(c["init"]),
        "dataset": dataset,
        "negatives": negatives,
        "systems": None,
        "teacher": None,
        "out": f"{MODELS}/cross-encoders/{name}",
        "checkpoint_dir": f"{MODELS}/.checkpoints/cross-encoder-{name}",
        "head": c.get("head", "cls"),
        "max_length": c.get("max_length", 256),
        "negatives_per_query": c.get("negatives_per_query", 7),
        "dropout": TRAINING["dropout"],
        "train": train_settings(c),
        "info": {"cross_encoder": name, "description": c.get("description", "")},
    }


def reader_spec(name):
    """The resolved spec of a reader the pipeline trains (the answer spans of the source's training
    pairs: `units`, by default the dataset's own units.jsonl)."""
    r = READERS[name]
    dataset = f"{DATA}/{train_source(r)}"
    return {
        "kind": "reader",
        "init": model_ref(r["init"]),
        "dataset": dataset,
        "units": r.get("units") or f"{dataset}/units.jsonl",
        "max_length": r.get("max_length", 384),
        "out": f"{MODELS}/readers/{name}",
        "checkpoint_dir": f"{MODELS}/.checkpoints/reader-{name}",
        "dropout": TRAINING["dropout"],
        "train": train_settings(r),
        "info": {"reader": name, "description": r.get("description", "")},
    }


def reader_path(name):
    """What a reader loads: its trained folder (models/readers/<name>) or its `hf` id / folder."""
    if name not in READERS:
        raise ValueError(
            f"config key berm.labels.reader: {name!r} is not a key of `readers` "
            f"(defined: {', '.join(READERS) or 'none'})"
        )
    r = READERS[name]
    return r["hf"] if "hf" in r else f"{MODELS}/readers/{name}"


def spec_inputs(spec):
    """Dataset marker, negatives, teacher scores, BERM labels, a reader's units file and
    initial model of a training spec (a dataset's units.jsonl comes with its marker)."""
    files = [f"{spec['dataset']}/dataset.json"]
    files += [spec["negatives"]] if spec.get("negatives") else []
    files += model_files(spec["init"])
    files += [spec["teacher"]] if spec.get("teacher") else []
    if spec.get("units") and spec["units"] != f"{spec['dataset']}/units.jsonl":
        files.append(spec["units"])
    return files + ([spec["berm"]["labels"]] if spec.get("berm") else [])


# BERM (rules/labels.smk): essential-unit labels of the pairs a recipe with a `berm` term trains on.
BERM = config["berm"]
BERM_LABELS = BERM["labels"]


def berm_spec(recipe, dataset):
    """The `berm` loss term of a training spec (None without one): weights plus the labels file."""
    b = recipe.get("berm")
    if not b:
        return None
    return {
        "labels": f"{dataset}/berm/train/labels.jsonl",
        "scale": recipe.get("scale", 1.0),
        **b,
    }


def label_max_pairs(split):
    """All training pairs; a seeded sample of test pairs for the analyses (BERM Table 5)."""
    return None if split == "train" else BERM["analysis"]["pairs"]


def berm_reader():
    """The reader whose start probabilities enter the labels (None: BM25 only, the official code)."""
    name = BERM_LABELS["reader"]
    return None if name is None else reader_path(name)


def reader_files():
    ref = berm_reader()
    return model_files(ref) if ref else []


def label_shards(dataset, split):
    n = BERM_LABELS["shards"]
    return [f"{DATA}/{dataset}/berm/{split}/labels.{i}-of-{n}.jsonl" for i in range(n)]


BERM_FIGURES = [
    f"{RESULTS}/berm/figure4.png" if BERM_GRID else [],
    f"{RESULTS}/berm/figure5.png",
]


def berm_grid_points():
    """BERM Figure 4: every (alpha, beta) point with its system and its metrics on the targets."""
    return [
        {
            "alpha": a,
            "beta": b,
            "system": name,
            "metrics": [f"{METRICS}/{t}/{name}.json" for t in TARGETS],
        }
        for (a, b), name in sorted(BERM_GRID.items())
    ]


def tsne_domains():
    """BERM Figure 5: the source and the targets (or config berm.analysis.tsne_domains)."""
    names = BERM["analysis"].get("tsne_domains") or [SOURCE, *TARGETS]
    return {n: f"{DATA}/{check_dataset(n)}" for n in names}


def analysis_labels(dataset):
    """BERM Tables 5-6: the labelled pairs of a dataset's evaluation split (rules/labels.smk)."""
    return f"{DATA}/{dataset}/berm/{eval_split(dataset)}/labels.jsonl"


def system_scale(system):
    """The inverse temperature a trained system's logits use (1 for a system no recipe trained)."""
    name = system if system in RECIPES else TRAIN_RUNS.get(system, (None,))[0]
    return RECIPES[name].get("scale", 1.0) if name else 1.0


def recipe_code(run):
    """The library modules a training run executes: the trainer, its loss, its BERM term."""
    r = RECIPES[TRAIN_RUNS[run][0]]
    mods = [*TRAINER_CODE, LOSS_MODULES[r["loss"]]]
    if r.get("berm"):
        mods += ["zsdr.training.berm", "zsdr.losses.berm", "zsdr.data.units"]
    return code(*mods)


def launch_settings(item):
    """How a training job starts: processes per node, nodes, launcher (a recipe may set its own processes)."""
    out = {k: TRAINING[k] for k in ("processes", "nodes", "launcher")}
    if item.get("processes"):
        out["processes"] = item["processes"]
    return out


def spec_summary(spec, launch):
    """One line with the hyperparameters a dry run shows (`snakemake -n`)."""
    t = spec["train"]
    length = (
        f"{t['max_steps']} steps" if t.get("max_steps") else f"{t['epochs']} epochs"
    )
    b = spec.get("berm")
    berm = (
        f"; + BERM R1 x{b['r1_weight']:g} + R2 x{b['r2_weight']:g}"
        f"{' (double softmax)' if b.get('double_softmax') else ''}, labels "
        f"{BERM_LABELS['variant']} BM25 + {BERM_LABELS['delta']:g} x reader "
        f"{BERM_LABELS['reader']}"
        if b
        else ""
    )
    enc = spec.get("encoder", {})
    lengths = (
        f"q{enc.get('query_max_length', '-')}/d{enc.get('doc_max_length', '-')}"
        if spec["kind"] == "bi_encoder"
        else f"pair {spec['max_length']}"
    )
    data = (
        f"loss {spec.get('loss', 'lce')} with {spec['negatives_per_query']} negative(s) "
        f"from {os.path.basename(spec['negatives'])}"
        if spec.get("negatives")
        else f"loss start/end cross-entropy on the {spec['units']} answers"
    )
    return (
        f"init {spec['init']}; {data}; batch {t['batch_size']} x "
        f"{launch['processes'] * launch['nodes']} process(es) x grad-acc {t.get('grad_accum', 1)}; "
        f"{t.get('optimizer', 'adamw')} lr {t['lr']:g}, {t.get('schedule', 'linear')}, warmup "
        f"{t.get('warmup_steps', 0)}; {length}; max length {lengths}; {t['precision']}{berm}"
    )


LOSS_MODULES = {
    "pairwise_nll": "zsdr.losses.contrastive",
    "contrastive": "zsdr.losses.contrastive",
    "margin_mse": "zsdr.losses.margin_mse",
}
TRAINER_CODE = (
    "zsdr.training.trainer",
    "zsdr.training.data",
    "zsdr.training.tasks",
    "zsdr.training.distributed",
    "zsdr.training.recipes",
    "zsdr.models.encoder",
    "zsdr.data.formats",
)
TRIPLES_SOURCES = sorted(
    {
        train_source(x)
        for x in [*RECIPES.values(), *CROSS_ENCODERS.values()]
        if x["negatives"] == "triples"
    }
)
ANCE_RUNS = [r for r, (n, _) in TRAIN_RUNS.items() if RECIPES[n]["negatives"] == "ance"]


def previous_system(run):
    """The system whose model mines the negatives of an ANCE run: the last episode or the init recipe."""
    name, k = TRAIN_RUNS[run]
    return RECIPES[name]["init"] if k == 1 else f"{name}-ep{k - 1}"


# Resolve every training spec now, so a config mistake stops any command with the key to fix.
for _run in TRAIN_RUNS:
    train_spec(_run)
for _name in CROSS_ENCODERS:
    cross_encoder_spec(_name)
for _name in TRAINED_READERS:
    reader_spec(_name)
berm_reader()
