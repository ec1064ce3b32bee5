"""Retrieval systems: every configured and trained system, routed to its model per dataset."""

from __future__ import annotations

from typing import Any

from zsdr.data import registry
from zsdr.models.released import RELEASES


class SystemsPlan:
    """Retrieval systems: every configured and trained system, routed to its model per dataset (a part of :class:`zsdr.plan.core.Plan`)."""

    def check_system(self, name: str, where: str) -> str:
        if name not in self.SYSTEMS:
            raise ValueError(
                f"config key {where}: system {name!r} is not defined under `systems` "
                f"(defined: {', '.join(self.SYSTEMS)})"
            )
        return name

    def previous_system(self, run: str) -> str:
        """The system whose model mines the negatives of an ANCE run: the last episode, the recipe's
        `base_system` or its init recipe."""
        name, k = self.MINED[run]
        if k > 1:
            return f"{name}-ep{k - 1}"
        return self.check_system(self.modir_base(name), f"recipes.{name}.base_system")

    def recipe_lengths(self, name: str | None) -> dict[str, int]:
        """The query / document lengths a recipe trains at, where the config says them: its `encoder`,
        else its init recipe's (a key missing from both is the checkpoint's, unknown here).
        """
        out, seen = {}, set()
        while name in self.RECIPES and name not in seen:
            seen.add(name)
            enc = self.RECIPES[name]["encoder"]
            for k in self.LENGTH_KEYS:
                if k in enc:
                    out.setdefault(k, enc[k])
            name = self.RECIPES[name]["init"]
        return out

    def system_lengths(self, system: str) -> dict[str, int]:
        """The lengths a dense system encodes at, where the config says them: its own options, else
        those of the recipe that trained it."""
        spec = self.SYSTEMS[system]
        out = {k: spec[k] for k in self.LENGTH_KEYS if k in spec}
        recipe = (
            self.TRAIN_RUNS[system][0]
            if system in self.TRAIN_RUNS
            else spec.get("modir") or spec.get("mixture") or spec.get("per_target")
        )
        if recipe is None and system in self.RECIPES:
            recipe = system  # a recipe's last episode
        if recipe is None and "rem_of" in spec:
            recipe = self.TRAIN_RUNS[spec["rem_of"]][0]
        return {**self.recipe_lengths(recipe), **out} if recipe else out

    def dataset_lengths_text(self, system: str) -> str:
        """The datasets a system encodes at their own lengths (`dataset_lengths`), for a dry-run line:
        "arguana q128; scifact d256" ("" when it encodes every dataset alike)."""
        parts = []
        for dataset, lengths in self.SYSTEMS[system].get("dataset_lengths", {}).items():
            shown = " ".join(
                f"{'q' if k == 'query_max_length' else 'd'}{v}" for k, v in sorted(lengths.items(), reverse=True)
            )
            parts.append(f"{dataset} {shown}")
        return "; ".join(parts)

    def mining_lengths(self, run: str) -> dict[str, int]:
        """The lengths an ANCE run's negatives are mined at: the episode's own (the lengths it trains
        at), falling back to the previous system's where the config does not say them."""
        return self.recipe_lengths(self.MINED[run][0])

    def mining_options(self, run: str, dataset: str | None) -> dict[str, Any]:
        """The Encoder settings a mining job loads the previous model with: its mining system's, at the
        episode's query and document lengths."""
        return {
            **self.encoder_options(self.mining_system(run), dataset),
            **self.mining_lengths(run),
        }

    def mining_system(self, run: str) -> str:
        """The system whose corpus embeddings an ANCE run's mining searches: the previous system when it
        encodes documents at the episode's length, else `<previous>.mine-d<length>` (the same model at
        the episode's document length; its own encode jobs)."""
        prev = self.previous_system(run)
        doc = self.mining_lengths(run).get("doc_max_length")
        if doc is None or self.system_lengths(prev).get("doc_max_length") == doc:
            return prev
        return f"{prev}.mine-d{doc}"

    def language(self, name: str) -> str:
        """Analyzer language of a dataset (the registry's; mini domains are English)."""
        return registry.REGISTRY[name].language if name in registry.REGISTRY else "en"

    def ddr_model(self, system: str, dataset: str | None) -> tuple[str, str | None]:
        """DDR systems: ``(model, rem)`` on ``dataset``: the trained folder (DAM + REM) on the REM's
        training dataset (and at snapshot 0), else the dataset's DAM (or its snapshot) + the REM.
        """
        spec = self.SYSTEMS[system]
        snapshot = spec.get("dam_snapshot")
        if dataset is None or dataset == spec["train_dataset"] or snapshot == 0:
            return spec["model"], None
        dam = self.dam_path(f"{spec['target_dam']}{self.DAM_SEP}{dataset}", f"systems.{system}")
        if snapshot:
            dam = f"{dam}/snapshots/step-{snapshot:09d}"
        return dam, f"{spec['model']}/rem"

    def routed(self, system: str, dataset: str | None) -> str:
        """The system that stands for ``system`` on ``dataset``: `by_language` sends the datasets of a
        language to that language's system (DDR: DuReader-trained models on the Chinese sets).
        """
        if dataset is None:
            return system
        return self.SYSTEMS[system].get("by_language", {}).get(self.language(dataset), system)

    def dense_model(self, system: str, dataset: str | None = None) -> str:
        """What a dense system loads on ``dataset``: a backbone folder the DAG builds, a model folder
        (per dataset for DDR and per-target systems), or an HF id."""
        system = self.routed(system, dataset)
        spec = self.SYSTEMS[system]
        if "rem_of" in spec:
            return self.ddr_model(system, dataset)[0]
        if "modir" in spec:
            return self.modir_model(spec["modir"], dataset, spec.get("modir_step"))
        if "mixture" in spec:
            return self.mixture_model(spec["mixture"], dataset, spec.get("mixture_step"))
        if "per_target" in spec and dataset not in (
            None,
            self.RECIPES[spec["per_target"]].get("dataset", self.SOURCE),
        ):
            return f"{self.MODELS}/trained/{spec['per_target']}@{dataset}"
        if "backbone" in spec:
            name = spec["backbone"]
            if name not in self.config["backbones"]:
                raise ValueError(
                    f"config key systems.{system}.backbone: {name!r} is not a key of `backbones`"
                )
            backbone = self.config["backbones"][name]
            return (
                f"{self.MODELS}/backbones/{name}"
                if "build" in backbone
                else self.on_this_machine(backbone["hf"])
            )
        if spec["model"] in RELEASES:
            return self.model_ref(spec["model"])
        return self.on_this_machine(spec["model"])

    def embedding_donor(self, system: str, dataset: str) -> str | None:
        """The dataset whose embeddings of ``system`` an encode job of ``dataset`` reads for the documents both
        corpora hold (`datasets.shared_corpus`): only where the system encodes both alike (the same model,
        REM and settings) and an `encode_corpus` job encodes ``dataset`` (not a group job); else None."""
        donor = self.SHARED_CORPUS.get(dataset)
        if donor is None or (dataset in self.GROUP_DATASETS and system in self.GROUP_SYSTEMS):
            return None
        same = (self.routed(system, dataset) == self.routed(system, donor)
                and self.dense_model(system, dataset) == self.dense_model(system, donor)
                and self.encoder_options(system, dataset) == self.encoder_options(system, donor))
        return donor if same else None

    def donor_inputs(self, wc: Any) -> list[str]:
        """What an encode job reads of its donor (:meth:`embedding_donor`): the donor's shards and the overlap map."""
        donor = self.embedding_donor(wc.system, wc.dataset)
        if donor is None:
            return []
        return [f"{self.EMBEDDINGS}/{donor}/{wc.system}/{s}" for s in self.shards(donor)] + [
            self.overlap_file(wc.dataset, donor)
        ]

    def dense_model_input(self, wc: Any) -> list[str]:
        """The model files a dense job waits for (none for a Hugging Face id)."""
        files = self.model_files(self.dense_model(wc.system, wc.dataset))
        system = self.routed(wc.system, wc.dataset)
        if "rem_of" in self.SYSTEMS[system]:
            files += self.model_files(self.SYSTEMS[system]["model"])
        if self.SYSTEMS[system].get("rem"):
            files += self.model_files(self.model_ref(self.SYSTEMS[system]["rem"]))
        return files

    def encoder_options(self, system: str, dataset: str | None = None) -> dict[str, Any]:
        """The Encoder settings of a dense system (everything but kind/backbone/model/description);
        a REM on a DAM also gets the REM folder and its recipe's encoder settings (a DAM has none).
        """
        system = self.routed(system, dataset)
        spec = self.SYSTEMS[system]
        options = {k: v for k, v in spec.items() if k not in self.SYSTEM_KEYS}
        if options.get("rem") in RELEASES:
            options["rem"] = self.model_ref(options["rem"])
        if "rem_of" in spec:
            rem = self.ddr_model(system, dataset)[1]
            if rem:
                recipe = self.RECIPES[self.TRAIN_RUNS[spec["rem_of"]][0]]
                options = {
                    **recipe["encoder"],
                    **recipe["system"],
                    **options,
                    "rem": rem,
                }
        # per-dataset inference lengths (`dataset_lengths`: a paper's evaluation settings, e.g. COCO-DR's
        # ArguAna queries at 128 tokens) over the system's own
        options.update(options.pop("dataset_lengths", {}).get(dataset, {}))
        k = (
            self.RECIPES[spec["mixture"]]["mixture"].get("soft_tokens")
            if "mixture" in spec
            else None
        )
        if k and dataset == self.SOURCE:
            # [X] rmsc.source_context: the context an RMSC model encodes the source dataset in
            options = {
                **options,
                "soft_tokens": {"k": k, "inference": self.RMSC_SOURCE_CONTEXT},
            }
        return options

    def system_scale(self, system: str) -> float:
        """The inverse temperature a trained system's logits use (1 for a system no recipe trained)."""
        name = system if system in self.RECIPES else self.TRAIN_RUNS.get(system, (None,))[0]
        return self.RECIPES[name]["scale"] if name else 1.0

    def _setup_systems(self) -> None:
        """Resolve every retrieval system (configured, trained, per curve step and per DAM snapshot), the ANCE runs that mine negatives and their mining systems."""
        # Retrieval systems (config `systems` plus one per trained run), by kind. A REM recipe's system
        # is its REM on each dataset's DAM (the trained folder itself on its training dataset); a
        # per-target recipe's system is its per-dataset run.
        self.SYSTEMS = dict(self.config["systems"])
        for _run, (_name, _k) in self.TRAIN_RUNS.items():
            if _run in self.PER_TARGET:
                continue
            _r = self.RECIPES[_name]
            _sys = {
                "kind": "dense",
                "model": f"{self.MODELS}/trained/{_run}",
                "description": _r.get("description", f"trained by recipe {_name}"),
                **_r["system"],
            }
            if _r.get("rem"):
                _sys |= {
                    "rem_of": _run,
                    "target_dam": _r.get("target_dam") or _r["init"],
                    "train_dataset": _r.get("dataset", self.SOURCE),
                }
            if _r.get("per_target_init"):
                _sys["per_target"] = _name
            if _r.get("by_language"):
                _sys["by_language"] = _r["by_language"]
            self.SYSTEMS.setdefault(_run, _sys)
            if _run != _name and _k == _r["episodes"]:
                self.SYSTEMS.setdefault(_name, _sys)
        for _name in self.MODIR_RECIPES:
            self.SYSTEMS.setdefault(
                _name,
                {
                    "kind": "dense",
                    "model": self.modir_model(_name, self.modir_source_target(_name)),
                    "description": self.RECIPES[_name].get(
                        "description", f"trained by recipe {_name}"
                    ),
                    "modir": _name,
                    **self.RECIPES[_name]["system"],
                },
            )
        self.MODIR_STEP_SYSTEMS = {}  # (recipe, dataset, step) -> system evaluated for the curves
        for _name in self.MODIR_CURVES["recipes"]:
            for _d in self.MODIR_CURVE_DATASETS:
                _eval = int(self.MODIR.get("eval_step") or self.modir_total(_name, _d))
                for _n in self.modir_steps(_name, _d):
                    # step 0 is the base system, the evaluated step the recipe's own system
                    _sys = {0: self.modir_base(_name), _eval: _name}.get(_n, f"{_name}.step{_n}")
                    if _sys == f"{_name}.step{_n}":
                        self.SYSTEMS.setdefault(
                            _sys,
                            {
                                "kind": "dense",
                                "model": self.modir_model(_name, _d, _n),
                                "description": f"{_name} after {_n} steps",
                                "modir": _name,
                                "modir_step": _n,
                                **self.RECIPES[_name]["system"],
                            },
                        )
                    self.MODIR_STEP_SYSTEMS[(_name, _d, _n)] = _sys
        for _name in self.PER_TARGET_MIXTURES:
            self.SYSTEMS.setdefault(
                _name,
                {
                    "kind": "dense",
                    "model": self.mixture_model(_name, self.SOURCE),
                    "description": self.RECIPES[_name].get(
                        "description", f"trained by recipe {_name}"
                    ),
                    "mixture": _name,
                },
            )
        self.RMSC_STEP_SYSTEMS = {}  # (recipe, step) -> system evaluated for RMSC's curves
        for _name in self.RMSC_CURVE_RECIPES:
            for _n in self.rmsc_steps(_name):
                _sys = (
                    _name
                    if _n == self.RECIPES[_name]["train"]["max_steps"]
                    else f"{_name}.step{_n}"
                )
                if _sys != _name:
                    self.SYSTEMS.setdefault(
                        _sys,
                        {
                            "kind": "dense",
                            "model": self.mixture_model(_name, self.SOURCE, _n),
                            "description": f"{_name} after {_n} steps",
                            "mixture": _name,
                            "mixture_step": _n,
                        },
                    )
                self.RMSC_STEP_SYSTEMS[(_name, _n)] = _sys
        for _name, _s in self.config["systems"].items():
            if (
                "rem_of" in _s
            ):  # a trained REM on other DAMs (e.g. DDR\SI: target DAMs from the backbone)
                _rem = _s["rem_of"]
                if _rem not in self.RECIPES or not self.RECIPES[_rem].get("rem"):
                    raise ValueError(
                        f"config key systems.{_name}.rem_of: {_rem!r} is not a recipe with a `rem`"
                    )
                self.SYSTEMS[_name] = {
                    **{k: v for k, v in self.SYSTEMS[_rem].items() if k != "by_language"},
                    "description": _s.get("description", ""),
                    "target_dam": _s.get("target_dam") or self.SYSTEMS[_rem]["target_dam"],
                    **({"by_language": _s["by_language"]} if _s.get("by_language") else {}),
                }
        for _name, _s in self.SYSTEMS.items():
            for _lang, _other in _s.get("by_language", {}).items():
                if _other not in self.SYSTEMS or self.SYSTEMS[_other].get("by_language"):
                    raise ValueError(
                        f"config key {_name}.by_language.{_lang}: {_other!r} is not a system (or routes on itself)"
                    )
        # DDR Figure 4: the figure's REM on snapshots of each target DAM, <system>.dam-step<N>.
        self.FIGURE4_SYSTEMS = {}  # (dataset, step) -> system
        for _d in self.FIGURE4_DATASETS:
            for _n in self.figure4_steps(_d):
                _name = f"{self.FIGURE4['system']}.dam-step{_n}"
                self.SYSTEMS.setdefault(
                    _name,
                    {
                        **self.SYSTEMS[self.FIGURE4["system"]],
                        "dam_snapshot": _n,
                        "description": f"DDR Figure 4: target DAM after {_n} steps",
                    },
                )
                self.FIGURE4_SYSTEMS[(_d, _n)] = _name

        # Negative files mined by the mine_negatives job, one per ANCE run and one per MoDIR recipe.
        self.MINED = {
            r: (n, k)
            for r, (n, k) in self.TRAIN_RUNS.items()
            if self.RECIPES[n]["negatives"] == "ance" and r not in self.PER_TARGET
        }
        self.MINED |= {
            n: (n, 1) for n in self.MODIR_RECIPES if self.RECIPES[n]["negatives"] == "ance"
        }
        self.ANCE_RUNS = list(self.MINED)

        self.LENGTH_KEYS = ("query_max_length", "doc_max_length")

        # The mining systems that encode the corpus at an episode's document length.
        for _run in self.MINED:
            _sys = self.mining_system(_run)
            if _sys != self.previous_system(_run):
                _prev = self.previous_system(_run)
                self.SYSTEMS.setdefault(
                    _sys,
                    {
                        **{k: v for k, v in self.SYSTEMS[_prev].items() if k != "by_language"},
                        "doc_max_length": self.mining_lengths(_run)["doc_max_length"],
                        "description": f"{_prev} encoding documents at {self.mining_lengths(_run)['doc_max_length']} "
                        "tokens (ANCE mining)",
                    },
                )
        self.BM25_SYSTEMS = [n for n, s in self.SYSTEMS.items() if s["kind"] == "bm25"]
        self.DENSE_SYSTEMS = [n for n, s in self.SYSTEMS.items() if s["kind"] == "dense"]

        self.SYSTEM_KEYS = {
            "kind",
            "backbone",
            "model",
            "description",
            "rem_of",
            "target_dam",
            "train_dataset",
            "per_target",
            "dam_snapshot",
            "by_language",
            "modir",
            "modir_step",
            "mixture",
            "mixture_step",
        }
