"""Recipes: training runs and episodes, DDR's DAM chains and per-target runs."""

from __future__ import annotations

from typing import Any


class RecipesPlan:
    """Recipes: training runs and episodes, DDR's DAM chains and per-target runs (a part of :class:`zsdr.plan.core.Plan`)."""

    def mixture_per_target(self, recipe: dict[str, Any]) -> bool:
        """A `mixture` recipe (RMSC) with a target set trains once per target."""
        sets = recipe["mixture"]["sets"] if recipe.get("mixture") else []
        return any(s["domain"] == "target" for s in sets)

    def dam_parts(self, chain: str, where: str) -> tuple[str, list[str]]:
        """``(backbone, [corpus, ...])`` of a DAM chain, checked against the config."""
        base, *corpora = chain.split(self.DAM_SEP)
        if base not in self.config["backbones"] or not corpora:
            raise ValueError(
                f"config key {where}: DAM {chain!r} must be <backbone>--<corpus>[--<corpus>...] "
                f"with a key of `backbones` first (defined: {', '.join(self.config['backbones'])})"
            )
        for c in corpora:
            if c not in self.CONFIGURED_DATASETS and c not in self.MINI_DATASETS:
                raise ValueError(
                    f"config key {where}: DAM {chain!r} trains on {c!r}, which is not a configured "
                    f"dataset (datasets.source, datasets.targets or datasets.extra)"
                )
        return base, corpora

    def is_dam(self, name: str) -> bool:
        return self.DAM_SEP in name and name.split(self.DAM_SEP)[0] in self.config["backbones"]

    def recipe_run(self, name: str, episode: int | None = None) -> str:
        """The run that trains episode ``episode`` (default: the last) of recipe ``name``."""
        e = self.RECIPES[name]["episodes"]
        return name if e == 1 else f"{name}-ep{episode or e}"

    def add_per_target_runs(self, name: str) -> None:
        """Plan one run <name>@<dataset> per target of recipe ``name`` (MoDIR, RMSC)."""
        for dataset in self.recipe_targets(name):
            self.TRAIN_RUNS[f"{name}@{dataset}"] = (name, 1)
            self.PER_TARGET[f"{name}@{dataset}"] = dataset

    def trained_model(self, name: str) -> str:
        return f"{self.MODELS}/trained/{self.recipe_run(name)}"

    def _setup_recipes(self) -> None:
        """Resolve the recipes, cross-encoders, readers and pretrained models, every training run (recipe, episode) and DDR's per-target runs."""
        # Trained models (config `recipes`, `cross_encoders`, `readers`): every recipe is a dense system
        # of the same name; a recipe with E > 1 episodes trains runs <name>-ep1 .. <name>-epE (each also a
        # system, so the next episode can mine negatives with it) and the system <name> is its last episode.
        self.TRAINING = self.config["training"]
        self.RECIPES = self.config["recipes"]
        self.CROSS_ENCODERS = self.config["cross_encoders"]
        # Extractive QA readers (BERM's unit labels): the `hf` ones are used as released.
        self.READERS = self.config["readers"]
        self.TRAINED_READERS = [n for n, r in self.READERS.items() if "hf" not in r]
        # COCO-DR's retrieval-oriented pretrained backbones (rules/cocodr.smk): `hf` ones are used as
        # released, the others trained with COCO's objective into models/pretrained/<name>.
        self.COCODR = self.config["cocodr"]
        self.PRETRAINED = self.COCODR["pretrained"]
        self.TRAINED_PRETRAINED = [n for n, p in self.PRETRAINED.items() if "hf" not in p and "release" not in p]
        self.TRAIN_RUNS = {}  # run name -> (recipe, episode)

        for _name, _r in self.RECIPES.items():
            _e = _r["episodes"]
            if _e > 1 and _r["negatives"] != "ance":
                raise ValueError(
                    f"config key recipes.{_name}.episodes: {_e} episodes need `negatives: ance`"
                )
            if (
                _r["negatives"] == "ance"
                and _r["init"] not in self.RECIPES
                and not _r.get("base_system")
            ):
                raise ValueError(
                    f"config key recipes.{_name}.init: ANCE episodes mine with the previous model, "
                    f"so init must be another recipe (got {_r['init']!r}) or `base_system` must name "
                    f"the system that mines"
                )
            if _r.get("head") == "new" and _r["init"] in self.RECIPES:
                raise ValueError(
                    f"config key recipes.{_name}.head: `new` would discard the head of the trained "
                    f"{_r['init']!r} it starts from (set `head: checkpoint`, or init from a plain backbone)"
                )
            if _r.get("dro") and _r["negatives"] != "ance":
                raise ValueError(
                    f"config key recipes.{_name}.dro: the query clusters are refreshed with each ANCE "
                    f"episode's negatives, so a `dro` recipe needs `negatives: ance`"
                )
            if _r.get("mixture") and (_r["negatives"] != "random" or _r["loss"] != "contrastive"):
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
            if "modir" in _r or self.mixture_per_target(_r):
                continue  # one run per target (below)
            for _k in range(1, _e + 1):
                self.TRAIN_RUNS[_name if _e == 1 else f"{_name}-ep{_k}"] = (_name, _k)

        # DDR's domain adaption modules (rules/pretrain.smk): a DAM is named by its chain of MLM stages,
        # <backbone>--<corpus>[--<corpus>...], e.g. tiny-roberta--mini-source--mini-alpha = the tiny RoBERTa
        # after MLM on the source corpus, then on mini-alpha ("sequential initialisation"). Recipes name
        # a DAM as their `init`; a REM recipe's `target_dam` (default: its init) is the chain every
        # target's DAM continues; a `per_target_init` recipe (DDR\D) trains once per dataset d, from
        # the DAM <per_target_init>--<d>, as runs <recipe>@<d>.
        self.DDR = self.config["ddr"]
        self.DAM_SEP = "--"
        self.CONFIGURED_DATASETS = list(
            dict.fromkeys([self.SOURCE, *self.TARGETS, *self.config["datasets"]["extra"]])
        )

        self.PER_TARGET = {}  # run <recipe>@<dataset> -> dataset
        for _name, _r in self.RECIPES.items():
            if _r.get("per_target_init"):
                if _r["episodes"] > 1 or _r.get("rem"):
                    raise ValueError(
                        f"config key recipes.{_name}.per_target_init: per-target training is for "
                        f"single-episode full fine-tuning (no episodes, no rem)"
                    )
                for _d in self.CONFIGURED_DATASETS:
                    if _d != _r.get("dataset", self.SOURCE):
                        self.TRAIN_RUNS[f"{_name}@{_d}"] = (_name, 1)
                        self.PER_TARGET[f"{_name}@{_d}"] = _d
