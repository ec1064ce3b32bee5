"""The hyperparameter card of a config: the numbers a reviewer compares with the official runs, computed
from the plan without training anything.

For every training job (the recipes' runs, DDR's DAMs, COCO pretraining, cross-encoders, readers,
generators) :func:`training_rows` gives what an example is and how many an epoch holds, the optimizer
steps the job takes, its warmup, peak learning rate, schedule and horizon, the learning rate at its last
step, the global batch, negatives, lengths, precision and where its weights and head start; for every
dense system :func:`inference_rows` gives the lengths it encodes each dataset at. The step count and the
schedule are the trainer's own functions (:func:`zsdr.training.config.training_steps`,
:func:`~zsdr.training.config.lr_factor`), so the card cannot drift from what a job does. Where the
number of examples depends on data the plan cannot see (the queries a teacher scored, a corpus not yet
converted), the card uses the published figure it names (``~`` marks an estimate) or says "from the data".

``zsdr hparams --configfile configs/paper.yaml`` prints the card; ``docs/methods/hparams-paper.md`` and
``hparams-small.md`` are it (:func:`zsdr.plan.card_page.markdown`), with the official values of
``docs/methods/reference.yaml`` beside the paper scale's (tests/test_hparams.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from zsdr.data.sizes import TRAINING_SETS, published_sizes
from zsdr.plan.recipes import DAM_SEP

# The card's fields, in the order a row shows them (what each means: FIELD_HELP).
FIELDS = ("kind", "example", "examples_per_epoch", "epochs", "steps", "warmup", "lr", "optimizer", "schedule",
          "horizon", "lr_at_end", "global_batch", "negatives", "lengths", "precision", "init", "head")
FIELD_HELP = {
    "kind": "the trainer's task (bi_encoder, mixture, mlm, coco, cross_encoder, reader, generator)",
    "example": "what one training example is: what an epoch counts",
    "examples_per_epoch": "examples an epoch holds (~: a published or estimated figure; the job counts its data)",
    "epochs": "passes over the examples (when the length is set in epochs)",
    "steps": "optimizer steps the job takes",
    "warmup": "linear warmup steps",
    "lr": "peak learning rate (an episode's own, after any per-episode decay)",
    "optimizer": "adamw or lamb",
    "schedule": "linear (warmup, then linear decay) or constant (after warmup)",
    "horizon": "step at which the linear decay reaches 0 (the official t_total); +N: this run starts N steps in",
    "lr_at_end": "learning rate at the last step, as a fraction of the peak",
    "global_batch": "examples per optimizer step: per process x processes x nodes x gradient accumulation",
    "negatives": "negatives per query (+ in-batch: every other document of the global batch)",
    "lengths": "training lengths in tokens: q<query>/d<document>, or one max length",
    "precision": "training precision (the GPU's; a CPU run is fp32)",
    "init": "the weights the job starts from",
    "head": "where the head on top of the backbone starts",
}


@dataclass
class Row:
    """One training job of the card: its name (``job``), the config section its settings come from
    (``source``) and its :data:`FIELDS` (``None``: does not apply)."""

    job: str
    source: str
    values: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    marks: dict[str, str] = field(default_factory=dict)   # field -> "~" (an estimate) or "<=" (an upper bound)


def _fmt_int(n: int | float) -> str:
    return f"{int(n):,}"


def fmt(value: Any) -> str:
    """A card value as the card prints it (integers with thousands separators, floats in short form)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return _fmt_int(value)
    if isinstance(value, float):
        return f"{value:.3g}" if value < 1e-2 or value >= 1e4 else f"{value:.4g}"
    return str(value)


# --------------------------------------------------------------------------------------------- examples
def _dataset_name(path: str | None) -> str:
    return os.path.basename(str(path or "").rstrip("/"))


def _capped(n: int | None, cap: int | None, what: str, source: str) -> tuple[int | None, str, str]:
    if cap is not None and (n is None or cap < n):
        return int(cap), what, "max_examples"
    return n, what, source


