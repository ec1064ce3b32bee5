"""Stage 4d, COCO-DR: span files of the COCO corpora, the query clusters of iDRO runs, Figure 4's variants.

COCO-DR (docs/methods/cocodr.md; rules/cocodr.smk): `cocodr.pretrained` models trained with COCO's objective read
one span file per corpus; every ANCE run whose recipe has a `dro` term is clustered by the model that mines its
negatives. The analyses and figures that read evaluated systems are zsdr.plan.figures'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.datasets import check_dataset
from zsdr.plan.recipes import Recipes


@dataclass(frozen=True)
class Cocodr:
    recipes: Recipes
    section: dict[str, Any]             # config `cocodr`
    analysis: dict[str, Any]            # cocodr.analysis
    span_corpora: list[str]       # every corpus a span file is written for
    dro_runs: list[str]           # ANCE runs with a `dro` term: each clustered before it trains
    figure4: dict[str, Any]             # cocodr.figure4
    figure4_datasets: list[str]
    figures: list[str]

    def pretrained_corpora(self, name: str) -> list[str]:
        return pretrained_corpora(self.recipes, name)

    def spans_file(self, corpus: str) -> str:
        return f"{self.recipes.datasets.paths.data}/{corpus}/coco/spans.arrow"

    def span_parts(self, corpus: str) -> list[str]:
        """The shard span files a corpus's span file is merged from: one per corpus shard
        (`dense.dataset_shards`, as its encoding), none for a corpus of one shard or when
        `cocodr.spans.max_docs` keeps only the corpus's first documents (written in one pass)."""
        n = 1 if self.section["spans"]["max_docs"] else len(self.recipes.datasets.shards(corpus))
        data = self.recipes.datasets.paths.data
        return [] if n == 1 else [f"{data}/{corpus}/coco/spans.{i}-of-{n}.arrow" for i in range(n)]

    def cocodr_episodes(self, recipe: str, where: str) -> list[str]:
        """Figure 4: the systems of a variant per episode: its warmup (the init recipe), then each ANCE episode."""
        recipes = self.recipes.by_name
        if recipe not in recipes or recipes[recipe]["negatives"] != "ance":
            raise ValueError(f"config key {where}: {recipe!r} is not a recipe with ANCE episodes")
        warmup = recipes[recipe]["init"]
        if warmup not in recipes:
            raise ValueError(f"config key {where}: the init of {recipe!r} must be its warmup recipe")
        episodes = range(1, recipes[recipe]["episodes"] + 1)
        return [warmup, *(self.recipes.recipe_run(recipe, k) for k in episodes)]

    def geometry_file(self, model: str, corpus: str) -> str:
        return f"{self.recipes.datasets.paths.stats}/cocodr/geometry/{model}/{corpus}.json"

    def cluster_analysis_file(self, target: str) -> str:
        """Figure 5c: a target's nearest source query cluster and iDRO's training-loss change on it."""
        return f"{self.recipes.datasets.paths.stats}/cocodr/clusters/{target}.json"


def pretrained_corpora(recipes: Recipes, name: str) -> list[str]:
    """The configured datasets a pipeline-pretrained model trains on (checked)."""
    corpora = recipes.pretrained[name].get("corpora") or []
    if not corpora:
        raise ValueError(f"config key cocodr.pretrained.{name}.corpora: name the corpora to pretrain on")
    for c in corpora:
        if c not in recipes.datasets.configured:
            raise ValueError(
                f"config key cocodr.pretrained.{name}.corpora: {c!r} is not a configured dataset "
                f"(datasets.source, datasets.targets or datasets.extra)"
            )
    return list(corpora)


def build_cocodr(config: dict[str, Any], recipes: Recipes) -> Cocodr:
    section = config["cocodr"]
    analysis = section["analysis"]
    datasets = recipes.datasets
    span_corpora = sorted(
        {c for n in recipes.trained_pretrained for c in pretrained_corpora(recipes, n)}
        | ({datasets.source, *datasets.targets} if analysis else set())
    )
    figure4 = section["figure4"]
    return Cocodr(
        recipes=recipes, section=section, analysis=analysis, span_corpora=list(span_corpora),
        dro_runs=list(r for r, (n, _) in recipes.runs.items() if recipes.by_name[n].get("dro")),
        figure4=figure4,
        figure4_datasets=list(check_dataset(d, datasets.mini) for d in (figure4["datasets"] or datasets.targets)),
        figures=list(f"{datasets.paths.results}/cocodr/figure{n}.png" for n in (3, 4, 5)) if analysis else [],
    )
