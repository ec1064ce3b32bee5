"""Stage 10, trainings: the resolved spec (what the trainer reads), inputs, launch settings and code of every
training job: recipe runs (bi-encoders and RMSC mixtures), cross-encoders, readers, COCO pretraining,
query generators and DDR's DAMs.

:func:`build_trainings` resolves every spec once, so a config mistake stops planning with the key to fix. The
code stamps of the recipe runs are written by :meth:`Trainings.write_training_stamps`, a call the workflow makes
while the Snakefile is read (Snakemake lists the stamp folder once while it builds the DAG, so a stamp first
written by an input function could be missed); building the stage writes nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from zsdr.plan.berm import Berm
from zsdr.plan.code import Code
from zsdr.plan.cocodr import Cocodr
from zsdr.plan.ddr import Ddr
from zsdr.plan.recipes import DAM_SEP, Recipes
from zsdr.plan.references import ModelRefs
from zsdr.plan.systems import Systems
from zsdr.training.loss_registry import LOSSES
from zsdr.training.term_registry import TERMS

PLANNED_TERMS = ("berm", "modir", "dro")
"""Loss terms whose sections the planner resolves (their label, triples and cluster files are job inputs); every
other registered term's section goes into the spec as the recipe gives it."""

LOSS_MODULES = {name: loss.module for name, loss in LOSSES.items()}
"""The module of each base loss (a training's code input), from the loss registry."""

TRAINER_CODE = (
    "zsdr.training.trainer",
    "zsdr.training.data",
    "zsdr.training.tasks",
    "zsdr.distributed",
    "zsdr.training.launch",
    "zsdr.training.recipes",
    "zsdr.models.encoder",
    "zsdr.data.formats",
)
"""The modules every training job runs."""


