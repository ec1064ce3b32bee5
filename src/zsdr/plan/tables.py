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
