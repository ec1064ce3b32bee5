"""The cells of a paper table, computed from its spec: which metric files and statistics a table reads
(:func:`required_cells`, :func:`required_statistics`) and :class:`TableCells`, which lays out the
table's lines (datasets, groups, averages, info rows; expanded by ``metrics``) and computes every
cell: a system's metric on a dataset, the mean over a group or an average row, a relative or
absolute difference of two columns, a dataset statistic, or the reason a cell stays empty.

:mod:`zsdr.tables.marks` adds significance markers and emphasis to the cells,
:mod:`zsdr.tables.render` writes them as CSV and Markdown beside the paper's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from zsdr.evaluation.metrics import read_metrics
from zsdr.io import DataError
from zsdr.tables import inputs
from zsdr.tables.catalogue import load_systems, unavailable_reason
from zsdr.tables.spec_model import DatasetEntry, SystemEntry, TableSpec

METRIC_FORMATS = {"unit_variance": "d4", "unit_accuracy": "pct1", "unit_similarity": "d3"}   # default: d3
STAT_FORMATS = {"docs": "int", "queries": "int", "qrels": "int", "doc_avg_words": "d2", "query_avg_words": "d2",
                "rel_per_query": "d1", "query_jaccard": "d4", "doc_jaccard": "d4"}


@dataclass
class Cell:
    value: float | None = None
    reason: str | None = None
    per_query: dict | None = None     # dataset / group: per-query scores (groups: "<dataset>/<qid>")
    parts: dict | None = None         # average: member key -> value
    system: str | None = None
    text: str | None = None           # info rows
    marker: str = ""
    p_values: list = field(default_factory=list)
    emphasis: str = ""


@dataclass(frozen=True)
class Line:
    """One line of the dataset axis with its metric resolved (rows expand by ``metrics``)."""
    entry: DatasetEntry
    metric: str | None
    metric_label: str | None

    @property
    def key(self) -> str:
        return self.entry.key if self.metric_label is None else f"{self.entry.key}@{self.metric}"


def label_text(label) -> str:
    return " / ".join(x for x in label if x) if isinstance(label, tuple) else str(label)


def entry_name(entry) -> str:
    """How footers name an entry: its system's label for multi-column row labels, else label (group)."""
    if isinstance(entry.label, tuple):
        systems = getattr(entry, "systems", ())
        return load_systems()[systems[0]].label if systems else label_text(entry.label)
    group = getattr(entry, "group", None)
    return f"{entry.label} ({group})" if group else str(entry.label)