def examples_of(plan: Any, spec: dict[str, Any]) -> tuple[int | None, str, str]:
    """``(count or None, what an example is, where the count comes from)`` of a training spec at this config's
    scale, without its data: the published figures of :mod:`zsdr.data.sizes`, capped by ``max_examples``."""
    kind = spec["kind"]
    cap = spec.get("max_examples")
    if kind in ("bi_encoder", "cross_encoder"):
        name = _dataset_name(spec["dataset"])
        negatives = os.path.basename(spec.get("negatives") or "")
        if name.endswith("-triples"):
            known = TRAINING_SETS.get(name, {})
            if spec.get("examples") == "triples":
                return _capped(known.get("triples"), None, "triple (query, positive, negative)",
                               known.get("source", "from the data"))
            return _capped(known.get("queries"), cap, "query (a negative drawn from its triples)",
                           known.get("source", "from the data"))
        known = TRAINING_SETS.get(name, {})
        teacher = " with teacher scores" if spec.get("teacher") else ""
        pool = ("mined" if spec.get("info", {}).get("mine") or spec.get("modir") and "negatives/" in spec["negatives"]
                else "hard-negative" if "hard-negatives" in negatives else negatives.removesuffix(".jsonl"))
        what = f"query{teacher} (+ a positive, negatives from its {pool} pool)"
        # a teacher keeps the queries it scored: at most the judged training queries
        n = known.get("queries")
        if spec.get("examples") == "query_triples":
            # every (query, negative) pair of the pool, a query's pairs consecutive (the official ANCE loaders)
            mine = spec.get("info", {}).get("mine") or {}
            sample = mine.get("sample")
            what = (f"triple (query, positive, one of its {sample or 'pooled'} {pool} negatives; a query's triples "
                    "consecutive)")
            n = min(n, int(cap)) if n is not None and cap is not None else n
            if n is not None and sample:
                return n * int(sample), what, "<= " + known.get("source", "from the data") + " x negatives per query"
            return _capped(None, None, what, "from the data")
        return _capped(n, cap, what, ("<= " if teacher and n else "") + known.get("source", "from the data"))
    if kind == "mixture":
        sizes = [x.get("size") for x in spec["sets"]]
        total = sum(sizes) if sizes and all(isinstance(s, int) for s in sizes) else None
        return total, f"weak or labelled pair of {len(spec['sets'])} sets", ("set sizes" if total else "from the data")
    if kind == "mlm":
        name = _dataset_name(spec["dataset"])
        docs = published_sizes().get(name, {}).get("docs")
        return _capped(int(docs) if docs else None, cap, f"document of {name} (a random crop)",
                       "~ published corpus size" if docs else "from the data")
    if kind == "coco":
        corpora = [_dataset_name(os.path.dirname(os.path.dirname(f))) for f in spec["spans"]]
        sizes = [published_sizes().get(c, {}).get("docs") for c in corpora]
        per = cap
        if all(sizes):
            total = sum(min(int(s), per) if per else int(s) for s in sizes)
            return total, f"document (2 spans) of {len(corpora)} corpora", "~ published corpus sizes"
        return None, f"document (2 spans) of {len(corpora)} corpora", "from the data"
    if kind in ("reader", "generator"):
        name = _dataset_name(spec["dataset"])
        n, source = plan.resources.train_pairs(name, cap)
        return n, "training pair (query, passage)", source
    return None, "example", "from the data"


# --------------------------------------------------------------------------------------------------- rows
def _head(plan: Any, spec: dict[str, Any]) -> str:
    kind = spec["kind"]
    pooling = spec.get("encoder", {}).get("pooling") or plan.recipes.recipe_pooling(spec.get("info", {}).get("recipe"))
    if kind == "coco":
        return "Condenser head: new" if spec.get("head") == "new" else "Condenser head: from init"
    if kind == "mlm":
        return "MLM head: from init"
    if kind == "bi_encoder" and pooling == "cls_linear_ln":
        return "ANCE head: new (seeded)" if spec.get("head") == "new" else "ANCE head: from init"
    if kind == "bi_encoder" and spec.get("rem"):
        return "REM: new (DAM frozen)"
    if kind == "cross_encoder":
        return f"{spec.get('head')} scoring head: new"
    if kind == "reader":
        return "span head: new"
    return "none"


def _lengths(spec: dict[str, Any]) -> str:
    if spec["kind"] in ("bi_encoder", "mixture"):
        enc = spec.get("encoder", {})
        target = (spec.get("modir") or {}).get("target_query_max_length")
        return (f"q{enc.get('query_max_length', '?')}/d{enc.get('doc_max_length', '?')}"
                + (f", target q{target}" if target else ""))
    if spec["kind"] == "generator":
        return f"{spec['max_length']} -> q{spec['query_max_length']}"
    return str(spec.get("max_length", "-"))


