"""Stage 4c, DDR: the domain adaption modules' (DAMs') MLM settings per corpus and Figure 4's DAM snapshots.

A DAM is named by its chain of MLM stages, <backbone>--<corpus>[--<corpus>...] (zsdr.plan.recipes.DAM_SEP):
its last corpus's settings (`ddr.dam.source` or `ddr.dam.target`, `ddr.dam.datasets.<corpus>` over them) train
it, from the backbone or the DAM before it in the chain ("sequential initialisation").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.recipes import DAM_SEP, Recipes


@dataclass(frozen=True)
class Ddr:
    recipes: Recipes
    section: dict[str, Any]            # config `ddr`
    figure4: dict[str, Any]            # ddr.figure4
    figure4_datasets: list[str]
    figures: list[str]

    def dam_settings(self, corpus: str) -> dict[str, Any]:
        """The MLM settings of a DAM trained on ``corpus``: `ddr.dam.source` for the source corpus (or
        `ddr.dam.sources`), else `ddr.dam.target`, with `ddr.dam.datasets.<corpus>` merged over them."""
        dam = self.section["dam"]
        role = "source" if corpus in (dam.get("sources") or [self.recipes.datasets.source]) else "target"
        base, over = dam[role], dam["datasets"].get(corpus, {})
        return {**base, **over, "train": {**base["train"], **over.get("train", {})}, "role": role}

    def figure4_dam(self, dataset: str) -> str:
        """The target DAM whose snapshots DDR Figure 4 evaluates on ``dataset``."""
        recipe = self.recipes.by_name[self.figure4["system"]]
        return f"{recipe.get('target_dam') or recipe['init']}{DAM_SEP}{dataset}"

    def figure4_steps(self, dataset: str) -> list[int]:
        """The snapshot steps of ``dataset``'s target DAM (0 = the source DAM, before adaptation)."""
        every = self.figure4["snapshot_every"]
        total = self.dam_settings(dataset)["train"].get("max_steps")
        if not total:
            raise ValueError(
                f"config key ddr.figure4: the target DAM of {dataset} trains by epochs; give "
                f"ddr.dam.target.train.max_steps (or ddr.dam.datasets.{dataset}.train.max_steps) so "
                f"the snapshot steps are known when the DAG is built"
            )
        return [0, *range(every, total, every)]


def build_ddr(config: dict[str, Any], recipes: Recipes) -> Ddr:
    section = config["ddr"]
    figure4 = section["figure4"]
    return Ddr(recipes=recipes, section=section, figure4=figure4,
               figure4_datasets=list(figure4.get("datasets") or recipes.datasets.targets),
               figures=[f"{recipes.datasets.paths.results}/ddr/figure4.png"])
