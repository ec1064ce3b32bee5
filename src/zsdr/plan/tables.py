"""Stage 7, tables: table 1's systems and baselines, the cells and statistics every paper table reads, and the
model cards of table 1's trained systems.

At mini scale a paper table's dataset rows are the mini targets (a table with Chinese rows, DDR's, also gets the
Chinese mini targets, `mini_zh`, as its Chinese rows, which its systems' `by_language` route to their Chinese
twins); elsewhere the cells of datasets this config
does not fetch show why they are empty (zsdr.tables.cells).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from zsdr.plan.code import Code
from zsdr.plan.params import Labels
from zsdr.plan.systems import Systems
from zsdr.tables.cells import required_cells, required_statistics
from zsdr.tables.inputs import cell_file
from zsdr.tables.spec import all_specs, spec_files

TableKey = tuple[str, int]
"""A paper table: (paper, number)."""


@dataclass(frozen=True)
class Tables:
    systems: Systems
    code: Code
    table1_systems: list[str]
    table1_baselines: list[str]
    specs: dict[TableKey, Any]                          # zsdr.tables.spec_model.TableSpec of every paper table
    datasets_override: list[str] | None           # the mini targets stand for a table's dataset rows
    overrides: dict[TableKey, Any]                 # per table: those, with the Chinese mini targets where it has Chinese rows
    available_datasets: list[str] | None          # the datasets this config fetches (None at mini scale)
    cells: dict[TableKey, list[tuple[str, str]]]        # (dataset, system) cells of each table
    stats: dict[TableKey, Any]                          # the statistics each table reads
    model_cards: dict[str, dict[str, Any]]              # trained folder -> its card's entry

    @property
    def metrics(self) -> str:
        return self.systems.datasets.paths.metrics

    def override(self, key: TableKey) -> list[str] | dict[str, str] | None:
        """What stands for table ``key``'s dataset rows at mini scale: the English mini targets, and for a table
        with Chinese rows (DDR's) ``{dataset: language}`` of the English then the Chinese mini targets (`mini_zh`);
        None elsewhere."""
        return self.overrides.get(key, self.datasets_override)

    def table1_labels(self) -> Labels:
        """Table 1's systems with their descriptions (the legend's text, not compared for reruns)."""
        return Labels({s: self.systems.by_name[s].get("description", "") for s in self.table1_systems})

    def table_inputs(self, wc: Any) -> list[str]:
        """The spec, systems.yaml and published CSVs of a paper table (edits re-render it)."""
        files = spec_files(self.specs[(wc.paper, int(wc.n))])
        return [self.code.source_file(os.path.relpath(f, self.code.root)) for f in files]

    def table_cell_files(self, wc: Any) -> list[str]:
        """The cell files of a paper table: metrics/<d>/<s>.json, or <s>.units.json (`source: units`)."""
        key = (wc.paper, int(wc.n))
        return [cell_file(self.metrics, d, s, self.specs[key].source) for d, s in self.cells[key]]

    def model_card_inputs(self) -> list[str]:
        """The files the cards read: each run's zsdr.json and training.json (a snapshot exists once its run
        is trained), and the metrics."""
        files = []
        models = self.systems.datasets.paths.models
        for entry in self.model_cards.values():
            run = f"{models}/trained/{entry['run']}"
            files += [f"{run}/zsdr.json", f"{run}/training.json"]
            files += [f for m in entry["metrics"].values() for f in m.values()]
            files += list(entry["own"].values())
        return list(dict.fromkeys(files))

    def rem_models(self, key: TableKey) -> dict[str, str]:
        """DDR Table 5: the trained folder of every produced REM system of a table (its rem/rem.json holds the
        parameter counts; the folder's config.json is what the train rule declares)."""
        spec = self.specs[key]
        if not any(getattr(e, "rem", None) for e in spec.datasets):
            return {}
        by_name, out = self.systems.by_name, {}
        for entry in spec.systems:
            produced = [s for s in getattr(entry, "systems", ()) if s in by_name]
            if produced and "rem_of" in by_name[produced[0]]:
                out[entry.key] = by_name[produced[0]]["model"]
        return out


def model_cards(systems: Systems, table1: list[str]) -> dict[str, dict[str, Any]]:
    """Every trained model folder a dense table-1 system retrieves with -> its card's entry: the run, its
    recipe, paper and method sections, per system the metrics file of each dataset it scores that folder on
    (a DDR system: its trained folder, whose REM every dataset uses), ``own``: per dataset, the metrics of the
    folder itself as it loads with no arguments (a system's where the system loads it so, else those of the
    folder's own system, :attr:`Systems.own`), and ``why``: per system that encodes otherwise, how."""
    from zsdr.models.cards import recipe_paper

    recipes, paths = systems.recipes, systems.datasets.paths
    out: dict[str, dict[str, Any]] = {}
    for system, dataset, folder, run in systems.card_folders(table1):
        recipe = recipes.runs[run][0]
        r = recipes.by_name[recipe]
        entry = out.setdefault(folder, {
            "run": run,
            "recipe": recipe,
            "paper": recipe_paper(r, set(recipes.pretrained)),
            "description": r.get("description", ""),
            "sections": {k: r[k] for k in ("rem", "berm", "modir", "dro", "mixture") if r.get(k)},
            "metrics": {},
            "own": {},
            "why": {},
        })
        metrics = f"{paths.metrics}/{dataset}/{system}.json"
        entry["metrics"].setdefault(system, {})[dataset] = metrics
        why = systems.encodes_otherwise(system, dataset, folder, systems.saved_settings(recipe))
        if why is None:
            entry["own"].setdefault(dataset, metrics)
        elif why not in entry["why"].get(system, "").split("; "):
            entry["why"][system] = "; ".join(filter(None, [entry["why"].get(system), why]))
    for folder, entry in out.items():
        missing = sorted({d for m in entry["metrics"].values() for d in m} - set(entry["own"]))
        entry["own"].update({d: f"{paths.metrics}/{d}/{systems.own[folder]}.json" for d in missing})
    return out


def spec_languages(spec: Any) -> set[str]:
    """The languages of a paper table's dataset rows (the registry's; a dataset it does not know counts as English)."""
    from zsdr.data import registry

    return {registry.REGISTRY[d].language if d in registry.REGISTRY else "en"
            for e in spec.datasets if e.kind != "info" for d in e.members}


def build_tables(config: dict[str, Any], systems: Systems, code: Code) -> Tables:
    datasets = systems.datasets
    table1 = [systems.check_system(s, "table1.systems") for s in config["table1"]["systems"]]
    baselines = [systems.check_system(s, "table1.baselines") for s in config["table1"]["baselines"]]
    specs = all_specs()
    override = datasets.targets if datasets.mini else None
    available = None if datasets.mini else datasets.configured
    overrides = {}
    if override is not None and datasets.mini_zh_targets:
        for key, spec in specs.items():
            if "zh" in spec_languages(spec):
                overrides[key] = {**{d: datasets.language(d) for d in override},
                                  **{d: "zh" for d in datasets.mini_zh_targets}}
    names = set(systems.by_name)
    return Tables(
        systems=systems, code=code, table1_systems=table1, table1_baselines=baselines, specs=specs,
        datasets_override=override, available_datasets=available, overrides=overrides,
        cells={key: required_cells(spec, names, overrides.get(key, override), available_datasets=available)
               for key, spec in specs.items()},
        stats={key: required_statistics(spec, overrides.get(key, override), available_datasets=available)
               for key, spec in specs.items()},
        model_cards=model_cards(systems, table1),
    )
