"""``results/table1.{csv,md,png}``: the project's own head-to-head table and its figure.

Rows are systems; columns are the source domain's dev split and every zero-shot target domain,
plus the mean over targets. Every cell comes from a metrics file of the pipeline.

Significance: the strongest baseline (the one of ``baselines`` with the best target mean; the first
listed wins a tie) is the reference. Every other system is compared with it on each target by a
two-tailed paired test over per-query scores (t-test by default). Both directions are marked:
``†`` p < 0.05 and ``‡`` p < 0.01 where the system is better, ``▽`` p < 0.05 and ``▼`` p < 0.01
where it is worse.

The CSV is for programs: columns ``system``, ``paper`` (the config file that defines the system:
``baselines``, ``berm``, ``ddr``, ``modir``, ``cocodr``, ``rmsc``), ``description``, ``role``
(reference / baseline / system), one column per dataset named as the dataset, ``target_mean``, and
per target ``<dataset>_p`` (the p-value, scientific notation with 3 significant digits) and
``<dataset>_vs_baseline`` (``better`` / ``worse`` at p < 0.05, else empty). The Markdown keeps the
human labels (``<dataset> (target)``, ``target mean``) and the markers; the figure draws every
target as a panel of bars grouped by paper.
"""

from __future__ import annotations

import math
import os

import pandas as pd

from zsdr.evaluation import significance
from zsdr.evaluation.metrics import read_metrics
from zsdr.io import DataError, atomic_write, save_figure
from zsdr.tables import inputs
from zsdr.tables.catalogue import load_systems
from zsdr.tables.formatting import emphasis_ranks, format_value, md_escape, md_table, md_value, rounded
from zsdr.tables.marks import paired_test

BETTER = ((0.01, "‡"), (0.05, "†"))
WORSE = ((0.01, "▼"), (0.05, "▽"))
ALPHA = 0.05      # the level at which a system counts as better or worse than the reference
DIGITS = 4
# The paper files of the config (configs/papers/<paper>.yaml), in the order tables group systems;
# a system none of them defines is config.yaml's (BM25, the untrained encoders): a baseline.
PAPERS = {"baselines": "baselines", "berm": "BERM", "ddr": "DDR", "modir": "MoDIR", "cocodr": "COCO-DR",
          "rmsc": "RMSC"}
FIXED = ("system", "paper", "description", "role")


def _labels(systems) -> dict[str, str]:
    """``{system: description}`` from such a mapping or a list of ids (labels from systems.yaml)."""
    if isinstance(systems, dict):
        return dict(systems)
    known = load_systems()
    return {s: known[s].label if s in known else "" for s in systems}