def _negatives(spec: dict[str, Any]) -> str | None:
    if spec["kind"] == "mixture":
        return "1 + in-batch"
    if "negatives_per_query" not in spec:
        return None
    n = int(spec["negatives_per_query"])
    return f"{n} + in-batch" if spec.get("loss") == "contrastive" else str(n)


# the batch composition of `examples: query_triples`, with its source (a card note of every such row)
BATCH_COMPOSITION = (
    "batches: each query's triples one after another, one per negative of its mined pool, in a seeded order of "
    "the queries (examples: query_triples), as the official ANCE-family loaders build them: a 64-triple batch "
    "holds 2-3 queries [C OpenMatch/COCO-DR ANCE/utils/util.py StreamingDataset (lines dealt to processes, "
    "each line's records emitted in turn), ANCE/data/msmarco_data.py GetTripletTrainingDataProcessingFn (one "
    "triple per negative); the same loaders in microsoft/ANCE and xsc1234/BERM]")

# what of COCO-DR's training the released run_ann.py does not give and the project reconstructs (every DRO row)
DRO_RECONSTRUCTED = (
    "reconstructed: OpenMatch/COCO-DR ANCE/drivers/run_ann.py imports model.dro_greedy_loss (absent from ANCE/model/) "
    "and reads triple fields 9 (group_ids) and 10 (weights) that GetTripletTrainingDataProcessingFn never yields; "
    "each triple's group is its query's cluster (run_ann_data_gen.py --cluster_query), the update is "
    "ANCE/model/dro_loss.py's, the batches the repository's loader (docs/methods/cocodr.md#implemented-update)")

_PLURAL = {"triple": "triples", "query": "queries", "document": "documents", "training": "pairs", "weak": "pairs"}


def budget_text(plan: Any, spec: dict[str, Any], launch: dict[str, Any]) -> str:
    """A training's effective length for a dry run's line: its optimizer steps and where they come from, the
    schedule's horizon and the learning rate at its last step, e.g. ``51,267 steps (3 epochs x 35,000,000
    triples // 2,048; linear decay to 0 at 51,267: lr at the end 0 x peak)``."""
    row = training_row(plan, "", "", spec, launch)
    v, t = row.values, spec["train"]
    steps = v["steps"]
    if not isinstance(steps, int):
        return f"{fmt(t['epochs'])} epoch(s) of the training set (its size is counted from the data)"
    if t.get("max_steps") is not None:
        how = "max_steps"
    else:
        unit = _PLURAL.get(v["example"].split(" ")[0], "examples")
        mark = row.marks.get("examples_per_epoch")
        how = f"{fmt(t['epochs'])} epochs x {mark + ' ' if mark else ''}{fmt(v['examples_per_epoch'])} {unit} // {fmt(v['global_batch'])}"
    mark = row.marks.get("steps")
    text = f"{mark + ' ' if mark else ''}{fmt(steps)} steps ({how}"
    if t.get("step_limit") is not None and steps == int(t["step_limit"]):   # the limit cut this run
        text += f"; training.step_limit: the first {fmt(steps)}"
    if v["schedule"] == "linear":
        text += f"; linear decay to 0 at {fmt(v['horizon'])}: lr at the end {fmt(v['lr_at_end'])} x peak"
    return text + ")"


