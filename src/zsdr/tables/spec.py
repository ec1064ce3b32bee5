"""Declarative specs of the papers' tables: ``specs/<paper>_table<N>.yaml``, loaded and validated.

This module reads a spec file into the classes of :mod:`zsdr.tables.spec_model`, checking every key
(:func:`parse_spec`), and finds the shipped specs (:func:`load_spec`, :func:`list_specs`,
:func:`all_specs`); the systems a spec names are checked against :mod:`zsdr.tables.catalogue`, its
published CSV against :mod:`zsdr.tables.published_csv`.

A spec describes one table of one paper: what it reproduces, its rows and columns, how cells are
computed, tested and emphasised, and where the paper's own numbers are (``published/*.csv``).
:mod:`zsdr.tables.render` turns a spec plus the pipeline's metric/statistics files into
``results/<paper>/table<N>.{csv,md}``.

Spec format (YAML; every key is checked, an unknown key is an error)::

    paper: ddr                  # berm | ddr | modir | cocodr | rmsc (must match the file name)
    table: 2                    # the paper's table number (must match the file name)
    kind: metric                # metric | data | static | analysis (see below)
    title: "..."
    caption: "..."              # what the table reproduces, in the paper's words where possible
    orientation: datasets-as-rows   # or systems-as-rows (rows are systems, columns datasets)
    row_header: [Language, Dataset] # names of the label columns of the row axis
    source: metrics             # metric tables: where cells come from (metrics | units, see below)
    metric: ndcg@10             # default metric of every cell
    metrics:                    # optional: one line per metric for each dataset entry (a row, or in
      - {metric: ndcg@10, label: NDCG@10}  # systems-as-rows a column "<dataset> <label>")
    datasets:                   # the dataset axis, in the paper's order
      - {id: trec-covid, label: TREC-COVID}              # a registry dataset
      - {id: cqadupstack, label: CQADupStack}            # a group: mean of its members (groups below)
      - {average: Avg, over: [trec-covid, cqadupstack]}  # mean of entries/ids (default: all above)
      - {info: Parameters, values: {dpr: 110M}}          # a text row (no number is computed)
    groups: {name: [dataset, ...]}   # optional; `cqadupstack` (its 12 forums) is built in
    systems:                    # the other axis: what is measured on each dataset
      - {key: dr, system: ddr-dr-contrast, alternatives: [..], label: DR, group: Contrastive,
         metric: recall@1000, format: d3, published: CL_DR, published_marker: CL_sig}
      - {key: imp, relative: [ddr, dr]}      # ddr / dr - 1 (operands: column keys or system ids)
      - {key: gap, difference: [ance, bm25]} # ance - bm25
      - {key: jac, stat: doc_jaccard, source: shift}            # from shift/<dataset>.json
      - {key: docs, stat: docs, source: stats, split: eval}     # from stats/<dataset>.json
    significance:
      test: ttest               # ttest | fisher (paired, two-tailed)
      holm: false               # Holm correction over every p-value of the table
      unit: datasets            # average rows: pair per-dataset values (datasets) or pool queries
      comparisons:
        - {column: ddr, against: [dr], symbols: [[0.01, "**"], [0.05, "*"]], attach: imp}
          # marker shown where `column` is better than `against` at p < threshold; attach:
          # self (default: the `column` cell), against (the baseline's cell) or a column key
    emphasis: {per: row, bold: best, underline: second, among: [bm25, dr, ddr]}
          # underline: second | none | {best_among: [keys]}; among: keys or a list of key lists
    published: {file: ddr_table2.csv, key: [dataset, metric], ignore: [language],
                marker_file: null, note: null}
          # row entries name their CSV row with `published:` (values of `key`; the metric label is
          # appended when `metrics` expands rows); column entries name their CSV column.
          # Default: the label. `published: null` on an entry: the paper has no such row/column.
    notes: [...]                # shown under the table (transcription caveats, choices made)

Kinds: ``metric`` cells come from ``metrics/<dataset>/<system>.json`` (retrieval metrics such as
``ndcg@10``) or, with ``source: units``, from ``metrics/<dataset>/<system>.units.json`` (BERM's unit
analyses, :mod:`zsdr.evaluation.unit_analysis`: ``unit_variance``, ``unit_accuracy``,
``unit_similarity``); ``data`` cells from dataset
statistics (and may mix in metric differences); ``static`` tables (hyperparameters, qualitative
content) and ``analysis`` tables (numbers that a later analysis stage will produce) render the
published content only and say why (``why``; ``stage`` for analysis). Static/analysis specs
without a published file describe their layout in ``layout: {rows, columns}``.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

from zsdr.data.registry import REGISTRY
from zsdr.io import DataError, safe_yaml
from zsdr.tables.catalogue import SYSTEMS_FILE, load_stages, load_systems
from zsdr.tables.published_csv import PUBLISHED_DIR, check_published_shape, published_table
from zsdr.tables.spec_model import (BUILTIN_GROUPS, CELL_SOURCES, FORMAT_RE, KINDS, METRIC_RE, ORIENTATIONS, PAPERS,
                                    REM_STATS, SPEC_FILE_RE, STAT_SOURCES, UNIT_METRICS, Comparison, DatasetEntry,
                                    Emphasis, KeyContext, Published, Significance, SystemEntry, TableSpec, package_dir)

_TOP_KEYS = {"paper", "table", "kind", "title", "caption", "why", "stage", "orientation", "row_header", "source",
             "metric", "metrics", "datasets", "groups", "systems", "significance", "emphasis", "published", "notes",
             "layout"}

SPEC_DIR = package_dir("specs")


# ---------------------------------------------------------------------------------------------
# Helpers


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def _label(ctx: KeyContext, value, key: str) -> tuple[str, ...] | str:
    if isinstance(value, list):
        return tuple(ctx.text(v, f"{key}[{i}]") for i, v in enumerate(value))
    return ctx.text(value, key)


def _check_metric(ctx: KeyContext, name, key: str, source: str) -> str:
    """``name`` when it is a metric that the table's cell ``source`` holds (else an error naming ``key``)."""
    text = str(name)
    if source == "units":
        if text not in UNIT_METRICS:
            raise ctx.error(key, f"{text!r} is not a unit analysis measure ({', '.join(UNIT_METRICS)})")
    elif not METRIC_RE.match(text):
        raise ctx.error(key, f"{text!r} is not a metric name (e.g. ndcg@10, recall@100, hole@10)")
    return text