def p_text(p: float | None) -> str:
    """A p-value in scientific notation with 3 significant digits (``2.50e-26``); ``""`` for none."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return ""
    return f"{p:.2e}"


def direction(p: float | None, better: bool | None) -> str:
    """``better`` / ``worse`` when ``p`` < :data:`ALPHA` (by the sign of the difference), else ``""``."""
    if p is None or better is None or math.isnan(p) or p >= ALPHA:
        return ""
    return "better" if better else "worse"


def marker(p: float | None, verdict: str) -> str:
    """The Markdown marker of a cell: ``†``/``‡`` better, ``▽``/``▼`` worse, ``""`` otherwise."""
    if not verdict:
        return ""
    return significance.marker(p, BETTER if verdict == "better" else WORSE)


def build_table1(metric_files: list[str | os.PathLike], systems: dict[str, str] | list[str], datasets: list[str],
                 source: str, metric: str, baselines: list[str] | None = None, test: str = "ttest",
                 trials: int = 10000, holm: bool = False, papers: dict[str, str] | None = None) -> pd.DataFrame:
    """``metric_files`` are ``<anything>/<dataset>/<system>.json`` files covering systems x datasets.

    ``baselines``: the systems the others are tested against (the strongest by target mean is the
    reference); none: no significance. ``test``: ``ttest`` or ``fisher`` (``trials``); ``holm``:
    Holm-correct all p-values of the table together. ``papers``: ``{system: paper}`` (the ``paper``
    column; a system it lacks is a baseline's). The frame keeps p-values as floats; :func:`write_table`
    formats them.
    """
    by_key = inputs.metric_files_by_cell(metric_files)
    labels = _labels(systems)
    papers = papers or {}
    targets = [d for d in datasets if d != source]
    clash = [d for d in datasets if d in FIXED or d == "target_mean" or d.endswith(("_p", "_vs_baseline"))]
    if clash:
        raise DataError(None, None, f"table1: dataset name(s) {', '.join(clash)} clash with the CSV's column names",
                        "rename the dataset")
    unknown = sorted({p for p in papers.values() if p not in PAPERS})
    if unknown:
        raise DataError(None, None, f"table1: unknown paper(s) {', '.join(unknown)} (known: {', '.join(PAPERS)})",
                        "map every system to one of the config's paper files")
    rows, per_query = [], {}
    for system, label in labels.items():
        row = {"system": system, "paper": papers.get(system, "baselines"), "description": label, "role": "system"}
        for d in datasets:
            path = by_key.get((d, system))
            if path is None:
                raise DataError(f"{d}/{system}.json", None, "no metrics file given for this cell",
                                "list it among the table rule's inputs")
            value, per_query[(d, system)] = inputs.metric_scores(read_metrics(path), path, metric)
            row[d] = round(value, DIGITS)
        if targets:
            row["target_mean"] = round(sum(row[d] for d in targets) / len(targets), DIGITS)
        rows.append(row)
    df = pd.DataFrame(rows)
    df.attrs.update(metric=metric, source=source, datasets=list(datasets), targets=targets, test=test,
                    trials=trials, holm=holm, reference=None, baselines=list(baselines or []))
    for b in baselines or []:
        if b not in labels:
            raise DataError(None, None, f"table1 baseline {b!r} is not one of the table's systems "
                                        f"({', '.join(labels)})", "list every baseline under table1.systems too")
    if not baselines or not targets:
        return df
    means = dict(zip(df["system"], df["target_mean"]))
    reference = max(baselines, key=lambda b: (means[b], -baselines.index(b)))
    df.attrs["reference"] = reference
    df["role"] = ["reference" if s == reference else "baseline" if s in baselines else "system" for s in df["system"]]
    tests = []
    for system in df["system"]:
        for d in targets:
            if system != reference:
                result = paired_test(per_query[(d, system)], per_query[(d, reference)], test, trials,
                                     f"table1: {d} {system} vs {reference}")
                better = None if result["mean_a"] == result["mean_b"] else result["mean_a"] > result["mean_b"]
                tests.append((system, d, result["p"], better))
    if holm:
        tests = [(s, d, p, better) for (s, d, _, better), p in zip(tests, significance.holm([t[2] for t in tests]))]
    found = {(s, d): (p, better) for s, d, p, better in tests}
    for d in targets:
        cells = [found.get((s, d), (None, None)) for s in df["system"]]
        df[f"{d}_p"] = [p for p, _ in cells]
        df[f"{d}_vs_baseline"] = [direction(p, better) for p, better in cells]
    return df


def csv_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The frame as the CSV holds it: p-values as text (:func:`p_text`), the rest as built."""
    out = df.copy()
    for d in df.attrs.get("targets", []):
        if f"{d}_p" in out:
            out[f"{d}_p"] = [p_text(p) for p in out[f"{d}_p"]]
    return out


def markdown(df: pd.DataFrame, title: str) -> str:
    """Table 1 as Markdown: human column labels, the best value per column in bold, the markers."""
    datasets, source = df.attrs["datasets"], df.attrs["source"]
    value_cols = list(datasets) + (["target_mean"] if "target_mean" in df else [])
    label = {d: f"{d} ({'source' if d == source else 'target'})" for d in datasets} | {"target_mean": "target mean"}
    fmt = f"d{DIGITS}"
    bold = {c: emphasis_ranks({i: rounded(v, fmt) for i, v in df[c].items() if pd.notna(v)})[0] for c in value_cols}
    header = ["system", "paper", "description"] + [label[c] for c in value_cols]
    rows = []
    for i, row in df.iterrows():
        cells = [md_escape(str(row["system"])), md_escape(PAPERS.get(row["paper"], row["paper"])),
                 md_escape(str(row["description"]))]
        for c in value_cols:
            verdict = row.get(f"{c}_vs_baseline", "") or ""
            cells.append(md_value(format_value(row[c], fmt), "bold" if i in bold[c] else "",
                                  marker(row.get(f"{c}_p"), verdict)))
        rows.append(cells)
    lines = [f"# {title}", "", md_table(header, rows), "", "Bold = best per column."]
    ref = df.attrs.get("reference")
    if ref:
        test = ("two-tailed paired t-test" if df.attrs["test"] == "ttest"
                else f"Fisher randomization test ({df.attrs.get('trials')} trials)")
        holm = ", Holm-corrected over the table" if df.attrs.get("holm") else ""
        lines.append(f"Against the strongest baseline, {ref} (best target mean among "
                     f"{', '.join(df.attrs.get('baselines', []))}), by a {test} over the per-query "
                     f"{df.attrs.get('metric', '')} of each target{holm}: † p < 0.05, ‡ p < 0.01 better; "
                     f"▽ p < 0.05, ▼ p < 0.01 worse; no marker: no significant difference. "
                     f"The p-values are in table1.csv (`<dataset>_p`, `<dataset>_vs_baseline`).")
    lines.append("The abbreviations of the descriptions (DPR, KD, DAM, REM, iDRO, CD / CO, ...) are spelled out in "
                 "docs/glossary.md of the zsdr repository.")
    return "\n".join(lines)


def write_table(df: pd.DataFrame, csv: str | os.PathLike, md: str | os.PathLike, title: str,
                figure: str | os.PathLike | None = None) -> None:
    """Write the CSV (:func:`csv_frame`), the Markdown (:func:`markdown`) and, when given, the figure."""
    with atomic_write(csv) as fh:
        csv_frame(df).to_csv(fh, index=False, lineterminator="\n")
    text = markdown(df, title)
    with atomic_write(md) as fh:
        fh.write(text + "\n")
    if figure is not None:
        render_table1_figure(df, figure, title)


def write_table1(metric_files: list[str | os.PathLike], csv: str | os.PathLike, md: str | os.PathLike,
                 figure: str | os.PathLike | None, *, systems: dict[str, str] | list[str], datasets: list[str],
                 source: str, metric: str, scale: str, significance: dict, baselines: list[str] | None = None,
                 papers: dict[str, str] | None = None) -> pd.DataFrame:
    """Table 1 of one run: :func:`build_table1` of ``metric_files`` tested as ``significance`` (config
    `evaluation.significance`: ``test``, ``trials``, ``holm``), written by :func:`write_table` under the title
    "Table 1 (<scale> scale): <metric>"; returns the frame."""
    df = build_table1(metric_files, systems, datasets, source, metric, baselines=baselines,
                      test=significance["test"], trials=significance["trials"], holm=significance["holm"],
                      papers=papers)
    write_table(df, csv, md, f"Table 1 ({scale} scale): {metric}", figure=figure)
    return df


def figure_rows(df: pd.DataFrame) -> list[int]:
    """The frame's row positions in figure order: grouped by paper (:data:`PAPERS` order), table order within."""
    order = {p: k for k, p in enumerate(PAPERS)}
    return sorted(range(len(df)), key=lambda i: (order.get(df["paper"].iloc[i], len(order)), i))


def render_table1_figure(df: pd.DataFrame, out: str | os.PathLike, title: str = "", max_columns: int = 4) -> dict:
    """One horizontal bar panel per target (the source's when there is none): every system's value,
    coloured and grouped by paper, the reference's value as a dashed line, a triangle beside each bar
    that is significantly better (up) or worse (down) than the reference, filled at p < 0.01.

    Written with :func:`zsdr.io.save_figure` (no date or version in the file: the same table gives
    the same bytes). Returns ``{panel: {"better": n, "worse": n}}``.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from zsdr.tables.figures import metric_label, pyplot

    plt = pyplot()
    panels = list(df.attrs.get("targets") or [df.attrs["source"]])
    order = figure_rows(df)
    n = len(order)
    cols = min(len(panels), max_columns)
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(1.6 + 3.4 * cols, 1.6 + nrows * (0.8 + 0.24 * n)),
                             sharey=True, squeeze=False)
    colors = {p: plt.get_cmap("tab10")(k) for k, p in enumerate(PAPERS)}
    papers = [df["paper"].iloc[i] for i in order]
    ys = list(range(n))[::-1]               # the first row on top
    ref = df.attrs.get("reference")
    ref_row = next((i for i in range(len(df)) if df["system"].iloc[i] == ref), None)
    summary = {}
    for ax, d in zip(axes.flat, panels):
        values = [float(df[d].iloc[i]) for i in order]
        ax.barh(ys, values, color=[colors.get(p, "tab:gray") for p in papers], height=0.75, zorder=2)
        top = max(values + [1e-9])
        counts = {"better": 0, "worse": 0}
        if ref_row is not None and f"{d}_vs_baseline" in df:
            ax.axvline(float(df[d].iloc[ref_row]), color="black", lw=0.8, ls="--", zorder=3)
            for y, i, v in zip(ys, order, values):
                verdict = df[f"{d}_vs_baseline"].iloc[i]
                if not verdict:
                    continue
                counts[verdict] += 1
                strong = df[f"{d}_p"].iloc[i] < 0.01
                ax.scatter([v + 0.03 * top], [y], marker="^" if verdict == "better" else "v", s=30, zorder=4,
                           color="black", facecolors="black" if strong else "white", linewidths=0.8)
        for k in range(1, n):               # a thin rule between paper groups
            if papers[k] != papers[k - 1]:
                ax.axhline(ys[k] + 0.5, color="tab:gray", lw=0.5, zorder=1)
        ax.set_xlim(0, top * 1.12)
        ax.set_ylim(-0.6, n - 0.4)
        ax.set_title(f"{d} ({'target' if d in df.attrs.get('targets', []) else 'source'})", fontsize=10)
        ax.set_xlabel(metric_label(df.attrs.get("metric", "")))
        ax.grid(axis="x", color="0.9", zorder=0)
        summary[d] = counts
    for ax in axes[:, 0]:
        ax.set_yticks(ys, [df["system"].iloc[i] for i in order], fontsize=7)
        ax.set_ylabel("system")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles = [Patch(color=colors[p], label=PAPERS[p]) for p in PAPERS if p in papers]
    if ref_row is not None:
        handles += [Line2D([], [], color="black", lw=0.8, ls="--", label=f"strongest baseline ({ref})"),
                    Line2D([], [], ls="", marker="^", color="black", label="better, p < 0.01"),
                    Line2D([], [], ls="", marker="^", color="black", markerfacecolor="white",
                           label="better, p < 0.05"),
                    Line2D([], [], ls="", marker="v", color="black", label="worse, p < 0.01"),
                    Line2D([], [], ls="", marker="v", color="black", markerfacecolor="white",
                           label="worse, p < 0.05")]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=11)
    legend_inches = 0.2 + 0.17 * math.ceil(len(handles) / 6)
    fig.tight_layout(rect=(0, legend_inches / fig.get_figheight(), 1, 1))
    save_figure(fig, out)
    return summary
