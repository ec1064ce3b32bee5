"""Stage 8, figures: the points of every paper figure that reads evaluated systems (a system and its metrics or
analysis files per point), and the systems those figures and COCO-DR's analyses evaluate.

The method stages (zsdr.plan.modir, rmsc, ddr, cocodr, berm) say which models and steps exist; this stage names
the system each point reads, so it comes after zsdr.plan.systems.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from zsdr.plan.berm import Berm
from zsdr.plan.cocodr import Cocodr
from zsdr.plan.ddr import Ddr
from zsdr.plan.systems import Systems
from zsdr.plan.trainings import training_data

COCODR_ANALYSIS_SYSTEMS = ("with_coco", "without_coco", "with_idro", "without_idro")


@dataclass(frozen=True)
class Figures:
    systems: Systems
    ddr: Ddr
    cocodr: Cocodr
    berm: Berm
    cocodr_sweeps: dict[tuple[str, float], str]   # (sweep, value) -> recipe of COCO-DR Figure 3's sweeps
    cocodr_eval_systems: frozenset[str]            # the systems COCO-DR's figures and analyses evaluate

    @property
    def paths(self) -> Any:
        return self.systems.datasets.paths

    def _metrics(self, dataset: str, system: str) -> str:
        return f"{self.paths.metrics}/{dataset}/{system}.json"

    # DDR Figure 4
    def figure4_points(self) -> list[dict[str, Any]]:
        """DDR Figure 4: per target, the REM on each snapshot of its DAM (and the final DAM), with the DAM
        folder whose snapshots.json gives each snapshot's training time."""
        fig, steps = self.ddr.figure4["system"], self.systems.figure4_systems
        return [
            {"dataset": d, "step": n, "system": steps.get((d, n), fig), "final": (d, n) not in steps,
             "metrics": self._metrics(d, steps.get((d, n), fig))}
            for d in self.ddr.figure4_datasets
            for n in [*self.ddr.figure4_steps(d), None]
        ]

    # MoDIR
    def modir_points(self) -> list[dict[str, Any]]:
        """Every (curve recipe, dataset, step) with its domain-analysis and metrics files."""
        modir = self.systems.modir
        return [
            {"recipe": r, "label": modir.modir_label(r), "dataset": d, "step": n,
             "domain": f"{self.paths.stats}/modir/{d}/{system}.json", "metrics": self._metrics(d, system)}
            for (r, d, n), system in self.systems.modir_step_systems.items()
        ]

    def modir_check_steps(self, section: str, recipes: Iterable[str], steps: Iterable[int]) -> None:
        modir, evaluated = self.systems.modir, self.systems.modir_step_systems
        d = modir.modir_dataset(section)
        for r in recipes:
            if (r, d, 0) not in evaluated:
                raise ValueError(f"config key modir.{section}: {r!r} is not a curve recipe (modir.curves.recipes)")
            missing = [n for n in steps if (r, d, n) not in evaluated]
            if missing:
                raise ValueError(
                    f"config key modir.{section}.steps: {missing} are not evaluated steps of {r} "
                    f"on {d} ({modir.modir_steps(r, d)}; see modir.curves)"
                )

    def modir_tsne_models(self, options: bool = False) -> dict[str, Any]:
        """MoDIR Figure 4: ``{panel label: model folder}``, the base model then every recipe x step
        (``options``: each panel's encoder settings instead of its model)."""
        modir = self.systems.modir
        f4, d = modir.section["figure4"], modir.modir_dataset("figure4")
        self.modir_check_steps("figure4", f4["recipes"], f4["steps"])
        out = {}
        for r in f4["recipes"]:
            for n in f4["steps"]:
                system = self.systems.modir_step_systems[(r, d, n)]
                label = f"{modir.modir_label(system)} (step 0)" if n == 0 else f"{modir.modir_label(r)}, step {n}"
                out[label] = self.systems.encoder_options(system, d) if options else self.systems.dense_model(system, d)
        return out

    # RMSC
    def rmsc_curve_points(self, figure: int) -> list[dict[str, Any]]:
        """RMSC Figure 2 / 3: every evaluated step of each recipe on the source dev set (in-domain) and on
        each curve target the recipe has a model for."""
        rmsc, recipes, source = self.systems.rmsc, self.systems.recipes, self.systems.datasets.source
        points = []
        for name in rmsc.curves[f"figure{figure}"]:
            targets = [d for d in rmsc.curve_datasets
                       if name not in recipes.per_target_mixtures or d in recipes.recipe_targets(name)]
            for n in rmsc.rmsc_steps(name):
                system = self.systems.rmsc_step_systems[(name, n)]
                for d in [source, *targets]:
                    points.append({
                        "recipe": name, "label": self.systems.by_name[name].get("description", name), "step": n,
                        "dataset": d, "in_domain": d == source, "metrics": self._metrics(d, system),
                    })
        return points

    # COCO-DR
    def cocodr_figure4_points(self) -> list[dict[str, Any]]:
        return cocodr_figure4_points(self.cocodr, self.paths.metrics)

    def cocodr_figure3_points(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        targets, ref = self.systems.datasets.targets, self.cocodr.section["sweeps"]["reference"]
        points = [
            {"sweep": "temperature" if sweep == "rho" else "clusters", "value": value, "system": recipe,
             "metrics": [self._metrics(d, recipe) for d in targets]}
            for (sweep, value), recipe in sorted(self.cocodr_sweeps.items())
        ]
        reference = ({"label": self.systems.check_system(ref, "cocodr.sweeps.reference"),
                      "metrics": [self._metrics(d, ref) for d in targets]} if ref else None)
        return points, reference

    def cocodr_analysis_system(self, key: str) -> str:
        return self.systems.check_system(self.cocodr.analysis[key], f"cocodr.analysis.{key}")

    def cocodr_idro_files(self) -> dict[str, str]:
        """COCO-DR Figure 5c / Table 4: the query clusters and the negatives of `cocodr.analysis.with_idro`'s run."""
        system = self.cocodr_analysis_system("with_idro")
        recipes = self.systems.recipes
        run = recipes.recipe_run(system)
        return {
            "clusters": f"{self.paths.data}/{self.systems.datasets.source}/clusters/{run}.jsonl",
            "negatives": training_data(recipes, recipes.by_name[system], "cocodr.analysis.with_idro", run)[1],
        }

    def cocodr_analysis_model(self, name: str) -> str:
        """A model Figure 5 measures: a pretrained model or a backbone (checked)."""
        recipes = self.systems.recipes
        if name not in recipes.pretrained and name not in recipes.backbones:
            raise ValueError(
                f"config key cocodr.analysis: {name!r} is neither a cocodr.pretrained model nor a backbone"
            )
        return self.systems.refs.model_ref(name)

    # BERM
    def berm_grid_points(self) -> list[dict[str, Any]]:
        return self.berm.grid_points()


def cocodr_figure4_points(cocodr: Cocodr, metrics: str) -> list[dict[str, Any]]:
    return [
        {"variant": label, "episode": e, "dataset": d, "system": s, "metrics": f"{metrics}/{d}/{s}.json"}
        for label, recipe in cocodr.figure4["variants"].items()
        for e, s in enumerate(cocodr.cocodr_episodes(recipe, f"cocodr.figure4.variants.{label}"), 1)
        for d in cocodr.figure4_datasets
    ]


def build_figures(systems: Systems, ddr: Ddr, cocodr: Cocodr, berm: Berm,
                  cocodr_sweeps: dict[tuple[str, float], str]) -> Figures:
    evaluated = {p["system"] for p in cocodr_figure4_points(cocodr, systems.datasets.paths.metrics)}
    evaluated |= set(cocodr_sweeps.values())
    if cocodr.analysis:
        evaluated |= {systems.check_system(cocodr.analysis[k], f"cocodr.analysis.{k}") for k in COCODR_ANALYSIS_SYSTEMS}
    return Figures(systems=systems, ddr=ddr, cocodr=cocodr, berm=berm, cocodr_sweeps=dict(cocodr_sweeps),
                   cocodr_eval_systems=frozenset(evaluated))