def _published_ref(ctx: KeyContext, entry: dict, key: str, default):
    """An entry's `published` name: explicit (str / list / null) or the default."""
    if "published" not in entry:
        return default
    value = entry["published"]
    if value is None:
        return None
    return _label(ctx, value, f"{key}.published")

# ---------------------------------------------------------------------------------------------
# Parsing one spec


def _parse_dataset_entry(ctx: KeyContext, raw, i: int, groups: dict, row_axis: bool) -> DatasetEntry:
    key = f"datasets[{i}]"
    raw = ctx.mapping(raw, key)
    kinds = [k for k in ("id", "average", "info") if k in raw]
    if len(kinds) != 1:
        raise ctx.error(key, "an entry has exactly one of id, average, info")
    if "id" in raw:
        ctx.only(raw, {"id", "label", "published", "key"}, key)
        ident = ctx.text(raw["id"], f"{key}.id")
        label = _label(ctx, raw.get("label", ident), f"{key}.label")
        if ident in groups:
            kind, members = "group", tuple(groups[ident])
        elif ident in REGISTRY:
            kind, members = "dataset", (ident,)
        else:
            raise ctx.error(f"{key}.id", f"{ident!r} is neither a registry dataset nor a group",
                            "use a name of `zsdr datasets` or define it under `groups`")
        entry_key = ctx.text(raw.get("key", ident), f"{key}.key")
    elif "average" in raw:
        ctx.only(raw, {"average", "over", "published", "key", "label"}, key)
        name = ctx.text(raw["average"], f"{key}.average")
        label = _label(ctx, raw.get("label", name), f"{key}.label")
        members = ctx.texts(raw.get("over"), f"{key}.over")
        kind, entry_key = "average", ctx.text(raw.get("key", _slug(name)), f"{key}.key")
    else:
        ctx.only(raw, {"info", "values", "published", "key", "label", "rem"}, key)
        name = ctx.text(raw["info"], f"{key}.info")
        label = _label(ctx, raw.get("label", name), f"{key}.label")
        values = {str(k): ctx.text(v, f"{key}.values.{k}")
                  for k, v in ctx.mapping(raw.get("values", {}), f"{key}.values").items()}
        rem = raw.get("rem")
        if rem not in (None, *REM_STATS):
            raise ctx.error(f"{key}.rem", f"unknown REM statistic {rem!r}", f"use one of {', '.join(REM_STATS)}")
        return DatasetEntry(key=ctx.text(raw.get("key", _slug(name)), f"{key}.key"), kind="info", label=label,
                            published=_published_ref(ctx, raw, key, label), values=values, rem=rem)
    if not row_axis and isinstance(label, tuple):
        raise ctx.error(f"{key}.label", "entries of the column axis have a single text label")
    return DatasetEntry(key=entry_key, kind=kind, label=label, members=members,
                        published=_published_ref(ctx, raw, key, label))


