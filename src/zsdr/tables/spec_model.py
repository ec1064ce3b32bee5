"""The data model of a table spec: the frozen dataclasses a ``specs/<paper>_table<N>.yaml`` file
becomes (:class:`TableSpec` and its entries), the vocabulary a spec may use (papers, kinds, metric
and format patterns, statistics, built-in dataset groups), and :class:`KeyContext`, which names the
file and key of an error.

:mod:`zsdr.tables.spec` describes the file format and loads and validates specs into these classes;
:mod:`zsdr.tables.catalogue` reads ``systems.yaml``; :mod:`zsdr.tables.published_csv` the paper's numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from zsdr.io import DataError

PAPERS = ("berm", "ddr", "modir", "cocodr", "rmsc")
KINDS = ("metric", "data", "static", "analysis")
ORIENTATIONS = ("datasets-as-rows", "systems-as-rows")
PROVENANCES = ("T", "L", "R")
STAT_SOURCES = {
    "stats": ("docs", "doc_avg_words", "queries", "query_avg_words", "qrels", "rel_per_query"),
    "shift": ("query_jaccard", "doc_jaccard"),
}
CQADUPSTACK_FORUMS = ("android", "english", "gaming", "gis", "mathematica", "physics", "programmers", "stats",
                      "tex", "unix", "webmasters", "wordpress")
BUILTIN_GROUPS = {"cqadupstack": tuple(f"cqadupstack-{f}" for f in CQADUPSTACK_FORUMS)}
METRIC_RE = re.compile(r"^(ndcg|recall|mrr|hole|precision|map|accuracy)@\d+$")
# Where the cells of a metric table come from, and the metric names each source has.
CELL_SOURCES = ("metrics", "units")
UNIT_METRICS = ("unit_variance", "unit_accuracy", "unit_similarity")
FORMAT_RE = re.compile(r"^(\+?)(d|pct)([0-4])$|^int$")
SPEC_FILE_RE = re.compile(r"^(?P<paper>[a-z]+)_table(?P<table>\d+)\.yaml$")


def package_dir(name: str) -> Path:
    """A file or folder shipped in the ``zsdr.tables`` package (specs, published CSVs, systems.yaml)."""
    return Path(str(resources.files("zsdr.tables").joinpath(name)))


# Info rows a REM's parameter counts fill (zsdr.models.adapters: rem.json): the trainable share
# and the share added at inference (LoRA merged), both relative to the backbone.
REM_STATS = ("train_pct", "infer_pct")


@dataclass(frozen=True)
class DatasetEntry:
    """An entry of the dataset axis: ``dataset``, ``group``, ``average`` or ``info``."""
    key: str
    kind: str
    label: tuple[str, ...] | str
    members: tuple[str, ...] = ()      # dataset: (id,); group: its datasets; average: keys or ids
    published: tuple[str, ...] | str | None = None
    values: dict = field(default_factory=dict)   # info rows: column key -> text
    rem: str | None = None                        # info rows computed from REM parameter counts


@dataclass(frozen=True)
class SystemEntry:
    """An entry of the system axis: ``system``, ``relative``, ``difference`` or ``stat``."""
    key: str
    kind: str
    label: tuple[str, ...] | str
    group: str | None = None
    systems: tuple[str, ...] = ()      # the system, then alternatives (first one produced is used)
    operands: tuple[str, ...] = ()     # relative / difference: (a, b)
    stat: str | None = None
    source: str | None = None
    split: str = "eval"
    metric: str | None = None
    format: str | None = None
    published: tuple[str, ...] | str | None = None
    published_marker: str | None = None


@dataclass(frozen=True)
class Comparison:
    column: str
    against: tuple[str, ...]
    symbols: tuple[tuple[float, str], ...]
    attach: str = "self"


@dataclass(frozen=True)
class Significance:
    test: str = "ttest"
    holm: bool = False
    unit: str = "datasets"
    trials: int = 10000
    comparisons: tuple[Comparison, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class Emphasis:
    per: str
    bold: str | None
    underline: str | tuple[str, ...] | None   # "second", None, or the keys of a best-among set
    among: tuple[tuple[str, ...], ...]
    lower_is_better: bool = False


@dataclass(frozen=True)
class Published:
    file: str | None
    key: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    marker_file: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class TableSpec:
    path: Path
    paper: str
    table: int
    kind: str
    title: str
    caption: str
    orientation: str = "datasets-as-rows"
    row_header: tuple[str, ...] = ("Dataset",)
    source: str = "metrics"
    metric: str | None = None
    metrics: tuple[tuple[str, str], ...] = ()
    datasets: tuple[DatasetEntry, ...] = ()
    groups: dict = field(default_factory=dict)
    systems: tuple[SystemEntry, ...] = ()
    significance: Significance | None = None
    emphasis: Emphasis | None = None
    published: Published | None = None
    notes: tuple[str, ...] = ()
    why: str | None = None
    stage: str | None = None
    layout: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.paper}_table{self.table}"

    @property
    def rows_are_datasets(self) -> bool:
        return self.orientation == "datasets-as-rows"

    def system_entry(self, key: str) -> SystemEntry:
        for entry in self.systems:
            if entry.key == key:
                return entry
        raise KeyError(key)


class KeyContext:
    """Where we are in a spec file (or systems.yaml), for error messages."""

    def __init__(self, path: Path):
        self.path = path

    def error(self, key: str, message: str, fix: str | None = None) -> DataError:
        return DataError(self.path, None, f"key {key}: {message}", fix)

    def mapping(self, value, key: str) -> dict:
        if not isinstance(value, dict):
            raise self.error(key, f"expected a mapping, got {type(value).__name__}")
        return value

    def seq(self, value, key: str) -> list:
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {type(value).__name__}")
        return value

    def text(self, value, key: str) -> str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise self.error(key, f"expected text, got {type(value).__name__}")
        return str(value)

    def texts(self, value, key: str) -> tuple[str, ...]:
        """A list of texts (``None`` = empty)."""
        return tuple(self.text(v, f"{key}[{i}]") for i, v in enumerate(self.seq([] if value is None else value, key)))

    def only(self, mapping: dict, allowed: set[str], key: str) -> None:
        unknown = sorted(set(mapping) - allowed)
        if unknown:
            raise self.error(key, f"unknown key(s) {', '.join(unknown)}", f"allowed: {', '.join(sorted(allowed))}")
