"""Stage 5, systems: every retrieval system (configured, trained, per curve step, per DAM snapshot), routed to
its model and encoder settings per dataset, and the ANCE runs that mine negatives with one of them.

:func:`build_systems` adds, in this order, one system per trained run (a recipe's last episode also under the
recipe's name), one per MoDIR and per-target RMSC recipe, the curve systems (``<recipe>.step<N>``), the REMs of
`systems.<name>.rem_of`, DDR Figure 4's DAM snapshots (``<system>.dam-step<N>``), the mining systems of ANCE
episodes that mine at another document length (``<previous>.mine-d<length>``) and, last, the folders' own
systems of the model cards (``<run>.own``: a trained folder table 1 uses, evaluated as it loads with no
arguments, on the datasets where no system loads it so); a configured system of the same name wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zsdr.models.released import RELEASES
from zsdr.plan import checks
from zsdr.plan.datasets import Datasets
from zsdr.plan.ddr import Ddr
from zsdr.plan.modir import Modir
from zsdr.plan.recipes import DAM_SEP, LENGTH_KEYS, Recipes
from zsdr.plan.references import ModelRefs
from zsdr.plan.rmsc import Rmsc

SYSTEM_KEYS = frozenset({
    "kind", "backbone", "model", "description", "rem_of", "target_dam", "train_dataset", "per_target",
    "dam_snapshot", "by_language", "modir", "modir_step", "mixture", "mixture_step",
})
"""The keys of a system that say which model it is; every other key is an Encoder setting."""


def _lengths(by_name: dict[str, dict[str, Any]], recipes: Recipes, system: str) -> dict[str, int]:
    spec = by_name[system]
    out = {k: spec[k] for k in LENGTH_KEYS if k in spec}
    if system in recipes.runs:
        recipe = recipes.runs[system][0]
    else:
        recipe = spec.get("modir") or spec.get("mixture") or spec.get("per_target")
    if recipe is None and system in recipes.by_name:
        recipe = system  # a recipe's last episode
    if recipe is None and "rem_of" in spec:
        recipe = recipes.runs[spec["rem_of"]][0]
    return {**recipes.recipe_lengths(recipe), **out} if recipe else out


@dataclass(frozen=True)
class Systems:
    datasets: Datasets
    recipes: Recipes
    refs: ModelRefs
    modir: Modir
    rmsc: Rmsc
    by_name: dict[str, dict[str, Any]]                     # every system, in plan order
    modir_step_systems: dict[tuple[str, str, int], str]    # (recipe, dataset, step) -> system of MoDIR's curves
    rmsc_step_systems: dict[tuple[str, int], str]          # (recipe, step) -> system of RMSC's curves
    figure4_systems: dict[tuple[str, int], str]            # (dataset, step) -> system of DDR Figure 4
    mined: dict[str, tuple[str, int]]                      # ANCE run (or MoDIR recipe) -> (recipe, episode)
    bm25: list[str]
    dense: list[str]
    own: dict[str, str] = field(default_factory=dict)      # trained folder -> its own system (model cards)

    @property
    def ance_runs(self) -> list[str]:
        """The negative files the mine_negatives job writes: one per ANCE run and one per ANCE MoDIR recipe."""
        return list(self.mined)

    def check_system(self, name: str, where: str) -> str:
        return checks.check_system_name(name, self.by_name, where)

    def previous_system(self, run: str) -> str:
        """The system whose model mines the negatives of an ANCE run: the last episode, the recipe's
        `base_system` or its init recipe."""
        name, k = self.mined[run]
        if k > 1:
            return f"{name}-ep{k - 1}"
        return self.check_system(self.modir.modir_base(name), f"recipes.{name}.base_system")

    def system_lengths(self, system: str) -> dict[str, int]:
        """The lengths a dense system encodes at, where the config says them: its own options, else those of
        the recipe that trained it."""
        return _lengths(self.by_name, self.recipes, system)

    def dataset_lengths_text(self, system: str) -> str:
        """The datasets a system encodes at their own lengths (`dataset_lengths`), for a dry-run line:
        "arguana q128; scifact d256" ("" when it encodes every dataset alike)."""
        parts = []
        for dataset, lengths in self.by_name[system].get("dataset_lengths", {}).items():
            shown = " ".join(
                f"{'q' if k == 'query_max_length' else 'd'}{v}" for k, v in sorted(lengths.items(), reverse=True)
            )
            parts.append(f"{dataset} {shown}")
        return "; ".join(parts)

    def mining_lengths(self, run: str) -> dict[str, int]:
        """The lengths an ANCE run's negatives are mined at: the episode's own (the lengths it trains at)."""
        return self.recipes.recipe_lengths(self.mined[run][0])

    def mining_system(self, run: str) -> str:
        """The system whose corpus embeddings an ANCE run's mining searches: the previous system when it
        encodes documents at the episode's length, else `<previous>.mine-d<length>`."""
        return _mining_system(self.by_name, self.recipes, self.mined, self.previous_system(run), run)

    def mining_options(self, run: str, dataset: str | None) -> dict[str, Any]:
        """The Encoder settings a mining job loads the previous model with: its mining system's, at the
        episode's query and document lengths."""
        return {**self.encoder_options(self.mining_system(run), dataset), **self.mining_lengths(run)}

    def ddr_model(self, system: str, dataset: str | None) -> tuple[str, str | None]:
        """DDR systems: ``(model, rem)`` on ``dataset``: the trained folder (DAM + REM) on the REM's training
        dataset (and at snapshot 0), else the dataset's DAM (or its snapshot) + the REM."""
        spec = self.by_name[system]
        snapshot = spec.get("dam_snapshot")
        if dataset is None or dataset == spec["train_dataset"] or snapshot == 0:
            return spec["model"], None
        dam = self.refs.dam_path(f"{spec['target_dam']}{DAM_SEP}{dataset}", f"systems.{system}")
        if snapshot:
            dam = f"{dam}/snapshots/step-{snapshot:09d}"
        return dam, f"{spec['model']}/rem"

    def routed(self, system: str, dataset: str | None) -> str:
        """The system that stands for ``system`` on ``dataset``: `by_language` sends the datasets of a language
        to that language's system (DDR: DuReader-trained models on the Chinese sets)."""
        if dataset is None:
            return system
        return self.by_name[system].get("by_language", {}).get(self.datasets.language(dataset), system)

    def dense_model(self, system: str, dataset: str | None = None) -> str:
        """What a dense system loads on ``dataset``: a backbone folder the DAG builds, a model folder (per
        dataset for DDR and per-target systems), or an HF id."""
        system = self.routed(system, dataset)
        spec = self.by_name[system]
        models = self.datasets.paths.models
        if "rem_of" in spec:
            return self.ddr_model(system, dataset)[0]
        if "modir" in spec:
            return self.modir.modir_model(spec["modir"], dataset, spec.get("modir_step"))
        if "mixture" in spec:
            return self.rmsc.mixture_model(spec["mixture"], dataset, spec.get("mixture_step"))
        if "per_target" in spec and dataset not in (
            None, self.recipes.by_name[spec["per_target"]].get("dataset", self.datasets.source)
        ):
            return f"{models}/trained/{spec['per_target']}@{dataset}"
        if "backbone" in spec:
            name = spec["backbone"]
            if name not in self.recipes.backbones:
                raise ValueError(f"config key systems.{system}.backbone: {name!r} is not a key of `backbones`")
            backbone = self.recipes.backbones[name]
            return f"{models}/backbones/{name}" if "build" in backbone else self.refs.on_this_machine(backbone["hf"])
        if spec["model"] in RELEASES:
            return self.refs.model_ref(spec["model"])
        return self.refs.on_this_machine(spec["model"])

    def dense_model_input(self, wc: Any) -> list[str]:
        """The model files a dense job waits for (none for a Hugging Face id)."""
        files = self.refs.model_files(self.dense_model(wc.system, wc.dataset))
        spec = self.by_name[self.routed(wc.system, wc.dataset)]
        if "rem_of" in spec:
            files += self.refs.model_files(spec["model"])
        if spec.get("rem"):
            files += self.refs.model_files(self.refs.model_ref(spec["rem"]))
        return files

    def encoder_options(self, system: str, dataset: str | None = None) -> dict[str, Any]:
        """The Encoder settings of a dense system (every key but :data:`SYSTEM_KEYS`); a REM on a DAM also gets
        the REM folder and its recipe's encoder settings (a DAM has none)."""
        system = self.routed(system, dataset)
        spec = self.by_name[system]
        options = {k: v for k, v in spec.items() if k not in SYSTEM_KEYS}
        if options.get("rem") in RELEASES:
            options["rem"] = self.refs.model_ref(options["rem"])
        if "rem_of" in spec:
            rem = self.ddr_model(system, dataset)[1]
            if rem:
                recipe = self.recipes.by_name[self.recipes.runs[spec["rem_of"]][0]]
                options = {**recipe["encoder"], **recipe["system"], **options, "rem": rem}
        # per-dataset inference lengths (`dataset_lengths`: a paper's evaluation settings, e.g. COCO-DR's
        # ArguAna queries at 128 tokens) over the system's own
        options.update(options.pop("dataset_lengths", {}).get(dataset, {}))
        k = self.recipes.by_name[spec["mixture"]]["mixture"].get("soft_tokens") if "mixture" in spec else None
        if k and dataset == self.datasets.source:
            # [X] rmsc.source_context: the context an RMSC model encodes the source dataset in
            options = {**options, "soft_tokens": {"k": k, "inference": self.rmsc.source_context}}
        return options

    def card_folders(self, table1: list[str]) -> list[tuple[str, str, str, str]]:
        """``(system, dataset, folder, run)``: the trained folder each dense table-1 system retrieves with on each
        evaluated dataset (a DDR system: its trained folder, whose REM every dataset uses), and its run."""
        prefix = f"{self.datasets.paths.models}/trained/"
        out = []
        for system in table1:
            if self.by_name[system]["kind"] != "dense":
                continue
            for dataset in self.datasets.evaluated:
                spec = self.by_name[self.routed(system, dataset)]
                folder = spec["model"] if "rem_of" in spec else self.dense_model(system, dataset)
                run = folder[len(prefix):].split("/snapshots/")[0] if folder.startswith(prefix) else None
                if run in self.recipes.runs:
                    out.append((system, dataset, folder, run))
        return out

    def saved_settings(self, recipe: str) -> dict[str, Any]:
        """The settings a recipe's trained folder loads with that a system may also give: the recipe's `system`
        settings (zsdr.json's `retrieval`) and an RMSC model's soft tokens in their default inference context
        (the one training leaves in zsdr.json)."""
        from zsdr.models.soft_tokens import SoftTokens

        r = self.recipes.by_name[recipe]
        k = (r.get("mixture") or {}).get("soft_tokens")
        return {**r["system"], **({"soft_tokens": SoftTokens(k=int(k)).to_dict()} if k else {})}

    def encodes_otherwise(self, system: str, dataset: str, folder: str, saved: dict[str, Any]) -> str | None:
        """How ``system`` encodes ``dataset`` otherwise than ``folder`` loaded with no arguments (which loads
        with the ``saved`` settings, :meth:`saved_settings`), or None when it loads it so."""
        model = self.dense_model(system, dataset)
        if model != folder:
            spec = self.by_name[self.routed(system, dataset)]
            return "the REM on each dataset's own DAM" if "rem_of" in spec else f"the model {model} on {dataset}"
        extra = {k: v for k, v in self.encoder_options(system, dataset).items() if saved.get(k) != v}
        if not extra:
            return None
        if set(extra) == {"soft_tokens"}:
            return f"{dataset} in the soft-token context {extra['soft_tokens']['inference']}"
        return f"{dataset} with {', '.join(f'{k}={v}' for k, v in sorted(extra.items()))}"

    def system_scale(self, system: str) -> float:
        """The inverse temperature a trained system's logits use (1 for a system no recipe trained)."""
        name = system if system in self.recipes.by_name else self.recipes.runs.get(system, (None,))[0]
        return self.recipes.by_name[name]["scale"] if name else 1.0


