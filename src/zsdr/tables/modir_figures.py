"""MoDIR's training-dynamics figures and Table 3, drawn from the MoDIR stage's snapshots.

Provenance: Xin et al., "Zero-Shot Dense Retrieval with Momentum Adversarial Domain Invariant
Representations" (Findings of ACL 2022), Figures 3 and 5 and Table 3.

* Figure 3 (:func:`render_domain_acc`): Global Domain-Acc (a domain classifier fitted on the frozen
  embeddings of a snapshot, solid, from the domain files) and Local Domain-Acc (the training
  classifier's accuracy on the current batches, dashed, from ``train_log.jsonl``) of documents and
  queries against training steps, one row of panels per recipe.
* Figure 5 (:func:`render_acc_and_quality`): Global Domain-Acc of documents (left axis) and a
  retrieval metric (right axis) against training steps, one panel per target dataset.
* Table 3 (:func:`write_table3`): KNN-Source% (share of source documents among a target query's
  nearest documents) and a retrieval metric at four steps per setting, beside the published rows.
* Table 4 (:func:`write_table4`): the case study of :func:`zsdr.evaluation.case_study.case_study`
  beside the paper's rows.

The workflow's jobs call one function each: :func:`write_modir_curves` (Figures 3 and 5, Table 3) and
:func:`write_case_study` (Table 4 from the two models and their metrics files).

A *point* is ``{"recipe", "label", "dataset", "step", "domain": domain file, "metrics": metrics
file}``; step 0 is the model before MoDIR training. A domain file holds
``{"global_domain_acc": {"queries": a, "docs": a}, "knn_source": fraction, ...}``.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Sequence

from zsdr.evaluation.metrics import read_metrics
from zsdr.io import DataError, atomic_write, open_lines, read_json, save_figure
from zsdr.tables.figures import figure_legend, metric_label, pyplot, scaled_title, write_csv
from zsdr.tables.inputs import metric_scores
from zsdr.tables.formatting import format_value
from zsdr.tables.published_csv import read_published

SIDES = ("docs", "queries")
SIDE_TITLES = {"docs": "Documents", "queries": "Queries"}
LOCAL_KEYS = {"docs": "local_domain_acc_docs", "queries": "local_domain_acc_queries"}
PAPER_STEPS = ("0", "10k", "30k", "50k")
FIX = "run snakemake modir"
DOMAIN_FIX = "re-run the MoDIR domain analysis (snakemake modir)"


# ---------------------------------------------------------------------------------------------
# Inputs


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_domain(path: str | os.PathLike, knn: bool = False) -> dict:
    """A domain file, checked for numeric ``global_domain_acc.queries`` / ``.docs`` (and ``knn_source``
    when ``knn``)."""
    data = read_json(path, DOMAIN_FIX)
    acc = data.get("global_domain_acc")
    if not isinstance(acc, dict) or not all(_number(acc.get(s)) for s in SIDES):
        raise DataError(path, None, "no numeric global_domain_acc.queries and global_domain_acc.docs", DOMAIN_FIX)
    if knn and not _number(data.get("knn_source")):
        raise DataError(path, None, "no numeric knn_source", DOMAIN_FIX)
    return data


def read_local_acc(path: str | os.PathLike) -> dict[str, list[tuple[int, float]]]:
    """``{side: [(step, Local Domain-Acc), ...]}`` from a ``train_log.jsonl``: the records that carry
    ``local_domain_acc_<side>`` (empty lists for a run without a domain classifier)."""
    out: dict[str, list[tuple[int, float]]] = {s: [] for s in SIDES}
    with open_lines(path) as lines:
        for line in lines:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(path, lines.lineno, f"not a JSON object ({exc})", "train the run again") from None
            if not isinstance(rec, dict) or not _number(rec.get("step")):
                raise DataError(path, lines.lineno, "a log record without a numeric step", "train the run again")
            for side in SIDES:
                if _number(rec.get(LOCAL_KEYS[side])):
                    out[side].append((int(rec["step"]), float(rec[LOCAL_KEYS[side]])))
    for side in SIDES:
        out[side].sort()
    return out


def _metric(path, metric: str) -> float:
    value = metric_scores(read_metrics(path), path, metric)[0]
    if value is None:
        raise DataError(path, None, f"{metric!r} is null (no query it applies to)", "re-run the evaluate rule")
    return value


def _index(points: Sequence[dict]) -> dict[tuple[str, str, int], dict]:
    """``{(recipe, dataset, step): point}``; the same key twice is an error."""
    out = {}
    for p in points:
        key = (str(p["recipe"]), str(p["dataset"]), int(p["step"]))
        if key in out:
            raise ValueError(f"two points for recipe {key[0]!r}, dataset {key[1]!r}, step {key[2]}")
        out[key] = p
    return out


# ---------------------------------------------------------------------------------------------
# Figure 3


def render_domain_acc(points: Sequence[dict], logs: dict, out_png: str | os.PathLike, out_csv: str | os.PathLike, *,
                      dataset: str, scale: str = "") -> list[dict]:
    """MoDIR Figure 3 for ``dataset``: one row of panels per recipe (in the order the points name them,
    titled with their label), columns documents and queries; Global Domain-Acc (solid, the points'
    domain files) and Local Domain-Acc (dashed, ``logs[recipe]``'s train log; a recipe without a log,
    or whose log has no local accuracy, e.g. a run without an adversary, gets the solid line only)
    against steps. y from 0.4 (lower when a value is) to 1.0, chance (0.5) dotted.

    CSV columns: recipe, label, dataset, kind (global|local), side (docs|queries), step, value.
    Returns the rows."""
    mine = [p for p in points if p["dataset"] == dataset]
    if not mine:
        raise DataError(None, None, f"no MoDIR points for dataset {dataset!r}", FIX)
    _index(mine)
    recipes = list(dict.fromkeys(str(p["recipe"]) for p in mine))
    labels = {r: next(str(p.get("label") or r) for p in mine if str(p["recipe"]) == r) for r in recipes}
    rows = []
    for recipe in recipes:
        own = sorted((p for p in mine if str(p["recipe"]) == recipe), key=lambda p: int(p["step"]))
        domains = [(int(p["step"]), read_domain(p["domain"])["global_domain_acc"]) for p in own]
        local = read_local_acc(logs[recipe]) if logs.get(recipe) else {s: [] for s in SIDES}
        base = {"recipe": recipe, "label": labels[recipe], "dataset": dataset}
        for side in SIDES:
            rows += [{**base, "kind": "global", "side": side, "step": step, "value": float(acc[side])}
                     for step, acc in domains]
        for side in SIDES:
            rows += [{**base, "kind": "local", "side": side, "step": step, "value": value}
                     for step, value in local[side]]
    plt = pyplot()
    fig, axes = plt.subplots(len(recipes), 2, figsize=(8.0, 2.8 * len(recipes) + 0.8), squeeze=False, sharey=True)
    low = min(0.4, math.floor(min(r["value"] for r in rows) * 20) / 20)
    for i, recipe in enumerate(recipes):
        for j, side in enumerate(SIDES):
            ax = axes[i][j]
            for kind, style in (("global", dict(linestyle="-", marker="o", color="tab:blue")),
                                ("local", dict(linestyle="--", color="tab:orange"))):
                series = [r for r in rows if r["recipe"] == recipe and r["side"] == side and r["kind"] == kind]
                if series:
                    ax.plot([r["step"] for r in series], [r["value"] for r in series],
                            label=f"{kind.capitalize()} Domain-Acc", markersize=4, **style)
            ax.axhline(0.5, linestyle=":", color="tab:gray", linewidth=1, label="chance")
            ax.set_ylim(low, 1.0)
            ax.set_title(f"{labels[recipe]}: {SIDE_TITLES[side]}", fontsize=9)
            ax.set_xlabel("training steps")
            if j == 0:
                ax.set_ylabel("Domain-Acc")
            ax.grid(alpha=0.3)
    figure_legend(fig, axes, max_columns=None)
    fig.suptitle(scaled_title(f"MoDIR Figure 3: Global and Local Domain-Acc over training, {dataset}", scale),
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save_figure(fig, out_png)
    write_csv(out_csv, ["recipe", "label", "dataset", "kind", "side", "step", "value"], rows)
    return rows


# ---------------------------------------------------------------------------------------------
# Figure 5


def render_acc_and_quality(points: Sequence[dict], out_png: str | os.PathLike, out_csv: str | os.PathLike, *,
                           recipe: str, datasets: Sequence[str], metric: str = "ndcg@10",
                           scale: str = "") -> list[dict]:
    """MoDIR Figure 5: one panel per dataset (in ``datasets``' order) with ``recipe``'s Global
    Domain-Acc of documents (left axis, 0.4–1.0 unless a value is lower) and ``metric`` (right axis)
    against steps.

    CSV columns: dataset, step, global_domain_acc_docs, ``metric``. Returns the rows."""
    if not datasets:
        raise ValueError("render_acc_and_quality needs at least one dataset")
    _index([p for p in points if p["recipe"] == recipe])
    rows, label = [], recipe
    for dataset in datasets:
        own = sorted((p for p in points if p["recipe"] == recipe and p["dataset"] == dataset),
                     key=lambda p: int(p["step"]))
        if not own:
            raise DataError(None, None, f"no MoDIR points for recipe {recipe!r} on dataset {dataset!r}", FIX)
        label = str(own[0].get("label") or recipe)
        rows += [{"dataset": dataset, "step": int(p["step"]),
                  "global_domain_acc_docs": float(read_domain(p["domain"])["global_domain_acc"]["docs"]),
                  metric: _metric(p["metrics"], metric)} for p in own]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.9 * len(datasets) + 0.6, 3.6), squeeze=False)
    low = min(0.4, math.floor(min(r["global_domain_acc_docs"] for r in rows) * 20) / 20)
    for ax, dataset in zip(axes[0], datasets):
        own = [r for r in rows if r["dataset"] == dataset]
        steps = [r["step"] for r in own]
        acc_line = ax.plot(steps, [r["global_domain_acc_docs"] for r in own], marker="o", markersize=4,
                           color="tab:blue", label="Global Domain-Acc (documents)")
        ax.axhline(0.5, linestyle=":", color="tab:gray", linewidth=1)
        ax.set_ylim(low, 1.0)
        ax.set(title=dataset, xlabel="training steps", ylabel="Global Domain-Acc (documents)")
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
        twin = ax.twinx()
        metric_line = twin.plot(steps, [r[metric] for r in own], marker="s", markersize=4, linestyle="--",
                                color="tab:orange", label=metric_label(metric))
        twin.set_ylabel(metric_label(metric))
    lines = acc_line + metric_line
    fig.legend(lines, [line.get_label() for line in lines], loc="lower center", ncol=2, fontsize=8)
    fig.suptitle(scaled_title(f"MoDIR Figure 5: Global Domain-Acc and {metric_label(metric)} over training, {label}",
                         scale), fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save_figure(fig, out_png)
    write_csv(out_csv, ["dataset", "step", "global_domain_acc_docs", metric], rows)
    return rows


# ---------------------------------------------------------------------------------------------
# Table 3


def _metric_prefix(metric: str) -> str:
    return re.sub(r"[^0-9a-z]+", "", metric.lower())


def write_table3(points: Sequence[dict], out_csv: str | os.PathLike, out_md: str | os.PathLike, *, dataset: str,
                 settings: dict, steps: Sequence[int], metric: str = "ndcg@10", published: str | os.PathLike,
                 scale: str = "") -> list[dict]:
    """MoDIR Table 3 on ``dataset``: for each ``settings`` row (``{row label: recipe}``, in order) the
    KNN-Source% and ``metric`` at ``steps`` (four of our steps standing for the paper's 0 / 10k / 30k /
    50k), each followed by the paper's row ``"<label> (published)"`` when ``published`` has that label.

    CSV columns: ``setting``, ``source`` (``zsdr`` or ``published``), then one column per (measure,
    step) named ``<measure>_<paper step>@step<our step>``: ``knn_source_0@step0``,
    ``knn_source_10k@step20``, ... then ``<metric>_0@step0``, ... where ``<metric>`` is the metric
    without punctuation (``ndcg10``); the published file's column ``knn_source_10k`` fills
    ``knn_source_10k@step<our second step>`` and so on (its nDCG@10 columns only when ``metric`` is
    ``ndcg@10``). Cells as printed: KNN-Source% with one decimal (``12.3%``), the metric with three.
    Returns the CSV rows."""
    steps = [int(s) for s in steps]
    if len(steps) != len(PAPER_STEPS):
        raise ValueError(f"steps must be {len(PAPER_STEPS)} steps standing for the paper's 0/10k/30k/50k, got {steps}")
    if not settings:
        raise ValueError("write_table3 needs at least one setting")
    index = _index([p for p in points if p["dataset"] == dataset])
    prefix = _metric_prefix(metric)
    knn_cols = [f"knn_source_{p}@step{s}" for p, s in zip(PAPER_STEPS, steps)]
    metric_cols = [f"{prefix}_{p}@step{s}" for p, s in zip(PAPER_STEPS, steps)]
    needed = ("setting", *(f"{k}_{p}" for k in ("knn_source", "ndcg10") for p in PAPER_STEPS))
    paper = {r["setting"]: r for r in read_published(published, needed)}
    rows, ks = [], set()
    for label, recipe in settings.items():
        row = {"setting": label, "source": "zsdr"}
        for step, kcol, mcol in zip(steps, knn_cols, metric_cols):
            point = index.get((str(recipe), dataset, step))
            if point is None:
                raise DataError(None, None, f"Table 3 needs recipe {recipe!r} ({label}) at step {step} on "
                                f"{dataset!r}, and no MoDIR point has it", FIX)
            domain = read_domain(point["domain"], knn=True)
            row[kcol] = format_value(float(domain["knn_source"]), "pct1")
            if _number(domain.get("knn_k")):
                ks.add(int(domain["knn_k"]))
            row[mcol] = format_value(_metric(point["metrics"], metric), "d3")
        rows.append(row)
        if label in paper:
            pub = {"setting": f"{label} (published)", "source": "published"}
            for p, kcol, mcol in zip(PAPER_STEPS, knn_cols, metric_cols):
                pub[kcol] = paper[label][f"knn_source_{p}"]
                pub[mcol] = paper[label][f"ndcg10_{p}"] if metric == "ndcg@10" else ""
            rows.append(pub)
    fields = ["setting", "source"] + knn_cols + metric_cols
    write_csv(out_csv, fields, rows)

    shown = metric_label(metric)
    head = (["Setting"] + [f"KNN-Source% {p} (step {s})" for p, s in zip(PAPER_STEPS, steps)]
            + [f"{shown} {p} (step {s})" for p, s in zip(PAPER_STEPS, steps)])
    lines = [f"# MoDIR Table 3: KNN-Source% and {shown} over training", "",
             f"Dataset {dataset}; scale: {scale or 'unspecified'}; our steps "
             f"{' / '.join(map(str, steps))} stand for the paper's {' / '.join(PAPER_STEPS)}.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        label = f"*{r['setting']}*" if r["source"] == "published" else r["setting"]
        lines.append("| " + " | ".join([label] + [r[c] or "—" for c in knn_cols + metric_cols]) + " |")
    nearest = f"the {ks.pop()} nearest" if len(ks) == 1 else "the nearest"
    lines += ["", f"KNN-Source%: share of source documents among {nearest} documents of each target query in a "
              "joint source+target index. Rows marked (published) are the paper's (TREC-COVID, ANCE, steps "
              "0 / 10k / 30k / 50k" + ("" if metric == "ndcg@10" else f"; it reports nDCG@10, not {metric}") + ").",
              "", "At non-paper scales the steps are the config's stand-ins for the paper's 0 / 10k / 30k / 50k "
              "steps; step 0 is the model before MoDIR training.", ""]
    with atomic_write(out_md) as fh:
        fh.write("\n".join(lines))
    return rows


# ---------------------------------------------------------------------------------------------
# Table 4

TABLE4_COLUMNS = ["source", "target_query", "qid", "ndcg10_gain", "nearest_source_queries_before",
                  "nearest_source_queries_after"]
PUBLISHED4_COLUMNS = (TABLE4_COLUMNS[1], *TABLE4_COLUMNS[3:])
JOIN = " | "


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_table4(out_csv: str | os.PathLike, out_md: str | os.PathLike, rows: list[dict], *,
                 published: str | os.PathLike, scale: str = "") -> None:
    """Write the case study's rows and the paper's (``published``: modir_table4.csv) atomically.

    CSV columns: ``source`` (``zsdr`` or ``published``), ``target_query``, ``qid`` (empty for the
    paper's rows), ``ndcg10_gain`` (ours with three decimals; the column keeps the published file's
    name whatever the rows' ``metric``), ``nearest_source_queries_before`` / ``_after`` (texts joined with
    ``" | "``). The Markdown: a title, the scale, our rows and then the paper's, marked (published)."""
    paper = read_published(published, PUBLISHED4_COLUMNS)
    metric = next((r["metric"] for r in rows if r.get("metric")), "ndcg@10")
    shown = metric_label(metric)
    out = [{"source": "zsdr", "target_query": r["target_query"], "qid": r["qid"],
            "ndcg10_gain": format_value(r["gain"], "d3"),
            "nearest_source_queries_before": JOIN.join(r["before"]),
            "nearest_source_queries_after": JOIN.join(r["after"])} for r in rows]
    out += [{"source": "published", "qid": "", **{c: p[c] for c in PUBLISHED4_COLUMNS}} for p in paper]
    write_csv(out_csv, TABLE4_COLUMNS, out)
    lines = ["# MoDIR Table 4: case study", "",
             f"Scale: {scale or 'unspecified'}. The target queries with the largest gain and the largest loss in "
             f"{shown} (after − before MoDIR training) and their nearest source training queries by the inner "
             "product of query embeddings, before and after. The paper's rows (TREC-COVID / MS MARCO, ANCE) "
             f"follow, marked (published){'' if metric == 'ndcg@10' else '; their gains are in nDCG@10'}.", "",
             f"| Target query | {shown} gain | Nearest source queries (before) | Nearest source queries (after) |",
             "|---|---|---|---|"]
    cells = [(f"{_md(r['target_query'])} ({r['qid']})", format_value(r["gain"], "+d3"), r["before"], r["after"])
             for r in rows]
    cells += [(f"{_md(p['target_query'])} *(published)*", p["ndcg10_gain"],
               p["nearest_source_queries_before"].split(JOIN), p["nearest_source_queries_after"].split(JOIN))
              for p in paper]
    for query, gain, before, after in cells:
        lines.append(f"| {query} | {gain} | {'<br>'.join(map(_md, before))} | {'<br>'.join(map(_md, after))} |")
    lines.append("")
    with atomic_write(out_md) as fh:
        fh.write("\n".join(lines))


# ---------------------------------------------------------------------------------------------
# The workflow's jobs: one call each


def write_modir_curves(points: Sequence[dict], logs: dict[str, dict[str, str]], *, dataset: str, figure5: dict,
                       table3: dict, published: str | os.PathLike, figure3_files: tuple[str, str],
                       figure5_files: tuple[str, str], table3_files: tuple[str, str], scale: str = "") -> None:
    """Figures 3 and 5 and Table 3 of the curve runs (the `modir_curves` job): Figure 3 and Table 3 on
    ``dataset`` (``logs[dataset]``: the runs' train logs), Figure 5 of ``figure5``'s recipe and datasets,
    Table 3's ``table3`` settings and steps (config modir.table3) beside ``published``. ``figure3_files``,
    ``figure5_files``: (png, csv); ``table3_files``: (csv, md)."""
    render_domain_acc(points, logs[dataset], *figure3_files, dataset=dataset, scale=scale)
    render_acc_and_quality(points, *figure5_files, recipe=figure5["recipe"], datasets=figure5["datasets"],
                           scale=scale)
    write_table3(points, *table3_files, dataset=dataset, settings=table3["settings"], steps=table3["steps"],
                 published=published, scale=scale)


def write_case_study(out_csv: str | os.PathLike, out_md: str | os.PathLike, *, models: Sequence[str],
                     options: Sequence[dict], metrics: Sequence[str | os.PathLike], source: str, target: str,
                     split: str, neighbours: int, max_source_queries: int | None, seed: int, device: str,
                     batch_size: int, published: str | os.PathLike, scale: str = "") -> list[dict]:
    """MoDIR Table 4 (the `modir_table4` job): the case study of the models before and after MoDIR
    (``models``, ``options`` and their ``metrics`` files on ``target``'s ``split``, both in that order) by
    :func:`zsdr.evaluation.case_study.case_study` on their per-query nDCG@10, written with the paper's rows
    (:func:`write_table4`). ``device``: config dense.device (``auto``: CUDA when available). Returns the rows."""
    from zsdr.evaluation.case_study import case_study

    if not (len(models) == len(options) == len(metrics) == 2):
        raise ValueError(f"MoDIR Table 4 compares two systems (before, after MoDIR); got {len(models)} models, "
                         f"{len(options)} encoder settings and {len(metrics)} metrics files")
    scores = [metric_scores(read_metrics(path), path, "ndcg@10")[1] for path in metrics]
    rows = case_study(models[0], models[1], options[0], options[1], source, target, split, scores[0], scores[1],
                      neighbours=neighbours, max_source_queries=max_source_queries, seed=seed,
                      device=None if device == "auto" else device, batch_size=batch_size)
    write_table4(out_csv, out_md, rows, published=published, scale=scale)
    return rows
