"""Stage 2, recipes and runs: every training run of the config, its recipe's settings, DDR's DAM chains.

:func:`build_recipes` is the one owner of the runs: a recipe with E episodes trains ``<name>-ep1`` ..
``<name>-epE`` (one run ``<name>`` when E is 1); a per-target recipe (DDR\\D's `per_target_init`, MoDIR's `modir`,
RMSC's target `mixture`) trains ``<name>@<dataset>`` once per target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan import checks
from zsdr.plan.datasets import Datasets

DAM_SEP = "--"
"""What joins a DAM chain's stages: ``<backbone>--<corpus>[--<corpus>...]``."""


def mixture_per_target(recipe: dict[str, Any]) -> bool:
    """A `mixture` recipe (RMSC) with a target set trains once per target."""
    sets = recipe["mixture"]["sets"] if recipe.get("mixture") else []
    return any(s["domain"] == "target" for s in sets)


def _targets(name: str, recipe: dict[str, Any], per_target_datasets: list[str]) -> list[str]:
    wanted = recipe.get("targets")
    if wanted is None:
        return list(per_target_datasets)
    return checks.check_recipe_targets(name, wanted, per_target_datasets)


def _runs_wanted(recipe: dict[str, Any]) -> bool:
    """A per-target recipe's `targets` (default: every target) limits its runs; an empty list trains none."""
    return recipe.get("targets") is None or bool(recipe["targets"])


@dataclass(frozen=True)
class Recipes:
    """The recipes and the other trained models' sections, and every training run."""

    datasets: Datasets
    by_name: dict[str, dict[str, Any]]               # config `recipes`, `extends` resolved
    training: dict[str, Any]                         # config `training`
    backbones: dict[str, Any]
    cross_encoders: dict[str, Any]
    readers: dict[str, Any]
    trained_readers: list[str]                 # readers without `hf`: trained by the pipeline
    pretrained: dict[str, Any]                       # config cocodr.pretrained
    trained_pretrained: list[str]              # pretrained models the pipeline trains (COCO)
    runs: dict[str, tuple[str, int]]                 # run -> (recipe, episode)
    per_target: dict[str, str]                       # run <recipe>@<dataset> -> dataset
    per_target_datasets: list[str]             # what a per-target recipe trains on by default
    modir_recipes: list[str]                   # recipes with a `modir` section and runs
    mixture_recipes: list[str]                 # recipes with a `mixture` section (RMSC)
    per_target_mixtures: list[str]             # mixture recipes trained once per target

    def recipe_targets(self, name: str) -> list[str]:
        """The targets a per-target recipe (MoDIR, RMSC) trains one model for: its `targets`, else every
        configured dataset but the source."""
        return _targets(name, self.by_name[name], self.per_target_datasets)

    def recipe_run(self, name: str, episode: int | None = None) -> str:
        """The run that trains episode ``episode`` (default: the last) of recipe ``name``."""
        e = self.by_name[name]["episodes"]
        return name if e == 1 else f"{name}-ep{episode or e}"

    def trained_model(self, name: str) -> str:
        return f"{self.datasets.paths.models}/trained/{self.recipe_run(name)}"

    def dam_parts(self, chain: str, where: str) -> tuple[str, list[str]]:
        """``(backbone, [corpus, ...])`` of a DAM chain, checked against the config."""
        base, *corpora = chain.split(DAM_SEP)
        if base not in self.backbones or not corpora:
            raise ValueError(
                f"config key {where}: DAM {chain!r} must be <backbone>--<corpus>[--<corpus>...] "
                f"with a key of `backbones` first (defined: {', '.join(self.backbones)})"
            )
        for c in corpora:
            if c not in self.datasets.configured and c not in (*self.datasets.mini, *self.datasets.mini_zh):
                raise ValueError(
                    f"config key {where}: DAM {chain!r} trains on {c!r}, which is not a configured "
                    f"dataset (datasets.source, datasets.targets or datasets.extra)"
                )
        return base, corpora

    def is_dam(self, name: str) -> bool:
        return DAM_SEP in name and name.split(DAM_SEP)[0] in self.backbones

    def train_settings(self, item: dict[str, Any]) -> dict[str, Any]:
        """The recipe's `train` section over the shared `training` defaults."""
        shared = {k: self.training[k] for k in ("seed", "precision", "save_every", "log_every")}
        if self.training.get("step_limit") is not None:  # set only when given: no other run's params change
            shared["step_limit"] = self.training["step_limit"]
        if self.training.get("cpu_chunk_tokens") is not None:  # likewise
            shared["cpu_chunk_tokens"] = self.training["cpu_chunk_tokens"]
        return {**shared, **item["train"]}

    def recipe_dropout(self, item: dict[str, Any]) -> float | None:
        """The dropout a recipe trains with: its own `dropout`, else `training.dropout` (null: the checkpoint's)."""
        own = item.get("dropout")
        return self.training["dropout"] if own is None else own

    def launch_settings(self, item: dict[str, Any]) -> dict[str, Any]:
        """How a training job starts: processes per node, nodes, launcher (a recipe may set its own
        processes). How its loop runs is the same for every training (zsdr.plan.core.Plan.training_loop)."""
        out = {k: self.training[k] for k in ("processes", "nodes", "launcher")}
        if item.get("processes"):
            out["processes"] = item["processes"]
        return out

    def recipe_pooling(self, name: str | None) -> str | None:
        """A recipe's pooling: its own encoder setting, else its init recipe's (None when it comes from a
        checkpoint's own zsdr.json or sentence-transformers settings)."""
        seen = set()
        while name in self.by_name and name not in seen:
            seen.add(name)
            r = self.by_name[name]
            if r["encoder"].get("pooling"):
                return r["encoder"]["pooling"]
            name = r.get("init")
        return None

    def recipe_lengths(self, name: str | None) -> dict[str, int]:
        """The query / document lengths a recipe trains at, where the config says them: its `encoder`,
        else its init recipe's (a key missing from both is the checkpoint's, unknown here)."""
        out, seen = {}, set()
        while name in self.by_name and name not in seen:
            seen.add(name)
            enc = self.by_name[name]["encoder"]
            for k in LENGTH_KEYS:
                if k in enc:
                    out.setdefault(k, enc[k])
            name = self.by_name[name]["init"]
        return out


