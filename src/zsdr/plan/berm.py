"""BERM: essential-unit labelling specs and shards."""

from __future__ import annotations

from typing import Any


class BermPlan:
    """BERM: essential-unit labelling specs and shards (a part of :class:`zsdr.plan.core.Plan`)."""

    def berm_spec(self, recipe: dict[str, Any], dataset: str) -> dict[str, Any] | None:
        """The `berm` loss term of a training spec (None without one): weights plus the labels file."""
        b = recipe.get("berm")
        if not b:
            return None
        return {
            "labels": f"{dataset}/berm/train/labels.jsonl",
            "scale": recipe["scale"],
            **b,
        }

    def label_max_pairs(self, split: str) -> int | None:
        """All training pairs; a seeded sample of test pairs for the analyses (BERM Table 5)."""
        return None if split == "train" else self.BERM["analysis"]["pairs"]

    def berm_reader(self) -> str | None:
        """The reader whose start probabilities enter the labels (None: BM25 only, the official code)."""
        name = self.BERM_LABELS["reader"]
        return None if name is None else self.reader_path(name)

    def reader_files(self) -> list[str]:
        ref = self.berm_reader()
        return self.model_files(ref) if ref else []

    def label_shards(self, dataset: str, split: str) -> list[str]:
        n = self.BERM_LABELS["shards"]
        return [f"{self.DATA}/{dataset}/berm/{split}/labels.{i}-of-{n}.jsonl" for i in range(n)]

    def _setup_berm(self) -> None:
        """Resolve BERM's `berm` and `berm.labels` sections."""
        # BERM (rules/labels.smk): essential-unit labels of the pairs a recipe with a `berm` term trains on.
        self.BERM = self.config["berm"]
        self.BERM_LABELS = self.BERM["labels"]