def _parse_system_entry(ctx: KeyContext, raw, i: int, systems: dict, row_axis: bool, source: str) -> SystemEntry:
    key = f"systems[{i}]"
    raw = ctx.mapping(raw, key)
    kinds = [k for k in ("system", "relative", "difference", "stat") if k in raw]
    if len(kinds) != 1:
        raise ctx.error(key, "an entry has exactly one of system, relative, difference, stat")
    kind = kinds[0]
    common = {"key", "label", "group", "metric", "format", "published", "published_marker"}
    metric = raw.get("metric")
    if metric is not None:
        metric = _check_metric(ctx, metric, f"{key}.metric", source)
    fmt = raw.get("format")
    if fmt is not None and not FORMAT_RE.match(str(fmt)):
        raise ctx.error(f"{key}.format", f"{fmt!r} is not a format", "d0..d4, +d3, pct1, +pct1 or int")
    fields = {}
    if kind == "system":
        ctx.only(raw, common | {"system", "alternatives"}, key)
        ids = [ctx.text(raw["system"], f"{key}.system"), *ctx.texts(raw.get("alternatives"), f"{key}.alternatives")]
        for sid in ids:
            if sid not in systems:
                raise ctx.error(f"{key}.system", f"{sid!r} is not defined in systems.yaml",
                                "add it to zsdr/tables/systems.yaml (one place for every system id)")
        fields["systems"] = tuple(ids)
        default_key, default_label = ids[0], systems[ids[0]].label
    elif kind in ("relative", "difference"):
        ctx.only(raw, common | {kind}, key)
        ops = ctx.seq(raw[kind], f"{key}.{kind}")
        if len(ops) != 2:
            raise ctx.error(f"{key}.{kind}", "expected [a, b]")
        fields["operands"] = tuple(ctx.text(o, f"{key}.{kind}") for o in ops)
        default_key, default_label = f"{kind}-{'-'.join(fields['operands'])}", kind
    else:
        ctx.only(raw, common | {"stat", "source", "split"}, key)
        source = raw.get("source", "stats")
        if source not in STAT_SOURCES:
            raise ctx.error(f"{key}.source", f"{source!r} is not one of {', '.join(STAT_SOURCES)}")
        stat = ctx.text(raw["stat"], f"{key}.stat")
        if stat not in STAT_SOURCES[source]:
            raise ctx.error(f"{key}.stat", f"{stat!r} is not a {source} statistic ({', '.join(STAT_SOURCES[source])})")
        split = ctx.text(raw.get("split", "eval"), f"{key}.split")
        fields.update(stat=stat, source=source, split=split)
        default_key, default_label = (stat if split == "eval" else f"{stat}-{split}"), stat
    label = _label(ctx, raw.get("label", default_label), f"{key}.label")
    if not row_axis and isinstance(label, tuple):
        raise ctx.error(f"{key}.label", "entries of the column axis have a single text label")
    marker = raw.get("published_marker")
    return SystemEntry(key=ctx.text(raw.get("key", default_key), f"{key}.key"), kind=kind, label=label,
                       group=raw.get("group"), metric=metric, format=fmt,
                       published=_published_ref(ctx, raw, key, label),
                       published_marker=None if marker is None else ctx.text(marker, f"{key}.published_marker"),
                       **fields)