class TableCells:
    """The lines of one table and its cells, each computed once (:meth:`cell`)."""

    def __init__(self, spec: TableSpec, metric_files=None, *, produced_systems=None, datasets_override=None,
                 available_datasets=None, stats=None, shift=None, splits=None, scale="paper", significance=None,
                 rem_stats=None):
        self.spec = spec
        self.rem_stats = dict(rem_stats or {})
        self.metric_files = {tuple(k): Path(v) for k, v in (metric_files or {}).items()}
        if produced_systems is None:
            produced_systems = {s for _, s in self.metric_files}
        systems = load_systems()
        self.produced = {s for s in produced_systems if s in systems and systems[s].provenance != "R"}
        # a list of datasets, or {dataset: language} where a table's rows are in several languages (DDR's Chinese
        # rows at mini scale)
        self.override = None if datasets_override is None else list(datasets_override)
        self.override_languages = dict(datasets_override) if isinstance(datasets_override, dict) else {}
        self.available = None if available_datasets is None else set(available_datasets)
        self.stats = dict(stats or {})
        self.shift = dict(shift or {})
        self.splits = dict(splits or {})
        self.scale = scale
        sig = spec.significance
        self.sig = None if sig is None else replace(sig, **{k: v for k, v in (significance or {}).items()
                                                            if k in ("test", "holm", "trials")})
        self.entries = {e.key: e for e in spec.systems}
        self._cells: dict = {}
        self._read_cache: dict = {}
        self._stat_cache: dict = {}
        self.untested: list[str] = []
        self.lines = self._build_lines()

    # -- axis -----------------------------------------------------------------------------------
    def _dataset_entries(self) -> list[DatasetEntry]:
        if self.override is None:
            return list(self.spec.datasets)
        # Info rows (facts of the columns, e.g. a REM's parameter share) stay; the datasets are this run's.
        entries = [e for e in self.spec.datasets if e.kind == "info"]
        entries += [DatasetEntry(key=d, kind="dataset", label=self._override_label(d), members=(d,))
                    for d in self.override]
        if any(e.kind == "average" for e in self.spec.datasets):
            entries.append(DatasetEntry(key="avg", kind="average", label="Avg", members=tuple(self.override)))
        return entries

    def _override_label(self, dataset: str):
        """A replacement dataset's row label, laid out like the paper's (name under "Dataset")."""
        header = list(self.spec.row_header)
        if len(header) < 2 or not self.spec.rows_are_datasets:
            return dataset
        cells = [""] * len(header)
        cells[header.index("Dataset") if "Dataset" in header else -1] = dataset
        if "Language" in header:
            from zsdr.data import registry

            entry = registry.REGISTRY.get(dataset)
            cells[header.index("Language")] = self.override_languages.get(dataset) or (entry.language if entry else "en")
        return tuple(cells)

    def _build_lines(self) -> list[Line]:
        lines = []
        metrics = list(self.spec.metrics) or [(None, None)]
        for e in self._dataset_entries():
            if e.kind == "info":
                lines.append(Line(e, None, None))
                continue
            for metric, mlabel in metrics:
                lines.append(Line(e, metric, mlabel))
        return lines

    def average_members(self, entry: DatasetEntry) -> list[DatasetEntry]:
        entries = self._dataset_entries()
        by_key = {e.key: e for e in entries}
        if entry.members:
            out = []
            for m in entry.members:
                if m in by_key and by_key[m].kind != "info":
                    out.append(by_key[m])
                elif m in self.spec.groups:
                    out.append(DatasetEntry(key=m, kind="group", label=m, members=self.spec.groups[m]))
                else:
                    out.append(DatasetEntry(key=m, kind="dataset", label=m, members=(m,)))
            return out
        before = entries[:entries.index(entry)]
        return [e for e in before if e.kind in ("dataset", "group")]

    def leaves(self, entry: DatasetEntry) -> list[str]:
        if entry.kind == "average":
            return [d for m in self.average_members(entry) for d in self.leaves(m)]
        return list(entry.members)

    # -- systems --------------------------------------------------------------------------------
    def chosen(self, entry: SystemEntry) -> str | None:
        return next((s for s in entry.systems if s in self.produced), None)

    def operand(self, entry: SystemEntry, name: str) -> SystemEntry:
        if name in self.entries:
            return self.entries[name]
        return SystemEntry(key=f"~{name}", kind="system", label=name, systems=(name,), metric=entry.metric)

    def systems_needed(self, entry: SystemEntry) -> list[str]:
        if entry.kind == "system":
            s = self.chosen(entry)
            return [s] if s else []
        if entry.kind in ("relative", "difference"):
            return [s for op in entry.operands for s in self.systems_needed(self.operand(entry, op))]
        return []

    def metric_of(self, entry: SystemEntry, line: Line) -> str | None:
        return entry.metric or line.metric or self.spec.metric

    def fmt_of(self, entry: SystemEntry, metric: str | None) -> str:
        if entry.format:
            return entry.format
        if entry.kind == "stat":
            return STAT_FORMATS[entry.stat]
        if entry.kind == "relative":
            return "+pct1"
        if entry.kind == "difference":
            return "+d3"
        if metric in METRIC_FORMATS:
            return METRIC_FORMATS[metric]
        return "pct1" if metric and metric.startswith("hole@") else "d3"

    def in_run(self, dataset: str) -> bool:
        return self.available is None or dataset in self.available

    # -- cells ----------------------------------------------------------------------------------
    def cell(self, line: Line, entry: SystemEntry) -> Cell:
        key = (line.key, entry.key, entry.metric, line.metric)
        if key not in self._cells:
            self._cells[key] = self._compute(line, entry)
        return self._cells[key]

    def _compute(self, line: Line, entry: SystemEntry) -> Cell:
        e = line.entry
        if e.kind == "info":
            if e.rem and entry.key in self.rem_stats:
                return Cell(text=rem_text(self.rem_stats[entry.key], e.rem))
            return Cell(text=e.values.get(entry.key, ""))
        if entry.kind in ("relative", "difference"):
            return self._derived(line, entry)
        if e.kind == "average":
            members = self.average_members(e)
            return self._mean([self.cell(Line(m, line.metric, line.metric_label), entry) for m in members],
                              [m.key for m in members])
        if entry.kind == "stat":
            return self._stat(e, entry)
        system = self.chosen(entry)
        if system is None:
            return Cell(reason=unavailable_reason(entry.systems[0]))
        metric = self.metric_of(entry, line)
        cells = [self._dataset_metric(d, system, metric) for d in e.members]
        if len(cells) == 1:
            return cells[0]
        out = self._mean(cells, list(e.members))
        if out.value is not None:
            out.per_query = {f"{d}/{q}": v for d, c in zip(e.members, cells) for q, v in c.per_query.items()}
            out.parts = None
        return out

    def _dataset_metric(self, dataset: str, system: str, metric: str) -> Cell:
        if not self.in_run(dataset):
            return Cell(reason=f"dataset {dataset} not in this run", system=system)
        path = self.metric_files.get((dataset, system))
        if path is None:
            raise DataError(inputs.cell_file("metrics", dataset, system, self.spec.source), None,
                            "no metrics file given for this cell",
                            "list every file of required_cells() among the table rule's inputs")
        if path not in self._read_cache:
            self._read_cache[path] = read_metrics(path)
            inputs.check_metrics_cell(self._read_cache[path], path, dataset, system)
        value, per_query = inputs.metric_scores(self._read_cache[path], path, metric)
        if value is None:
            return Cell(reason=f"{metric} applies to no query of {dataset}", system=system)
        return Cell(value=value, per_query=per_query, system=system)

    def _mean(self, cells: list[Cell], keys: list[str]) -> Cell:
        missing = [k for k, c in zip(keys, cells) if c.value is None]
        system = next((c.system for c in cells if c.system), None)
        if missing:
            reasons = {c.reason for c in cells if c.value is None}
            reason = reasons.pop() if len(reasons) == 1 and len(missing) == len(cells) else \
                f"incomplete: no value for {', '.join(missing)}"
            return Cell(reason=reason, system=system)
        parts = {k: c.value for k, c in zip(keys, cells)}
        per_query = None
        if all(c.per_query is not None for c in cells):
            per_query = {f"{k}/{q}": v for k, c in zip(keys, cells) for q, v in c.per_query.items()}
        return Cell(value=sum(parts.values()) / len(parts), parts=parts, per_query=per_query, system=system)

    def _derived(self, line: Line, entry: SystemEntry) -> Cell:
        a, b = (self.cell(line, self.operand(entry, op)) for op in entry.operands)
        for c in (a, b):
            if c.value is None:
                return Cell(reason=c.reason)
        if entry.kind == "difference":
            return Cell(value=a.value - b.value)
        if b.value == 0:
            return Cell(reason="relative to zero")
        return Cell(value=a.value / b.value - 1)

    def _stat(self, e: DatasetEntry, entry: SystemEntry) -> Cell:
        values, weights = [], []
        for d in e.members:
            if not self.in_run(d):
                return Cell(reason=f"dataset {d} not in this run")
            found = self._stat_lookup(d, entry)
            if isinstance(found, str):
                return Cell(reason=found)
            values.append(found[0])
            weights.append(found[1])
        if len(values) == 1:
            return Cell(value=values[0])
        if entry.stat in ("docs", "queries", "qrels"):
            return Cell(value=float(sum(values)))
        if entry.source == "shift" or not sum(weights):
            return Cell(value=sum(values) / len(values))
        return Cell(value=sum(v * w for v, w in zip(values, weights)) / sum(weights))

    def _stat_lookup(self, dataset: str, entry: SystemEntry):
        """(value, weight) of a statistic for one dataset, or the reason it is missing."""
        source = self.stats if entry.source == "stats" else self.shift
        if dataset not in source:
            folder = "stats" if entry.source == "stats" else "shift"
            raise DataError(f"{folder}/{dataset}.json", None, f"no {entry.source} file given for this dataset",
                            "list every file of required_statistics() among the table rule's inputs")
        cache_key = (entry.source, dataset)
        if cache_key not in self._stat_cache:
            reader = inputs.read_statistics if entry.source == "stats" else inputs.read_shift
            self._stat_cache[cache_key] = reader(source[dataset])
        data = self._stat_cache[cache_key]
        if entry.source == "shift":
            return float(data[entry.stat]), 1.0
        split = self.splits.get(dataset, "test") if entry.split == "eval" else entry.split
        stats = data.get(split)
        if stats is None and entry.split == "eval":
            stats = data.get("eval")
        if stats is None:
            return f"no {split} split"
        weight = stats["docs"] if entry.stat == "doc_avg_words" else stats["queries"]
        return float(stats[entry.stat]), float(weight)


