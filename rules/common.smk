# Helpers and target builders shared by every rule file. No rules here.

import os
import re
import signal
import sys

from zsdr.data import registry
from zsdr.models.released import RELEASES
from zsdr.models.released import remote_files as released_files
from zsdr.tables.figures import FIGURES as FIGURE_SPECS
from zsdr.tables.inputs import cell_file
from zsdr.tables.render import required_cells, required_statistics, spec_files
from zsdr.tables.spec import all_specs, load_systems
from zsdr.workflow import check_model_reference, code_files


def _wait_for_the_job(signum, frame):
    print(
        f"{signal.Signals(signum).name} received: waiting for the running job to checkpoint and stop",
        file=sys.stderr,
        flush=True,
    )


# Inside a SLURM job each rule runs in a Snakemake process under srun. The warning SLURM sends before a
# time limit (sbatch --signal=USR1@300, profiles/slurm) reaches every process of that step: this Snakemake
# would die of it (SIGUSR1's default action) and the step with it, killing the training script before it
# could write its checkpoint. A handler keeps this process waiting for the script instead; the script
# checkpoints, exits 128 + 10, the job fails and its retry resumes. (A handler, not SIG_IGN: the scripts
# started from here must not inherit an ignored SIGUSR1.)
if os.environ.get("SLURM_JOB_ID"):
    try:
        signal.signal(signal.SIGUSR1, _wait_for_the_job)
    except ValueError:  # not the main thread
        pass

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


# Library modules that others import at module level: listing the importer lists them too.
CODE_IMPORTS = {
    "zsdr.models.encoder": (
        "zsdr.models.adapters",
        "zsdr.models.soft_tokens",
        "zsdr.models.checkpoints",
    ),
    "zsdr.models.released": (
        "zsdr.models.encoder",
        "zsdr.models.adapters",
        "zsdr.models.soft_tokens",
        "zsdr.models.checkpoints",
    ),
    "zsdr.pretrain.coco": ("zsdr.models.checkpoints",),
    "zsdr.training.berm": ("zsdr.training.sections",),
    "zsdr.training.modir": ("zsdr.training.sections",),
    "zsdr.training.idro": ("zsdr.training.sections",),
    "zsdr.evaluation.cocodr": ("zsdr.evaluation.domain", "zsdr.evaluation.case_study"),
    "zsdr.tables.rmsc_figures": (
        "zsdr.tables.cocodr_figures",
        "zsdr.tables.modir_figures",
    ),
}


def code(*modules):
    """The source files of the zsdr modules a rule runs (as inputs, so code edits re-plan it)."""
    modules = [m for name in modules for m in (name, *CODE_IMPORTS.get(name, ()))]
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
REMOTE = {**registry.remote_files(), **released_files()}


def released_archive(name):
    """The downloaded archive of a release (zsdr.models.released.RELEASES); none for an archive kept in
    a hub repository, which the job reads through the Hugging Face cache like any hub file.
    """
    if RELEASES[name].hub_file:
        return []
    return [f"{DOWNLOADS}/{registry.RemoteFile(RELEASES[name].url).local_path}"]


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
# COCO-DR's retrieval-oriented pretrained backbones (rules/cocodr.smk): `hf` ones are used as
# released, the others trained with COCO's objective into models/pretrained/<name>.
COCODR = config["cocodr"]
PRETRAINED = COCODR.get("pretrained", {})
TRAINED_PRETRAINED = [n for n, p in PRETRAINED.items() if "hf" not in p]
TRAIN_RUNS = {}  # run name -> (recipe, episode)


def mixture_per_target(recipe):
    """A `mixture` recipe (RMSC) with a target set trains once per target."""
    sets = (recipe.get("mixture") or {}).get("sets", [])
    return any(s["domain"] == "target" for s in sets)


for _name, _r in RECIPES.items():
    _e = _r.get("episodes", 1)
    if _e > 1 and _r["negatives"] != "ance":
        raise ValueError(
            f"config key recipes.{_name}.episodes: {_e} episodes need `negatives: ance`"
        )
    if (
        _r["negatives"] == "ance"
        and _r["init"] not in RECIPES
        and not _r.get("base_system")
    ):
        raise ValueError(
            f"config key recipes.{_name}.init: ANCE episodes mine with the previous model, "
            f"so init must be another recipe (got {_r['init']!r}) or `base_system` must name "
            f"the system that mines"
        )
    if _r.get("head") == "new" and _r["init"] in RECIPES:
        raise ValueError(
            f"config key recipes.{_name}.head: `new` would discard the head of the trained "
            f"{_r['init']!r} it starts from (set `head: checkpoint`, or init from a plain backbone)"
        )
    if _r.get("dro") and _r["negatives"] != "ance":
        raise ValueError(
            f"config key recipes.{_name}.dro: the query clusters are refreshed with each ANCE "
            f"episode's negatives, so a `dro` recipe needs `negatives: ance`"
        )
    if _r.get("mixture") and (
        _r["negatives"] != "random" or _r["loss"] != "contrastive"
    ):
        raise ValueError(
            f"config key recipes.{_name}.mixture: RMSC's joint training draws one random "
            f"negative per query (set negatives: random, loss: contrastive)"
        )
    if _r.get("mixture") and not _r["train"].get("max_steps"):
        raise ValueError(
            f"config key recipes.{_name}.train.max_steps: a mixture recipe is evaluated at "
            f"snapshots, so its length is given in steps"
        )
    if _r["negatives"] == "random" and not _r.get("mixture"):
        raise ValueError(
            f"config key recipes.{_name}.negatives: random negatives come with a `mixture` "
            f"section (the supervision sets)"
        )
    if "modir" in _r or mixture_per_target(_r):
        continue  # one run per target (below)
    for _k in range(1, _e + 1):
        TRAIN_RUNS[_name if _e == 1 else f"{_name}-ep{_k}"] = (_name, _k)

# DDR's domain adaption modules (rules/pretrain.smk): a DAM is named by its chain of MLM stages,
# <backbone>--<corpus>[--<corpus>...], e.g. tiny-roberta--mini-source--mini-alpha = the tiny RoBERTa
# after MLM on the source corpus, then on mini-alpha ("sequential initialisation"). Recipes name
# a DAM as their `init`; a REM recipe's `target_dam` (default: its init) is the chain every
# target's DAM continues; a `per_target_init` recipe (DDR\D) trains once per dataset d, from
# the DAM <per_target_init>--<d>, as runs <recipe>@<d>.
DDR = config["ddr"]
DAM_SEP = "--"
CONFIGURED_DATASETS = list(
    dict.fromkeys([SOURCE, *TARGETS, *config["datasets"]["extra"]])
)


def dam_parts(chain, where):
    """``(backbone, [corpus, ...])`` of a DAM chain, checked against the config."""
    base, *corpora = chain.split(DAM_SEP)
    if base not in config["backbones"] or not corpora:
        raise ValueError(
            f"config key {where}: DAM {chain!r} must be <backbone>--<corpus>[--<corpus>...] "
            f"with a key of `backbones` first (defined: {', '.join(config['backbones'])})"
        )
    for c in corpora:
        if c not in CONFIGURED_DATASETS and c not in MINI_DATASETS:
            raise ValueError(
                f"config key {where}: DAM {chain!r} trains on {c!r}, which is not a configured "
                f"dataset (datasets.source, datasets.targets or datasets.extra)"
            )
    return base, corpora


def is_dam(name):
    return DAM_SEP in name and name.split(DAM_SEP)[0] in config["backbones"]


PER_TARGET = {}  # run <recipe>@<dataset> -> dataset
for _name, _r in RECIPES.items():
    if _r.get("per_target_init"):
        if _r.get("episodes", 1) > 1 or _r.get("rem"):
            raise ValueError(
                f"config key recipes.{_name}.per_target_init: per-target training is for "
                f"single-episode full fine-tuning (no episodes, no rem)"
            )
        for _d in CONFIGURED_DATASETS:
            if _d != _r.get("dataset", SOURCE):
                TRAIN_RUNS[f"{_name}@{_d}"] = (_name, 1)
                PER_TARGET[f"{_name}@{_d}"] = _d


# MoDIR (METHODS.md §3): a recipe with a `modir` section trains once per target dataset d, as runs
# <recipe>@<d>, on the source batches plus d's unlabelled target triples (rule modir_triples). Its
# system on d is that run at `modir.eval_step` (a snapshot, or the end of the run); on the source
# dataset it is the run of `modir.source_target` (default: the first target) [X]. The step-0 model
# of the curves is the recipe's `base_system` (default: its init recipe), which also mines the
# ANCE negatives of an ANCE+MoDIR recipe once for all its targets.
MODIR = config["modir"]
MODIR_TARGETS = [d for d in CONFIGURED_DATASETS if d != SOURCE]
# A recipe's `targets` (default: every target) limits its runs; an empty list trains none.
MODIR_RECIPES = [
    n
    for n, r in RECIPES.items()
    if r.get("modir") and (r.get("targets") is None or r["targets"])
]


def recipe_targets(name):
    """The targets a per-target recipe (MoDIR, RMSC) trains one model for: its `targets`, else every
    configured dataset but the source."""
    wanted = RECIPES[name].get("targets")
    if wanted is None:
        return MODIR_TARGETS
    unknown = [d for d in wanted if d not in MODIR_TARGETS]
    if unknown:
        raise ValueError(
            f"config key recipes.{name}.targets: {unknown} are not configured targets "
            f"(datasets.targets / datasets.extra)"
        )
    return list(wanted)