@dataclass(frozen=True)
class Trainings:
    recipes: Recipes
    refs: ModelRefs
    systems: Systems
    cocodr: Cocodr
    ddr: Ddr
    berm: Berm
    code: Code
    triples_sources: list[str]                  # datasets whose text triples become a training dataset
    weak_pairs: list[tuple[str, str]]           # (corpus, method) of every weak-pair file a mixture run reads
    stamps: dict[str, str] = field(default_factory=dict, compare=False, repr=False)   # run -> code stamp

    @property
    def paths(self) -> Any:
        return self.recipes.datasets.paths

    # the data a training reads
    def train_source(self, item: dict[str, Any]) -> str:
        return self.recipes.datasets.check_dataset(item.get("dataset", self.recipes.datasets.source))

    def side_file(self, source: str, key: str, where: str) -> str:
        return side_file(self.recipes, source, key, where)

    def training_data(self, item: dict[str, Any], where: str, run: str | None = None) -> tuple[str, str]:
        """``(dataset folder, negatives file)`` an item trains on, by its `negatives` kind."""
        return training_data(self.recipes, item, where, run)

    def teacher_file(self, item: dict[str, Any], where: str) -> str | None:
        name = item.get("teacher")
        if name is None:
            return None
        src = self.train_source(item)
        if name == "published":
            return self.side_file(src, "teacher_scores", where)
        if name not in self.recipes.cross_encoders:
            raise ValueError(
                f"config key {where}.teacher: {name!r} is neither `published` nor a key of `cross_encoders`"
            )
        return f"{self.paths.data}/{src}/teacher/{name}.jsonl"

    def teacher_negatives(self, name: str, source: str) -> str:
        """The negatives file whose (query, candidate) pairs the cross-encoder ``name`` scores on ``source``."""
        item = self.recipes.cross_encoders[name] | {"dataset": source, "negatives": "hard"}
        return self.training_data(item, f"cross_encoders.{name}")[1]

    def teacher_max_examples(self, name: str, source: str) -> int | None:
        """How many examples of its negatives file the teacher ``name`` must score on ``source``: the largest
        `max_examples` of the recipes that distil from those scores, when every one of them trains on that
        same file (its first N kept examples are then all they read); None (every query) when one of them
        reads all its examples or trains on another file, or when no recipe uses the scores."""
        negatives = self.teacher_negatives(name, source)
        limits = []
        for recipe, r in self.recipes.by_name.items():
            if r.get("mixture") or r.get("teacher") != name or self.train_source(r) != source:
                continue
            if self.training_data(r, f"recipes.{recipe}")[1] != negatives or r.get("max_examples") is None:
                return None
            limits.append(int(r["max_examples"]))
        return max(limits) if limits else None

    def mine_settings(self, run: str) -> dict[str, Any]:
        """What the mine_negatives job of an ANCE run does: the model (the previous system's) and its settings
        at the episode's lengths, the `mine` settings (`training.mine` under the recipe's), the seed (the
        recipe's plus the episode) and the queries it mines for (the recipe's `max_examples`)."""
        name, k = self.systems.mined[run]
        r = self.recipes.by_name[name]
        return {
            "mine": {**self.recipes.training["mine"], **r.get("mine", {})},
            "seed": self.recipes.train_settings(r)["seed"] + k,
            "max_examples": r.get("max_examples"),
        }

    # recipe runs
    def train_spec(self, run: str) -> dict[str, Any]:
        """The resolved spec (zsdr.training.recipes) of one training run."""
        recipes, refs = self.recipes, self.refs
        name, k = recipes.runs[run]
        r = recipes.by_name[name]
        if r.get("mixture"):
            return self.mixture_spec(run)
        where = f"recipes.{name}"
        episodes = r["episodes"]
        models = self.paths.models
        init = refs.model_ref(r["init"]) if k == 1 else f"{models}/trained/{name}-ep{k - 1}"
        if k == 1:
            refs.check_ance_head(r, init, where)
        if run in recipes.per_target and r.get("per_target_init"):
            init = refs.dam_path(f"{r['per_target_init']}{DAM_SEP}{recipes.per_target[run]}", where)
        dataset, negatives = self.training_data(r, where, run)
        train = recipes.train_settings(r)
        if r.get("episode_lr_decay") and k > 1:
            train["lr"] = train["lr"] * episode_lr_factor(r, k, where)
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
            train["schedule_steps"] = train.get("schedule_steps") or episodes * train["max_steps"]
            train["schedule_offset"] = (k - 1) * train["max_steps"]
        modir = self.modir_spec(r, run, train)
        mined = name if run in recipes.per_target and r.get("modir") else run
        return {
            "kind": "bi_encoder",
            "init": init,
            "dataset": dataset,
            "negatives": negatives,
            "systems": r.get("systems"),
            "teacher": self.teacher_file(r, where),
            "out": f"{models}/trained/{run}",
            "checkpoint_dir": f"{models}/.checkpoints/{run}",
            "encoder": r["encoder"],
            # the settings the recipe's retrieval system encodes with beyond `encoder` (saved in zsdr.json)
            **({"retrieval": r["system"]} if r.get("system") else {}),
            **({"head": r["head"]} if r.get("head") and k == 1 else {}),
            "loss": r["loss"],
            **({"examples": example_unit(r, where)} if r.get("examples", "queries") != "queries" else {}),
            "negatives_per_query": r["negatives_per_query"],
            "scale": r["scale"],
            "dropout": recipes.recipe_dropout(r),
            "max_examples": r.get("max_examples"),
            "berm": self.berm.berm_spec(r, dataset),
            "rem": r.get("rem"),
            **({"modir": modir} if modir else {}),
            **({"dro": {**r["dro"], "clusters_file": f"{self.paths.data}/{self.train_source(r)}/clusters/{run}.jsonl"}}
               if r.get("dro") else {}),
            # any other registered term: its section as the recipe gives it
            **{t: r[t] for t in TERMS if t not in PLANNED_TERMS and r.get(t)},
            "train": train,
            "info": {
                "recipe": name,
                "target": recipes.per_target.get(run),
                "episode": k,
                "episodes": episodes,
                "description": r.get("description", ""),
                "provenance": r["provenance"],
                **({"mine": {**recipes.training["mine"], **r["mine"], **self.mine_info(mined)}}
                   if r["negatives"] == "ance" else {}),
            },
        }

    def mine_info(self, run: str) -> dict[str, str]:
        """What the summary says about an ANCE run's mining: the system and the lengths it mines at."""
        s = self.systems
        if run not in s.mined:
            return {}
        lengths = {**s.system_lengths(s.mining_system(run)), **s.mining_lengths(run)}
        return {
            "system": s.mining_system(run),
            "lengths": "q{}/d{}".format(lengths.get("query_max_length", "-"), lengths.get("doc_max_length", "-")),
        }

    def mixture_spec(self, run: str) -> dict[str, Any]:
        """The resolved spec (zsdr.training.rmsc) of a run of a `mixture` recipe."""
        recipes, rmsc = self.recipes, self.systems.rmsc
        name = recipes.runs[run][0]
        r = recipes.by_name[name]
        target = recipes.per_target.get(run)
        train = recipes.train_settings(r)
        if name in rmsc.curve_recipes:
            train["snapshot_every"] = rmsc.curves["snapshot_every"]
        k = r["mixture"].get("soft_tokens")
        return {
            "kind": "mixture",
            "init": self.refs.model_ref(r["init"]),
            "encoder": r["encoder"],
            "sets": rmsc.mixture_sets(name, target),
            "scale": r["scale"],
            "group_negatives": r["mixture"]["group_negatives"],
            "soft_tokens": {"k": k} if k else None,
            "dropout": recipes.recipe_dropout(r),
            "out": f"{self.paths.models}/trained/{run}",
            "checkpoint_dir": f"{self.paths.models}/.checkpoints/{run}",
            "train": train,
            "info": {"recipe": name, "target": target, "description": r.get("description", ""),
                     "provenance": r["provenance"]},
        }

    def modir_spec(self, recipe: dict[str, Any], run: str, train: dict[str, Any]) -> dict[str, Any] | None:
        """The `modir` term of a MoDIR run (None otherwise); sets the run's length and snapshots in ``train``."""
        if not recipe.get("modir"):
            return None
        modir = self.systems.modir
        name, target = self.recipes.runs[run][0], self.recipes.per_target[run]
        train["max_steps"] = modir.modir_total(name, target)
        if modir.is_curve_run(name, target):
            train["snapshot_every"] = modir.curves["snapshot_every"]
        # the target's queries at the length its evaluation encodes them (the system's `dataset_lengths`), as
        # MoDIR's code tokenises a target's data once for both (--max_query_length_tgd: ArguAna 512)
        length = recipe["system"].get("dataset_lengths", {}).get(target, {}).get("query_max_length")
        return {
            "seed": train["seed"],
            **recipe["modir"],
            **({"target_query_max_length": length} if length else {}),
            "triples": f"{self.paths.data}/{target}/modir/triples.tsv",
            "target": f"{self.paths.data}/{target}",
        }

    # the other trained models
    def cross_encoder_spec(self, name: str) -> dict[str, Any]:
        c = self.recipes.cross_encoders[name]
        dataset, negatives = self.training_data(c, f"cross_encoders.{name}")
        models = self.paths.models
        return {
            "kind": "cross_encoder",
            "init": self.refs.model_ref(c["init"]),
            "dataset": dataset,
            "negatives": negatives,
            "systems": None,
            "teacher": None,
            "out": f"{models}/cross-encoders/{name}",
            "checkpoint_dir": f"{models}/.checkpoints/cross-encoder-{name}",
            "head": c["head"],
            "max_length": c["max_length"],
            "negatives_per_query": c["negatives_per_query"],
            "dropout": self.recipes.training["dropout"],
            "train": self.recipes.train_settings(c),
            "info": {"cross_encoder": name, "description": c["description"]},
        }

    def reader_spec(self, name: str) -> dict[str, Any]:
        """The resolved spec of a reader the pipeline trains (the answer spans of the source's training pairs:
        `units`, by default the dataset's own units.jsonl)."""
        r = self.recipes.readers[name]
        dataset = f"{self.paths.data}/{self.train_source(r)}"
        models = self.paths.models
        return {
            "kind": "reader",
            "init": self.refs.model_ref(r["init"]),
            "dataset": dataset,
            "units": r.get("units") or f"{dataset}/units.jsonl",
            "max_length": r["max_length"],
            "out": f"{models}/readers/{name}",
            "checkpoint_dir": f"{models}/.checkpoints/reader-{name}",
            "dropout": self.recipes.training["dropout"],
            "train": self.recipes.train_settings(r),
            "info": {"reader": name, "description": r["description"]},
        }

    def coco_spec(self, name: str) -> dict[str, Any]:
        """The resolved spec (zsdr.pretrain.coco) of a pretrained model the pipeline trains."""
        p = self.recipes.pretrained[name]
        if "init" not in p or "train" not in p:
            raise ValueError(
                f"config key cocodr.pretrained.{name}: give `hf` (a released model) or `init`, "
                f"`corpora` and `train` (pretrained by the pipeline)"
            )
        if p["init"] == name:
            raise ValueError(f"config key cocodr.pretrained.{name}.init: a model cannot start from itself")
        init = self.refs.model_ref(p["init"])
        if p.get("head") != "new":
            self.refs.check_head_source(init, f"cocodr.pretrained.{name}.init")
        models = self.paths.models
        return {
            "kind": "coco",
            "init": init,
            "spans": [self.cocodr.spans_file(c) for c in self.cocodr.pretrained_corpora(name)],
            "max_length": p["max_length"],
            "mlm_probability": p["mlm_probability"],
            "head_layers": p["head_layers"],
            "skip_from": p["skip_from"],
            "late_mlm": p["late_mlm"],
            "contrastive_weight": p["contrastive_weight"],
            "backbone_dropout": p["backbone_dropout"],
            **({"head": p["head"]} if p.get("head") else {}),
            "tie_embeddings": p.get("tie_embeddings"),
            "max_examples": p.get("max_examples"),
            "out": f"{models}/pretrained/{name}",
            "checkpoint_dir": f"{models}/.checkpoints/pretrained-{name}",
            "dropout": self.recipes.training["dropout"],
            "train": self.recipes.train_settings(p),
            "info": {"pretrained": name, "description": p["description"], "provenance": p["provenance"]},
        }

    def generator_spec(self, name: str) -> dict[str, Any]:
        """The resolved spec (zsdr.models.generator) of a generator the pipeline trains."""
        rmsc = self.systems.rmsc
        g = rmsc.generators[name]
        where = f"rmsc.qgen.generators.{name}"
        if "build" not in g or "train" not in g or "tokenizer" not in g:
            raise ValueError(
                f"config key {where}: give `hf` (a released generator) or `build`, `tokenizer` and "
                f"`train` (a tiny T5 trained by the pipeline)"
            )
        if g["tokenizer"] not in self.recipes.backbones:
            raise ValueError(f"config key {where}.tokenizer: {g['tokenizer']!r} is not a key of `backbones`")
        datasets, models = self.recipes.datasets, self.paths.models
        return {
            "kind": "generator",
            "init": f"{models}/generators/{name}.init",
            "dataset": f"{self.paths.data}/{datasets.check_dataset(g.get('dataset', datasets.source))}",
            "split": "train",
            "max_length": g["max_length"],
            "query_max_length": g["query_max_length"],
            "out": f"{models}/generators/{name}",
            "checkpoint_dir": f"{models}/.checkpoints/generator-{name}",
            "dropout": self.recipes.training["dropout"],
            "train": self.recipes.train_settings(g),
            "info": {"generator": name, "description": g.get("description", "")},
        }

    def dam_spec(self, chain: str) -> dict[str, Any]:
        """The resolved MLM spec (zsdr.pretrain.mlm) of the DAM ``chain``."""
        where = f"DAM {chain}"
        base, corpora = self.recipes.dam_parts(chain, where)
        corpus = corpora[-1]
        prev = DAM_SEP.join([base, *corpora[:-1]])
        init = self.refs.model_ref(base) if len(corpora) == 1 else self.refs.dam_path(prev, where)
        s = self.ddr.dam_settings(corpus)
        train = self.recipes.train_settings(s)
        if corpus in self.ddr.figure4_datasets and chain == self.ddr.figure4_dam(corpus):
            train["snapshot_every"] = self.ddr.figure4["snapshot_every"]
        models = self.paths.models
        return {
            "kind": "mlm",
            "init": init,
            "dataset": f"{self.paths.data}/{corpus}",
            "max_length": s["max_length"],
            "mlm_probability": self.ddr.section["dam"]["mlm_probability"],
            "tie_embeddings": self.ddr.section["dam"]["tie_embeddings"],
            "max_examples": s.get("max_examples"),
            "out": f"{models}/dams/{chain}",
            "checkpoint_dir": f"{models}/.checkpoints/dam-{chain}",
            "dropout": self.recipes.training["dropout"],
            "train": train,
            "info": {"dam": chain, "corpus": corpus, "role": s["role"],
                     "from": prev if len(corpora) > 1 else base},
        }

    # what a training job reads and runs
    def spec_inputs(self, spec: dict[str, Any]) -> list[str]:
        """Dataset marker and store, negatives, teacher scores, BERM labels, a reader's units file and initial
        model of a training spec (a dataset's units.jsonl comes with its marker). Every training that reads a
        dataset's texts maps its store (zsdr.data.store)."""
        model_files = self.refs.model_files
        if spec["kind"] == "coco":
            return [*spec["spans"], *model_files(spec["init"])]
        if spec["kind"] == "mixture":
            files = [f for x in spec["sets"]
                     for f in (f"{x['dataset']}/dataset.json", f"{x['dataset']}/store/store.json")]
            files += [x["pairs"] for x in spec["sets"] if x.get("pairs")]
            return list(dict.fromkeys(files)) + model_files(spec["init"])
        files = [f"{spec['dataset']}/dataset.json"]
        if spec["kind"] in ("bi_encoder", "cross_encoder", "generator", "reader", "mlm"):
            files.append(f"{spec['dataset']}/store/store.json")
        files += [spec["negatives"]] if spec.get("negatives") else []
        files += [spec["dro"]["clusters_file"]] if spec.get("dro") else []
        files += model_files(spec["init"])
        files += [spec["teacher"]] if spec.get("teacher") else []
        if spec.get("units") and spec["units"] != f"{spec['dataset']}/units.jsonl":
            files.append(spec["units"])
        if spec.get("modir"):
            target = spec["modir"]["target"]
            files += [spec["modir"]["triples"], f"{target}/dataset.json", f"{target}/store/store.json"]
        return files + ([spec["berm"]["labels"]] if spec.get("berm") else [])

    def recipe_code(self, run: str) -> str:
        """The code input (a stamp, zsdr.plan.code) of a training run: the trainer, its loss, its terms (the
        stamp :meth:`write_training_stamps` wrote, else written now)."""
        stamp = self.stamps.get(run)
        return stamp if stamp is not None else self._recipe_code(run)

    def write_training_stamps(self) -> None:
        """Write (or confirm) the code stamp of every training run."""
        self.stamps.update({run: self._recipe_code(run) for run in self.recipes.runs})

    def _recipe_code(self, run: str) -> str:
        r = self.recipes.by_name[self.recipes.runs[run][0]]
        mods = [*TRAINER_CODE, LOSS_MODULES[r["loss"]]]
        if r.get("berm"):
            mods += ["zsdr.training.berm_term", "zsdr.losses.semantic_units", "zsdr.data.units"]
        if r.get("modir"):
            mods += ["zsdr.training.modir", "zsdr.losses.adversarial", "zsdr.models.heads"]
        if r.get("dro"):
            mods += ["zsdr.training.idro"]
        if r.get("mixture"):
            mods += ["zsdr.training.rmsc", "zsdr.training.weak.table", "zsdr.models.soft_tokens"]
        mods += [TERMS[t].split(":")[0] for t in TERMS if t not in PLANNED_TERMS and r.get(t)]
        # the registry's lines of the terms it runs (zsdr.training.terms.term_sections): a new term's line
        # changes the stamp of the recipes that carry its section only
        return self.code.code(*mods, script="train", entries=[t for t in TERMS if r.get(t)])


