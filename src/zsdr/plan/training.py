"""Training: the resolved spec, inputs, code and launch settings of every training job."""

from __future__ import annotations

from typing import Any

from zsdr.models.released import KNOWN_CHECKPOINTS, RELEASES
from zsdr.training.term_registry import TERMS
from zsdr.workflow import check_model_reference

# Loss terms whose sections the planner resolves (their label, triples and cluster files are job
# inputs); every other registered term's section goes into the spec as the recipe gives it.
PLANNED_TERMS = ("berm", "modir", "dro")


class TrainingPlan:
    """Training: the resolved spec, inputs, code and launch settings of every training job (a part of :class:`zsdr.plan.core.Plan`)."""

    def on_this_machine(self, ref: str) -> str:
        """``ref``; a model the DAG does not build must be usable, or planning fails naming its config key
        (not a job, minutes later): a folder must hold a complete model, and with `offline: true` a
        Hugging Face id must be in the local cache.
        """
        if not ref.startswith(f"{self.MODELS}/") and ref not in self.OFFLINE_CHECKED:
            check_model_reference(ref, self.config, self.config["offline"])
            self.OFFLINE_CHECKED.add(ref)
        return ref

    def model_ref(self, name: str) -> str:
        """What `init` names: a backbone, a recipe's trained model, a cross-encoder, or an HF id/folder."""
        if name in self.config["backbones"]:
            b = self.config["backbones"][name]
            return (
                f"{self.MODELS}/backbones/{name}" if "build" in b else self.on_this_machine(b["hf"])
            )
        if name in self.RECIPES:
            return self.trained_model(name)
        if name in self.PRETRAINED:
            p = self.PRETRAINED[name]
            if "release" in p:
                return self.released_model(p["release"], f"cocodr.pretrained.{name}.release")
            return (
                self.on_this_machine(p["hf"]) if "hf" in p else f"{self.MODELS}/pretrained/{name}"
            )
        if self.is_dam(name):
            return self.dam_path(name, "init")
        if name in self.CROSS_ENCODERS:
            return f"{self.MODELS}/cross-encoders/{name}"
        if name in RELEASES:
            return f"{self.MODELS}/released/{name}"
        return self.on_this_machine(name)

    def released_model(self, name: str, where: str) -> str:
        """The folder the DAG converts the release ``name`` into (zsdr.models.released), or a config error."""
        if name not in RELEASES:
            raise ValueError(
                f"config key {where}: {name!r} is not a release (known: {', '.join(sorted(RELEASES))})"
            )
        return f"{self.MODELS}/released/{name}"

    def check_head_source(self, ref: str, where: str) -> None:
        """A COCO pretraining that continues its init's Condenser head must not start from a hub copy known to
        lack it (zsdr.models.released.KNOWN_CHECKPOINTS): said when the plan is made, not hours into a job."""
        known = KNOWN_CHECKPOINTS.get(ref)
        if known is not None and known.get("condenser_head") is False:
            instead = known.get("instead", "a checkpoint that carries one")
            raise ValueError(
                f"config key {where}: {ref} carries no Condenser head ({known['note']}), which COCO pretraining "
                f"continues; start from {instead} (cocodr.pretrained.<name>: {{release: condenser}}), "
                "or start a new head on purpose with `head: new`"
            )

    def check_ance_head(self, recipe: dict[str, Any], init: str, where: str) -> None:
        """A cls_linear_ln recipe that keeps its init's ANCE head (no `head: new`) must not start from a hub id
        known to carry none (zsdr.models.released.KNOWN_CHECKPOINTS): said when the plan is made."""
        known = KNOWN_CHECKPOINTS.get(init)
        pooling = recipe["encoder"].get("pooling") or self.recipe_pooling(recipe.get("init"))
        if pooling == "cls_linear_ln" and recipe.get("head") != "new" and known and known.get("ance_head") is False:
            raise ValueError(
                f"config key {where}.head: {init} carries no ANCE head ({known['note']}), which cls_linear_ln "
                "pooling would keep; set `head: new` to start one on purpose, or start from a checkpoint with one"
            )

    def model_files(self, ref: str) -> list[str]:
        """The files a job waits for before loading ``ref`` (none for a Hugging Face id; a DAM's
        snapshot exists once its DAM is trained; a converted REM release is its rem.json).
        """
        if not ref.startswith(f"{self.MODELS}/"):
            return []
        name = (
            ref[len(f"{self.MODELS}/released/") :]
            if ref.startswith(f"{self.MODELS}/released/")
            else None
        )
        if name in RELEASES and RELEASES[name].kind == "adapter-rem":
            return [f"{ref}/rem.json"]
        return [f"{ref.split('/snapshots/')[0]}/config.json"]

    def train_source(self, item: dict[str, Any]) -> str:
        return self.check_dataset(item.get("dataset", self.SOURCE))

    def side_file(self, source: str, key: str, where: str) -> str:
        path = self.TRAINING["sources"].get(source, {}).get(key)
        if not path:
            raise ValueError(
                f"config key {where} needs training.sources.{source}.{key} (the file is not configured)"
            )
        return path

    def training_data(
        self, item: dict[str, Any], where: str, run: str | None = None
    ) -> tuple[str, str]:
        """``(dataset folder, negatives file)`` an item trains on, by its `negatives` kind."""
        src = self.train_source(item)
        kind = item["negatives"]
        if kind == "triples":
            self.side_file(src, "triples", where)
            return f"{self.DATA}/{src}-triples", f"{self.DATA}/{src}-triples/negatives.jsonl"
        if kind == "hard":
            return f"{self.DATA}/{src}", self.side_file(src, "hard_negatives", where)
        if kind == "bm25":
            return f"{self.DATA}/{src}", f"{self.DATA}/{src}/negatives/bm25.jsonl"
        if run in self.PER_TARGET and item.get("modir"):
            run = self.TRAIN_RUNS[run][0]  # mined once by the base system for every target
        return f"{self.DATA}/{src}", f"{self.DATA}/{src}/negatives/{run}.jsonl"

    def teacher_file(self, item: dict[str, Any], where: str) -> str | None:
        name = item.get("teacher")
        if name is None:
            return None
        src = self.train_source(item)
        if name == "published":
            return self.side_file(src, "teacher_scores", where)
        if name not in self.CROSS_ENCODERS:
            raise ValueError(
                f"config key {where}.teacher: {name!r} is neither `published` nor a key of `cross_encoders`"
            )
        return f"{self.DATA}/{src}/teacher/{name}.jsonl"

    def teacher_negatives(self, name: str, source: str) -> str:
        """The negatives file whose (query, candidate) pairs the cross-encoder ``name`` scores on ``source``."""
        item = self.CROSS_ENCODERS[name] | {"dataset": source, "negatives": "hard"}
        return self.training_data(item, f"cross_encoders.{name}")[1]

    def teacher_max_examples(self, name: str, source: str) -> int | None:
        """How many examples of its negatives file the teacher ``name`` must score on ``source``: the largest
        `max_examples` of the recipes that distil from those scores, when every one of them trains on that
        same file (its first N kept examples are then all they read); None (every query) when one of them
        reads all its examples or trains on another file, or when no recipe uses the scores."""
        negatives = self.teacher_negatives(name, source)
        limits = []
        for recipe, r in self.RECIPES.items():
            if r.get("mixture") or r.get("teacher") != name or self.train_source(r) != source:
                continue
            if self.training_data(r, f"recipes.{recipe}")[1] != negatives or r.get("max_examples") is None:
                return None
            limits.append(int(r["max_examples"]))
        return max(limits) if limits else None

    def train_settings(self, item: dict[str, Any]) -> dict[str, Any]:
        """The recipe's `train` section over the shared `training` defaults."""
        shared = {k: self.TRAINING[k] for k in ("seed", "precision", "save_every", "log_every")}
        return {**shared, **item["train"]}

    def recipe_dropout(self, item: dict[str, Any]) -> float | None:
        """The dropout a recipe trains with: its own `dropout`, else `training.dropout` (null: the
        checkpoint's)."""
        own = item.get("dropout")
        return self.TRAINING["dropout"] if own is None else own

    def train_spec(self, run: str) -> dict[str, Any]:
        """The resolved spec (zsdr.training.recipes) of one training run."""
        name, k = self.TRAIN_RUNS[run]
        r = self.RECIPES[name]
        if r.get("mixture"):
            return self.mixture_spec(run)
        where = f"recipes.{name}"
        episodes = r["episodes"]
        init = self.model_ref(r["init"]) if k == 1 else f"{self.MODELS}/trained/{name}-ep{k - 1}"
        if k == 1:
            self.check_ance_head(r, init, where)
        if run in self.PER_TARGET and r.get("per_target_init"):
            init = self.dam_path(
                f"{r['per_target_init']}{self.DAM_SEP}{self.PER_TARGET[run]}", where
            )
        dataset, negatives = self.training_data(r, where, run)
        train = self.train_settings(r)
        if r.get("episode_lr_decay") and k > 1:
            train["lr"] = train["lr"] * self.episode_lr_factor(r, k, where)
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
        return {
            "kind": "bi_encoder",
            "init": init,
            "dataset": dataset,
            "negatives": negatives,
            "systems": r.get("systems"),
            "teacher": self.teacher_file(r, where),
            "out": f"{self.MODELS}/trained/{run}",
            "checkpoint_dir": f"{self.MODELS}/.checkpoints/{run}",
            "encoder": r["encoder"],
            # the settings the recipe's retrieval system encodes with beyond `encoder` (saved in zsdr.json)
            **({"retrieval": r["system"]} if r.get("system") else {}),
            **({"head": r["head"]} if r.get("head") and k == 1 else {}),
            "loss": r["loss"],
            **({"examples": self.example_unit(r, where)} if r.get("examples", "queries") != "queries" else {}),
            "negatives_per_query": r["negatives_per_query"],
            "scale": r["scale"],
            "dropout": self.recipe_dropout(r),
            "max_examples": r.get("max_examples"),
            "berm": self.berm_spec(r, dataset),
            "rem": r.get("rem"),
            **({"modir": modir} if modir else {}),
            **(
                {
                    "dro": {
                        **r["dro"],
                        "clusters_file": f"{self.DATA}/{self.train_source(r)}/clusters/{run}.jsonl",
                    }
                }
                if r.get("dro")
                else {}
            ),
            # any other registered term: its section as the recipe gives it
            **{t: r[t] for t in TERMS if t not in PLANNED_TERMS and r.get(t)},
            "train": train,
            "info": {
                "recipe": name,
                "target": self.PER_TARGET.get(run),
                "episode": k,
                "episodes": episodes,
                "description": r.get("description", ""),
                "provenance": r["provenance"],
                **(
                    {
                        "mine": {
                            **self.TRAINING["mine"],
                            **r["mine"],
                            **self.mine_info(
                                name if run in self.PER_TARGET and r.get("modir") else run
                            ),
                        }
                    }
                    if r["negatives"] == "ance"
                    else {}
                ),
            },
        }

    def episode_lr_factor(self, recipe: dict[str, Any], k: int, where: str) -> float:
        """The peak lr of episode ``k`` as a fraction of the recipe's (`episode_lr_decay`). The official
        rule (COCO-DR's run_ann.py) as a mapping ``{total_steps, floor}``: an episode resumed at global
        step g = (k - 1) x max_steps trains at ``max(floor, 1 - g / total_steps)`` x lr; `true`: the
        stand-in ``max(0.2, 1 - (k - 1) / episodes)`` of the mini scale, whose episodes count epochs."""
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

    def example_unit(self, recipe: dict[str, Any], where: str) -> str:
        """What one training example is (`examples`): `triples`, every (query, negative) pair of MS MARCO's
        triples (what the official warmups' epochs count), needs the triples and one negative per query."""
        unit = recipe.get("examples", "queries")
        if unit == "triples" and (recipe["negatives"] != "triples" or recipe["negatives_per_query"] > 1):
            raise ValueError(
                f"config key {where}.examples: triples counts the (query, negative) pairs of a triples "
                f"file, so it needs negatives: triples and negatives_per_query <= 1 (this recipe has "
                f"negatives: {recipe['negatives']}, negatives_per_query: {recipe['negatives_per_query']})"
            )
        return unit

    def mine_info(self, run: str) -> dict[str, str]:
        """What the summary says about an ANCE run's mining: the system and the lengths it mines at."""
        if run not in self.MINED:
            return {}
        lengths = {**self.system_lengths(self.mining_system(run)), **self.mining_lengths(run)}
        return {
            "system": self.mining_system(run),
            "lengths": "q{}/d{}".format(
                lengths.get("query_max_length", "-"), lengths.get("doc_max_length", "-")
            ),
        }

    def mixture_spec(self, run: str) -> dict[str, Any]:
        """The resolved spec (zsdr.training.rmsc) of a run of a `mixture` recipe."""
        name = self.TRAIN_RUNS[run][0]
        r = self.RECIPES[name]
        m = r["mixture"]
        target = self.PER_TARGET.get(run)
        train = self.train_settings(r)
        if name in self.RMSC_CURVE_RECIPES:
            train["snapshot_every"] = self.RMSC_CURVES["snapshot_every"]
        k = m.get("soft_tokens")
        return {
            "kind": "mixture",
            "init": self.model_ref(r["init"]),
            "encoder": r["encoder"],
            "sets": self.mixture_sets(name, target),
            "scale": r["scale"],
            "group_negatives": m["group_negatives"],
            "soft_tokens": {"k": k} if k else None,
            "dropout": self.recipe_dropout(r),
            "out": f"{self.MODELS}/trained/{run}",
            "checkpoint_dir": f"{self.MODELS}/.checkpoints/{run}",
            "train": train,
            "info": {
                "recipe": name,
                "target": target,
                "description": r.get("description", ""),
                "provenance": r["provenance"],
            },
        }

    def modir_spec(
        self, recipe: dict[str, Any], run: str, train: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The `modir` term of a MoDIR run (None otherwise); sets the run's length and snapshots."""
        if not recipe.get("modir"):
            return None
        name, target = self.TRAIN_RUNS[run][0], self.PER_TARGET[run]
        train["max_steps"] = self.modir_total(name, target)
        if self.is_curve_run(name, target):
            train["snapshot_every"] = self.MODIR_CURVES["snapshot_every"]
        # the target's queries at the length its evaluation encodes them (the system's `dataset_lengths`), as
        # MoDIR's code tokenises a target's data once for both (--max_query_length_tgd: ArguAna 512)
        length = recipe["system"].get("dataset_lengths", {}).get(target, {}).get("query_max_length")
        return {
            "seed": train["seed"],
            **recipe["modir"],
            **({"target_query_max_length": length} if length else {}),
            "triples": f"{self.DATA}/{target}/modir/triples.tsv",
            "target": f"{self.DATA}/{target}",
        }

    def cross_encoder_spec(self, name: str) -> dict[str, Any]:
        c = self.CROSS_ENCODERS[name]
        dataset, negatives = self.training_data(c, f"cross_encoders.{name}")
        return {
            "kind": "cross_encoder",
            "init": self.model_ref(c["init"]),
            "dataset": dataset,
            "negatives": negatives,
            "systems": None,
            "teacher": None,
            "out": f"{self.MODELS}/cross-encoders/{name}",
            "checkpoint_dir": f"{self.MODELS}/.checkpoints/cross-encoder-{name}",
            "head": c["head"],
            "max_length": c["max_length"],
            "negatives_per_query": c["negatives_per_query"],
            "dropout": self.TRAINING["dropout"],
            "train": self.train_settings(c),
            "info": {"cross_encoder": name, "description": c["description"]},
        }

    def reader_spec(self, name: str) -> dict[str, Any]:
        """The resolved spec of a reader the pipeline trains (the answer spans of the source's training
        pairs: `units`, by default the dataset's own units.jsonl)."""
        r = self.READERS[name]
        dataset = f"{self.DATA}/{self.train_source(r)}"
        return {
            "kind": "reader",
            "init": self.model_ref(r["init"]),
            "dataset": dataset,
            "units": r.get("units") or f"{dataset}/units.jsonl",
            "max_length": r["max_length"],
            "out": f"{self.MODELS}/readers/{name}",
            "checkpoint_dir": f"{self.MODELS}/.checkpoints/reader-{name}",
            "dropout": self.TRAINING["dropout"],
            "train": self.train_settings(r),
            "info": {"reader": name, "description": r["description"]},
        }

    def reader_path(self, name: str) -> str:
        """What a reader loads: its trained folder (models/readers/<name>) or its `hf` id / folder."""
        return self.named_model(name, self.READERS, "berm.labels.reader", "`readers`", "readers")

    def named_model(
        self, name: str, table: dict[str, Any], key: str, table_key: str, folder: str
    ) -> str:
        """What a model named in config key ``key`` loads: its `hf` id / folder from ``table`` (config
        ``table_key``), else the folder the pipeline trains it into, models/<folder>/<name>."""
        if name not in table:
            raise ValueError(
                f"config key {key}: {name!r} is not a key of {table_key} "
                f"(defined: {', '.join(table) or 'none'})"
            )
        entry = table[name]
        return (
            self.on_this_machine(entry["hf"]) if "hf" in entry else f"{self.MODELS}/{folder}/{name}"
        )

    def spec_inputs(self, spec: dict[str, Any]) -> list[str]:
        """Dataset marker and store, negatives, teacher scores, BERM labels, a reader's units file and
        initial model of a training spec (a dataset's units.jsonl comes with its marker). Every
        training that reads a dataset's texts maps its store (zsdr.data.store)."""
        if spec["kind"] == "coco":
            return [*spec["spans"], *self.model_files(spec["init"])]
        if spec["kind"] == "mixture":
            files = [
                f
                for x in spec["sets"]
                for f in (f"{x['dataset']}/dataset.json", f"{x['dataset']}/store/store.json")
            ]
            files += [x["pairs"] for x in spec["sets"] if x.get("pairs")]
            return list(dict.fromkeys(files)) + self.model_files(spec["init"])
        files = [f"{spec['dataset']}/dataset.json"]
        if spec["kind"] in ("bi_encoder", "cross_encoder", "generator", "reader", "mlm"):
            files.append(f"{spec['dataset']}/store/store.json")
        files += [spec["negatives"]] if spec.get("negatives") else []
        files += [spec["dro"]["clusters_file"]] if spec.get("dro") else []
        files += self.model_files(spec["init"])
        files += [spec["teacher"]] if spec.get("teacher") else []
        if spec.get("units") and spec["units"] != f"{spec['dataset']}/units.jsonl":
            files.append(spec["units"])
        if spec.get("modir"):
            target = spec["modir"]["target"]
            files += [spec["modir"]["triples"], f"{target}/dataset.json", f"{target}/store/store.json"]
        return files + ([spec["berm"]["labels"]] if spec.get("berm") else [])

    def recipe_code(self, run: str) -> str:
        """The code input (a stamp, :meth:`code`) of a training run: the trainer, its loss, its terms.

        The stamps of every run are written when the plan is made (:meth:`write_training_stamps`), while
        the Snakefile is read: Snakemake lists the stamp folder once while it builds the DAG, so a stamp
        first written by an input function could be missed."""
        stamp = self.TRAINING_STAMPS.get(run)
        return stamp if stamp is not None else self._recipe_code(run)

    def write_training_stamps(self) -> None:
        """Write (or confirm) the code stamp of every training run."""
        self.TRAINING_STAMPS = {run: self._recipe_code(run) for run in self.TRAIN_RUNS}

    def _recipe_code(self, run: str) -> str:
        r = self.RECIPES[self.TRAIN_RUNS[run][0]]
        mods = [*self.TRAINER_CODE, self.LOSS_MODULES[r["loss"]]]
        if r.get("berm"):
            mods += ["zsdr.training.berm", "zsdr.losses.berm", "zsdr.data.units"]
        if r.get("modir"):
            mods += ["zsdr.training.modir", "zsdr.losses.adversarial", "zsdr.models.heads"]
        if r.get("dro"):
            mods += ["zsdr.training.idro"]
        if r.get("mixture"):
            mods += ["zsdr.training.rmsc", "zsdr.training.weak", "zsdr.models.soft_tokens"]
        mods += [TERMS[t].split(":")[0] for t in TERMS if t not in PLANNED_TERMS and r.get(t)]
        return self.code(*mods, script="train")

    def launch_settings(self, item: dict[str, Any]) -> dict[str, Any]:
        """How a training job starts: processes per node, nodes, launcher (a recipe may set its own
        processes), and how its loop runs (batch-preparing worker processes, compiled backbones); laid
        out on the site's nodes (:meth:`site_layout`)."""
        out = {k: self.TRAINING[k] for k in ("processes", "nodes", "launcher")}
        out["loop"] = {"workers": self.TRAINING["loader_workers"], "compile": self.TRAINING["compile"]}
        if item.get("processes"):
            out["processes"] = item["processes"]
        return self.site_layout(out)

    def recipe_pooling(self, name: str | None) -> str | None:
        """A recipe's pooling: its own encoder setting, else its init recipe's (None when it comes from a
        checkpoint's own zsdr.json or sentence-transformers settings)."""
        seen = set()
        while name in self.RECIPES and name not in seen:
            seen.add(name)
            r = self.RECIPES[name]
            if r["encoder"].get("pooling"):
                return r["encoder"]["pooling"]
            name = r.get("init")
        return None

    def _setup_training(self) -> None:
        """Resolve the (empty) set of model references already checked on this machine."""
        # Training (rules/finetune.smk): what each training job reads, how it is launched, what it runs.

        self.OFFLINE_CHECKED = set()

    def _setup_training_2(self) -> None:
        """Resolve the loss modules, trainer code and triples sources, and every training spec (a config mistake stops planning here)."""
        self.LOSS_MODULES = {
            "pairwise_nll": "zsdr.losses.contrastive",
            "contrastive": "zsdr.losses.contrastive",
            "margin_mse": "zsdr.losses.margin_mse",
        }
        self.TRAINER_CODE = (
            "zsdr.training.trainer",
            "zsdr.training.data",
            "zsdr.training.tasks",
            "zsdr.distributed",
            "zsdr.training.recipes",
            "zsdr.models.encoder",
            "zsdr.data.formats",
        )
        self.TRIPLES_SOURCES = sorted(
            {
                self.train_source(x)
                for x in [*self.RECIPES.values(), *self.CROSS_ENCODERS.values()]
                if x["negatives"] == "triples"
            }
        )
        # Resolve every training spec now, so a config mistake stops any command with the key to fix.
        for _run in self.TRAIN_RUNS:
            self.train_spec(_run)
        for _name in self.CROSS_ENCODERS:
            self.cross_encoder_spec(_name)
        for _name in self.TRAINED_READERS:
            self.reader_spec(_name)
        for _name in self.TRAINED_PRETRAINED:
            self.coco_spec(_name)
        for _name in self.TRAINED_GENERATORS:
            self.generator_spec(_name)