MODIR_CURVES = MODIR["curves"]
MODIR_CURVE_DATASETS = MODIR_CURVES.get("datasets") or TARGETS
for _name in MODIR_RECIPES:
    if RECIPES[_name].get("episodes", 1) > 1 or RECIPES[_name].get("rem"):
        raise ValueError(
            f"config key recipes.{_name}.modir: MoDIR continues one model per target "
            f"(set episodes: 1, no rem)"
        )
    if not RECIPES[_name]["train"].get("max_steps"):
        raise ValueError(
            f"config key recipes.{_name}.train.max_steps: MoDIR evaluates every target at a "
            f"fixed step, so its length is given in steps"
        )
    for _d in recipe_targets(_name):
        TRAIN_RUNS[f"{_name}@{_d}"] = (_name, 1)
        PER_TARGET[f"{_name}@{_d}"] = _d
for _name in MODIR_CURVES["recipes"]:
    if _name not in MODIR_RECIPES:
        raise ValueError(
            f"config key modir.curves.recipes: {_name!r} is not a recipe with a `modir` section"
        )


# RMSC (METHODS.md §5; rules/rmsc.smk): a `mixture` recipe with a target set trains once per
# target d, as runs <recipe>@<d> (`targets` limits them); its system on d is that run, on the
# source dataset the run of `rmsc.source_target` (else its first target) [X]. Weak pairs are
# data/<corpus>/weak/<method>.jsonl; the source's weak set of a run uses its target's method.
RMSC = config["rmsc"]
RMSC_WEAK = RMSC.get("weak", {})
RMSC_QGEN = RMSC.get("qgen", {})
# whose word pieces SCL's spans are counted in
WEAK_TOKENIZER = RMSC_WEAK.get("tokenizer") or COCODR["spans"]["tokenizer"]
GENERATORS = RMSC_QGEN.get("generators", {})
TRAINED_GENERATORS = [n for n, g in GENERATORS.items() if "hf" not in g]
MIXTURE_RECIPES = [n for n, r in RECIPES.items() if r.get("mixture")]
PER_TARGET_MIXTURES = [
    n
    for n in MIXTURE_RECIPES
    if mixture_per_target(RECIPES[n])
    and (RECIPES[n].get("targets") is None or RECIPES[n]["targets"])
]


for _name in PER_TARGET_MIXTURES:
    if RECIPES[_name].get("episodes", 1) > 1 or RECIPES[_name].get("rem"):
        raise ValueError(
            f"config key recipes.{_name}.mixture: a mixture recipe is one run per target "
            f"(set episodes: 1, no rem)"
        )
    for _d in recipe_targets(_name):
        TRAIN_RUNS[f"{_name}@{_d}"] = (_name, 1)
        PER_TARGET[f"{_name}@{_d}"] = _d


def weak_method(entry, target, where):
    """The extraction method of a weak set: its own, else the target's, else rmsc.weak.method."""
    method = entry.get("method") or RMSC_WEAK.get("methods", {}).get(target)
    method = method or RMSC_WEAK.get("method", "scl")
    if method == "qgen" and RMSC_QGEN.get("generator") not in GENERATORS:
        raise ValueError(
            f"config key {where}: QGen pairs need rmsc.qgen.generator to name a key of "
            f"rmsc.qgen.generators (defined: {', '.join(GENERATORS) or 'none'})"
        )
    return method


def weak_file(corpus, method):
    return f"{DATA}/{corpus}/weak/{method}.jsonl"


def mixture_sets(name, target):
    """The resolved supervision sets (zsdr.training.rmsc) of recipe ``name``'s run on ``target``."""
    out = []
    m = RECIPES[name]["mixture"]
    for i, entry in enumerate(m["sets"]):
        where = f"recipes.{name}.mixture.sets[{i}]"
        corpus = SOURCE if entry["domain"] == "source" else target
        resolved = {
            "name": entry.get("name") or f"{entry['domain']}-{entry['relevance']}",
            "domain": entry["domain"],
            "relevance": entry["relevance"],
            "dataset": f"{DATA}/{corpus}",
            "size": entry.get("size"),
            "negatives": m.get("weak_negatives", "corpus"),
        }
        if entry["relevance"] == "weak":
            resolved["pairs"] = weak_file(corpus, weak_method(entry, target, where))
        out.append(resolved)
    return out


RMSC_SOURCE_CONTEXT = list(RMSC.get("source_context", ["target", "human"]))
_domain, _relevance = RMSC_SOURCE_CONTEXT
if _domain not in ("source", "target") or _relevance not in ("human", "weak"):
    raise ValueError(
        f"config key rmsc.source_context: {RMSC_SOURCE_CONTEXT} must be [domain, relevance], "
        "domain source or target, relevance human or weak (e.g. [target, human])"
    )


def soft_context(context):
    """``[T] x [H]`` for ``[target, human]``: a soft-token context as the summaries print it."""
    return f"[{context[0][0].upper()}] x [{context[1][0].upper()}]"


def mixture_model(name, dataset, step=None):
    """The folder of mixture recipe ``name``'s model on ``dataset`` after ``step`` steps (default: the end)."""
    run = name
    if name in PER_TARGET_MIXTURES:
        targets = recipe_targets(name)
        if dataset in (None, SOURCE):
            wanted = RMSC.get("source_target")
            target = wanted if wanted in targets else targets[0]
        elif dataset in targets:
            target = dataset
        else:
            raise ValueError(
                f"config key recipes.{name}.targets: {name} has no model for {dataset!r}; add "
                f"the dataset to its targets (an RMSC model is trained per target)"
            )
        run = f"{name}@{target}"
    path = f"{MODELS}/trained/{run}"
    total = RECIPES[name]["train"]["max_steps"]
    if step is None or int(step) == total:
        return path
    every = RMSC_CURVES.get("snapshot_every", 1000)
    if name not in RMSC_CURVE_RECIPES or int(step) % every or int(step) > total:
        raise ValueError(
            f"config key rmsc.curves: the model of {name} after {step} steps is not saved"
        )
    return f"{path}/snapshots/step-{int(step):09d}"


RMSC_CURVES = RMSC.get("curves", {})
RMSC_CURVE_RECIPES = list(
    dict.fromkeys([*RMSC_CURVES.get("figure2", []), *RMSC_CURVES.get("figure3", [])])
)
RMSC_CURVE_DATASETS = RMSC_CURVES.get("datasets") or TARGETS
for _name in RMSC_CURVE_RECIPES:
    if _name not in MIXTURE_RECIPES:
        raise ValueError(
            f"config key rmsc.curves: {_name!r} is not a recipe with a `mixture` section"
        )


def weak_inputs(wc):
    """What a weak-pair extraction reads besides the corpus: SCL the span tokenizer, QGen its generator."""
    if wc.method == "scl":
        return model_files(model_ref(WEAK_TOKENIZER))
    if wc.method == "qgen":
        return model_files(generator_path(RMSC_QGEN["generator"]))
    return []


def weak_summary(wc):
    """What a dry run shows of a weak-pair extraction: its settings, the open choices marked [X]."""
    w, q = RMSC_WEAK, RMSC_QGEN
    common = (
        f"at most {w.get('max_pairs') or 'every document'} pairs [X], "
        f"{w.get('pairs_per_document', 1)} per document [X], seeded document order"
    )
    if wc.method == "scl":
        return (
            f"SCL: two random spans of <= {w.get('max_tokens', 30)} {WEAK_TOKENIZER} word pieces "
            f"(new span p {w.get('new_span_probability', 0.1):g}) [X: COCO-DR's spans]; {common}"
        )
    if wc.method == "ict":
        return (
            f"ICT: a sentence vs the rest of its document, kept in its context with p "
            f"{w.get('keep_probability', 0.1):g} [X]; {common}"
        )
    return (
        f"QGen: {q.get('queries_per_document', 3)} queries per document by "
        f"{generator_path(q['generator'])} [X: the generator], top-k {q.get('top_k', 25)} top-p "
        f"{q.get('top_p', 0.95):g}, <= {q.get('max_length', 64)} tokens; {common}"
    )


def rmsc_curve_points(figure):
    """RMSC Figure 2 / 3: every evaluated step of each recipe on the source dev set (in-domain)
    and on each curve target the recipe has a model for."""
    points = []
    for name in RMSC_CURVES.get(f"figure{figure}", []):
        targets = [
            d
            for d in RMSC_CURVE_DATASETS
            if name not in PER_TARGET_MIXTURES or d in recipe_targets(name)
        ]
        for n in rmsc_steps(name):
            system = RMSC_STEP_SYSTEMS[(name, n)]
            for d in [SOURCE, *targets]:
                points.append(
                    {
                        "recipe": name,
                        "label": SYSTEMS[name].get("description", name),
                        "step": n,
                        "dataset": d,
                        "in_domain": d == SOURCE,
                        "metrics": f"{METRICS}/{d}/{system}.json",
                    }
                )
    return points