def training_data(recipes: Recipes, item: dict[str, Any], where: str, run: str | None = None) -> tuple[str, str]:
    """``(dataset folder, negatives file)`` an item (recipe, cross-encoder) trains on, by its `negatives` kind."""
    datasets = recipes.datasets
    data = datasets.paths.data
    src = datasets.check_dataset(item.get("dataset", datasets.source))
    kind = item["negatives"]
    if kind == "triples":
        side_file(recipes, src, "triples", where)
        return f"{data}/{src}-triples", f"{data}/{src}-triples/negatives.jsonl"
    if kind == "hard":
        return f"{data}/{src}", side_file(recipes, src, "hard_negatives", where)
    if kind == "bm25":
        return f"{data}/{src}", f"{data}/{src}/negatives/bm25.jsonl"
    if run in recipes.per_target and item.get("modir"):
        run = recipes.runs[run][0]  # mined once by the base system for every target
    return f"{data}/{src}", f"{data}/{src}/negatives/{run}.jsonl"


def side_file(recipes: Recipes, source: str, key: str, where: str) -> str:
    """The file `training.sources.<source>.<key>` names (``{data}`` in it: the scale's data folder, for a file the
    pipeline writes), or a ValueError naming config key ``where``."""
    path = recipes.training["sources"].get(source, {}).get(key)
    if not path:
        raise ValueError(f"config key {where} needs training.sources.{source}.{key} (the file is not configured)")
    return path.replace("{data}", recipes.datasets.paths.data)