def required_cells(spec: TableSpec, produced_systems, datasets_override: list[str] | None = None, *,
                   available_datasets=None) -> list[tuple[str, str]]:
    """The (dataset, system) metric cells the pipeline must compute for ``spec``.

    ``produced_systems``: the system ids this run can produce (the config's ``systems``). A spec
    column uses the first of its system and ``alternatives`` that is produced; reported-only
    systems are never required. Each cell is a file :func:`zsdr.tables.inputs.cell_file` names:
    ``metrics/<dataset>/<system>.json``, or ``<system>.units.json`` when ``spec.source`` is ``units``.
    ``datasets_override`` replaces the paper's datasets (mini scale; a ``{dataset: language}`` mapping labels each
    row with its language); ``available_datasets``
    (optional) drops cells of datasets this run does not have.
    """
    if spec.kind in ("static", "analysis"):
        return []
    table = TableCells(spec, produced_systems=set(produced_systems), datasets_override=datasets_override,
                       available_datasets=available_datasets)
    cells = set()
    for line in table.lines:
        if line.entry.kind == "info":
            continue
        datasets = [d for d in table.leaves(line.entry) if table.in_run(d)]
        for entry in spec.systems:
            for system in table.systems_needed(entry):
                cells.update((d, system) for d in datasets)
    return sorted(cells)


def required_statistics(spec: TableSpec, datasets_override: list[str] | None = None, *,
                        available_datasets=None) -> dict[str, list[str]]:
    """``{"stats": [dataset, ...], "shift": [dataset, ...]}``: the statistics files ``spec`` reads."""
    out: dict[str, set] = {"stats": set(), "shift": set()}
    if spec.kind in ("static", "analysis"):
        return {k: [] for k in out}
    table = TableCells(spec, datasets_override=datasets_override, available_datasets=available_datasets)
    sources = {e.source for e in spec.systems if e.kind == "stat"}
    for line in table.lines:
        if line.entry.kind != "info":
            for source in sources:
                out[source].update(d for d in table.leaves(line.entry) if table.in_run(d))
    return {k: sorted(v) for k, v in out.items()}


def rem_text(stats: dict, name: str) -> str:
    """A REM's parameter share as the paper prints it: ``9.70%`` trainable, ``+3.20%`` at inference."""
    value = stats.get(name)
    if not isinstance(value, (int, float)):
        raise DataError(None, None, f"REM statistics lack {name!r}", "write rem.json again (save the REM)")
    return f"{'+' if name == 'infer_pct' else ''}{value:.2f}%"