def _parse_significance(ctx: KeyContext, raw, column_keys: set[str], system_keys: set[str]) -> Significance:
    raw = ctx.mapping(raw, "significance")
    ctx.only(raw, {"test", "holm", "unit", "trials", "comparisons", "note"}, "significance")
    test = raw.get("test", "ttest")
    if test not in ("ttest", "fisher"):
        raise ctx.error("significance.test", f"{test!r} is neither ttest nor fisher")
    unit = raw.get("unit", "datasets")
    if unit not in ("datasets", "queries"):
        raise ctx.error("significance.unit", f"{unit!r} is neither datasets nor queries")
    if not isinstance(raw.get("holm", False), bool):
        raise ctx.error("significance.holm", "expected true or false")
    comparisons = []
    for i, c in enumerate(ctx.seq(raw.get("comparisons", []), "significance.comparisons")):
        key = f"significance.comparisons[{i}]"
        c = ctx.mapping(c, key)
        ctx.only(c, {"column", "against", "symbols", "attach"}, key)
        column = ctx.text(c.get("column"), f"{key}.column")
        against = tuple(ctx.text(a, f"{key}.against") for a in ctx.seq(c.get("against"), f"{key}.against"))
        for k in (column, *against):
            if k not in system_keys:
                raise ctx.error(key, f"{k!r} is not the key of a `system:` entry (tests need per-query scores)")
        symbols = []
        for j, pair in enumerate(ctx.seq(c.get("symbols", [[0.01, "**"], [0.05, "*"]]), f"{key}.symbols")):
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], float) and 0 < pair[0] < 1):
                raise ctx.error(f"{key}.symbols[{j}]", "expected [threshold, symbol] with 0 < threshold < 1")
            symbols.append((float(pair[0]), ctx.text(pair[1], f"{key}.symbols[{j}]")))
        if [s[0] for s in symbols] != sorted(s[0] for s in symbols):
            raise ctx.error(f"{key}.symbols", "list thresholds from the strictest (smallest) up")
        attach = ctx.text(c.get("attach", "self"), f"{key}.attach")
        if attach not in ("self", "against") and attach not in column_keys:
            raise ctx.error(f"{key}.attach", f"{attach!r} is not self, against or a system entry key")
        comparisons.append(Comparison(column=column, against=against, symbols=tuple(symbols), attach=attach))
    trials = raw.get("trials", 10000)
    if not isinstance(trials, int) or trials < 100:
        raise ctx.error("significance.trials", "expected an integer >= 100")
    return Significance(test=test, holm=raw.get("holm", False), unit=unit, trials=trials,
                        comparisons=tuple(comparisons), note=raw.get("note"))


def _parse_emphasis(ctx: KeyContext, raw, column_keys: list[str], default_among: list[str],
                    orientation: str) -> Emphasis:
    raw = ctx.mapping(raw, "emphasis")
    ctx.only(raw, {"per", "bold", "underline", "among", "lower_is_better"}, "emphasis")
    per = raw.get("per")
    expected = "row" if orientation == "datasets-as-rows" else "column"
    if per != expected:
        raise ctx.error("emphasis.per", f"{per!r}: emphasis compares systems on one dataset, which is a {expected} "
                                        f"in a {orientation} table", f"write per: {expected}")
    bold = raw.get("bold", "best")
    if bold not in ("best", None):
        raise ctx.error("emphasis.bold", "expected best or null")
    underline = raw.get("underline")
    if isinstance(underline, dict):
        ctx.only(underline, {"best_among"}, "emphasis.underline")
        underline = ctx.texts(underline.get("best_among"), "emphasis.underline.best_among")
        for k in underline:
            if k not in column_keys:
                raise ctx.error("emphasis.underline.best_among", f"{k!r} is not a system entry key")
    elif underline not in ("second", None, "none"):
        raise ctx.error("emphasis.underline", "expected second, none or {best_among: [keys]}")
    if underline == "none":
        underline = None
    among_raw = raw.get("among")
    if among_raw is None:
        among = (tuple(default_among),)
    else:
        among_raw = ctx.seq(among_raw, "emphasis.among")
        groups = among_raw if among_raw and all(isinstance(a, list) for a in among_raw) else [among_raw]
        among = tuple(tuple(ctx.text(k, "emphasis.among") for k in g) for g in groups)
        for g in among:
            for k in g:
                if k not in column_keys:
                    raise ctx.error("emphasis.among", f"{k!r} is not a system entry key")
    return Emphasis(per=per, bold=bold, underline=underline, among=among,
                    lower_is_better=bool(raw.get("lower_is_better", False)))


def _parse_published(ctx: KeyContext, raw) -> Published | None:
    if raw is None:
        return None
    raw = ctx.mapping(raw, "published")
    ctx.only(raw, {"file", "key", "ignore", "marker_file", "note"}, "published")
    return Published(file=raw.get("file"), key=ctx.texts(raw.get("key"), "published.key"),
                     ignore=ctx.texts(raw.get("ignore"), "published.ignore"), marker_file=raw.get("marker_file"),
                     note=raw.get("note"))