def episode_lr_factor(recipe: dict[str, Any], k: int, where: str) -> float:
    """The peak lr of episode ``k`` as a fraction of the recipe's (`episode_lr_decay`). The official rule
    (COCO-DR's run_ann.py) as a mapping ``{total_steps, floor}``: an episode resumed at global step
    g = (k - 1) x max_steps trains at ``max(floor, 1 - g / total_steps)`` x lr; `true`: the stand-in
    ``max(0.2, 1 - (k - 1) / episodes)`` of the mini scale, whose episodes count epochs."""
    rule = recipe["episode_lr_decay"]
    if rule is True:
        return max(0.2, 1 - (k - 1) / recipe["episodes"])
    steps = recipe["train"].get("max_steps")
    if not steps:
        raise ValueError(
            f"config key {where}.episode_lr_decay: the official rule counts the steps done before an "
            "episode, so train.max_steps must give the episode's length (or set episode_lr_decay: true)"
        )
    return max(float(rule["floor"]), 1 - (k - 1) * int(steps) / int(rule["total_steps"]))


def example_unit(recipe: dict[str, Any], where: str) -> str:
    """What one training example is (`examples`): `triples`, every (query, negative) pair of MS MARCO's triples
    (what the official warmups' epochs count), needs the triples and one negative per query; `query_triples`,
    every (query, negative) pair of the negatives file with each query's pairs consecutive (the official ANCE
    loaders), needs one negative per query."""
    unit = recipe.get("examples", "queries")
    if unit == "query_triples" and recipe["negatives_per_query"] != 1:
        raise ValueError(
            f"config key {where}.examples: query_triples makes one (query, positive, negative) triple per "
            f"negative of a query's pool, so it needs negatives_per_query: 1 (this recipe has "
            f"{recipe['negatives_per_query']})"
        )
    if unit == "triples" and (recipe["negatives"] != "triples" or recipe["negatives_per_query"] > 1):
        raise ValueError(
            f"config key {where}.examples: triples counts the (query, negative) pairs of a triples "
            f"file, so it needs negatives: triples and negatives_per_query <= 1 (this recipe has "
            f"negatives: {recipe['negatives']}, negatives_per_query: {recipe['negatives_per_query']})"
        )
    return unit