def training_row(plan: Any, job: str, source: str, spec: dict[str, Any], launch: dict[str, Any]) -> Row:
    """The card row of one training job (``spec``: the resolved spec the job trains, ``launch``: its
    processes and nodes)."""
    from zsdr.training.config import TrainConfig, lr_factor, steps_run, training_steps, warmup_steps

    t = spec["train"]
    cfg = TrainConfig.from_dict({k: v for k, v in t.items() if k in TrainConfig.__dataclass_fields__})
    world = int(launch["processes"]) * int(launch["nodes"])
    n, what, counted = examples_of(plan, spec)
    row = Row(job, source)
    v = row.values
    v["kind"] = spec["kind"]
    v["example"] = what
    epoch_size = t.get("epoch_size")
    if epoch_size:
        v["examples_per_epoch"] = int(epoch_size)
        row.notes.append(f"an epoch counts {_fmt_int(epoch_size)} examples (train.epoch_size: the official code's "
                         f"assumed size, which sets its schedule); the data hold {fmt(n) if n else 'their own count'}"
                         f" ({counted})")
    else:
        v["examples_per_epoch"] = n if n is not None else "from the data"
        mark = "<=" if counted.startswith("<=") else "~" if "~" in counted else ""
        if n is not None and mark:
            row.marks["examples_per_epoch"] = mark
    v["epochs"] = t.get("epochs") if t.get("max_steps") is None else None
    if t.get("max_steps") is not None or epoch_size or n is not None:
        horizon_steps = training_steps(cfg, n or 0, world)
        steps = steps_run(cfg, horizon_steps)
        v["steps"] = steps  # training.step_limit: the first steps of a schedule of horizon_steps
        if t.get("max_steps") is None and not epoch_size and row.marks.get("examples_per_epoch"):
            row.marks["steps"] = row.marks["examples_per_epoch"]
    else:
        steps = horizon_steps = None
        v["steps"] = "from the data"
    if t.get("warmup_ratio") is None:
        v["warmup"] = int(t["warmup_steps"])
    elif t.get("schedule_steps") or horizon_steps is not None:
        v["warmup"] = warmup_steps(cfg, horizon_steps or 0)
    else:
        v["warmup"] = f"{float(t['warmup_ratio']):g} of the run's steps"
    v["lr"] = float(t["lr"])
    v["optimizer"] = t["optimizer"]
    v["schedule"] = t["schedule"]
    if v["schedule"] == "linear":
        horizon = t.get("schedule_steps") or horizon_steps
        offset = int(t.get("schedule_offset") or 0)
        v["horizon"] = horizon if horizon is None or not offset else f"{_fmt_int(horizon)} (+{_fmt_int(offset)})"
        if horizon is None:
            v["horizon"] = "the run's length"
    else:
        v["horizon"] = None
    v["lr_at_end"] = round(lr_factor(cfg, steps - 1, horizon_steps), 3) if isinstance(steps, int) else None
    v["global_batch"] = int(t["batch_size"]) * world * int(t["grad_accum"])
    v["negatives"] = _negatives(spec)
    if spec.get("examples") == "query_triples":
        row.notes.append(BATCH_COMPOSITION)
    if spec.get("dro"):
        row.notes.append(DRO_RECONSTRUCTED)
    v["lengths"] = _lengths(spec)
    v["precision"] = t["precision"]
    episode = spec.get("info", {}).get("episode") or 1
    v["init"] = _in_scale(plan, spec["init"]) if episode == 1 else "the previous episode"
    v["head"] = _head(plan, spec)
    return row


def _in_scale(plan: Any, path: str) -> str:
    """``path`` relative to the scale's own folder (`paths.root`), so a card reads the same at every scale."""
    root = plan.recipes.datasets.paths.root
    return path[len(root) + 1:] if root and path.startswith(root + "/") else path


def _evaluated_per_target(plan: Any) -> set[tuple[str, str]]:
    """``(recipe, dataset)`` of every per-target run (`per_target_init`, DDR\\D) a table or table 1 evaluates."""
    cells = {c for cells in plan.tables.cells.values() for c in cells}
    cells |= {(d, s) for s in plan.tables.table1_systems for d in plan.datasets.evaluated}
    out = set()
    for d, s in cells:
        spec = plan.systems.by_name.get(plan.systems.routed(s, d), {}) if s in plan.systems.by_name else {}
        if spec.get("per_target"):
            out.add((spec["per_target"], d))
    return out