def _mining_system(by_name: dict[str, dict[str, Any]], recipes: Recipes, mined: dict[str, tuple[str, int]],
                   prev: str, run: str) -> str:
    doc = recipes.recipe_lengths(mined[run][0]).get("doc_max_length")
    if doc is None or _lengths(by_name, recipes, prev).get("doc_max_length") == doc:
        return prev
    return f"{prev}.mine-d{doc}"


def _trained(recipe: dict[str, Any], name: str, model: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "dense", "model": model, "description": recipe.get("description", f"trained by recipe {name}"),
            **extra}


def build_systems(config: dict[str, Any], recipes: Recipes, refs: ModelRefs, modir: Modir, rmsc: Rmsc,
                  ddr: Ddr) -> Systems:
    """The systems stage (see the module's docstring for the order systems are added in)."""
    datasets, by_recipe = recipes.datasets, recipes.by_name
    models, source = datasets.paths.models, datasets.source
    systems = dict(config["systems"])
    # A REM recipe's system is its REM on each dataset's DAM (the trained folder itself on its training
    # dataset); a per-target recipe's system is its per-dataset run.
    for run, (name, k) in recipes.runs.items():
        if run in recipes.per_target:
            continue
        r = by_recipe[name]
        sys = {**_trained(r, name, f"{models}/trained/{run}"), **r["system"]}
        if r.get("rem"):
            sys |= {"rem_of": run, "target_dam": r.get("target_dam") or r["init"],
                    "train_dataset": r.get("dataset", source)}
        if r.get("per_target_init"):
            sys["per_target"] = name
        if r.get("by_language"):
            sys["by_language"] = r["by_language"]
        systems.setdefault(run, sys)
        if run != name and k == r["episodes"]:
            systems.setdefault(name, sys)
    for name in recipes.modir_recipes:
        r = by_recipe[name]
        model = modir.modir_model(name, modir.modir_source_target(name))
        systems.setdefault(name, {**_trained(r, name, model, modir=name), **r["system"]})
    modir_steps = {}
    for name in modir.curves["recipes"]:
        for d in modir.curve_datasets:
            evaluated = int(modir.section.get("eval_step") or modir.modir_total(name, d))
            for n in modir.modir_steps(name, d):
                # step 0 is the base system, the evaluated step the recipe's own system
                sys = {0: modir.modir_base(name), evaluated: name}.get(n, f"{name}.step{n}")
                if sys == f"{name}.step{n}":
                    systems.setdefault(sys, {"kind": "dense", "model": modir.modir_model(name, d, n),
                                             "description": f"{name} after {n} steps", "modir": name,
                                             "modir_step": n, **by_recipe[name]["system"]})
                modir_steps[(name, d, n)] = sys
    for name in recipes.per_target_mixtures:
        systems.setdefault(name, _trained(by_recipe[name], name, rmsc.mixture_model(name, source), mixture=name))
    rmsc_steps = {}
    for name in rmsc.curve_recipes:
        for n in rmsc.rmsc_steps(name):
            sys = name if n == by_recipe[name]["train"]["max_steps"] else f"{name}.step{n}"
            if sys != name:
                systems.setdefault(sys, {"kind": "dense", "model": rmsc.mixture_model(name, source, n),
                                         "description": f"{name} after {n} steps", "mixture": name,
                                         "mixture_step": n})
            rmsc_steps[(name, n)] = sys
    for name, s in config["systems"].items():
        if "rem_of" in s:  # a trained REM on other DAMs (e.g. DDR\SI: target DAMs from the backbone)
            rem = s["rem_of"]
            if rem not in by_recipe or not by_recipe[rem].get("rem"):
                raise ValueError(f"config key systems.{name}.rem_of: {rem!r} is not a recipe with a `rem`")
            systems[name] = {
                **{k: v for k, v in systems[rem].items() if k != "by_language"},
                "description": s.get("description", ""),
                "target_dam": s.get("target_dam") or systems[rem]["target_dam"],
                **({"by_language": s["by_language"]} if s.get("by_language") else {}),
            }
    for name, s in systems.items():
        for lang, other in s.get("by_language", {}).items():
            if other not in systems or systems[other].get("by_language"):
                raise ValueError(
                    f"config key {name}.by_language.{lang}: {other!r} is not a system (or routes on itself)"
                )
    figure4 = {}
    for d in ddr.figure4_datasets:
        for n in ddr.figure4_steps(d):
            name = f"{ddr.figure4['system']}.dam-step{n}"
            systems.setdefault(name, {**systems[ddr.figure4["system"]], "dam_snapshot": n,
                                      "description": f"DDR Figure 4: target DAM after {n} steps"})
            figure4[(d, n)] = name
    mined = {r: (n, k) for r, (n, k) in recipes.runs.items()
             if by_recipe[n]["negatives"] == "ance" and r not in recipes.per_target}
    mined |= {n: (n, 1) for n in recipes.modir_recipes if by_recipe[n]["negatives"] == "ance"}
    for run, (name, k) in mined.items():
        prev = (f"{name}-ep{k - 1}" if k > 1
                else checks.check_system_name(modir.modir_base(name), systems, f"recipes.{name}.base_system"))
        sys = _mining_system(systems, recipes, mined, prev, run)
        if sys != prev:
            doc = recipes.recipe_lengths(name)["doc_max_length"]
            systems.setdefault(sys, {**{k: v for k, v in systems[prev].items() if k != "by_language"},
                                     "doc_max_length": doc,
                                     "description": f"{prev} encoding documents at {doc} tokens (ANCE mining)"})
    def stage(by_name: dict[str, dict[str, Any]], own: dict[str, str]) -> Systems:
        return Systems(
            datasets=datasets, recipes=recipes, refs=refs, modir=modir, rmsc=rmsc, by_name=by_name,
            modir_step_systems=modir_steps, rmsc_step_systems=rmsc_steps, figure4_systems=figure4, mined=mined,
            bm25=list(n for n, s in by_name.items() if s["kind"] == "bm25"),
            dense=list(n for n, s in by_name.items() if s["kind"] == "dense"), own=own,
        )

    # The model cards' own systems: where no table-1 system loads a trained folder as it is (a DDR system
    # plugs its REM into each target's own DAM; a system may give other settings on a dataset), the folder
    # itself is evaluated there (zsdr.plan.tables.model_cards).
    routed = stage(systems, {})
    own: dict[str, str] = {}
    for system, dataset, folder, run in routed.card_folders(
            [s for s in (config.get("table1") or {}).get("systems", []) if s in systems]):
        saved = routed.saved_settings(recipes.runs[run][0])
        if routed.encodes_otherwise(system, dataset, folder, saved) is not None and folder not in own:
            snapshot = folder.split("/snapshots/")[1] if "/snapshots/" in folder else None
            own[folder] = f"{run}.{snapshot}.own" if snapshot else f"{run}.own"
    for folder, name in own.items():
        systems.setdefault(name, {"kind": "dense", "model": folder,
                                  "description": f"the folder {folder} as it loads with no arguments (its model "
                                                 "card's own scores)"})
    return stage(systems, own)