def build_trainings(recipes: Recipes, refs: ModelRefs, systems: Systems, cocodr: Cocodr, ddr: Ddr, berm: Berm,
                    code: Code) -> Trainings:
    """The trainings stage; every spec is resolved here, so a config mistake stops planning with its key."""
    triples = sorted({
        recipes.datasets.check_dataset(x.get("dataset", recipes.datasets.source))
        for x in [*recipes.by_name.values(), *recipes.cross_encoders.values()] if x["negatives"] == "triples"
    })
    t = Trainings(recipes=recipes, refs=refs, systems=systems, cocodr=cocodr, ddr=ddr, berm=berm, code=code,
                  triples_sources=triples, weak_pairs=[])
    specs = {run: t.train_spec(run) for run in recipes.runs}
    for name in recipes.cross_encoders:
        t.cross_encoder_spec(name)
    for name in recipes.trained_readers:
        t.reader_spec(name)
    for name in recipes.trained_pretrained:
        t.coco_spec(name)
    for name in systems.rmsc.trained_generators:
        t.generator_spec(name)
    for name in ddr.figure4_datasets:
        t.dam_spec(ddr.figure4_dam(name))
    # the weak-pair files the mixture runs read: (corpus, method)
    weak = sorted({
        (os.path.basename(x["dataset"]), os.path.basename(x["pairs"])[: -len(".jsonl")])
        for spec in specs.values() if spec["kind"] == "mixture" for x in spec["sets"] if x.get("pairs")
    })
    return replace(t, weak_pairs=weak)