def training_jobs(plan: Any) -> Iterable[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """``(job, config section, spec, launch)`` of every training the plan runs, in plan order: the recipes'
    runs (a per-target run only where a table evaluates it), DAMs once per corpus (their settings depend on
    the corpus alone: the sources, every corpus with its own `ddr.dam.datasets` entry, and `*` for any other
    target), COCO pretraining, and the cross-encoders, readers and generators something uses."""
    evaluated = _evaluated_per_target(plan)
    for run, (name, _) in plan.recipes.runs.items():
        r = plan.recipes.by_name[name]
        target = plan.recipes.per_target.get(run, r.get("dataset", plan.datasets.source))
        if r.get("per_target_init") and (name, target) not in evaluated:
            continue
        yield f"train {run}", f"recipes.{name}", plan.trainings.train_spec(run), plan.recipes.launch_settings(plan.recipes.by_name[name])
    dam = plan.ddr.section["dam"]
    corpora = list(dict.fromkeys([*(dam.get("sources") or [plan.datasets.source]), *dam["datasets"]]))
    chains = sorted(set(_dam_chains(plan)))
    for corpus in [*corpora, "*"]:
        settings = plan.ddr.dam_settings(corpus if corpus != "*" else "\0")
        where = (f"ddr.dam.{settings['role']}" if corpus == "*" or corpus not in dam["datasets"]
                 else f"ddr.dam.datasets.{corpus}")
        spec = _dam_card_spec(plan, corpus, settings, chains)
        yield f"dam {corpus}", where, spec, plan.recipes.launch_settings(settings)
    for name in plan.recipes.trained_pretrained:
        p = plan.recipes.pretrained[name]
        yield f"pretrain {name}", f"cocodr.pretrained.{name}", plan.trainings.coco_spec(name), plan.recipes.launch_settings(p)
    teachers = {r.get("teacher") for r in plan.recipes.by_name.values()}
    for name in plan.recipes.cross_encoders:
        if name not in teachers:
            continue
        c = plan.recipes.cross_encoders[name]
        yield f"cross-encoder {name}", f"cross_encoders.{name}", plan.trainings.cross_encoder_spec(name), plan.recipes.launch_settings(c)
    for name in plan.recipes.trained_readers:
        if name != plan.berm.labels.get("reader"):
            continue
        yield f"reader {name}", f"readers.{name}", plan.trainings.reader_spec(name), plan.recipes.launch_settings(plan.recipes.readers[name])
    for name in plan.rmsc.trained_generators:
        if name != plan.rmsc.qgen.get("generator"):
            continue
        g = plan.rmsc.generators[name]
        yield f"generator {name}", f"rmsc.qgen.generators.{name}", plan.trainings.generator_spec(name), plan.recipes.launch_settings(g)


def _dam_chains(plan: Any) -> list[str]:
    """The DAM chains the recipes start from or plug their REMs into (their backbones name the DAMs)."""
    out = []
    for r in plan.recipes.by_name.values():
        for key in ("init", "target_dam", "per_target_init"):
            if r.get(key) and plan.recipes.is_dam(r[key]):
                out.append(r[key])
    return out


def _dam_card_spec(plan: Any, corpus: str, settings: dict[str, Any], chains: list[str]) -> dict[str, Any]:
    """A DAM's spec as the card shows it: the MLM settings of ``corpus`` (``*``: any other target), its
    dataset and what it starts from: a source DAM its backbone, a target DAM the source DAM of its language
    (the chains the recipes name; DDR's sequential initialisation)."""
    parts = [plan.recipes.dam_parts(c, "card") for c in chains]
    if settings["role"] == "source":
        starts = sorted({base for base, corpora in parts if corpora[0] == corpus})
    else:
        language = plan.datasets.language(corpus) if corpus != "*" else None
        starts = sorted({f"{base}{DAM_SEP}{corpora[0]}" for base, corpora in parts
                         if language is None or plan.datasets.language(corpora[0]) == language})
    return {
        "kind": "mlm",
        "init": " or ".join(starts) or "-",
        "dataset": f"{plan.paths.data}/{corpus}" if corpus != "*" else "*",
        "max_length": settings["max_length"],
        "max_examples": settings.get("max_examples"),
        "train": plan.recipes.train_settings(settings),
    }


def training_rows(plan: Any) -> list[Row]:
    return [training_row(plan, job, source, spec, launch) for job, source, spec, launch in training_jobs(plan)]


# ------------------------------------------------------------------------------------------- inference
def inference_rows(plan: Any) -> list[dict[str, Any]]:
    """Per group of dense systems that encode alike: their default lengths and the datasets they encode at
    other lengths (`dataset_lengths`), over the datasets this config evaluates."""
    datasets = list(dict.fromkeys([*plan.datasets.evaluated, *plan.datasets.configured]))
    groups: dict[tuple, list[str]] = {}
    for system in plan.systems.dense:
        if ".mine-d" in system:  # encodes the training queries' corpus only
            continue
        own = plan.systems.system_lengths(system)
        default = (own.get("query_max_length"), own.get("doc_max_length"))
        special = []
        for d in datasets:
            opts = plan.systems.encoder_options(system, d)
            got = (opts.get("query_max_length", default[0]), opts.get("doc_max_length", default[1]))
            if got != default:
                special.append((d, got))
        if not special:
            continue
        groups.setdefault((default, tuple(special)), []).append(system)
    rows = []
    for (default, special), systems in groups.items():
        rows.append({"systems": systems, "default": default, "datasets": list(special)})
    return rows
