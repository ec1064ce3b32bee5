"""Paper tables: the cells, statistics and metric files each table reads."""

from __future__ import annotations

import os
from typing import Any

from zsdr.tables.inputs import cell_file
from zsdr.tables.render import required_cells, required_statistics, spec_files
from zsdr.tables.spec import all_specs


class TablesPlan:
    """Paper tables: the cells, statistics and metric files each table reads (a part of :class:`zsdr.plan.core.Plan`)."""

    def table_inputs(self, wc: Any) -> list[str]:
        """The spec, systems.yaml and published CSVs of a paper table (edits re-render it)."""
        files = spec_files(self.TABLE_SPECS[(wc.paper, int(wc.n))])
        return [self.source_file(os.path.relpath(f, self.root)) for f in files]

    def table_cell_files(self, wc: Any) -> list[str]:
        """The cell files of a paper table: metrics/<d>/<s>.json, or <s>.units.json (`source: units`)."""
        key = (wc.paper, int(wc.n))
        return [
            cell_file(self.METRICS, d, s, self.TABLE_SPECS[key].source)
            for d, s in self.TABLE_CELLS[key]
        ]

    def model_cards(self) -> dict[str, dict[str, Any]]:
        """Every trained model folder a dense table-1 system retrieves with -> its card's entry: the run,
        its recipe, paper and method sections, per system the metrics file of each dataset it scores
        that folder on (a DDR system: its trained folder, whose REM every dataset uses), and ``own``: per
        dataset, the metrics of the folder itself as it loads with no arguments, which is a system's
        where the system loads it so, else those of the folder's own system `<run>.own` (added here,
        evaluated only there); ``why``: per system that encodes otherwise, how."""
        from zsdr.models.cards import recipe_paper

        prefix = f"{self.MODELS}/trained/"
        out: dict[str, dict[str, Any]] = {}
        for system in self.TABLE1_SYSTEMS:
            if self.SYSTEMS[system]["kind"] != "dense":
                continue
            for dataset in self.EVAL_DATASETS:
                spec = self.SYSTEMS[self.routed(system, dataset)]
                folder = spec["model"] if "rem_of" in spec else self.dense_model(system, dataset)
                run = folder[len(prefix) :].split("/snapshots/")[0] if folder.startswith(prefix) else None
                if run not in self.TRAIN_RUNS:
                    continue
                recipe = self.TRAIN_RUNS[run][0]
                r = self.RECIPES[recipe]
                entry = out.setdefault(
                    folder,
                    {
                        "run": run,
                        "recipe": recipe,
                        "paper": recipe_paper(r, set(self.PRETRAINED)),
                        "description": r.get("description", ""),
                        "sections": {
                            k: r[k] for k in ("rem", "berm", "modir", "dro", "mixture") if r.get(k)
                        },
                        "metrics": {},
                        "own": {},
                        "why": {},
                    },
                )
                metrics = f"{self.METRICS}/{dataset}/{system}.json"
                entry["metrics"].setdefault(system, {})[dataset] = metrics
                why = self.encodes_otherwise(system, dataset, folder, self.saved_settings(r))
                if why is None:
                    entry["own"].setdefault(dataset, metrics)
                elif why not in entry["why"].get(system, "").split("; "):
                    entry["why"][system] = "; ".join(filter(None, [entry["why"].get(system), why]))
        for folder, entry in out.items():
            missing = sorted({d for m in entry["metrics"].values() for d in m} - set(entry["own"]))
            if missing:
                own = self.own_system(folder, entry["run"])
                entry["own"].update({d: f"{self.METRICS}/{d}/{own}.json" for d in missing})
        return out

    def saved_settings(self, recipe: dict[str, Any]) -> dict[str, Any]:
        """The settings a recipe's trained folder loads with that a system may also give: the recipe's
        `system` settings (zsdr.json's `retrieval`) and an RMSC model's soft tokens in their default
        inference context (the one training leaves in zsdr.json)."""
        from zsdr.models.soft_tokens import SoftTokens

        k = (recipe.get("mixture") or {}).get("soft_tokens")
        return {**recipe["system"], **({"soft_tokens": SoftTokens(k=int(k)).to_dict()} if k else {})}

    def encodes_otherwise(self, system: str, dataset: str, folder: str, saved: dict[str, Any]) -> str | None:
        """How ``system`` encodes ``dataset`` otherwise than ``folder`` loaded with no arguments (whose
        zsdr.json holds the recipe's `system` settings, ``saved``), or None when it loads it so."""
        model = self.dense_model(system, dataset)
        if model != folder:
            spec = self.SYSTEMS[self.routed(system, dataset)]
            return (
                "the REM on each dataset's own DAM" if "rem_of" in spec else f"the model {model} on {dataset}"
            )
        extra = {
            k: v for k, v in self.encoder_options(system, dataset).items() if saved.get(k) != v
        }
        if not extra:
            return None
        if set(extra) == {"soft_tokens"}:
            return f"{dataset} in the soft-token context {extra['soft_tokens']['inference']}"
        return f"{dataset} with {', '.join(f'{k}={v}' for k, v in sorted(extra.items()))}"

    def own_system(self, folder: str, run: str) -> str:
        """The dense system that evaluates ``folder`` as it loads with no arguments (a model card's own
        scores), added to the systems on first use: `<run>.own`, `<run>.<snapshot>.own`."""
        snapshot = folder.split("/snapshots/")[1] if "/snapshots/" in folder else None
        name = f"{run}.{snapshot}.own" if snapshot else f"{run}.own"
        if name not in self.SYSTEMS:
            self.SYSTEMS[name] = {
                "kind": "dense",
                "model": folder,
                "description": f"the folder {folder} as it loads with no arguments (its model card's own scores)",
            }
            self.DENSE_SYSTEMS.append(name)
            self.EXTRA_EVAL_SYSTEMS.append(name)  # one evaluate_system job per dataset it is needed on
        return name

    def model_card_inputs(self) -> list[str]:
        """The files the cards read: each run's zsdr.json and training.json (a snapshot exists once its
        run is trained), and the metrics."""
        files = []
        for entry in self.MODEL_CARDS.values():
            run = f"{self.MODELS}/trained/{entry['run']}"
            files += [f"{run}/zsdr.json", f"{run}/training.json"]
            files += [f for m in entry["metrics"].values() for f in m.values()]
            files += list(entry["own"].values())
        return list(dict.fromkeys(files))

    def _setup_tables(self) -> None:
        """Resolve table 1's systems and baselines and the cells and statistics of every paper table."""
        self.TABLE1_SYSTEMS = [
            self.check_system(s, "table1.systems") for s in self.config["table1"]["systems"]
        ]
        self.TABLE1_BASELINES = [
            self.check_system(s, "table1.baselines") for s in self.config["table1"]["baselines"]
        ]
        # The paper tables. At mini scale their dataset rows are the mini targets; elsewhere the cells
        # of datasets this config does not fetch show why they are empty.
        self.TABLE_SPECS = all_specs()
        for _name in self.config["dense"]["dataset_shards"]:
            if _name not in self.CONFIGURED_DATASETS:
                raise ValueError(
                    f"config key dense.dataset_shards.{_name}: {_name!r} is not a configured dataset "
                    f"(datasets.source, datasets.targets or datasets.extra)"
                )
        self.TABLE_DATASETS_OVERRIDE = self.TARGETS if self.MINI_DATASETS else None
        self.TABLE_AVAILABLE_DATASETS = None if self.MINI_DATASETS else self.CONFIGURED_DATASETS
        self.TABLE_CELLS = {
            key: required_cells(
                spec,
                set(self.SYSTEMS),
                self.TABLE_DATASETS_OVERRIDE,
                available_datasets=self.TABLE_AVAILABLE_DATASETS,
            )
            for key, spec in self.TABLE_SPECS.items()
        }
        self.TABLE_STATS = {
            key: required_statistics(
                spec, self.TABLE_DATASETS_OVERRIDE, available_datasets=self.TABLE_AVAILABLE_DATASETS
            )
            for key, spec in self.TABLE_SPECS.items()
        }
