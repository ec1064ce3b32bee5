"""Stage 4b, RMSC: weak-pair sets, per-target mixtures, query generators and the curve snapshots.

RMSC (docs/methods/rmsc.md; rules/rmsc.smk): a `mixture` recipe with a target set trains once per target d, as
runs <recipe>@<d> (zsdr.plan.recipes); its system on d is that run, on the source dataset the run of
`rmsc.source_target` (else its first target) [X]. Weak pairs are data/<corpus>/weak/<method>.jsonl; the
source's weak set of a run uses its target's method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zsdr.plan import checks
from zsdr.plan.recipes import Recipes
from zsdr.plan.references import ModelRefs


@dataclass(frozen=True)
class Rmsc:
    recipes: Recipes
    refs: ModelRefs
    section: dict[str, Any]            # config `rmsc`
    weak: dict[str, Any]               # rmsc.weak
    qgen: dict[str, Any]               # rmsc.qgen
    weak_tokenizer: str                # whose word pieces SCL's spans are counted in
    generators: dict[str, Any]
    trained_generators: list[str]
    source_context: list[str]          # [domain, relevance] an RMSC model encodes the source dataset in
    curves: dict[str, Any]
    curve_recipes: list[str]
    curve_datasets: list[str]
    figures: list[str]

    def weak_method(self, entry: dict[str, Any], target: str | None, where: str) -> str:
        """The extraction method of a weak set: its own, else the target's, else rmsc.weak.method."""
        method = entry["method"] or self.weak["methods"].get(target)
        method = method or self.weak["method"]
        if method == "qgen" and self.qgen.get("generator") not in self.generators:
            raise ValueError(
                f"config key {where}: QGen pairs need rmsc.qgen.generator to name a key of "
                f"rmsc.qgen.generators (defined: {', '.join(self.generators) or 'none'})"
            )
        return method

    def weak_file(self, corpus: str, method: str) -> str:
        return f"{self.recipes.datasets.paths.data}/{corpus}/weak/{method}.jsonl"

    def mixture_sets(self, name: str, target: str | None) -> list[dict[str, Any]]:
        """The resolved supervision sets (zsdr.training.rmsc) of recipe ``name``'s run on ``target``."""
        out = []
        m = self.recipes.by_name[name]["mixture"]
        for i, entry in enumerate(m["sets"]):
            where = f"recipes.{name}.mixture.sets[{i}]"
            corpus = self.recipes.datasets.source if entry["domain"] == "source" else target
            resolved = {
                "name": entry.get("name") or f"{entry['domain']}-{entry['relevance']}",
                "domain": entry["domain"],
                "relevance": entry["relevance"],
                "dataset": f"{self.recipes.datasets.paths.data}/{corpus}",
                "size": entry["size"],
                "negatives": m["weak_negatives"],
            }
            if entry["relevance"] == "weak":
                resolved["pairs"] = self.weak_file(corpus, self.weak_method(entry, target, where))
            out.append(resolved)
        return out

    @staticmethod
    def soft_context(context: Sequence[str]) -> str:
        """``[T] x [H]`` for ``[target, human]``: a soft-token context as the summaries print it."""
        return f"[{context[0][0].upper()}] x [{context[1][0].upper()}]"

    def mixture_model(self, name: str, dataset: str | None, step: int | str | None = None) -> str:
        """The folder of mixture recipe ``name``'s model on ``dataset`` after ``step`` steps (default: the end)."""
        run = name
        if name in self.recipes.per_target_mixtures:
            targets = self.recipes.recipe_targets(name)
            if dataset in (None, self.recipes.datasets.source):
                wanted = self.section["source_target"]
                target = wanted if wanted in targets else targets[0]
            elif dataset in targets:
                target = dataset
            else:
                raise ValueError(
                    f"config key recipes.{name}.targets: {name} has no model for {dataset!r}; add "
                    f"the dataset to its targets (an RMSC model is trained per target)"
                )
            run = f"{name}@{target}"
        path = f"{self.recipes.datasets.paths.models}/trained/{run}"
        total = self.recipes.by_name[name]["train"]["max_steps"]
        if step is None or int(step) == total:
            return path
        every = self.curves["snapshot_every"]
        if name not in self.curve_recipes or int(step) % every or int(step) > total:
            raise ValueError(f"config key rmsc.curves: the model of {name} after {step} steps is not saved")
        return f"{path}/snapshots/step-{int(step):09d}"

    def rmsc_steps(self, name: str) -> list[int]:
        """The evaluated steps of a curve recipe: every snapshot and the end."""
        total = self.recipes.by_name[name]["train"]["max_steps"]
        every = self.curves["snapshot_every"]
        return [*range(every, total, every), total]

    def weak_inputs(self, wc: Any) -> list[str]:
        """What a weak-pair extraction reads besides the corpus: SCL the span tokenizer, QGen its generator."""
        if wc.method == "scl":
            return self.refs.model_files(self.refs.model_ref(self.weak_tokenizer))
        if wc.method == "qgen":
            return self.refs.model_files(self.refs.generator_path(self.qgen["generator"]))
        return []

    def weak_summary(self, wc: Any) -> str:
        """What a dry run shows of a weak-pair extraction: its settings, the open choices marked [X]."""
        w, q = self.weak, self.qgen
        per_document = w["pairs_per_document"]
        passes = "as many passes as that needs" if per_document is None else f"at most {per_document} passes"
        common = (
            f"{w['max_pairs'] or 'all'} pairs (the labelled set's size [P: comparable]), one per document "
            f"a pass over a seeded order, {passes} [X], no pair twice; statistics beside the file"
        )
        if wc.method != "qgen":
            common += "; each with a negative of another document by the positive's rule [X]"
        if wc.method == "scl":
            return (
                f"SCL: two random spans of <= {w['max_tokens']} {self.weak_tokenizer} word pieces "
                f"(new span p {w['new_span_probability']:g}) [X: COCO-DR's spans]; {common}"
            )
        if wc.method == "ict":
            return (
                f"ICT: a sentence vs the rest of its document, kept in its context with p "
                f"{w['keep_probability']:g} [X]; {common}"
            )
        return (
            f"QGen: {q['queries_per_document']} queries per document by "
            f"{self.refs.generator_path(q['generator'])} [X: the generator], top-k {q['top_k']} top-p "
            f"{q['top_p']:g}, <= {q['max_length']} tokens; {common}"
        )

    def curves_summary(self, figure: int) -> str:
        """What a dry run shows of a curve figure: its recipes, datasets and the evaluation interval [X]."""
        source = self.recipes.datasets.source
        recipes = ", ".join(self.curves[f"figure{figure}"])
        return (
            f"{recipes} evaluated every {self.curves['snapshot_every']} steps [X] on "
            f"{source} (in-domain) and {', '.join(self.curve_datasets)} [X]; a per-target model "
            f"stands on {source} for rmsc.source_target {self.section['source_target']} [X], in the "
            f"soft-token context {self.soft_context(self.source_context)} [X] rmsc.source_context"
        )


def build_rmsc(config: dict[str, Any], recipes: Recipes, refs: ModelRefs) -> Rmsc:
    section = config["rmsc"]
    weak, qgen, curves = section["weak"], section["qgen"], section["curves"]
    source_context = list(section["source_context"])
    checks.check_source_context(source_context)
    curve_recipes = list(dict.fromkeys([*curves["figure2"], *curves["figure3"]]))
    checks.check_members(curve_recipes, recipes.mixture_recipes, "rmsc.curves", "a recipe with a `mixture` section")
    results = recipes.datasets.paths.results
    return Rmsc(
        recipes=recipes, refs=refs, section=section, weak=weak, qgen=qgen,
        weak_tokenizer=weak["tokenizer"] or config["cocodr"]["spans"]["tokenizer"],
        generators=qgen["generators"],
        trained_generators=list(n for n, g in qgen["generators"].items() if "hf" not in g),
        source_context=source_context, curves=curves, curve_recipes=curve_recipes,
        curve_datasets=list(curves["datasets"] or recipes.datasets.targets),
        figures=list(f"{results}/rmsc/figure{n}.png" for n in (2, 3) if curves[f"figure{n}"]),
    )