def curves_summary(figure):
    """What a dry run shows of a curve figure: its recipes, datasets and the evaluation interval [X]."""
    recipes = ", ".join(RMSC_CURVES.get(f"figure{figure}", []))
    return (
        f"{recipes} evaluated every {RMSC_CURVES.get('snapshot_every', 1000)} steps [X] on "
        f"{SOURCE} (in-domain) and {', '.join(RMSC_CURVE_DATASETS)} [X]; a per-target model "
        f"stands on {SOURCE} for rmsc.source_target {RMSC.get('source_target')} [X], in the "
        f"soft-token context {soft_context(RMSC_SOURCE_CONTEXT)} [X] rmsc.source_context"
    )


RMSC_FIGURES = [
    f"{RESULTS}/rmsc/figure{n}.png" for n in (2, 3) if RMSC_CURVES.get(f"figure{n}")
]


def generator_path(name):
    """What a QGen generator loads: its `hf` id / folder or models/generators/<name>."""
    if name not in GENERATORS:
        raise ValueError(
            f"config key rmsc.qgen.generator: {name!r} is not a key of rmsc.qgen.generators "
            f"(defined: {', '.join(GENERATORS) or 'none'})"
        )
    g = GENERATORS[name]
    return on_this_machine(g["hf"]) if "hf" in g else f"{MODELS}/generators/{name}"


def generator_spec(name):
    """The resolved spec (zsdr.models.generator) of a generator the pipeline trains."""
    g = GENERATORS[name]
    where = f"rmsc.qgen.generators.{name}"
    if "build" not in g or "train" not in g or "tokenizer" not in g:
        raise ValueError(
            f"config key {where}: give `hf` (a released generator) or `build`, `tokenizer` and "
            f"`train` (a tiny T5 trained by the pipeline)"
        )
    if g["tokenizer"] not in config["backbones"]:
        raise ValueError(
            f"config key {where}.tokenizer: {g['tokenizer']!r} is not a key of `backbones`"
        )
    return {
        "kind": "generator",
        "init": f"{MODELS}/generators/{name}.init",
        "dataset": f"{DATA}/{check_dataset(g.get('dataset', SOURCE))}",
        "split": "train",
        "max_length": g.get("max_length", 256),
        "query_max_length": g.get("query_max_length", 64),
        "out": f"{MODELS}/generators/{name}",
        "checkpoint_dir": f"{MODELS}/.checkpoints/generator-{name}",
        "dropout": TRAINING["dropout"],
        "train": train_settings(g),
        "info": {"generator": name, "description": g.get("description", "")},
    }


def rmsc_steps(name):
    """The evaluated steps of a curve recipe: every snapshot and the end."""
    total = RECIPES[name]["train"]["max_steps"]
    every = RMSC_CURVES.get("snapshot_every", 1000)
    return [*range(every, total, every), total]


def modir_base(name):
    """The system a MoDIR recipe starts from: `base_system`, else its init recipe."""
    return RECIPES[name].get("base_system") or RECIPES[name]["init"]


def is_curve_run(name, dataset):
    return name in MODIR_CURVES["recipes"] and dataset in MODIR_CURVE_DATASETS


def modir_total(name, dataset):
    """Steps of the MoDIR run of recipe ``name`` on target ``dataset``: `modir.curves.max_steps`
    for the curve runs, else `modir.eval_step`, else the recipe's `train.max_steps`."""
    if is_curve_run(name, dataset) and MODIR_CURVES.get("max_steps"):
        return int(MODIR_CURVES["max_steps"])
    return int(MODIR.get("eval_step") or RECIPES[name]["train"]["max_steps"])


def modir_steps(name, dataset):
    """The evaluated steps of a curve run: 0 (the base system), every snapshot, the end."""
    total = modir_total(name, dataset)
    return [
        0,
        *range(MODIR_CURVES["snapshot_every"], total, MODIR_CURVES["snapshot_every"]),
        total,
    ]


def modir_source_target(name):
    return MODIR.get("source_target") or recipe_targets(name)[0]


def modir_model(name, dataset, step=None):
    """The folder of recipe ``name``'s model on ``dataset`` after ``step`` steps (default:
    `modir.eval_step`, else the end of the run); on the source dataset, the model of
    `modir.source_target`."""
    if dataset in (None, SOURCE):
        target = modir_source_target(name)
    elif dataset in recipe_targets(name):
        target = dataset
    else:
        raise ValueError(
            f"config key recipes.{name}.targets: {name} has no model for {dataset!r}; add the "
            f"dataset to its targets (a MoDIR model is trained per target)"
        )
    total = modir_total(name, target)
    step = int(step or MODIR.get("eval_step") or total)
    run = f"{MODELS}/trained/{name}@{target}"
    if step == total:
        return run
    every = MODIR_CURVES["snapshot_every"] if is_curve_run(name, target) else None
    if not every or step % every or step > total:
        raise ValueError(
            f"config key modir: the model of {name} on {target} after {step} steps is not "
            f"saved (the run has {total} steps"
            + (f" and a snapshot every {every})" if every else " and no snapshots)")
        )
    return f"{run}/snapshots/step-{step:09d}"


def modir_dataset(section):
    """The target of a MoDIR table or figure (`modir.<section>.dataset`, else the first curve dataset)."""
    name = MODIR[section].get("dataset") or MODIR_CURVE_DATASETS[0]
    if name not in MODIR_CURVE_DATASETS:
        raise ValueError(
            f"config key modir.{section}.dataset: {name!r} is not a curve dataset "
            f"(modir.curves.datasets: {', '.join(MODIR_CURVE_DATASETS)})"
        )
    return name


def modir_label(name):
    """A recipe's label in the figures: systems.yaml's, else its name."""
    known = load_systems().get(name)
    return known.label if known else name


def modir_points():
    """Every (curve recipe, dataset, step) with its domain-analysis and metrics files."""
    return [
        {
            "recipe": r,
            "label": modir_label(r),
            "dataset": d,
            "step": n,
            "domain": f"{STATS}/modir/{d}/{system}.json",
            "metrics": f"{METRICS}/{d}/{system}.json",
        }
        for (r, d, n), system in MODIR_STEP_SYSTEMS.items()
    ]


def modir_logs():
    """``{dataset: {recipe: train_log.jsonl}}`` of the curve runs (Local Domain-Acc)."""
    return {
        d: {
            r: f"{MODELS}/trained/{r}@{d}/train_log.jsonl"
            for r in MODIR_CURVES["recipes"]
        }
        for d in MODIR_CURVE_DATASETS
    }


def modir_figure5():
    f5 = MODIR["figure5"]
    recipe = f5.get("recipe") or MODIR_CURVES["recipes"][0]
    if recipe not in MODIR_CURVES["recipes"]:
        raise ValueError(
            f"config key modir.figure5.recipe: {recipe!r} is not in modir.curves.recipes"
        )
    return {"recipe": recipe, "datasets": f5.get("datasets") or MODIR_CURVE_DATASETS}


def modir_check_steps(section, recipes, steps):
    d = modir_dataset(section)
    for r in recipes:
        if (r, d, 0) not in MODIR_STEP_SYSTEMS:
            raise ValueError(
                f"config key modir.{section}: {r!r} is not a curve recipe (modir.curves.recipes)"
            )
        missing = [n for n in steps if (r, d, n) not in MODIR_STEP_SYSTEMS]
        if missing:
            raise ValueError(
                f"config key modir.{section}.steps: {missing} are not evaluated steps of {r} "
                f"on {d} ({modir_steps(r, d)}; see modir.curves)"
            )


def modir_tsne_models(options=False):
    """MoDIR Figure 4: ``{panel label: model folder}``, the base model then every recipe x step
    (``options``: each panel's encoder settings instead of its model)."""
    f4, d = MODIR["figure4"], modir_dataset("figure4")
    modir_check_steps("figure4", f4["recipes"], f4["steps"])
    out = {}
    for r in f4["recipes"]:
        for n in f4["steps"]:
            system = MODIR_STEP_SYSTEMS[(r, d, n)]
            label = (
                f"{modir_label(system)} (step 0)"
                if n == 0
                else f"{modir_label(r)}, step {n}"
            )
            out[label] = (
                encoder_options(system, d) if options else dense_model(system, d)
            )
    return out


def modir_case():
    """MoDIR Table 4: the systems before and after MoDIR."""
    t4 = MODIR["table4"]
    after = t4.get("after") or (MODIR_CURVES["recipes"] or MODIR_RECIPES)[0]
    if after not in MODIR_RECIPES:
        raise ValueError(
            f"config key modir.table4.after: {after!r} is not a MoDIR recipe"
        )
    return [t4.get("before") or modir_base(after), after]


MODIR_FIGURES = (
    [f"{RESULTS}/modir/figure{n}.png" for n in (3, 4, 5)]
    if MODIR_CURVES["recipes"]
    else []
)


def dam_path(chain, where):
    dam_parts(chain, where)
    return f"{MODELS}/dams/{chain}"


def dam_settings(corpus):
    """The MLM settings of a DAM trained on ``corpus``: `ddr.dam.source` for the source corpus (or
    `ddr.dam.sources`), else `ddr.dam.target`, with `ddr.dam.datasets.<corpus>` merged over them.
    """
    dam = DDR["dam"]
    role = "source" if corpus in (dam.get("sources") or [SOURCE]) else "target"
    base, over = dam[role], dam["datasets"].get(corpus, {})
    return {
        **base,
        **over,
        "train": {**base["train"], **over.get("train", {})},
        "role": role,
    }


