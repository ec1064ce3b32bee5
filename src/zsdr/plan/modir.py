"""Stage 4a, MoDIR: per-target models, the step each is evaluated at, the curve runs and their snapshots.

MoDIR (docs/methods/modir.md): a recipe with a `modir` section trains once per target dataset d, as runs
<recipe>@<d> (zsdr.plan.recipes), on the source batches plus d's unlabelled target triples (rule modir_triples).
Its system on d is that run at `modir.eval_step` (a snapshot, or the end of the run); on the source dataset it
is the run of `modir.source_target` (default: the first target) [X]. The step-0 model of the curves is the
recipe's `base_system` (default: its init recipe), which also mines the ANCE negatives of an ANCE+MoDIR recipe
once for all its targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan import checks
from zsdr.plan.recipes import Recipes
from zsdr.tables.catalogue import load_systems


@dataclass(frozen=True)
class Modir:
    recipes: Recipes
    section: dict[str, Any]               # config `modir`
    curves: dict[str, Any]                # modir.curves
    curve_datasets: list[str]
    figures: list[str]              # results/modir/figure{3,4,5}.png, where curves are configured

    def recipe(self, name: str) -> dict[str, Any]:
        return self.recipes.by_name[name]

    def modir_base(self, name: str) -> str:
        """The system a MoDIR recipe starts from: `base_system`, else its init recipe."""
        return self.recipe(name)["base_system"] or self.recipe(name)["init"]

    def is_curve_run(self, name: str, dataset: str) -> bool:
        return name in self.curves["recipes"] and dataset in self.curve_datasets

    def modir_total(self, name: str, dataset: str) -> int:
        """Steps of the MoDIR run of recipe ``name`` on target ``dataset``: `modir.curves.max_steps`
        for the curve runs, else `modir.eval_step`, else the recipe's `train.max_steps`."""
        if self.is_curve_run(name, dataset) and self.curves["max_steps"]:
            return int(self.curves["max_steps"])
        return int(self.section["eval_step"] or self.recipe(name)["train"]["max_steps"])

    def modir_steps(self, name: str, dataset: str) -> list[int]:
        """The evaluated steps of a curve run: 0 (the base system), every snapshot, the end."""
        total = self.modir_total(name, dataset)
        every = self.curves["snapshot_every"]
        return [0, *range(every, total, every), total]

    def modir_source_target(self, name: str) -> str:
        return self.section["source_target"] or self.recipes.recipe_targets(name)[0]

    def modir_model(self, name: str, dataset: str | None, step: int | str | None = None) -> str:
        """The folder of recipe ``name``'s model on ``dataset`` after ``step`` steps (default:
        `modir.eval_step`, else the end of the run); on the source dataset, the model of
        `modir.source_target`."""
        if dataset in (None, self.recipes.datasets.source):
            target = self.modir_source_target(name)
        elif dataset in self.recipes.recipe_targets(name):
            target = dataset
        else:
            raise ValueError(
                f"config key recipes.{name}.targets: {name} has no model for {dataset!r}; add the "
                f"dataset to its targets (a MoDIR model is trained per target)"
            )
        total = self.modir_total(name, target)
        step = int(step or self.section["eval_step"] or total)
        run = f"{self.recipes.datasets.paths.models}/trained/{name}@{target}"
        if step == total:
            return run
        every = self.curves["snapshot_every"] if self.is_curve_run(name, target) else None
        if not every or step % every or step > total:
            raise ValueError(
                f"config key modir: the model of {name} on {target} after {step} steps is not "
                f"saved (the run has {total} steps"
                + (f" and a snapshot every {every})" if every else " and no snapshots)")
            )
        return f"{run}/snapshots/step-{step:09d}"

    def modir_dataset(self, section: str) -> str:
        """The target of a MoDIR table or figure (`modir.<section>.dataset`, else the first curve dataset)."""
        name = self.section[section]["dataset"] or self.curve_datasets[0]
        if name not in self.curve_datasets:
            raise ValueError(
                f"config key modir.{section}.dataset: {name!r} is not a curve dataset "
                f"(modir.curves.datasets: {', '.join(self.curve_datasets)})"
            )
        return name

    @staticmethod
    def modir_label(name: str) -> str:
        """A recipe's label in the figures: systems.yaml's, else its name."""
        known = load_systems().get(name)
        return known.label if known else name

    def modir_logs(self) -> dict[str, dict[str, str]]:
        """``{dataset: {recipe: train_log.jsonl}}`` of the curve runs (Local Domain-Acc)."""
        models = self.recipes.datasets.paths.models
        return {d: {r: f"{models}/trained/{r}@{d}/train_log.jsonl" for r in self.curves["recipes"]}
                for d in self.curve_datasets}

    def modir_figure5(self) -> dict[str, Any]:
        f5 = self.section["figure5"]
        recipe = f5["recipe"] or self.curves["recipes"][0]
        if recipe not in self.curves["recipes"]:
            raise ValueError(f"config key modir.figure5.recipe: {recipe!r} is not in modir.curves.recipes")
        return {"recipe": recipe, "datasets": f5["datasets"] or list(self.curve_datasets)}

    def modir_case(self) -> list[str]:
        """MoDIR Table 4: the systems before and after MoDIR."""
        t4 = self.section["table4"]
        after = t4["after"] or next(iter(self.curves["recipes"] or self.recipes.modir_recipes), None)
        if after is None:
            return []  # no MoDIR recipe: no case study
        if after not in self.recipes.modir_recipes:
            raise ValueError(f"config key modir.table4.after: {after!r} is not a MoDIR recipe")
        return [t4["before"] or self.modir_base(after), after]


def build_modir(config: dict[str, Any], recipes: Recipes) -> Modir:
    section = config["modir"]
    curves = section["curves"]
    checks.check_members(curves["recipes"], recipes.modir_recipes, "modir.curves.recipes",
                         "a recipe with a `modir` section")
    results = recipes.datasets.paths.results
    return Modir(recipes=recipes, section=section, curves=curves,
                 curve_datasets=list(curves["datasets"] or recipes.datasets.targets),
                 figures=list(f"{results}/modir/figure{n}.png" for n in (3, 4, 5)) if curves["recipes"] else [])