LENGTH_KEYS = ("query_max_length", "doc_max_length")


def build_recipes(config: dict[str, Any], datasets: Datasets) -> Recipes:
    """The recipes stage: every run in plan order (episodes, then DDR\\D's, MoDIR's and RMSC's per-target runs)."""
    recipes = config["recipes"]
    runs: dict[str, tuple[str, int]] = {}
    per_target: dict[str, str] = {}
    for name, r in recipes.items():
        checks.check_recipe(name, r, recipes)
        if "modir" in r or mixture_per_target(r):
            continue  # one run per target (below)
        e = r["episodes"]
        for k in range(1, e + 1):
            runs[name if e == 1 else f"{name}-ep{k}"] = (name, k)
    # DDR's domain adaption modules are named by their chain of MLM stages, <backbone>--<corpus>[--<corpus>...]
    # (e.g. tiny-roberta--mini-source--mini-alpha: MLM on the source corpus, then on mini-alpha); a
    # `per_target_init` recipe (DDR\D) trains once per dataset d, from the DAM <per_target_init>--<d>.
    for name, r in recipes.items():
        if r.get("per_target_init"):
            checks.check_per_target_init(name, r)
            # a recipe trained on the Chinese mini source adapts to the Chinese mini targets
            chinese_mini = r.get("dataset") in datasets.mini_zh
            for d in (datasets.mini_zh_targets if chinese_mini else datasets.configured):
                if d != r.get("dataset", datasets.source):
                    runs[f"{name}@{d}"] = (name, 1)
                    per_target[f"{name}@{d}"] = d
    per_target_datasets = list(d for d in datasets.configured if d != datasets.source)
    modir_recipes = list(n for n, r in recipes.items() if r.get("modir") and _runs_wanted(r))
    mixture_recipes = list(n for n, r in recipes.items() if r.get("mixture"))
    per_target_mixtures = list(n for n in mixture_recipes
                                if mixture_per_target(recipes[n]) and _runs_wanted(recipes[n]))
    # MoDIR (a `modir` section) and RMSC (a `mixture` with a target set) train one model per target
    for names, check in ((modir_recipes, checks.check_modir_recipe), (per_target_mixtures, checks.check_mixture_recipe)):
        for name in names:
            check(name, recipes[name])
            for d in _targets(name, recipes[name], per_target_datasets):
                runs[f"{name}@{d}"] = (name, 1)
                per_target[f"{name}@{d}"] = d
    pretrained = config["cocodr"]["pretrained"]
    return Recipes(
        datasets=datasets, by_name=recipes, training=config["training"], backbones=config["backbones"],
        cross_encoders=config["cross_encoders"], readers=config["readers"],
        trained_readers=list(n for n, r in config["readers"].items() if "hf" not in r),
        pretrained=pretrained,
        trained_pretrained=list(n for n, p in pretrained.items() if "hf" not in p and "release" not in p),
        runs=runs, per_target=per_target, per_target_datasets=per_target_datasets, modir_recipes=modir_recipes,
        mixture_recipes=mixture_recipes, per_target_mixtures=per_target_mixtures)
