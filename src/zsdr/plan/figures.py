"""Figures of the papers that are not owned by one method section."""

from __future__ import annotations

from typing import Any


class FiguresPlan:
    """Figures of the papers that are not owned by one method section (a part of :class:`zsdr.plan.core.Plan`)."""

    def berm_grid_points(self) -> list[dict[str, Any]]:
        """BERM Figure 4: every (alpha, beta) point with its system and its metrics on the targets."""
        return [
            {
                "alpha": a,
                "beta": b,
                "system": name,
                "metrics": [f"{self.METRICS}/{t}/{name}.json" for t in self.TARGETS],
            }
            for (a, b), name in sorted(self.BERM_GRID.items())
        ]

    def tsne_domains(self) -> dict[str, str]:
        """BERM Figure 5: the source and the targets (or config berm.analysis.tsne_domains)."""
        names = self.BERM["analysis"].get("tsne_domains") or [self.SOURCE, *self.TARGETS]
        return {n: f"{self.DATA}/{self.check_dataset(n)}" for n in names}

    def analysis_labels(self, dataset: str) -> str:
        """BERM Tables 5-6: the labelled pairs of a dataset's evaluation split (rules/labels.smk)."""
        return f"{self.DATA}/{dataset}/berm/{self.eval_split(dataset)}/labels.jsonl"

    def _setup_figures(self) -> None:
        """Resolve the figure files of DDR and BERM."""
        self.DDR_FIGURES = [f"{self.RESULTS}/ddr/figure4.png"]
        self.BERM_FIGURES = [
            f"{self.RESULTS}/berm/figure4.png" if self.BERM_GRID else [],
            f"{self.RESULTS}/berm/figure5.png",
        ]