FIGURE4 = DDR["figure4"]
FIGURE4_DATASETS = FIGURE4.get("datasets") or TARGETS


def figure4_dam(dataset):
    """The target DAM whose snapshots DDR Figure 4 evaluates on ``dataset``."""
    recipe = RECIPES[FIGURE4["system"]]
    return f"{recipe.get('target_dam') or recipe['init']}{DAM_SEP}{dataset}"


def figure4_steps(dataset):
    """The snapshot steps of ``dataset``'s target DAM (0 = the source DAM, before adaptation)."""
    every = FIGURE4["snapshot_every"]
    total = dam_settings(dataset)["train"].get("max_steps")
    if not total:
        raise ValueError(
            f"config key ddr.figure4: the target DAM of {dataset} trains by epochs; give "
            f"ddr.dam.target.train.max_steps (or ddr.dam.datasets.{dataset}.train.max_steps) so "
            f"the snapshot steps are known when the DAG is built"
        )
    return [0, *range(every, total, every)]


def dam_launch(chain):
    """How the DAM ``chain``'s job starts (its last corpus's settings may set `processes`)."""
    return launch_settings(dam_settings(chain.split(DAM_SEP)[-1]))


def dam_spec(chain):
    """The resolved MLM spec (zsdr.pretrain.mlm) of the DAM ``chain``."""
    where = f"DAM {chain}"
    base, corpora = dam_parts(chain, where)
    corpus = corpora[-1]
    prev = DAM_SEP.join([base, *corpora[:-1]])
    init = model_ref(base) if len(corpora) == 1 else dam_path(prev, where)
    s = dam_settings(corpus)
    train = train_settings(s)
    if corpus in FIGURE4_DATASETS and chain == figure4_dam(corpus):
        train["snapshot_every"] = FIGURE4["snapshot_every"]
    return {
        "kind": "mlm",
        "init": init,
        "dataset": f"{DATA}/{corpus}",
        "max_length": s["max_length"],
        "mlm_probability": DDR["dam"]["mlm_probability"],
        "tie_embeddings": DDR["dam"]["tie_embeddings"],
        "max_examples": s.get("max_examples"),
        "out": f"{MODELS}/dams/{chain}",
        "checkpoint_dir": f"{MODELS}/.checkpoints/dam-{chain}",
        "dropout": TRAINING["dropout"],
        "train": train,
        "info": {
            "dam": chain,
            "corpus": corpus,
            "role": s["role"],
            "from": prev if len(corpora) > 1 else base,
        },
    }


def recipe_run(name, episode=None):
    """The run that trains episode ``episode`` (default: the last) of recipe ``name``."""
    e = RECIPES[name].get("episodes", 1)
    return name if e == 1 else f"{name}-ep{episode or e}"


def trained_model(name):
    return f"{MODELS}/trained/{recipe_run(name)}"


# Retrieval systems (config `systems` plus one per trained run), by kind. A REM recipe's system
# is its REM on each dataset's DAM (the trained folder itself on its training dataset); a
# per-target recipe's system is its per-dataset run.
SYSTEMS = dict(config["systems"])
for _run, (_name, _k) in TRAIN_RUNS.items():
    if _run in PER_TARGET:
        continue
    _r = RECIPES[_name]
    _sys = {
        "kind": "dense",
        "model": f"{MODELS}/trained/{_run}",
        "description": _r.get("description", f"trained by recipe {_name}"),
        **_r.get("system", {}),
    }
    if _r.get("rem"):
        _sys |= {
            "rem_of": _run,
            "target_dam": _r.get("target_dam") or _r["init"],
            "train_dataset": _r.get("dataset", SOURCE),
        }
    if _r.get("per_target_init"):
        _sys["per_target"] = _name
    if _r.get("by_language"):
        _sys["by_language"] = _r["by_language"]
    SYSTEMS.setdefault(_run, _sys)
    if _run != _name and _k == _r.get("episodes", 1):
        SYSTEMS.setdefault(_name, _sys)
for _name in MODIR_RECIPES:
    SYSTEMS.setdefault(
        _name,
        {
            "kind": "dense",
            "model": modir_model(_name, modir_source_target(_name)),
            "description": RECIPES[_name].get(
                "description", f"trained by recipe {_name}"
            ),
            "modir": _name,
        },
    )
MODIR_STEP_SYSTEMS = {}  # (recipe, dataset, step) -> system evaluated for the curves
for _name in MODIR_CURVES["recipes"]:
    for _d in MODIR_CURVE_DATASETS:
        _eval = int(MODIR.get("eval_step") or modir_total(_name, _d))
        for _n in modir_steps(_name, _d):
            # step 0 is the base system, the evaluated step the recipe's own system
            _sys = {0: modir_base(_name), _eval: _name}.get(_n, f"{_name}.step{_n}")
            if _sys == f"{_name}.step{_n}":
                SYSTEMS.setdefault(
                    _sys,
                    {
                        "kind": "dense",
                        "model": modir_model(_name, _d, _n),
                        "description": f"{_name} after {_n} steps",
                        "modir": _name,
                        "modir_step": _n,
                    },
                )
            MODIR_STEP_SYSTEMS[(_name, _d, _n)] = _sys
for _name in PER_TARGET_MIXTURES:
    SYSTEMS.setdefault(
        _name,
        {
            "kind": "dense",
            "model": mixture_model(_name, SOURCE),
            "description": RECIPES[_name].get(
                "description", f"trained by recipe {_name}"
            ),
            "mixture": _name,
        },
    )
RMSC_STEP_SYSTEMS = {}  # (recipe, step) -> system evaluated for RMSC's curves
for _name in RMSC_CURVE_RECIPES:
    for _n in rmsc_steps(_name):
        _sys = (
            _name if _n == RECIPES[_name]["train"]["max_steps"] else f"{_name}.step{_n}"
        )
        if _sys != _name:
            SYSTEMS.setdefault(
                _sys,
                {
                    "kind": "dense",
                    "model": mixture_model(_name, SOURCE, _n),
                    "description": f"{_name} after {_n} steps",
                    "mixture": _name,
                    "mixture_step": _n,
                },
            )
        RMSC_STEP_SYSTEMS[(_name, _n)] = _sys
for _name, _s in config["systems"].items():
    if (
        "rem_of" in _s
    ):  # a trained REM on other DAMs (e.g. DDR\SI: target DAMs from the backbone)
        _rem = _s["rem_of"]
        if _rem not in RECIPES or not RECIPES[_rem].get("rem"):
            raise ValueError(
                f"config key systems.{_name}.rem_of: {_rem!r} is not a recipe with a `rem`"
            )
        SYSTEMS[_name] = {
            **{k: v for k, v in SYSTEMS[_rem].items() if k != "by_language"},
            "description": _s.get("description", ""),
            "target_dam": _s.get("target_dam") or SYSTEMS[_rem]["target_dam"],
            **({"by_language": _s["by_language"]} if _s.get("by_language") else {}),
        }
for _name, _s in SYSTEMS.items():
    for _lang, _other in _s.get("by_language", {}).items():
        if _other not in SYSTEMS or SYSTEMS[_other].get("by_language"):
            raise ValueError(
                f"config key {_name}.by_language.{_lang}: {_other!r} is not a system (or routes on itself)"
            )
# DDR Figure 4: the figure's REM on snapshots of each target DAM, <system>.dam-step<N>.
FIGURE4_SYSTEMS = {}  # (dataset, step) -> system
for _d in FIGURE4_DATASETS:
    for _n in figure4_steps(_d):
        _name = f"{FIGURE4['system']}.dam-step{_n}"
        SYSTEMS.setdefault(
            _name,
            {
                **SYSTEMS[FIGURE4["system"]],
                "dam_snapshot": _n,
                "description": f"DDR Figure 4: target DAM after {_n} steps",
            },
        )
        FIGURE4_SYSTEMS[(_d, _n)] = _name


def check_system(name, where):
    if name not in SYSTEMS:
        raise ValueError(
            f"config key {where}: system {name!r} is not defined under `systems` "
            f"(defined: {', '.join(SYSTEMS)})"
        )
    return name


# Negative files mined by the mine_negatives job, one per ANCE run and one per MoDIR recipe.
MINED = {
    r: (n, k)
    for r, (n, k) in TRAIN_RUNS.items()
    if RECIPES[n]["negatives"] == "ance" and r not in PER_TARGET
}
MINED |= {n: (n, 1) for n in MODIR_RECIPES if RECIPES[n]["negatives"] == "ance"}
ANCE_RUNS = list(MINED)


def previous_system(run):
    """The system whose model mines the negatives of an ANCE run: the last episode, the recipe's
    `base_system` or its init recipe."""
    name, k = MINED[run]
    if k > 1:
        return f"{name}-ep{k - 1}"
    return check_system(modir_base(name), f"recipes.{name}.base_system")


LENGTH_KEYS = ("query_max_length", "doc_max_length")


def recipe_lengths(name):
    """The query / document lengths a recipe trains at, where the config says them: its `encoder`,
    else its init recipe's (a key missing from both is the checkpoint's, unknown here).
    """
    out, seen = {}, set()
    while name in RECIPES and name not in seen:
        seen.add(name)
        enc = RECIPES[name].get("encoder", {})
        for k in LENGTH_KEYS:
            if k in enc:
                out.setdefault(k, enc[k])
        name = RECIPES[name]["init"]
    return out


