"""RMSC: weak-pair sets, per-target mixtures, generators and curve points."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any


class RmscPlan:
    """RMSC: weak-pair sets, per-target mixtures, generators and curve points (a part of :class:`zsdr.plan.core.Plan`)."""

    def weak_method(self, entry: dict[str, Any], target: str | None, where: str) -> str:
        """The extraction method of a weak set: its own, else the target's, else rmsc.weak.method."""
        method = entry.get("method") or self.RMSC_WEAK["methods"].get(target)
        method = method or self.RMSC_WEAK["method"]
        if method == "qgen" and self.RMSC_QGEN.get("generator") not in self.GENERATORS:
            raise ValueError(
                f"config key {where}: QGen pairs need rmsc.qgen.generator to name a key of "
                f"rmsc.qgen.generators (defined: {', '.join(self.GENERATORS) or 'none'})"
            )
        return method

    def weak_file(self, corpus: str, method: str) -> str:
        return f"{self.DATA}/{corpus}/weak/{method}.jsonl"

    def mixture_sets(self, name: str, target: str | None) -> list[dict[str, Any]]:
        """The resolved supervision sets (zsdr.training.rmsc) of recipe ``name``'s run on ``target``."""
        out = []
        m = self.RECIPES[name]["mixture"]
        for i, entry in enumerate(m["sets"]):
            where = f"recipes.{name}.mixture.sets[{i}]"
            corpus = self.SOURCE if entry["domain"] == "source" else target
            resolved = {
                "name": entry.get("name") or f"{entry['domain']}-{entry['relevance']}",
                "domain": entry["domain"],
                "relevance": entry["relevance"],
                "dataset": f"{self.DATA}/{corpus}",
                "size": entry.get("size"),
                "negatives": m["weak_negatives"],
            }
            if entry["relevance"] == "weak":
                resolved["pairs"] = self.weak_file(corpus, self.weak_method(entry, target, where))
            out.append(resolved)
        return out

    def soft_context(self, context: Sequence[str]) -> str:
        """``[T] x [H]`` for ``[target, human]``: a soft-token context as the summaries print it."""
        return f"[{context[0][0].upper()}] x [{context[1][0].upper()}]"

    def mixture_model(self, name: str, dataset: str | None, step: int | str | None = None) -> str:
        """The folder of mixture recipe ``name``'s model on ``dataset`` after ``step`` steps (default: the end)."""
        run = name
        if name in self.PER_TARGET_MIXTURES:
            targets = self.recipe_targets(name)
            if dataset in (None, self.SOURCE):
                wanted = self.RMSC.get("source_target")
                target = wanted if wanted in targets else targets[0]
            elif dataset in targets:
                target = dataset
            else:
                raise ValueError(
                    f"config key recipes.{name}.targets: {name} has no model for {dataset!r}; add "
                    f"the dataset to its targets (an RMSC model is trained per target)"
                )
            run = f"{name}@{target}"
        path = f"{self.MODELS}/trained/{run}"
        total = self.RECIPES[name]["train"]["max_steps"]
        if step is None or int(step) == total:
            return path
        every = self.RMSC_CURVES["snapshot_every"]
        if name not in self.RMSC_CURVE_RECIPES or int(step) % every or int(step) > total:
            raise ValueError(
                f"config key rmsc.curves: the model of {name} after {step} steps is not saved"
            )
        return f"{path}/snapshots/step-{int(step):09d}"

    def weak_inputs(self, wc: Any) -> list[str]:
        """What a weak-pair extraction reads besides the corpus: SCL the span tokenizer, QGen its generator."""
        if wc.method == "scl":
            return self.model_files(self.model_ref(self.WEAK_TOKENIZER))
        if wc.method == "qgen":
            return self.model_files(self.generator_path(self.RMSC_QGEN["generator"]))
        return []

    def weak_summary(self, wc: Any) -> str:
        """What a dry run shows of a weak-pair extraction: its settings, the open choices marked [X]."""
        w, q = self.RMSC_WEAK, self.RMSC_QGEN
        common = (
            f"at most {w.get('max_pairs') or 'every document'} pairs [X], "
            f"{w['pairs_per_document']} per document [X], seeded document order"
        )
        if wc.method == "scl":
            return (
                f"SCL: two random spans of <= {w['max_tokens']} {self.WEAK_TOKENIZER} word pieces "
                f"(new span p {w['new_span_probability']:g}) [X: COCO-DR's spans]; {common}"
            )
        if wc.method == "ict":
            return (
                f"ICT: a sentence vs the rest of its document, kept in its context with p "
                f"{w['keep_probability']:g} [X]; {common}"
            )
        return (
            f"QGen: {q['queries_per_document']} queries per document by "
            f"{self.generator_path(q['generator'])} [X: the generator], top-k {q['top_k']} top-p "
            f"{q['top_p']:g}, <= {q['max_length']} tokens; {common}"
        )

    def rmsc_curve_points(self, figure: int) -> list[dict[str, Any]]:
        """RMSC Figure 2 / 3: every evaluated step of each recipe on the source dev set (in-domain)
        and on each curve target the recipe has a model for."""
        points = []
        for name in self.RMSC_CURVES[f"figure{figure}"]:
            targets = [
                d
                for d in self.RMSC_CURVE_DATASETS
                if name not in self.PER_TARGET_MIXTURES or d in self.recipe_targets(name)
            ]
            for n in self.rmsc_steps(name):
                system = self.RMSC_STEP_SYSTEMS[(name, n)]
                for d in [self.SOURCE, *targets]:
                    points.append(
                        {
                            "recipe": name,
                            "label": self.SYSTEMS[name].get("description", name),
                            "step": n,
                            "dataset": d,
                            "in_domain": d == self.SOURCE,
                            "metrics": f"{self.METRICS}/{d}/{system}.json",
                        }
                    )
        return points

    def curves_summary(self, figure: int) -> str:
        """What a dry run shows of a curve figure: its recipes, datasets and the evaluation interval [X]."""
        recipes = ", ".join(self.RMSC_CURVES[f"figure{figure}"])
        return (
            f"{recipes} evaluated every {self.RMSC_CURVES['snapshot_every']} steps [X] on "
            f"{self.SOURCE} (in-domain) and {', '.join(self.RMSC_CURVE_DATASETS)} [X]; a per-target model "
            f"stands on {self.SOURCE} for rmsc.source_target {self.RMSC.get('source_target')} [X], in the "
            f"soft-token context {self.soft_context(self.RMSC_SOURCE_CONTEXT)} [X] rmsc.source_context"
        )

    def generator_path(self, name: str) -> str:
        """What a QGen generator loads: its `hf` id / folder or models/generators/<name>."""
        return self.named_model(
            name, self.GENERATORS, "rmsc.qgen.generator", "rmsc.qgen.generators", "generators"
        )

    def generator_spec(self, name: str) -> dict[str, Any]:
        """The resolved spec (zsdr.models.generator) of a generator the pipeline trains."""
        g = self.GENERATORS[name]
        where = f"rmsc.qgen.generators.{name}"
        if "build" not in g or "train" not in g or "tokenizer" not in g:
            raise ValueError(
                f"config key {where}: give `hf` (a released generator) or `build`, `tokenizer` and "
                f"`train` (a tiny T5 trained by the pipeline)"
            )
        if g["tokenizer"] not in self.config["backbones"]:
            raise ValueError(
                f"config key {where}.tokenizer: {g['tokenizer']!r} is not a key of `backbones`"
            )
        return {
            "kind": "generator",
            "init": f"{self.MODELS}/generators/{name}.init",
            "dataset": f"{self.DATA}/{self.check_dataset(g.get('dataset', self.SOURCE))}",
            "split": "train",
            "max_length": g["max_length"],
            "query_max_length": g["query_max_length"],
            "out": f"{self.MODELS}/generators/{name}",
            "checkpoint_dir": f"{self.MODELS}/.checkpoints/generator-{name}",
            "dropout": self.TRAINING["dropout"],
            "train": self.train_settings(g),
            "info": {"generator": name, "description": g.get("description", "")},
        }

    def rmsc_steps(self, name: str) -> list[int]:
        """The evaluated steps of a curve recipe: every snapshot and the end."""
        total = self.RECIPES[name]["train"]["max_steps"]
        every = self.RMSC_CURVES["snapshot_every"]
        return [*range(every, total, every), total]

    def _setup_rmsc(self) -> None:
        """Resolve RMSC's weak-pair and QGen settings, generators, per-target mixture runs, source context and curves."""
        # RMSC (docs/methods/rmsc.md; rules/rmsc.smk): a `mixture` recipe with a target set trains once per
        # target d, as runs <recipe>@<d> (`targets` limits them); its system on d is that run, on the
        # source dataset the run of `rmsc.source_target` (else its first target) [X]. Weak pairs are
        # data/<corpus>/weak/<method>.jsonl; the source's weak set of a run uses its target's method.
        self.RMSC = self.config["rmsc"]
        self.RMSC_WEAK = self.RMSC["weak"]
        self.RMSC_QGEN = self.RMSC["qgen"]
        # whose word pieces SCL's spans are counted in
        self.WEAK_TOKENIZER = self.RMSC_WEAK.get("tokenizer") or self.COCODR["spans"]["tokenizer"]
        self.GENERATORS = self.RMSC_QGEN["generators"]
        self.TRAINED_GENERATORS = [n for n, g in self.GENERATORS.items() if "hf" not in g]
        self.MIXTURE_RECIPES = [n for n, r in self.RECIPES.items() if r.get("mixture")]
        self.PER_TARGET_MIXTURES = [
            n
            for n in self.MIXTURE_RECIPES
            if self.mixture_per_target(self.RECIPES[n])
            and (self.RECIPES[n].get("targets") is None or self.RECIPES[n]["targets"])
        ]

        for _name in self.PER_TARGET_MIXTURES:
            if self.RECIPES[_name]["episodes"] > 1 or self.RECIPES[_name].get("rem"):
                raise ValueError(
                    f"config key recipes.{_name}.mixture: a mixture recipe is one run per target "
                    f"(set episodes: 1, no rem)"
                )
            self.add_per_target_runs(_name)

        self.RMSC_SOURCE_CONTEXT = list(self.RMSC["source_context"])
        self._domain, self._relevance = self.RMSC_SOURCE_CONTEXT
        if self._domain not in ("source", "target") or self._relevance not in ("human", "weak"):
            raise ValueError(
                f"config key rmsc.source_context: {self.RMSC_SOURCE_CONTEXT} must be [domain, relevance], "
                "domain source or target, relevance human or weak (e.g. [target, human])"
            )

        self.RMSC_CURVES = self.RMSC["curves"]
        self.RMSC_CURVE_RECIPES = list(
            dict.fromkeys(
                [*self.RMSC_CURVES.get("figure2", []), *self.RMSC_CURVES.get("figure3", [])]
            )
        )
        self.RMSC_CURVE_DATASETS = self.RMSC_CURVES.get("datasets") or self.TARGETS
        for _name in self.RMSC_CURVE_RECIPES:
            if _name not in self.MIXTURE_RECIPES:
                raise ValueError(
                    f"config key rmsc.curves: {_name!r} is not a recipe with a `mixture` section"
                )

        self.RMSC_FIGURES = [
            f"{self.RESULTS}/rmsc/figure{n}.png"
            for n in (2, 3)
            if self.RMSC_CURVES.get(f"figure{n}")
        ]

    def _setup_rmsc_2(self) -> None:
        """Resolve the weak-pair files the mixture runs read; check the BERM reader and the DAM specs of DDR Figure 4."""
        # Weak-pair files the mixture runs read: (corpus, method).
        self.WEAK_PAIRS = sorted(
            {
                (os.path.basename(x["dataset"]), os.path.basename(x["pairs"])[: -len(".jsonl")])
                for _run, (_name, _k) in self.TRAIN_RUNS.items()
                if self.RECIPES[_name].get("mixture")
                for x in self.mixture_spec(_run)["sets"]
                if x.get("pairs")
            }
        )
        self.berm_reader()
        for _name in self.FIGURE4_DATASETS:
            self.dam_spec(self.figure4_dam(_name))
