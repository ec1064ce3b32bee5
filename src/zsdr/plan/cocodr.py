"""COCO-DR: span files, COCO pretraining specs, iDRO clusters and analysis systems."""

from __future__ import annotations

from typing import Any


class CocodrPlan:
    """COCO-DR: span files, COCO pretraining specs, iDRO clusters and analysis systems (a part of :class:`zsdr.plan.core.Plan`)."""

    def pretrained_corpora(self, name: str) -> list[str]:
        """The configured datasets a pipeline-pretrained model trains on (checked)."""
        corpora = self.PRETRAINED[name].get("corpora") or []
        if not corpora:
            raise ValueError(
                f"config key cocodr.pretrained.{name}.corpora: name the corpora to pretrain on"
            )
        for c in corpora:
            if c not in self.CONFIGURED_DATASETS:
                raise ValueError(
                    f"config key cocodr.pretrained.{name}.corpora: {c!r} is not a configured dataset "
                    f"(datasets.source, datasets.targets or datasets.extra)"
                )
        return list(corpora)

    def spans_file(self, corpus: str) -> str:
        return f"{self.DATA}/{corpus}/coco/spans.arrow"

    def span_parts(self, corpus: str) -> list[str]:
        """The shard span files a corpus's span file is merged from: one per corpus shard
        (`dense.dataset_shards`, as its encoding), none for a corpus of one shard or when
        `cocodr.spans.max_docs` keeps only the corpus's first documents (written in one pass)."""
        n = 1 if self.COCODR["spans"].get("max_docs") else len(self.shards(corpus))
        return [] if n == 1 else [f"{self.DATA}/{corpus}/coco/spans.{i}-of-{n}.arrow" for i in range(n)]

    def coco_spec(self, name: str) -> dict[str, Any]:
        """The resolved spec (zsdr.pretrain.coco) of a pretrained model the pipeline trains."""
        p = self.PRETRAINED[name]
        if "init" not in p or "train" not in p:
            raise ValueError(
                f"config key cocodr.pretrained.{name}: give `hf` (a released model) or `init`, "
                f"`corpora` and `train` (pretrained by the pipeline)"
            )
        if p["init"] == name:
            raise ValueError(
                f"config key cocodr.pretrained.{name}.init: a model cannot start from itself"
            )
        init = self.model_ref(p["init"])
        if p.get("head") != "new":
            self.check_head_source(init, f"cocodr.pretrained.{name}.init")
        return {
            "kind": "coco",
            "init": init,
            "spans": [self.spans_file(c) for c in self.pretrained_corpora(name)],
            "max_length": p["max_length"],
            "mlm_probability": p["mlm_probability"],
            "head_layers": p["head_layers"],
            "skip_from": p["skip_from"],
            "late_mlm": p["late_mlm"],
            "contrastive_weight": p["contrastive_weight"],
            "backbone_dropout": p["backbone_dropout"],
            **({"head": p["head"]} if p.get("head") else {}),
            "tie_embeddings": p.get("tie_embeddings"),
            "max_examples": p.get("max_examples"),
            "out": f"{self.MODELS}/pretrained/{name}",
            "checkpoint_dir": f"{self.MODELS}/.checkpoints/pretrained-{name}",
            "dropout": self.TRAINING["dropout"],
            "train": self.train_settings(p),
            "info": {
                "pretrained": name,
                "description": p["description"],
                "provenance": p["provenance"],
            },
        }

    def cocodr_episodes(self, recipe: str, where: str) -> list[str]:
        """Figure 4: the systems of a variant per episode: its warmup (the init recipe), then each ANCE episode."""
        if recipe not in self.RECIPES or self.RECIPES[recipe]["negatives"] != "ance":
            raise ValueError(f"config key {where}: {recipe!r} is not a recipe with ANCE episodes")
        warmup = self.RECIPES[recipe]["init"]
        if warmup not in self.RECIPES:
            raise ValueError(
                f"config key {where}: the init of {recipe!r} must be its warmup recipe"
            )
        episodes = range(1, self.RECIPES[recipe]["episodes"] + 1)
        return [warmup, *(self.recipe_run(recipe, k) for k in episodes)]

    def cocodr_figure4_points(self) -> list[dict[str, Any]]:
        return [
            {
                "variant": label,
                "episode": e,
                "dataset": d,
                "system": s,
                "metrics": f"{self.METRICS}/{d}/{s}.json",
            }
            for label, recipe in self.COCODR_FIG4["variants"].items()
            for e, s in enumerate(
                self.cocodr_episodes(recipe, f"cocodr.figure4.variants.{label}"), 1
            )
            for d in self.COCODR_FIG4_DATASETS
        ]

    def cocodr_figure3_points(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        ref = self.COCODR["sweeps"]["reference"]
        points = [
            {
                "sweep": "temperature" if sweep == "rho" else "clusters",
                "value": value,
                "system": recipe,
                "metrics": [f"{self.METRICS}/{d}/{recipe}.json" for d in self.TARGETS],
            }
            for (sweep, value), recipe in sorted(self.COCODR_SWEEPS.items())
        ]
        reference = (
            {
                "label": self.check_system(ref, "cocodr.sweeps.reference"),
                "metrics": [f"{self.METRICS}/{d}/{ref}.json" for d in self.TARGETS],
            }
            if ref
            else None
        )
        return points, reference

    def cocodr_analysis_system(self, key: str) -> str:
        return self.check_system(self.COCODR_ANALYSIS[key], f"cocodr.analysis.{key}")

    def geometry_file(self, model: str, corpus: str) -> str:
        return f"{self.STATS}/cocodr/geometry/{model}/{corpus}.json"

    def cocodr_analysis_model(self, name: str) -> str:
        """A model Figure 5 measures: a pretrained model or a backbone (checked)."""
        if name not in self.PRETRAINED and name not in self.config["backbones"]:
            raise ValueError(
                f"config key cocodr.analysis: {name!r} is neither a cocodr.pretrained model nor a backbone"
            )
        return self.model_ref(name)

    def _setup_cocodr(self) -> None:
        """Resolve COCO-DR's analysis, span corpora, clustered runs, figures and evaluated systems, and the systems evaluated per dataset."""
        # COCO-DR (docs/methods/cocodr.md; rules/cocodr.smk): span files per corpus, pretraining specs, the query
        # clusters of every ANCE run with a `dro` term, and the systems its figures evaluate.
        self.COCODR_ANALYSIS = self.COCODR["analysis"]

        self.SPAN_CORPORA = sorted(
            {c for n in self.TRAINED_PRETRAINED for c in self.pretrained_corpora(n)}
            | ({self.SOURCE, *self.TARGETS} if self.COCODR_ANALYSIS else set())
        )
        # ANCE runs whose recipe has a `dro` term: each is clustered by the model that mines its negatives.
        self.DRO_RUNS = [r for r, (n, _) in self.TRAIN_RUNS.items() if self.RECIPES[n].get("dro")]
        self.COCODR_FIG4 = self.COCODR.get("figure4", {})
        self.COCODR_FIG4_DATASETS = [
            self.check_dataset(d) for d in (self.COCODR_FIG4.get("datasets") or self.TARGETS)
        ]

        self.COCODR_FIGURES = (
            [f"{self.RESULTS}/cocodr/figure{n}.png" for n in (3, 4, 5)]
            if self.COCODR_ANALYSIS
            else []
        )

        self.COCODR_EVAL_SYSTEMS = (
            {p["system"] for p in self.cocodr_figure4_points()}
            | set(self.COCODR_SWEEPS.values())
            | (
                {
                    self.cocodr_analysis_system(k)
                    for k in ("with_coco", "without_coco", "with_idro", "without_idro")
                }
                if self.COCODR_ANALYSIS
                else set()
            )
        )

        # Systems evaluated on every dataset by one job per dataset (table 1's: the main target stays one
        # job per dataset), and the further systems that paper tables and BERM's loss-weight grid need,
        # evaluated one job per (dataset, system) so that table 1 never waits for them.
        # A system with a model per target (MoDIR, RMSC) exists only on its targets and the source, so it is
        # no EVAL_SYSTEM; on table 1's datasets, where every table-1 system exists, rules/evaluate.smk's
        # evaluate_table1 evaluates them with the others in the dataset's one job.
        self.EVAL_SYSTEMS = [
            s
            for s in dict.fromkeys(self.TABLE1_SYSTEMS)
            if "modir" not in self.SYSTEMS[s] and "mixture" not in self.SYSTEMS[s]
        ]
        self.EXTRA_EVAL_SYSTEMS = sorted(
            (
                {s for cells in self.TABLE_CELLS.values() for _, s in cells}
                | set(self.TABLE1_SYSTEMS)
                | set(self.BERM_GRID.values())
                | set(self.FIGURE4_SYSTEMS.values())
                | {self.FIGURE4["system"], self.FIGURE4["baseline"]}
                | set(self.MODIR_STEP_SYSTEMS.values())
                | set(self.modir_case())
                | self.COCODR_EVAL_SYSTEMS
                | set(self.RMSC_STEP_SYSTEMS.values())
            )
            - set(self.EVAL_SYSTEMS)
        )