def system_lengths(system):
    """The lengths a dense system encodes at, where the config says them: its own options, else
    those of the recipe that trained it."""
    spec = SYSTEMS[system]
    out = {k: spec[k] for k in LENGTH_KEYS if k in spec}
    recipe = (
        TRAIN_RUNS[system][0]
        if system in TRAIN_RUNS
        else spec.get("modir") or spec.get("mixture") or spec.get("per_target")
    )
    if recipe is None and system in RECIPES:
        recipe = system  # a recipe's last episode
    if recipe is None and "rem_of" in spec:
        recipe = TRAIN_RUNS[spec["rem_of"]][0]
    return {**recipe_lengths(recipe), **out} if recipe else out


def mining_lengths(run):
    """The lengths an ANCE run's negatives are mined at: the episode's own (the lengths it trains
    at), falling back to the previous system's where the config does not say them."""
    return recipe_lengths(MINED[run][0])


def mining_options(run, dataset):
    """The Encoder settings a mining job loads the previous model with: its mining system's, at the
    episode's query and document lengths."""
    return {**encoder_options(mining_system(run), dataset), **mining_lengths(run)}


def mining_system(run):
    """The system whose corpus embeddings an ANCE run's mining searches: the previous system when it
    encodes documents at the episode's length, else `<previous>.mine-d<length>` (the same model at
    the episode's document length; its own encode jobs)."""
    prev = previous_system(run)
    doc = mining_lengths(run).get("doc_max_length")
    if doc is None or system_lengths(prev).get("doc_max_length") == doc:
        return prev
    return f"{prev}.mine-d{doc}"


# The mining systems that encode the corpus at an episode's document length.
for _run in MINED:
    _sys = mining_system(_run)
    if _sys != previous_system(_run):
        _prev = previous_system(_run)
        SYSTEMS.setdefault(
            _sys,
            {
                **{k: v for k, v in SYSTEMS[_prev].items() if k != "by_language"},
                "doc_max_length": mining_lengths(_run)["doc_max_length"],
                "description": f"{_prev} encoding documents at {mining_lengths(_run)['doc_max_length']} "
                "tokens (ANCE mining)",
            },
        )
BM25_SYSTEMS = [n for n, s in SYSTEMS.items() if s["kind"] == "bm25"]
DENSE_SYSTEMS = [n for n, s in SYSTEMS.items() if s["kind"] == "dense"]


def language(name):
    """Analyzer language of a dataset (the registry's; mini domains are English)."""
    return registry.REGISTRY[name].language if name in registry.REGISTRY else "en"


def ddr_model(system, dataset):
    """DDR systems: ``(model, rem)`` on ``dataset``: the trained folder (DAM + REM) on the REM's
    training dataset (and at snapshot 0), else the dataset's DAM (or its snapshot) + the REM.
    """
    spec = SYSTEMS[system]
    snapshot = spec.get("dam_snapshot")
    if dataset is None or dataset == spec["train_dataset"] or snapshot == 0:
        return spec["model"], None
    dam = dam_path(f"{spec['target_dam']}{DAM_SEP}{dataset}", f"systems.{system}")
    if snapshot:
        dam = f"{dam}/snapshots/step-{snapshot:09d}"
    return dam, f"{spec['model']}/rem"


def routed(system, dataset):
    """The system that stands for ``system`` on ``dataset``: `by_language` sends the datasets of a
    language to that language's system (DDR: DuReader-trained models on the Chinese sets).
    """
    if dataset is None:
        return system
    return SYSTEMS[system].get("by_language", {}).get(language(dataset), system)


def dense_model(system, dataset=None):
    """What a dense system loads on ``dataset``: a backbone folder the DAG builds, a model folder
    (per dataset for DDR and per-target systems), or an HF id."""
    system = routed(system, dataset)
    spec = SYSTEMS[system]
    if "rem_of" in spec:
        return ddr_model(system, dataset)[0]
    if "modir" in spec:
        return modir_model(spec["modir"], dataset, spec.get("modir_step"))
    if "mixture" in spec:
        return mixture_model(spec["mixture"], dataset, spec.get("mixture_step"))
    if "per_target" in spec and dataset not in (
        None,
        RECIPES[spec["per_target"]].get("dataset", SOURCE),
    ):
        return f"{MODELS}/trained/{spec['per_target']}@{dataset}"
    if "backbone" in spec:
        name = spec["backbone"]
        if name not in config["backbones"]:
            raise ValueError(
                f"config key systems.{system}.backbone: {name!r} is not a key of `backbones`"
            )
        backbone = config["backbones"][name]
        return (
            f"{MODELS}/backbones/{name}"
            if "build" in backbone
            else on_this_machine(backbone["hf"])
        )
    if spec["model"] in RELEASES:
        return model_ref(spec["model"])
    return on_this_machine(spec["model"])


def dense_model_input(wc):
    """The model files a dense job waits for (none for a Hugging Face id)."""
    files = model_files(dense_model(wc.system, wc.dataset))
    system = routed(wc.system, wc.dataset)
    if "rem_of" in SYSTEMS[system]:
        files += model_files(SYSTEMS[system]["model"])
    if SYSTEMS[system].get("rem"):
        files += model_files(model_ref(SYSTEMS[system]["rem"]))
    return files


SYSTEM_KEYS = {
    "kind",
    "backbone",
    "model",
    "description",
    "rem_of",
    "target_dam",
    "train_dataset",
    "per_target",
    "dam_snapshot",
    "by_language",
    "modir",
    "modir_step",
    "mixture",
    "mixture_step",
}


def encoder_options(system, dataset=None):
    """The Encoder settings of a dense system (everything but kind/backbone/model/description);
    a REM on a DAM also gets the REM folder and its recipe's encoder settings (a DAM has none).
    """
    system = routed(system, dataset)
    spec = SYSTEMS[system]
    options = {k: v for k, v in spec.items() if k not in SYSTEM_KEYS}
    if options.get("rem") in RELEASES:
        options["rem"] = model_ref(options["rem"])
    if "rem_of" in spec:
        rem = ddr_model(system, dataset)[1]
        if rem:
            recipe = RECIPES[TRAIN_RUNS[spec["rem_of"]][0]]
            options = {
                **recipe.get("encoder", {}),
                **recipe.get("system", {}),
                **options,
                "rem": rem,
            }
    k = (
        RECIPES[spec["mixture"]]["mixture"].get("soft_tokens")
        if "mixture" in spec
        else None
    )
    if k and dataset == SOURCE:
        # [X] rmsc.source_context: the context an RMSC model encodes the source dataset in
        options = {
            **options,
            "soft_tokens": {"k": k, "inference": RMSC_SOURCE_CONTEXT},
        }
    return options


# GPU jobs request `dense.gpus` GPUs (a SLURM profile maps it) and, with conda, the CUDA env.
DENSE_ENV = "../envs/gpu.yaml" if config["dense"]["gpus"] else "../envs/cpu.yaml"
CLUSTER = config["cluster"]


def launch_gpus(launch):
    """GPUs of a training job: `training.gpus` per process x processes per node x nodes."""
    return TRAINING["gpus"] * launch["processes"] * launch["nodes"]


def cluster_resources(gpus=0):
    """The scheduler-facing resources every rule adds to its memory and runtime.

    `gpu` is the job's GPU count (an int, or a function of the wildcards): Snakemake's standard GPU
    resource, which the SLURM executor turns into `--gpus` and `profiles/local-gpu` limits with
    `--resources gpu=N`. From config `cluster`, when set: the account, the partition (GPU jobs use
    `gpu_partition` where given), the GPU model and CPUs per GPU of GPU jobs. Unset keys are left
    out, so a profile's default-resources still apply.
    """
    count = gpus if callable(gpus) else (lambda wc: gpus)

    def pick(gpu_value, cpu_value):
        return lambda wc: gpu_value if count(wc) else cpu_value

    out = {"gpu": gpus}
    if CLUSTER["account"]:
        out["slurm_account"] = CLUSTER["account"]
    if CLUSTER["partition"] or CLUSTER["gpu_partition"]:
        cpu_partition = CLUSTER["partition"] or ""
        out["slurm_partition"] = pick(
            CLUSTER["gpu_partition"] or cpu_partition, cpu_partition
        )
    if CLUSTER["gpu_model"]:
        out["gpu_model"] = pick(CLUSTER["gpu_model"], "")
    if CLUSTER["cpus_per_gpu"]:
        out["cpus_per_gpu"] = CLUSTER["cpus_per_gpu"]
    return out


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


# COCO-DR (METHODS.md §4; rules/cocodr.smk): span files per corpus, pretraining specs, the query
# clusters of every ANCE run with a `dro` term, and the systems its figures evaluate.
COCODR_ANALYSIS = COCODR.get("analysis", {})