def parse_spec(path: str | Path) -> TableSpec:
    """Load and validate one spec file (errors name the file and the key)."""
    path = Path(path)
    ctx = KeyContext(path)
    try:
        raw = safe_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise DataError(path, mark.line + 1 if mark else None, f"not valid YAML ({exc})") from None
    raw = ctx.mapping(raw, "(top level)")
    ctx.only(raw, _TOP_KEYS, "(top level)")
    m = SPEC_FILE_RE.match(path.name)
    if not m:
        raise DataError(path, None, "spec files are named <paper>_table<N>.yaml")
    paper, table = raw.get("paper"), raw.get("table")
    if paper not in PAPERS:
        raise ctx.error("paper", f"{paper!r} is not one of {', '.join(PAPERS)}")
    if paper != m["paper"] or table != int(m["table"]):
        raise ctx.error("paper/table", f"{paper}/{table} does not match the file name {path.name}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ctx.error("kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    for k in ("title", "caption"):
        if not raw.get(k):
            raise ctx.error(k, "required")
    common = dict(path=path, paper=paper, table=table, kind=kind, title=ctx.text(raw["title"], "title"),
                  caption=ctx.text(raw["caption"], "caption"),
                  notes=tuple(ctx.text(n, "notes") for n in ctx.seq(raw.get("notes", []), "notes")),
                  published=_parse_published(ctx, raw.get("published")))
    if kind in ("static", "analysis"):
        ctx.only(raw, {"paper", "table", "kind", "title", "caption", "why", "stage", "published", "notes", "layout"},
                 "(top level)")
        if not raw.get("why"):
            raise ctx.error("why", f"a {kind} table says why nothing is regenerated")
        if kind == "analysis" and raw.get("stage") not in load_stages():
            raise ctx.error("stage", f"{raw.get('stage')!r}: an analysis table names the stage that will produce it")
        if common["published"] is None and not raw.get("layout"):
            raise ctx.error("layout", "without a published file, describe the layout ({rows, columns})")
        spec = TableSpec(why=ctx.text(raw["why"], "why"), stage=raw.get("stage"),
                         layout=ctx.mapping(raw.get("layout", {}), "layout"), **common)
        if spec.published is not None:
            published_table(spec)  # parses
        return spec

    orientation = raw.get("orientation", "datasets-as-rows")
    if orientation not in ORIENTATIONS:
        raise ctx.error("orientation", f"{orientation!r} is not one of {', '.join(ORIENTATIONS)}")
    rows_are_datasets = orientation == "datasets-as-rows"
    default_header = ["Dataset"] if rows_are_datasets else ["System"]
    row_header = tuple(ctx.text(h, "row_header") for h in ctx.seq(raw.get("row_header", default_header), "row_header"))
    source = raw.get("source", "metrics")
    if source not in CELL_SOURCES:
        raise ctx.error("source", f"{source!r} is not one of {', '.join(CELL_SOURCES)}")
    if source != "metrics" and kind != "metric":
        raise ctx.error("source", f"only metric tables read their cells from {source!r} files")
    metric = raw.get("metric")
    if metric is not None:
        metric = _check_metric(ctx, metric, "metric", source)
    metrics = []
    for i, m_raw in enumerate(ctx.seq(raw.get("metrics", []), "metrics")):
        m_raw = ctx.mapping(m_raw, f"metrics[{i}]")
        ctx.only(m_raw, {"metric", "label"}, f"metrics[{i}]")
        name = _check_metric(ctx, m_raw.get("metric"), f"metrics[{i}].metric", source)
        metrics.append((name, ctx.text(m_raw.get("label", name), f"metrics[{i}].label")))

    groups = dict(BUILTIN_GROUPS)
    for name, members in ctx.mapping(raw.get("groups", {}), "groups").items():
        members = tuple(ctx.text(x, f"groups.{name}") for x in ctx.seq(members, f"groups.{name}"))
        for d in members:
            if d not in REGISTRY:
                raise ctx.error(f"groups.{name}", f"{d!r} is not a registry dataset")
        groups[name] = members

    systems = load_systems()
    datasets = tuple(_parse_dataset_entry(ctx, e, i, groups, rows_are_datasets)
                     for i, e in enumerate(ctx.seq(raw.get("datasets", []), "datasets")))
    entries = tuple(_parse_system_entry(ctx, e, i, systems, not rows_are_datasets, source)
                    for i, e in enumerate(ctx.seq(raw.get("systems", []), "systems")))
    if not datasets or not entries:
        raise ctx.error("datasets/systems", "a metric or data table has at least one dataset and one system entry")
    for axis, items in (("datasets", datasets), ("systems", entries)):
        seen = set()
        for e in items:
            if e.key in seen:
                raise ctx.error(axis, f"key {e.key!r} is used twice", "give one of them an explicit `key`")
            seen.add(e.key)
    for i, e in enumerate(datasets):
        if isinstance(e.label, tuple) and len(e.label) != len(row_header):
            raise ctx.error(f"datasets[{i}].label", f"{len(e.label)} labels for {len(row_header)} row_header columns")
        if e.kind == "average":
            names = {d.key for d in datasets[:i]} | set(groups) | set(REGISTRY)
            for mkey in e.members:
                if mkey not in names:
                    raise ctx.error(f"datasets[{i}].over", f"{mkey!r} is neither an entry above, a group nor a dataset")
        if e.kind == "info":
            for k in e.values:
                if k not in {s.key for s in entries}:
                    raise ctx.error(f"datasets[{i}].values", f"{k!r} is not a system entry key")
    keys = [e.key for e in entries]
    for i, e in enumerate(entries):
        if isinstance(e.label, tuple) and len(e.label) != len(row_header):
            raise ctx.error(f"systems[{i}].label", f"{len(e.label)} labels for {len(row_header)} row_header columns")
        for op in e.operands:
            if op not in keys[:i] + keys[i + 1:] and op not in systems:
                raise ctx.error(f"systems[{i}]", f"operand {op!r} is neither a system entry key nor a system id")
        hidden_operand = any(o not in keys for o in e.operands)
        needs_metric = e.kind == "system" or (e.kind in ("relative", "difference") and hidden_operand)
        if needs_metric and not (e.metric or metric or metrics):
            raise ctx.error(f"systems[{i}]", "no metric: set `metric` (table or entry) or `metrics`")
        if e.kind == "stat" and not rows_are_datasets:
            raise ctx.error(f"systems[{i}]", "stat entries need orientation datasets-as-rows")
    significance = None
    if raw.get("significance") is not None:
        significance = _parse_significance(ctx, raw["significance"], set(keys),
                                           {e.key for e in entries if e.kind == "system"})
    emphasis = None
    if raw.get("emphasis") is not None:
        emphasis = _parse_emphasis(ctx, raw["emphasis"], keys, [e.key for e in entries if e.kind == "system"],
                                   orientation)
    spec = TableSpec(orientation=orientation, row_header=row_header, source=source, metric=metric,
                     metrics=tuple(metrics), datasets=datasets, groups=groups, systems=entries,
                     significance=significance, emphasis=emphasis, **common)
    check_published_shape(spec)
    return spec


# ---------------------------------------------------------------------------------------------
# Public entry points


def spec_path(paper: str, table: int | str) -> Path:
    return SPEC_DIR / f"{paper}_table{int(table)}.yaml"


@functools.lru_cache(maxsize=None)
def load_spec(paper: str, table: int | str) -> TableSpec:
    """The validated spec of ``paper``'s table ``table`` (e.g. ``load_spec("ddr", 2)``)."""
    path = spec_path(paper, table)
    if not path.is_file():
        known = ", ".join(f"{p}/{t}" for p, t in list_specs())
        raise DataError(path, None, f"no spec for {paper} table {table}", f"known: {known}")
    return parse_spec(path)


def list_specs() -> list[tuple[str, int]]:
    """Every (paper, table) with a spec, papers in publication order then table number."""
    found = []
    for p in SPEC_DIR.glob("*.yaml"):
        m = SPEC_FILE_RE.match(p.name)
        if m and m["paper"] in PAPERS:
            found.append((m["paper"], int(m["table"])))
    return sorted(found, key=lambda pt: (PAPERS.index(pt[0]), pt[1]))


def all_specs() -> dict[tuple[str, int], TableSpec]:
    """Every spec, loaded and validated, keyed by (paper, table)."""
    return {pt: load_spec(*pt) for pt in list_specs()}


def spec_files(spec: TableSpec) -> list[Path]:
    """The package files a table depends on (spec, systems.yaml, published CSVs): list them as rule
    inputs so that editing one re-renders the table."""
    files = [spec.path, SYSTEMS_FILE]
    if spec.published is not None:
        files += [PUBLISHED_DIR / f for f in (spec.published.file, spec.published.marker_file) if f]
    return files
