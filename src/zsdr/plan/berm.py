"""Stage 4e, BERM: the essential-unit labels a `berm` term trains on, and BERM's own analyses' inputs.

BERM (docs/methods/berm.md; rules/labels.smk): the units of each training pair's positive are labelled
(BM25 + delta x a reader's start probabilities) in shards; Figure 4 is the loss-weight grid of recipes
(zsdr.workflow.expand_berm_grid), Figure 5 and Tables 5-6 read the evaluation splits' labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.datasets import Datasets, check_dataset
from zsdr.plan.references import ModelRefs


@dataclass(frozen=True)
class Berm:
    datasets: Datasets
    refs: ModelRefs
    section: dict[str, Any]                  # config `berm`
    labels: dict[str, Any]                   # berm.labels
    grid: dict[tuple[float, float], str]     # (alpha, beta) -> recipe of Figure 4's loss-weight grid
    figures: list[Any]

    @staticmethod
    def berm_spec(recipe: dict[str, Any], dataset: str) -> dict[str, Any] | None:
        """The `berm` loss term of a training spec (None without one): weights plus the labels file."""
        b = recipe.get("berm")
        if not b:
            return None
        return {"labels": f"{dataset}/berm/train/labels.jsonl", "scale": recipe["scale"], **b}

    def label_max_pairs(self, split: str) -> int | None:
        """All training pairs; a seeded sample of test pairs for the analyses (BERM Table 5)."""
        return None if split == "train" else self.section["analysis"]["pairs"]

    def berm_reader(self) -> str | None:
        """The reader whose start probabilities enter the labels (None: BM25 only, the official code)."""
        name = self.labels["reader"]
        return None if name is None else self.refs.reader_path(name)

    def reader_files(self) -> list[str]:
        ref = self.berm_reader()
        return self.refs.model_files(ref) if ref else []

    def label_shards(self, dataset: str, split: str) -> list[str]:
        n = self.labels["shards"]
        return [f"{self.datasets.paths.data}/{dataset}/berm/{split}/labels.{i}-of-{n}.jsonl" for i in range(n)]

    def grid_points(self) -> list[dict[str, Any]]:
        """BERM Figure 4: every (alpha, beta) point with its system and its metrics on the targets."""
        metrics = self.datasets.paths.metrics
        return [
            {"alpha": a, "beta": b, "system": name,
             "metrics": [f"{metrics}/{t}/{name}.json" for t in self.datasets.targets]}
            for (a, b), name in sorted(self.grid.items())
        ]

    def tsne_domains(self) -> dict[str, str]:
        """BERM Figure 5: the source and the targets (or config berm.analysis.tsne_domains)."""
        names = self.section["analysis"].get("tsne_domains") or [self.datasets.source, *self.datasets.targets]
        return {n: f"{self.datasets.paths.data}/{check_dataset(n, self.datasets.mini)}" for n in names}

    def analysis_labels(self, dataset: str) -> str:
        """BERM Tables 5-6: the labelled pairs of a dataset's evaluation split (rules/labels.smk)."""
        return f"{self.datasets.paths.data}/{dataset}/berm/{self.datasets.eval_split(dataset)}/labels.jsonl"


def build_berm(config: dict[str, Any], datasets: Datasets, refs: ModelRefs,
               grid: dict[tuple[float, float], str]) -> Berm:
    section = config["berm"]
    results = datasets.paths.results
    berm = Berm(datasets=datasets, refs=refs, section=section, labels=section["labels"], grid=dict(grid),
                figures=[f"{results}/berm/figure4.png" if grid else [], f"{results}/berm/figure5.png"])
    berm.berm_reader()  # a reader named but not defined stops the plan here
    return berm