def pretrained_corpora(name):
    """The configured datasets a pipeline-pretrained model trains on (checked)."""
    corpora = PRETRAINED[name].get("corpora") or []
    if not corpora:
        raise ValueError(
            f"config key cocodr.pretrained.{name}.corpora: name the corpora to pretrain on"
        )
    for c in corpora:
        if c not in CONFIGURED_DATASETS:
            raise ValueError(
                f"config key cocodr.pretrained.{name}.corpora: {c!r} is not a configured dataset "
                f"(datasets.source, datasets.targets or datasets.extra)"
            )
    return list(corpora)


def spans_file(corpus):
    return f"{DATA}/{corpus}/coco/spans.jsonl"


def coco_spec(name):
    """The resolved spec (zsdr.pretrain.coco) of a pretrained model the pipeline trains."""
    p = PRETRAINED[name]
    if "init" not in p or "train" not in p:
        raise ValueError(
            f"config key cocodr.pretrained.{name}: give `hf` (a released model) or `init`, "
            f"`corpora` and `train` (pretrained by the pipeline)"
        )
    if p["init"] == name:
        raise ValueError(
            f"config key cocodr.pretrained.{name}.init: a model cannot start from itself"
        )
    return {
        "kind": "coco",
        "init": model_ref(p["init"]),
        "spans": [spans_file(c) for c in pretrained_corpora(name)],
        "max_length": p.get("max_length", 128),
        "mlm_probability": p.get("mlm_probability", 0.15),
        "head_layers": p.get("head_layers", 2),
        "skip_from": p.get("skip_from", 6),
        "late_mlm": p.get("late_mlm", True),
        "contrastive_weight": p.get("contrastive_weight", 1.0),
        "backbone_dropout": p.get("backbone_dropout", False),
        **({"head": p["head"]} if p.get("head") else {}),
        "tie_embeddings": p.get("tie_embeddings"),
        "max_examples": p.get("max_examples"),
        "out": f"{MODELS}/pretrained/{name}",
        "checkpoint_dir": f"{MODELS}/.checkpoints/pretrained-{name}",
        "dropout": TRAINING["dropout"],
        "train": train_settings(p),
        "info": {
            "pretrained": name,
            "description": p.get("description", ""),
            "provenance": p.get("provenance", ""),
        },
    }


SPAN_CORPORA = sorted(
    {c for n in TRAINED_PRETRAINED for c in pretrained_corpora(n)}
    | ({SOURCE, *TARGETS} if COCODR_ANALYSIS else set())
)
# ANCE runs whose recipe has a `dro` term: each is clustered by the model that mines its negatives.
DRO_RUNS = [r for r, (n, _) in TRAIN_RUNS.items() if RECIPES[n].get("dro")]
COCODR_FIG4 = COCODR.get("figure4", {})
COCODR_FIG4_DATASETS = [
    check_dataset(d) for d in (COCODR_FIG4.get("datasets") or TARGETS)
]


def cocodr_episodes(recipe, where):
    """Figure 4: the systems of a variant per episode: its warmup (the init recipe), then each ANCE episode."""
    if recipe not in RECIPES or RECIPES[recipe]["negatives"] != "ance":
        raise ValueError(
            f"config key {where}: {recipe!r} is not a recipe with ANCE episodes"
        )
    warmup = RECIPES[recipe]["init"]
    if warmup not in RECIPES:
        raise ValueError(
            f"config key {where}: the init of {recipe!r} must be its warmup recipe"
        )
    episodes = range(1, RECIPES[recipe].get("episodes", 1) + 1)
    return [warmup, *(recipe_run(recipe, k) for k in episodes)]


def cocodr_figure4_points():
    return [
        {
            "variant": label,
            "episode": e,
            "dataset": d,
            "system": s,
            "metrics": f"{METRICS}/{d}/{s}.json",
        }
        for label, recipe in COCODR_FIG4.get("variants", {}).items()
        for e, s in enumerate(
            cocodr_episodes(recipe, f"cocodr.figure4.variants.{label}"), 1
        )
        for d in COCODR_FIG4_DATASETS
    ]


def cocodr_figure3_points():
    ref = COCODR.get("sweeps", {}).get("reference")
    points = [
        {
            "sweep": "temperature" if sweep == "rho" else "clusters",
            "value": value,
            "system": recipe,
            "metrics": [f"{METRICS}/{d}/{recipe}.json" for d in TARGETS],
        }
        for (sweep, value), recipe in sorted(COCODR_SWEEPS.items())
    ]
    reference = (
        {
            "label": check_system(ref, "cocodr.sweeps.reference"),
            "metrics": [f"{METRICS}/{d}/{ref}.json" for d in TARGETS],
        }
        if ref
        else None
    )
    return points, reference


def cocodr_analysis_system(key):
    return check_system(COCODR_ANALYSIS[key], f"cocodr.analysis.{key}")


def geometry_file(model, corpus):
    return f"{STATS}/cocodr/geometry/{model}/{corpus}.json"


def cocodr_analysis_model(name):
    """A model Figure 5 measures: a pretrained model or a backbone (checked)."""
    if name not in PRETRAINED and name not in config["backbones"]:
        raise ValueError(
            f"config key cocodr.analysis: {name!r} is neither a cocodr.pretrained model nor a backbone"
        )
    return model_ref(name)


COCODR_FIGURES = (
    [f"{RESULTS}/cocodr/figure{n}.png" for n in (3, 4, 5)] if COCODR_ANALYSIS else []
)


COCODR_EVAL_SYSTEMS = (
    {p["system"] for p in cocodr_figure4_points()}
    | set(COCODR_SWEEPS.values())
    | (
        {
            cocodr_analysis_system(k)
            for k in ("with_coco", "without_coco", "with_idro", "without_idro")
        }
        if COCODR_ANALYSIS
        else set()
    )
)


# Systems evaluated on every dataset by one job per dataset (table 1's: the main target stays one
# job per dataset), and the further systems that paper tables and BERM's loss-weight grid need,
# evaluated one job per (dataset, system) so that table 1 never waits for them.
# A MoDIR system exists only on its targets and the source, so it is always evaluated by its own job.
EVAL_SYSTEMS = [
    s
    for s in dict.fromkeys(TABLE1_SYSTEMS)
    if "modir" not in SYSTEMS[s] and "mixture" not in SYSTEMS[s]
]
EXTRA_EVAL_SYSTEMS = sorted(
    (
        {s for cells in TABLE_CELLS.values() for _, s in cells}
        | set(TABLE1_SYSTEMS)
        | set(BERM_GRID.values())
        | set(FIGURE4_SYSTEMS.values())
        | {FIGURE4["system"], FIGURE4["baseline"]}
        | set(MODIR_STEP_SYSTEMS.values())
        | set(modir_case())
        | COCODR_EVAL_SYSTEMS
        | set(RMSC_STEP_SYSTEMS.values())
    )
    - set(EVAL_SYSTEMS)
)


# Training (rules/finetune.smk): what each training job reads, how it is launched, what it runs.


OFFLINE_CHECKED = set()


def on_this_machine(ref):
    """``ref``; a model the DAG does not build must be usable, or planning fails naming its config key
    (not a job, minutes later): a folder must hold a complete model, and with `offline: true` a
    Hugging Face id must be in the local cache.
    """
    if not ref.startswith(f"{MODELS}/") and ref not in OFFLINE_CHECKED:
        check_model_reference(ref, config, config["offline"])
        OFFLINE_CHECKED.add(ref)
    return ref


def model_ref(name):
    """What `init` names: a backbone, a recipe's trained model, a cross-encoder, or an HF id/folder."""
    if name in config["backbones"]:
        b = config["backbones"][name]
        return (
            f"{MODELS}/backbones/{name}" if "build" in b else on_this_machine(b["hf"])
        )
    if name in RECIPES:
        return trained_model(name)
    if name in PRETRAINED:
        p = PRETRAINED[name]
        return on_this_machine(p["hf"]) if "hf" in p else f"{MODELS}/pretrained/{name}"
    if is_dam(name):
        return dam_path(name, "init")
    if name in CROSS_ENCODERS:
        return f"{MODELS}/cross-encoders/{name}"
    if name in RELEASES:
        return f"{MODELS}/released/{name}"
    return on_this_machine(name)


def model_files(ref):
    """The files a job waits for before loading ``ref`` (none for a Hugging Face id; a DAM's
    snapshot exists once its DAM is trained; a converted REM release is its rem.json).
    """
    if not ref.startswith(f"{MODELS}/"):
        return []
    name = (
        ref[len(f"{MODELS}/released/") :]
        if ref.startswith(f"{MODELS}/released/")
        else None
    )
    if name in RELEASES and RELEASES[name].kind == "adapter-rem":
        return [f"{ref}/rem.json"]
    return [f"{ref.split('/snapshots/')[0]}/config.json"]


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
    if run in PER_TARGET and item.get("modir"):
        run = TRAIN_RUNS[run][0]  # mined once by the base system for every target
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


def recipe_dropout(item):
    """The dropout a recipe trains with: its own `dropout`, else `training.dropout` (null: the
    checkpoint's)."""
    own = item.get("dropout")
    return TRAINING["dropout"] if own is None else own


