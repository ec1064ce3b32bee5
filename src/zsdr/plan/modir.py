"""MoDIR: per-target runs, evaluation steps, curve snapshots and figure inputs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zsdr.tables.spec import load_systems


class ModirPlan:
    """MoDIR: per-target runs, evaluation steps, curve snapshots and figure inputs (a part of :class:`zsdr.plan.core.Plan`)."""

    def recipe_targets(self, name: str) -> list[str]:
        """The targets a per-target recipe (MoDIR, RMSC) trains one model for: its `targets`, else every
        configured dataset but the source."""
        wanted = self.RECIPES[name].get("targets")
        if wanted is None:
            return self.MODIR_TARGETS
        unknown = [d for d in wanted if d not in self.MODIR_TARGETS]
        if unknown:
            raise ValueError(
                f"config key recipes.{name}.targets: {unknown} are not configured targets "
                f"(datasets.targets / datasets.extra)"
            )
        return list(wanted)

    def modir_base(self, name: str) -> str:
        """The system a MoDIR recipe starts from: `base_system`, else its init recipe."""
        return self.RECIPES[name].get("base_system") or self.RECIPES[name]["init"]

    def is_curve_run(self, name: str, dataset: str) -> bool:
        return name in self.MODIR_CURVES["recipes"] and dataset in self.MODIR_CURVE_DATASETS

    def modir_total(self, name: str, dataset: str) -> int:
        """Steps of the MoDIR run of recipe ``name`` on target ``dataset``: `modir.curves.max_steps`
        for the curve runs, else `modir.eval_step`, else the recipe's `train.max_steps`."""
        if self.is_curve_run(name, dataset) and self.MODIR_CURVES.get("max_steps"):
            return int(self.MODIR_CURVES["max_steps"])
        return int(self.MODIR.get("eval_step") or self.RECIPES[name]["train"]["max_steps"])

    def modir_steps(self, name: str, dataset: str) -> list[int]:
        """The evaluated steps of a curve run: 0 (the base system), every snapshot, the end."""
        total = self.modir_total(name, dataset)
        return [
            0,
            *range(self.MODIR_CURVES["snapshot_every"], total, self.MODIR_CURVES["snapshot_every"]),
            total,
        ]

    def modir_source_target(self, name: str) -> str:
        return self.MODIR.get("source_target") or self.recipe_targets(name)[0]

    def modir_model(self, name: str, dataset: str | None, step: int | str | None = None) -> str:
        """The folder of recipe ``name``'s model on ``dataset`` after ``step`` steps (default:
        `modir.eval_step`, else the end of the run); on the source dataset, the model of
        `modir.source_target`."""
        if dataset in (None, self.SOURCE):
            target = self.modir_source_target(name)
        elif dataset in self.recipe_targets(name):
            target = dataset
        else:
            raise ValueError(
                f"config key recipes.{name}.targets: {name} has no model for {dataset!r}; add the "
                f"dataset to its targets (a MoDIR model is trained per target)"
            )
        total = self.modir_total(name, target)
        step = int(step or self.MODIR.get("eval_step") or total)
        run = f"{self.MODELS}/trained/{name}@{target}"
        if step == total:
            return run
        every = self.MODIR_CURVES["snapshot_every"] if self.is_curve_run(name, target) else None
        if not every or step % every or step > total:
            raise ValueError(
                f"config key modir: the model of {name} on {target} after {step} steps is not "
                f"saved (the run has {total} steps"
                + (f" and a snapshot every {every})" if every else " and no snapshots)")
            )
        return f"{run}/snapshots/step-{step:09d}"

    def modir_dataset(self, section: str) -> str:
        """The target of a MoDIR table or figure (`modir.<section>.dataset`, else the first curve dataset)."""
        name = self.MODIR[section].get("dataset") or self.MODIR_CURVE_DATASETS[0]
        if name not in self.MODIR_CURVE_DATASETS:
            raise ValueError(
                f"config key modir.{section}.dataset: {name!r} is not a curve dataset "
                f"(modir.curves.datasets: {', '.join(self.MODIR_CURVE_DATASETS)})"
            )
        return name

    def modir_label(self, name: str) -> str:
        """A recipe's label in the figures: systems.yaml's, else its name."""
        known = load_systems().get(name)
        return known.label if known else name

    def modir_points(self) -> list[dict[str, Any]]:
        """Every (curve recipe, dataset, step) with its domain-analysis and metrics files."""
        return [
            {
                "recipe": r,
                "label": self.modir_label(r),
                "dataset": d,
                "step": n,
                "domain": f"{self.STATS}/modir/{d}/{system}.json",
                "metrics": f"{self.METRICS}/{d}/{system}.json",
            }
            for (r, d, n), system in self.MODIR_STEP_SYSTEMS.items()
        ]

    def modir_logs(self) -> dict[str, dict[str, str]]:
        """``{dataset: {recipe: train_log.jsonl}}`` of the curve runs (Local Domain-Acc)."""
        return {
            d: {
                r: f"{self.MODELS}/trained/{r}@{d}/train_log.jsonl"
                for r in self.MODIR_CURVES["recipes"]
            }
            for d in self.MODIR_CURVE_DATASETS
        }

    def modir_figure5(self) -> dict[str, Any]:
        f5 = self.MODIR["figure5"]
        recipe = f5.get("recipe") or self.MODIR_CURVES["recipes"][0]
        if recipe not in self.MODIR_CURVES["recipes"]:
            raise ValueError(
                f"config key modir.figure5.recipe: {recipe!r} is not in modir.curves.recipes"
            )
        return {"recipe": recipe, "datasets": f5.get("datasets") or self.MODIR_CURVE_DATASETS}

    def modir_check_steps(self, section: str, recipes: Iterable[str], steps: Iterable[int]) -> None:
        d = self.modir_dataset(section)
        for r in recipes:
            if (r, d, 0) not in self.MODIR_STEP_SYSTEMS:
                raise ValueError(
                    f"config key modir.{section}: {r!r} is not a curve recipe (modir.curves.recipes)"
                )
            missing = [n for n in steps if (r, d, n) not in self.MODIR_STEP_SYSTEMS]
            if missing:
                raise ValueError(
                    f"config key modir.{section}.steps: {missing} are not evaluated steps of {r} "
                    f"on {d} ({self.modir_steps(r, d)}; see modir.curves)"
                )

    def modir_tsne_models(self, options: bool = False) -> dict[str, Any]:
        """MoDIR Figure 4: ``{panel label: model folder}``, the base model then every recipe x step
        (``options``: each panel's encoder settings instead of its model)."""
        f4, d = self.MODIR["figure4"], self.modir_dataset("figure4")
        self.modir_check_steps("figure4", f4["recipes"], f4["steps"])
        out = {}
        for r in f4["recipes"]:
            for n in f4["steps"]:
                system = self.MODIR_STEP_SYSTEMS[(r, d, n)]
                label = (
                    f"{self.modir_label(system)} (step 0)"
                    if n == 0
                    else f"{self.modir_label(r)}, step {n}"
                )
                out[label] = (
                    self.encoder_options(system, d) if options else self.dense_model(system, d)
                )
        return out

    def modir_case(self) -> list[str]:
        """MoDIR Table 4: the systems before and after MoDIR."""
        t4 = self.MODIR["table4"]
        after = t4.get("after") or (self.MODIR_CURVES["recipes"] or self.MODIR_RECIPES)[0]
        if after not in self.MODIR_RECIPES:
            raise ValueError(f"config key modir.table4.after: {after!r} is not a MoDIR recipe")
        return [t4.get("before") or self.modir_base(after), after]

    def _setup_modir(self) -> None:
        """Resolve MoDIR's recipes, their per-target runs and the curve recipes and datasets."""
        # MoDIR (docs/methods/modir.md): a recipe with a `modir` section trains once per target dataset d, as runs
        # <recipe>@<d>, on the source batches plus d's unlabelled target triples (rule modir_triples). Its
        # system on d is that run at `modir.eval_step` (a snapshot, or the end of the run); on the source
        # dataset it is the run of `modir.source_target` (default: the first target) [X]. The step-0 model
        # of the curves is the recipe's `base_system` (default: its init recipe), which also mines the
        # ANCE negatives of an ANCE+MoDIR recipe once for all its targets.
        self.MODIR = self.config["modir"]
        self.MODIR_TARGETS = [d for d in self.CONFIGURED_DATASETS if d != self.SOURCE]
        # A recipe's `targets` (default: every target) limits its runs; an empty list trains none.
        self.MODIR_RECIPES = [
            n
            for n, r in self.RECIPES.items()
            if r.get("modir") and (r.get("targets") is None or r["targets"])
        ]

        self.MODIR_CURVES = self.MODIR["curves"]
        self.MODIR_CURVE_DATASETS = self.MODIR_CURVES.get("datasets") or self.TARGETS
        for _name in self.MODIR_RECIPES:
            if self.RECIPES[_name]["episodes"] > 1 or self.RECIPES[_name].get("rem"):
                raise ValueError(
                    f"config key recipes.{_name}.modir: MoDIR continues one model per target "
                    f"(set episodes: 1, no rem)"
                )
            if not self.RECIPES[_name]["train"].get("max_steps"):
                raise ValueError(
                    f"config key recipes.{_name}.train.max_steps: MoDIR evaluates every target at a "
                    f"fixed step, so its length is given in steps"
                )
            self.add_per_target_runs(_name)
        for _name in self.MODIR_CURVES["recipes"]:
            if _name not in self.MODIR_RECIPES:
                raise ValueError(
                    f"config key modir.curves.recipes: {_name!r} is not a recipe with a `modir` section"
                )

    def _setup_modir_2(self) -> None:
        """Resolve MoDIR's figure files (none without curve recipes)."""
        self.MODIR_FIGURES = (
            [f"{self.RESULTS}/modir/figure{n}.png" for n in (3, 4, 5)]
            if self.MODIR_CURVES["recipes"]
            else []
        )