def train_spec(run):
    """The resolved spec (zsdr.training.recipes) of one training run."""
    name, k = TRAIN_RUNS[run]
    r = RECIPES[name]
    if r.get("mixture"):
        return mixture_spec(run)
    where = f"recipes.{name}"
    episodes = r.get("episodes", 1)
    init = model_ref(r["init"]) if k == 1 else f"{MODELS}/trained/{name}-ep{k - 1}"
    if run in PER_TARGET and r.get("per_target_init"):
        init = dam_path(f"{r['per_target_init']}{DAM_SEP}{PER_TARGET[run]}", where)
    dataset, negatives = training_data(r, where, run)
    train = train_settings(r)
    if r.get("episode_lr_decay") and k > 1:
        train["lr"] = train["lr"] * max(0.2, 1 - (k - 1) / episodes)
    if r.get("episode_schedule") == "continuous" and episodes > 1:
        if not train.get("max_steps"):
            raise ValueError(
                f"config key {where}.episode_schedule: continuous needs train.max_steps "
                "(episodes of a fixed number of steps; set it, or use restart)"
            )
        if r.get("episode_lr_decay"):
            raise ValueError(
                f"config key {where}.episode_schedule: continuous and episode_lr_decay both decay "
                "the lr across episodes (set episode_lr_decay: false, or use restart)"
            )
        train["schedule_steps"] = (
            train.get("schedule_steps") or episodes * train["max_steps"]
        )
        train["schedule_offset"] = (k - 1) * train["max_steps"]
    modir = modir_spec(r, run, train)
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
        **({"head": r["head"]} if r.get("head") and k == 1 else {}),
        "loss": r["loss"],
        "negatives_per_query": r.get("negatives_per_query", 1),
        "scale": r.get("scale", 1.0),
        "dropout": recipe_dropout(r),
        "max_examples": r.get("max_examples"),
        "berm": berm_spec(r, dataset),
        "rem": r.get("rem"),
        **({"modir": modir} if modir else {}),
        **(
            {
                "dro": {
                    **r["dro"],
                    "clusters_file": f"{DATA}/{train_source(r)}/clusters/{run}.jsonl",
                }
            }
            if r.get("dro")
            else {}
        ),
        "train": train,
        "info": {
            "recipe": name,
            "target": PER_TARGET.get(run),
            "episode": k,
            "episodes": episodes,
            "description": r.get("description", ""),
            "provenance": r.get("provenance", ""),
            **(
                {
                    "mine": {
                        **TRAINING["mine"],
                        **r.get("mine", {}),
                        **mine_info(
                            name if run in PER_TARGET and r.get("modir") else run
                        ),
                    }
                }
                if r["negatives"] == "ance"
                else {}
            ),
        },
    }


def mine_info(run):
    """What the summary says about an ANCE run's mining: the system and the lengths it mines at."""
    if run not in MINED:
        return {}
    lengths = {**system_lengths(mining_system(run)), **mining_lengths(run)}
    return {
        "system": mining_system(run),
        "lengths": "q{}/d{}".format(
            lengths.get("query_max_length", "-"), lengths.get("doc_max_length", "-")
        ),
    }


def mixture_spec(run):
    """The resolved spec (zsdr.training.rmsc) of a run of a `mixture` recipe."""
    name = TRAIN_RUNS[run][0]
    r = RECIPES[name]
    m = r["mixture"]
    target = PER_TARGET.get(run)
    train = train_settings(r)
    if name in RMSC_CURVE_RECIPES:
        train["snapshot_every"] = RMSC_CURVES.get("snapshot_every", 1000)
    k = m.get("soft_tokens")
    return {
        "kind": "mixture",
        "init": model_ref(r["init"]),
        "encoder": r.get("encoder", {}),
        "sets": mixture_sets(name, target),
        "scale": r.get("scale", 1.0),
        "group_negatives": m.get("group_negatives", True),
        "soft_tokens": {"k": k} if k else None,
        "dropout": recipe_dropout(r),
        "out": f"{MODELS}/trained/{run}",
        "checkpoint_dir": f"{MODELS}/.checkpoints/{run}",
        "train": train,
        "info": {
            "recipe": name,
            "target": target,
            "description": r.get("description", ""),
            "provenance": r.get("provenance", ""),
        },
    }


def modir_spec(recipe, run, train):
    """The `modir` term of a MoDIR run (None otherwise); sets the run's length and snapshots."""
    if not recipe.get("modir"):
        return None
    name, target = TRAIN_RUNS[run][0], PER_TARGET[run]
    train["max_steps"] = modir_total(name, target)
    if is_curve_run(name, target):
        train["snapshot_every"] = MODIR_CURVES["snapshot_every"]
    return {
        "seed": train["seed"],
        **recipe["modir"],
        "triples": f"{DATA}/{target}/modir/triples.tsv",
        "target": f"{DATA}/{target}",
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
    return on_this_machine(r["hf"]) if "hf" in r else f"{MODELS}/readers/{name}"


def spec_inputs(spec):
    """Dataset marker, negatives, teacher scores, BERM labels, a reader's units file and
    initial model of a training spec (a dataset's units.jsonl comes with its marker)."""
    if spec["kind"] == "coco":
        return [*spec["spans"], *model_files(spec["init"])]
    if spec["kind"] == "mixture":
        files = [f"{x['dataset']}/dataset.json" for x in spec["sets"]]
        files += [x["pairs"] for x in spec["sets"] if x.get("pairs")]
        return list(dict.fromkeys(files)) + model_files(spec["init"])
    files = [f"{spec['dataset']}/dataset.json"]
    files += [spec["negatives"]] if spec.get("negatives") else []
    files += [spec["dro"]["clusters_file"]] if spec.get("dro") else []
    files += model_files(spec["init"])
    files += [spec["teacher"]] if spec.get("teacher") else []
    if spec.get("units") and spec["units"] != f"{spec['dataset']}/units.jsonl":
        files.append(spec["units"])
    if spec.get("modir"):
        files += [spec["modir"]["triples"], f"{spec['modir']['target']}/dataset.json"]
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


DDR_FIGURES = [f"{RESULTS}/ddr/figure4.png"]
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
    if r.get("modir"):
        mods += ["zsdr.training.modir", "zsdr.losses.adversarial", "zsdr.models.heads"]
    if r.get("dro"):
        mods += ["zsdr.training.idro"]
    if r.get("mixture"):
        mods += ["zsdr.training.rmsc", "zsdr.training.weak", "zsdr.models.soft_tokens"]
    return code(*mods)


def launch_settings(item):
    """How a training job starts: processes per node, nodes, launcher (a recipe may set its own processes)."""
    out = {k: TRAINING[k] for k in ("processes", "nodes", "launcher")}
    if item.get("processes"):
        out["processes"] = item["processes"]
    return out


def recipe_pooling(name):
    """A recipe's pooling: its own encoder setting, else its init recipe's (None when it comes from a
    checkpoint's own zsdr.json or sentence-transformers settings)."""
    seen = set()
    while name in RECIPES and name not in seen:
        seen.add(name)
        r = RECIPES[name]
        if r.get("encoder", {}).get("pooling"):
            return r["encoder"]["pooling"]
        name = r.get("init")
    return None


def head_summary(spec):
    """Where a cls_linear_ln training's head comes from ("" for other poolings)."""
    info = spec.get("info", {})
    pooling = spec.get("encoder", {}).get("pooling") or recipe_pooling(
        info.get("recipe")
    )
    if pooling != "cls_linear_ln":
        return ""
    if spec.get("head") == "new":
        return f"; ANCE head: new (seed {spec.get('encoder', {}).get('head_seed', 0)})"
    return f"; ANCE head: from checkpoint {spec['init']}"


def spec_summary(spec, launch):
    """One line with the hyperparameters a dry run shows (`snakemake -n`)."""
    t = spec["train"]
    length = (
        f"{t['max_steps']} steps" if t.get("max_steps") else f"{t['epochs']} epochs"
    )
    b = spec.get("berm")
    berm = (
        f"; + BERM R1 x{b['r1_weight']:g} ("
        + (
            "KL / units, official code"
            if b.get("r1_reduction", "sum") == "mean"
            else "KL, paper"
        )
        + f") + R2 x{b['r2_weight']:g} ("
        + (
            "double softmax, official code"
            if b.get("double_softmax")
            else "cross-entropy, paper"
        )
        + "), labels "
        f"{BERM_LABELS['variant']} BM25 + {BERM_LABELS['delta']:g} x reader "
        f"{BERM_LABELS['reader']}"
        if b
        else ""
    )
    enc = spec.get("encoder", {})
    lengths = (
        f"q{enc.get('query_max_length', '-')}/d{enc.get('doc_max_length', '-')}"
        if spec["kind"] in ("bi_encoder", "mixture")
        else (
            f"{spec['max_length']}"
            if spec["kind"] in ("mlm", "coco")
            else f"pair {spec['max_length']}"
        )
    )
    if spec["kind"] == "mixture":
        sets = ", ".join(
            "{} ({}{})".format(
                x["name"],
                os.path.basename(x["pairs"]) if x.get("pairs") else "qrels",
                "" if x.get("size") is None else f", size {x['size']}",
            )
            for x in spec["sets"]
        )
        soft = spec.get("soft_tokens")
        tokens = (
            f"soft tokens k {soft['k']} ([S]/[T] x [H]/[W], inference [T] x [H]; on "
            f"{SOURCE} {soft_context(RMSC_SOURCE_CONTEXT)} [X] rmsc.source_context)"
            if soft
            else "no soft tokens"
        )
        sizes = ", ".join(
            f"{x['name']} {x['size']}"
            for x in spec["sets"]
            if x.get("size") is not None
        )
        t = spec["train"]
        choices = (
            f"open choices [X]: weak-set sizes ({sizes or 'all pairs'}), weak negatives from "
            f"the {spec['sets'][0]['negatives']}, temperature {1 / spec['scale']:g}, "
            f"{t['max_steps']} steps, warmup {t.get('warmup_steps', 0)}, lengths "
            f"q{spec['encoder'].get('query_max_length', '-')}/d{spec['encoder'].get('doc_max_length', '-')}, "
            f"{t['precision']}"
        )
        data = (
            f"loss contrastive x{spec['scale']:g} with 1 random negative + in-batch negatives"
            f"{' of the same (domain, relevance) group' if spec['group_negatives'] else ''} "
            f"(weak negatives from the {spec['sets'][0]['negatives']}) over sets {sets}; {tokens}; "
            f"{choices}"
        )
    elif spec.get("negatives"):
        data = (
            f"loss {spec.get('loss', 'lce')} with {spec['negatives_per_query']} negative(s) "
            f"from {os.path.basename(spec['negatives'])}"
        )
    elif spec["kind"] == "coco":
        co = spec["contrastive_weight"]
        contrastive = (
            f"span contrastive x{co:g} (global batch, no temperature), " if co else ""
        )
        backbone = ", backbone MLM" if spec["late_mlm"] else ""
        corpora = ", ".join(
            os.path.basename(os.path.dirname(os.path.dirname(f))) for f in spec["spans"]
        )
        head = "new" if spec.get("head") == "new" else f"from checkpoint {spec['init']}"
        data = (
            f"{contrastive}Condenser head MLM ({spec['head_layers']} layers from layer "
            f"{spec['skip_from']}; head {head}){backbone} {spec['mlm_probability']:.0%} "
            f"whole-word, on {len(spec['spans'])} corpora: {corpora}"
        )
    elif spec["kind"] == "generator":
        data = (
            f"seq2seq token cross-entropy, passage -> query, on the {spec['split']} pairs of "
            f"{spec['dataset']} (queries <= {spec['query_max_length']} tokens)"
        )
    elif spec["kind"] == "mlm":
        data = (
            f"MLM {spec['mlm_probability']:.0%} (80/10/10) on the {spec['dataset']} corpus, "
            f"random crops"
        )
    else:
        data = f"loss start/end cross-entropy on the {spec['units']} answers"
    mine = spec.get("info", {}).get("mine")
    if mine:
        data += (
            f" (mined: top-{mine['depth']} of {mine.get('system', 'the previous model')} at "
            f"{mine.get('lengths', 'its lengths')}, {mine['sample']} sampled per query)"
        )
    data += head_summary(spec) if spec["kind"] == "bi_encoder" else ""
    rem = spec.get("rem")
    if rem:
        parts = [
            (
                f"LoRA r {rem['lora_r']} alpha {rem.get('lora_alpha') or rem['lora_r']:g} on "
                + "+".join(rem.get("lora_targets", ["query", "value"]))
                if rem.get("lora_r")
                else ""
            ),
            (
                f"parallel adapter {rem['adapter_bottleneck']} x{rem.get('adapter_scaling', 4.0):g}"
                if rem.get("adapter_bottleneck")
                else ""
            ),
        ]
        data += f"; REM only, DAM frozen: {' + '.join(x for x in parts if x)}"
    m = spec.get("modir")
    if m:
        queue = {
            "momentum": f"momentum n {m['momentum_steps']}",
            "single": "single (n 1)",
            "repeat": f"repeat x{m['momentum_steps']}",
        }[m["mode"]]
        halving = (
            f" halving every {m['lambda_half_life']:g} steps"
            if m.get("lambda_half_life")
            else ""
        )
        data += (
            f"; + MoDIR {m['loss']} loss vs {os.path.basename(m['target'])}, {queue} in chunks "
            f"of {m['chunk']}, lambda0 {m['lambda0']:g}{halving}, classifier lr "
            f"{m['classifier_lr']:g} (logits clipped at {m['logit_clip']:g})"
        )
    d = spec.get("dro")
    if d:
        data += (
            f"; + iDRO over K {d['clusters']} query clusters (beta {d.get('beta', 0.25):g}, rho "
            f"{d.get('rho', 0.05):g}, gamma {d.get('gamma', 0.1):g}, eps {d.get('eps', 0.01):g}, "
            f"gradients of the last {d.get('grad_layers', 3)} layers)"
            if d.get("kind", "idro") == "idro"
            else f"; + GroupDRO over K {d['clusters']} query clusters (fraction "
            f"{d.get('fraction')}, ema {d.get('ema')})"
        )
    if t.get("snapshot_every"):
        length += f", a snapshot every {t['snapshot_every']} steps"
    if t.get("schedule_steps"):
        offset = (
            f", this run from step {t['schedule_offset']}"
            if t.get("schedule_offset")
            else ""
        )
        length += f" (decay over {t['schedule_steps']} steps{offset})"
    inference = (
        f"; inference {config['dense']['precision']}"
        if spec["kind"] in ("bi_encoder", "mixture")
        else ""
    )
    dropout = (
        ""
        if "dropout" not in spec
        else (
            "; dropout as the checkpoint"
            if spec["dropout"] is None
            else f"; dropout {spec['dropout']:g}"
        )
    )
    return (
        f"init {spec['init']}; {data}; batch {t['batch_size']} x "
        f"{launch['processes'] * launch['nodes']} process(es) x grad-acc {t.get('grad_accum', 1)}; "
        f"{t.get('optimizer', 'adamw')} lr {t['lr']:g}, {t.get('schedule', 'linear')}, warmup "
        f"{t.get('warmup_steps', 0)}; {length}; max length {lengths}; {t['precision']}{dropout}{berm}"
        f"{inference}"
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
    "zsdr.distributed",
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
# Resolve every training spec now, so a config mistake stops any command with the key to fix.
for _run in TRAIN_RUNS:
    train_spec(_run)
for _name in CROSS_ENCODERS:
    cross_encoder_spec(_name)
for _name in TRAINED_READERS:
    reader_spec(_name)
for _name in TRAINED_PRETRAINED:
    coco_spec(_name)
for _name in TRAINED_GENERATORS:
    generator_spec(_name)
# Weak-pair files the mixture runs read: (corpus, method).
WEAK_PAIRS = sorted(
    {
        (os.path.basename(x["dataset"]), os.path.basename(x["pairs"])[: -len(".jsonl")])
        for _run, (_name, _k) in TRAIN_RUNS.items()
        if RECIPES[_name].get("mixture")
        for x in mixture_spec(_run)["sets"]
        if x.get("pairs")
    }
)
berm_reader()
for _name in FIGURE4_DATASETS:
    dam_spec(figure4_dam(_name))


def figure4_points():
    """DDR Figure 4: per target, the REM on each snapshot of its DAM (and the final DAM), with the
    DAM folder whose snapshots.json gives each snapshot's training time."""
    fig = FIGURE4["system"]
    return [
        {
            "dataset": d,
            "step": n,
            "system": FIGURE4_SYSTEMS.get((d, n), fig),
            "final": (d, n) not in FIGURE4_SYSTEMS,
            "metrics": f"{METRICS}/{d}/{FIGURE4_SYSTEMS.get((d, n), fig)}.json",
        }
        for d in FIGURE4_DATASETS
        for n in [*figure4_steps(d), None]
    ]


def rem_models(key):
    """DDR Table 5: the trained folder of every produced REM system of a table (its rem/rem.json
    holds the parameter counts; the folder's config.json is what the train rule declares).
    """
    spec = TABLE_SPECS[key]
    if not any(getattr(e, "rem", None) for e in spec.datasets):
        return {}
    out = {}
    for entry in spec.systems:
        produced = [s for s in getattr(entry, "systems", ()) if s in SYSTEMS]
        if produced and "rem_of" in SYSTEMS[produced[0]]:
            out[entry.key] = SYSTEMS[produced[0]]["model"]
    return out


# `cluster.scatter_search`: how the search is spread over jobs (not in `dense`, which many rules pass
# whole as a param, so switching it re-runs no encoding, mining or training).
SCATTER_SEARCH = CLUSTER["scatter_search"]


def scattered(dataset):
    """Whether `dense_search` merges per-shard searches: `cluster.scatter_search` and > 1 shard."""
    return SCATTER_SEARCH and len(shards(dataset)) > 1


def dense_search_inputs(wc):
    """The corpus shard folders `dense_search` searches or, scattered, every shard's top-k file."""
    if scattered(wc.dataset):
        root = f"{RUNS}/{wc.dataset}/.shards/{wc.system}"
        return [f"{root}/{s}.npz" for s in shards(wc.dataset)]
    return [f"{EMBEDDINGS}/{wc.dataset}/{wc.system}/{s}" for s in shards(wc.dataset)]


# With `offline: true`, every model the config names must be on this machine when planning starts,
# whether or not the requested targets use it (each is checked once).
if config["offline"]:
    for _name, _s in config["systems"].items():
        if isinstance(_s.get("model"), str) and _s["model"] not in RELEASES:
            on_this_machine(_s["model"])
    for _name, _r in RECIPES.items():
        if isinstance(_r.get("init"), str):
            model_ref(_r["init"])
