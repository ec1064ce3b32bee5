"""COCO-DR's analysis figures and Table 4, drawn from the COCO-DR stage's metrics and analysis files.

Provenance: Yu et al., "COCO-DR: Combating Distribution Shifts in Zero-Shot Dense Retrieval with
Contrastive and Distributionally Robust Learning" (EMNLP 2022), Figures 3, 4 and 5 and Table 4.

* Figure 3 (:func:`render_figure3`): the average target metric against (a) K, the number of iDRO
  clusters, and (b) the iDRO temperature; the paper's reference line (its best baseline, GPL) is
  a dashed horizontal line on both panels.
* Figure 4 (:func:`render_figure4`): the metric after each training episode (Epi-1 = the BM25
  warmup, Epi-2.. = ANCE episodes), one panel per dataset, one line per variant.
* Figure 5 (:func:`render_figure5`): (a) the relative reduction of the COCO contrastive loss on each
  target corpus against the relative zero-shot gain COCO brings there; (b) alignment against
  uniformity (:func:`zsdr.evaluation.cocodr.alignment` / ``uniformity``) per pretrained model and
  target corpus; (c) the relative training-loss gain from iDRO on each target's nearest source query
  cluster against that target's relative gain from iDRO.
* Table 4 (:func:`write_table4`): target queries with the largest gain from iDRO, the nearest source
  training query of each and that query's training-loss gain, beside the paper's rows.
* Figure 5c's records and Table 4's rows (:func:`cocodr_cluster_analysis`, rule `cocodr_clusters`): every
  embedding is the iDRO model's (the paper's "COCO-DR embeddings"); a source cluster's embedding is the mean of
  its training queries', so a target's average dot product with a cluster is its mean query embedding's dot
  product with that mean, the nearest cluster the largest; iDRO's effect on a cluster is the change of the
  training loss (pairwise NLL on the last episode's mined negatives) of its queries from the model without
  iDRO to the model with it.

Every writer also writes a CSV of the numbers it plots. Inputs are checked: a bad file raises
:class:`zsdr.io.DataError` naming it and the fix.

Gains in Figure 5 are relative, ``(with − without) / without`` (a loss reduction: ``(before − after) /
before``): the paper's text reads its Fig. 5a as "BioASQ: loss −50 % → +22 % zero-shot gain", and
Table 2 gives BioASQ 0.429 with COCO vs 0.353 without, +21.5 % relative (+0.076 absolute).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from zsdr.evaluation.metrics import read_metrics
from zsdr.io import DataError, atomic_write, read_json, save_figure
from zsdr.tables.figures import figure_legend, metric_label, pyplot, scaled_title, write_csv
from zsdr.tables.inputs import metric_scores
from zsdr.tables.formatting import format_value
from zsdr.tables.published_csv import read_published

log = logging.getLogger(__name__)

FIX = "run snakemake cocodr"
SWEEPS = {"clusters": "K (number of clusters)",
          "temperature": "rho = eta / tau (iDRO step; a higher temperature tau is a smaller rho)"}
SWEEP_TITLES = {"clusters": "(a) number of clusters K", "temperature": "(b) temperature, as the update step rho"}


# ---------------------------------------------------------------------------------------------
# Inputs and helpers


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _metric(path, metric: str) -> float:
    value = metric_scores(read_metrics(path), path, metric)[0]
    if value is None:
        raise DataError(path, None, f"{metric!r} is null (no query it applies to)", "re-run the evaluate rule")
    return value


def _average(files: Sequence, metric: str, what: str) -> tuple[float, list[str]]:
    """Mean over the files (one per target dataset) of each one's aggregate ``metric``, and the datasets
    (a file's ``dataset`` key, else its folder: ``metrics/<dataset>/<system>.json``)."""
    files = list(files or [])
    if not files:
        raise DataError(None, None, f"{what} lists no metrics files", FIX)
    values, datasets = [], []
    for path in files:
        data = read_metrics(path)
        value = metric_scores(data, path, metric)[0]
        if value is None:
            raise DataError(path, None, f"{metric!r} is null (no query it applies to)", "re-run the evaluate rule")
        values.append(value)
        datasets.append(str(data.get("dataset") or Path(path).parent.name))
    if len(set(datasets)) != len(datasets):
        raise DataError(files[0], None, f"{what} scores a dataset twice ({', '.join(datasets)})", FIX)
    return sum(values) / len(values), datasets


def _stats(path, keys: Sequence[str], positive: bool = False) -> dict:
    """A JSON object with numeric ``keys`` (> 0 with ``positive``)."""
    data = read_json(path, FIX)
    for key in keys:
        if not _number(data.get(key)):
            raise DataError(path, None, f"no numeric {key!r}", FIX)
        if positive and not data[key] > 0:
            raise DataError(path, None, f"{key!r} is {data[key]}, not > 0 (a relative change needs it)", FIX)
    return data


def collect_points(points: Sequence[dict], what: str, names: Sequence[str], x: str, minimum: int,
                   metric: str) -> list[dict]:
    """The rows of a figure's points: each point's ``names`` (as text), its integer ``x`` (>= ``minimum``)
    and the ``metric`` of its ``metrics`` file; no two points may share their names and ``x``."""
    if not points:
        raise DataError(None, None, f"no {what} points", FIX)
    rows, seen = [], set()
    for p in points:
        value = p.get(x)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"a {what} point's {x} must be an integer >= {minimum}, got {value!r}")
        key = tuple(str(p[n]) for n in names) + (value,)
        if key in seen:
            where = ", ".join(f"{n} {k!r}" for n, k in zip(names, key))
            raise ValueError(f"two {what} points for {where}, {x} {value}")
        seen.add(key)
        rows.append({**{n: str(p[n]) for n in names}, x: value, metric: _metric(p["metrics"], metric)})
    return rows


def _relative(new: float, old: float, path) -> float:
    if old == 0:
        raise DataError(path, None, "the baseline value is 0, so a relative gain is undefined", FIX)
    return (new - old) / abs(old)


def _not_produced(ax, scale: str) -> None:
    ax.text(0.5, 0.5, "not produced" + (f" at {scale} scale" if scale else ""), ha="center", va="center",
            transform=ax.transAxes, fontsize=9, color="tab:gray")
    ax.set_xticks([])
    ax.set_yticks([])


# ---------------------------------------------------------------------------------------------
# Figure 3


def render_figure3(points: Sequence[dict], out_png: str | os.PathLike, out_csv: str | os.PathLike,
                   metric: str = "ndcg@10", reference: dict | None = None, scale: str = "") -> list[dict]:
    """COCO-DR Figure 3: the average ``metric`` over the target datasets against (a) K and (b) the
    temperature.

    ``points``: ``{"sweep": "clusters" | "temperature", "value": K or rho (= η/τ, the form in which the
    official update carries the temperature), "system": name, "metrics":
    [metrics file per target dataset]}``; the average is the mean over the files of each file's
    aggregate ``metric``. Every point (and ``reference``) must score the same datasets.
    ``reference``: optional ``{"label", "metrics": [files]}``, a dashed horizontal line on both panels
    (the paper's is its best baseline). A sweep without points: its panel says "not produced".

    CSV columns: sweep (``clusters``, ``temperature`` or ``reference``), value, system, datasets
    (their number), average. Returns the rows."""
    rows, seen, datasets = [], set(), None
    for p in points:
        sweep = p.get("sweep")
        if sweep not in SWEEPS:
            raise ValueError(f"a Figure 3 point's sweep must be one of {', '.join(SWEEPS)}, got {sweep!r}")
        if not _number(p.get("value")):
            raise ValueError(f"a Figure 3 point needs a numeric value, got {p.get('value')!r}")
        key = (sweep, float(p["value"]))
        if key in seen:
            raise ValueError(f"two Figure 3 points for {sweep} = {p['value']}")
        seen.add(key)
        average, names = _average(p.get("metrics"), metric, f"Figure 3 point {p.get('system')!r}")
        if datasets is not None and set(names) != set(datasets):
            raise DataError(p["metrics"][0], None, f"point {p.get('system')!r} scores {sorted(names)}, another "
                            f"point {sorted(datasets)}: the averages would not compare", FIX)
        datasets = datasets or names
        rows.append({"sweep": sweep, "value": float(p["value"]), "system": str(p.get("system", "")),
                     "datasets": len(names), "average": average})
    rows.sort(key=lambda r: (list(SWEEPS).index(r["sweep"]), r["value"]))
    ref = None
    if reference:
        average, names = _average(reference.get("metrics"), metric, f"Figure 3 reference {reference.get('label')!r}")
        if datasets is not None and set(names) != set(datasets):
            raise DataError(reference["metrics"][0], None, f"the reference scores {sorted(names)}, the points "
                            f"{sorted(datasets)}: the averages would not compare", FIX)
        ref = {"sweep": "reference", "value": None, "system": str(reference.get("label", "reference")),
               "datasets": len(names), "average": average}
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.8), squeeze=False)
    shown = metric_label(metric)
    for ax, sweep in zip(axes[0], SWEEPS):
        own = [r for r in rows if r["sweep"] == sweep]
        if not own:
            _not_produced(ax, scale)
        else:
            ax.plot([r["value"] for r in own], [r["average"] for r in own], marker="o", markersize=5,
                    color="tab:blue", label="COCO-DR")
            if ref:
                ax.axhline(ref["average"], linestyle="--", color="tab:gray", linewidth=1.2, label=ref["system"])
            ax.set(xlabel=SWEEPS[sweep], ylabel=f"average {shown}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="best")
        ax.set_title(SWEEP_TITLES[sweep], fontsize=10)
    n = rows[0]["datasets"] if rows else (ref["datasets"] if ref else 0)
    fig.suptitle(scaled_title(f"COCO-DR Figure 3: average {shown} over {n} target datasets against iDRO's K and "
                         "temperature", scale), fontsize=10)
    fig.tight_layout()
    save_figure(fig, out_png)
    out = rows + ([ref] if ref else [])
    write_csv(out_csv, ["sweep", "value", "system", "datasets", "average"], out)
    return out


# ---------------------------------------------------------------------------------------------
# Figure 4


def episode_label(episode: int) -> str:
    """``1`` -> ``Epi-1`` (the BM25 warmup; 2.. are ANCE episodes)."""
    return f"Epi-{episode}"


def render_figure4(points: Sequence[dict], out_png: str | os.PathLike, out_csv: str | os.PathLike,
                   metric: str = "ndcg@10", scale: str = "") -> list[dict]:
    """COCO-DR Figure 4: ``metric`` after each training episode, one panel per dataset (in the order the
    points name them), one line per variant (likewise).

    ``points``: ``{"variant": label, "episode": 1-based episode (1 = BM25 warmup, 2.. = ANCE),
    "dataset", "metrics": metrics file}``.

    CSV columns: dataset, variant, episode, label (``Epi-<episode>``), ``metric``. Returns the rows."""
    rows = collect_points(points, "Figure 4", ("variant", "dataset"), "episode", 1, metric)
    for r in rows:
        r["label"] = episode_label(r["episode"])
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    rows.sort(key=lambda r: (datasets.index(r["dataset"]), variants.index(r["variant"]), r["episode"]))
    episodes = sorted({r["episode"] for r in rows})
    plt = pyplot()
    cols = min(len(datasets), 3)
    nrows = math.ceil(len(datasets) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.8 * cols + 0.6, 3.2 * nrows + 0.7), squeeze=False)
    shown = metric_label(metric)
    markers = "osD^v<>ph*"
    for ax, dataset in zip(axes.flat, datasets):
        for i, variant in enumerate(variants):
            own = [r for r in rows if r["dataset"] == dataset and r["variant"] == variant]
            if own:
                ax.plot([r["episode"] for r in own], [r[metric] for r in own], marker=markers[i % len(markers)],
                        markersize=4, label=variant, color=f"C{i % 10}")
        ax.set_xticks(episodes, [episode_label(e) for e in episodes])
        ax.set(title=dataset, xlabel="training episode", ylabel=shown)
        ax.title.set_fontsize(10)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(datasets):]:
        ax.set_visible(False)
    figure_legend(fig, axes)
    fig.suptitle(scaled_title(f"COCO-DR Figure 4: {shown} per training episode (Epi-1 = BM25 warmup, then ANCE)",
                         scale), fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save_figure(fig, out_png)
    write_csv(out_csv, ["dataset", "variant", "episode", "label", metric], rows)
    return rows


# ---------------------------------------------------------------------------------------------
# Figure 5


def _scatter(ax, rows: list[dict], color: str = "tab:blue") -> None:
    ax.scatter([r["x"] for r in rows], [r["y"] for r in rows], s=28, zorder=3, color=color)
    for r in rows:
        ax.annotate(r["dataset"], (r["x"], r["y"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.axhline(0, color="black", lw=0.5)
    ax.axvline(0, color="black", lw=0.5)
    ax.grid(alpha=0.3)


def render_figure5(loss_points: Sequence[dict], geometry_points: Sequence[dict], cluster_points: Sequence[dict],
                   out_png: str | os.PathLike, out_csv: str | os.PathLike, metric: str = "ndcg@10",
                   scale: str = "") -> list[dict]:
    """COCO-DR Figure 5, three panels (any list may be empty: its panel says "not produced").

    (a) ``loss_points``: ``{"dataset", "before": stats file, "after": stats file, "with": metrics file,
    "without": metrics file}``; a stats file holds ``{"contrastive_loss": float, ...}`` (the COCO loss
    on the target corpus without / with COCO pretraining). x = relative loss reduction
    ``(before − after) / before``, y = relative ``metric`` gain ``(with − without) / without``.

    (b) ``geometry_points``: ``{"label": model, "dataset", "stats": file with {"alignment",
    "uniformity"}}``; x = uniformity, y = alignment; one marker shape per model, one colour per dataset.

    (c) ``cluster_points``: ``{"dataset", "analysis": file with {"nearest_cluster": int,
    "loss_without": float, "loss_with": float}, "with": metrics file, "without": metrics file}``;
    x = relative training-loss gain from iDRO on the nearest source cluster ``(loss_without −
    loss_with) / loss_without``, y = relative ``metric`` gain from iDRO.

    CSV columns: panel (a|b|c), label (the model in b, else empty), dataset, x, y. Returns the rows."""
    rows = []
    for p in loss_points:
        before = _stats(p["before"], ("contrastive_loss",), positive=True)["contrastive_loss"]
        after = _stats(p["after"], ("contrastive_loss",))["contrastive_loss"]
        without = _metric(p["without"], metric)
        rows.append({"panel": "a", "label": "", "dataset": str(p["dataset"]), "x": (before - after) / before,
                     "y": _relative(_metric(p["with"], metric), without, p["without"])})
    for p in geometry_points:
        stats = _stats(p["stats"], ("alignment", "uniformity"))
        rows.append({"panel": "b", "label": str(p["label"]), "dataset": str(p["dataset"]),
                     "x": float(stats["uniformity"]), "y": float(stats["alignment"])})
    for p in cluster_points:
        data = _stats(p["analysis"], ("loss_without", "loss_with"), positive=False)
        cluster = data.get("nearest_cluster")
        if isinstance(cluster, bool) or not isinstance(cluster, int):
            raise DataError(p["analysis"], None, "no integer 'nearest_cluster'", FIX)
        if not data["loss_without"] > 0:
            raise DataError(p["analysis"], None, f"'loss_without' is {data['loss_without']}, not > 0", FIX)
        without = _metric(p["without"], metric)
        rows.append({"panel": "c", "label": "", "dataset": str(p["dataset"]),
                     "x": (data["loss_without"] - data["loss_with"]) / data["loss_without"],
                     "y": _relative(_metric(p["with"], metric), without, p["without"])})
    shown = metric_label(metric)
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(14.0, 4.4), squeeze=False)
    titles = {"a": "(a) COCO: loss reduction vs zero-shot gain", "b": "(b) alignment vs uniformity",
              "c": "(c) iDRO: nearest-cluster loss gain vs target gain"}
    labels = {"a": ("relative reduction of the COCO contrastive loss", f"relative {shown} gain from COCO"),
              "b": ("uniformity (lower = more uniform)", "alignment (lower = better aligned)"),
              "c": ("relative training-loss gain on the nearest source cluster", f"relative {shown} gain from iDRO")}
    for ax, panel in zip(axes[0], "abc"):
        own = [r for r in rows if r["panel"] == panel]
        ax.set_title(titles[panel], fontsize=10)
        if not own:
            _not_produced(ax, scale)
            continue
        ax.set(xlabel=labels[panel][0], ylabel=labels[panel][1])
        if panel != "b":
            _scatter(ax, own)
            if panel == "c":
                both = sum(1 for r in own if r["x"] > 0)
                ax.text(0.02, 0.98, f"loss improved on {both} of {len(own)} nearest clusters", fontsize=7,
                        transform=ax.transAxes, va="top")
            continue
        models = list(dict.fromkeys(r["label"] for r in own))
        datasets = list(dict.fromkeys(r["dataset"] for r in own))
        markers = "osD^v<>ph*"
        for r in own:
            ax.scatter(r["x"], r["y"], s=36, zorder=3, marker=markers[models.index(r["label"]) % len(markers)],
                       color=f"C{datasets.index(r['dataset']) % 10}")
        from matplotlib.lines import Line2D

        handles = ([Line2D([], [], linestyle="", marker=markers[i % len(markers)], color="black", label=m)
                    for i, m in enumerate(models)]
                   + [Line2D([], [], linestyle="", marker="o", color=f"C{i % 10}", label=d)
                      for i, d in enumerate(datasets)])
        ax.legend(handles=handles, fontsize=7, loc="best")
        ax.grid(alpha=0.3)
    fig.suptitle(scaled_title("COCO-DR Figure 5: COCO and iDRO against distribution shift", scale), fontsize=11)
    fig.tight_layout()
    save_figure(fig, out_png)
    write_csv(out_csv, ["panel", "label", "dataset", "x", "y"], rows)
    return rows


# ---------------------------------------------------------------------------------------------
# Table 4

TABLE4_COLUMNS = ["source", "target_query", "qid", "target_ndcg10_gain", "nearest_source_query", "source_gain"]
PUBLISHED4 = {"target_query": "target_trec_covid_query", "target_ndcg10_gain": "target_ndcg10_gain",
              "nearest_source_query": "nearest_msmarco_query", "source_gain": "source_gain"}


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_table4(out_csv: str | os.PathLike, out_md: str | os.PathLike, rows: list[dict],
                 published: str | os.PathLike = "cocodr_table4.csv", scale: str = "") -> None:
    """Write the case study's rows and the paper's (``published``: cocodr_table4.csv) atomically.

    ``rows``: ``{"target_query", "qid", "target_gain", "nearest_source_query", "source_gain"}`` (and
    optionally ``"metric"``, default ``ndcg@10``): a target query's metric gain from iDRO (after −
    before), its nearest source training query and that query's training-loss gain (before − after,
    positive = iDRO lowered it; None when not computed).

    CSV columns: ``source`` (``zsdr`` or ``published``), ``target_query``, ``qid`` (empty for the
    paper's rows), ``target_ndcg10_gain`` (ours signed with three decimals; the column keeps that name
    whatever the rows' ``metric``), ``nearest_source_query``, ``source_gain``. The Markdown: a title,
    the scale, our rows and then the paper's, marked (published)."""
    paper = read_published(published, tuple(PUBLISHED4.values()))
    for r in rows:
        missing = [k for k in ("target_query", "qid", "target_gain", "nearest_source_query") if k not in r]
        if missing:
            raise ValueError(f"a Table 4 row lacks {', '.join(missing)}")
    metric = next((r["metric"] for r in rows if r.get("metric")), "ndcg@10")
    shown = metric_label(metric)
    out = [{"source": "zsdr", "target_query": r["target_query"], "qid": r["qid"],
            "target_ndcg10_gain": format_value(r["target_gain"], "+d3"),
            "nearest_source_query": r["nearest_source_query"],
            "source_gain": format_value(r.get("source_gain"), "+d3")} for r in rows]
    out += [{"source": "published", "qid": "", **{ours: p[theirs] for ours, theirs in PUBLISHED4.items()}}
            for p in paper]
    write_csv(out_csv, TABLE4_COLUMNS, out)
    lines = ["# COCO-DR Table 4: case study", "",
             f"Scale: {scale or 'unspecified'}. The target queries with the largest {shown} gain from iDRO (with − "
             "without iDRO), the nearest source training query to each by the inner product of query embeddings, "
             "and that source query's training-loss gain from iDRO (loss without − with; positive = iDRO lowered "
             "it). The paper's rows (TREC-COVID / MS MARCO, COCO-DR Base) follow, marked (published)"
             f"{'' if metric == 'ndcg@10' else '; their gains are in nDCG@10'}.", "",
             f"| Target query | {shown} gain | Nearest source query | Source gain |", "|---|---|---|---|"]
    cells = [(f"{_md(str(r['target_query']))} ({r['qid']})", o["target_ndcg10_gain"],
              _md(str(r["nearest_source_query"])), o["source_gain"] or "—") for r, o in zip(rows, out)]
    cells += [(f"{_md(p['target_trec_covid_query'])} *(published)*", p["target_ndcg10_gain"],
               _md(p["nearest_msmarco_query"]), p["source_gain"] or "—") for p in paper]
    for query, gain, nearest, source_gain in cells:
        lines.append(f"| {query} | {gain} | {nearest} | {source_gain} |")
    lines.append("")
    with atomic_write(out_md) as fh:
        fh.write("\n".join(lines))


# ---------------------------------------------------------------------------------------------
# Figure 5c's cluster records and Table 4's rows, from the iDRO run's last clustering (rule cocodr_clusters)

SIDES = {"with": "with_idro", "without": "without_idro"}
"""Figure 5c / Table 4's two models: the fine-tuning with iDRO and the same without (config cocodr.analysis)."""

TABLE4_METRIC = "ndcg@10"
"""The per-query metric whose gain picks Table 4's target queries (the paper's nDCG@10 column)."""


def _analysis_file(files: Sequence[str | os.PathLike], dataset: str) -> str | os.PathLike:
    for f in files:
        if Path(f).name == f"{dataset}.json":
            return f
    raise ValueError(f"cocodr clusters: no analysis output file named {dataset}.json for target {dataset}")


def cocodr_cluster_analysis(*, source: str | os.PathLike, targets: Mapping[str, str], splits: Mapping[str, str],
                            with_idro: Mapping[str, Any], without_idro: Mapping[str, Any],
                            metrics: Mapping[str, Mapping[str, str]], table4_dataset: str, queries: int,
                            max_source_queries: int | None, seed: int, dense: Mapping[str, Any], scale: str,
                            clusters: str | os.PathLike, negatives: str | os.PathLike,
                            published: str | os.PathLike, analysis: Sequence[str | os.PathLike],
                            csv: str | os.PathLike, md: str | os.PathLike) -> dict[str, dict]:
    """Write each target's nearest-cluster record (``analysis``: one ``<target>.json`` per target of ``targets``)
    and Table 4 (``csv``, ``md``, beside the paper's rows in ``published``).

    ``source``: the source dataset's folder, whose judged training queries ``clusters`` (the iDRO run's last
    clusters file) groups (a seeded sample of ``max_source_queries`` of them, when set); ``negatives``: that
    run's mined negatives, on which both models' training losses are taken. ``with_idro`` / ``without_idro``:
    each model's ``system``, ``model``, encoder ``options`` and logit ``scale``; ``metrics``: target ->
    ``with_idro`` / ``without_idro`` -> its metrics file. ``splits``: each target's evaluation split;
    ``table4_dataset`` and ``queries``: the target and the number of its queries Table 4 lists; ``dense``:
    config `dense` (device, batch size). Returns the records by target.

    The encoder, the training losses and the clusters file are imported here, not with this module: the figures
    and tables that import it run no model (their code stamps, zsdr.plan.code), and rule `cocodr_clusters`
    names those modules itself."""
    from zsdr.data.formats import judged_queries
    from zsdr.evaluation.cocodr import (by_cluster, by_query, cluster_centroids, example_losses, nearest_clusters,
                                       nearest_source, pick_gains)
    from zsdr.models.encoder import load_encoder
    from zsdr.training.idro import read_clusters

    if table4_dataset not in targets:
        raise ValueError(f"cocodr clusters: Table 4's dataset {table4_dataset!r} is not a target "
                         f"({', '.join(targets)}); fix: config cocodr.table4.dataset")
    device = None if dense["device"] == "auto" else dense["device"]
    batch = dense["batch_size"]
    assigned = read_clusters(clusters)
    k = max(assigned.values()) + 1
    source_texts = judged_queries(source, "train")
    qids = [q for q in source_texts if q in assigned]
    if max_source_queries and len(qids) > max_source_queries:
        qids = sorted(random.Random(seed).sample(qids, max_source_queries), key=qids.index)
    sides = {"with": with_idro, "without": without_idro}

    encoder = load_encoder(with_idro["model"], device=device, **with_idro["options"])
    source_emb = encoder.encode_queries([source_texts[q] for q in qids], batch_size=batch, device=device)
    labels = np.array([assigned[q] for q in qids])
    # one pass of training losses per model serves Figure 5c's clusters and Table 4's queries
    pairs = {side: example_losses(s["model"], s["options"], source, negatives, set(qids).__contains__,
                                  scale=s["scale"], seed=seed, batch_size=batch, device=device)
             for side, s in sides.items()}
    cluster_losses = {side: by_cluster(pairs[side], assigned, k) for side in sides}
    query_losses = {side: by_query(pairs[side]) for side in sides}
    # a cluster without a training loss under both models (no mined negatives) is not a candidate
    centroids = cluster_centroids(source_emb, labels, k)
    centroids[[c for c in range(k) if any(cluster_losses[side][c]["loss"] is None for side in sides)]] = np.nan

    records, target_emb = {}, {}
    for d, folder in targets.items():
        texts = judged_queries(folder, splits[d])
        target_emb[d] = (texts, encoder.encode_queries(list(texts.values()), batch_size=batch, device=device))
        c, scores = nearest_clusters(target_emb[d][1], centroids)
        record = {"dataset": d, "nearest_cluster": int(c), "cluster_queries": int((labels == c).sum()),
                  "loss_with": cluster_losses["with"][c]["loss"], "loss_without": cluster_losses["without"][c]["loss"],
                  "scores": {str(i): float(v) for i, v in enumerate(scores) if np.isfinite(v)},
                  "with": with_idro["system"], "without": without_idro["system"], "clusters": clusters}
        log.info("%s: nearest source cluster %d (%d queries), training loss %.4f without iDRO, %.4f with", d, c,
                 record["cluster_queries"], record["loss_without"], record["loss_with"])
        with atomic_write(_analysis_file(analysis, d)) as fh:
            fh.write(json.dumps(record, indent=1) + "\n")
        records[d] = record

    # Table 4: the target queries iDRO helps most, their nearest source training query and its loss change.
    scores = {side: metric_scores(read_metrics(metrics[table4_dataset][key]), metrics[table4_dataset][key],
                                  TABLE4_METRIC)[1] for side, key in SIDES.items()}
    picked = pick_gains(scores["without"], scores["with"], n=queries)
    texts, emb = target_emb[table4_dataset]
    order = list(texts)
    nearest = nearest_source(emb[[order.index(q) for q, _ in picked]], source_emb)

    def gain(qid: str) -> float | None:
        before, after = query_losses["without"].get(qid), query_losses["with"].get(qid)
        return None if before is None or after is None else float(before - after)

    rows = [{"target_query": texts[q], "qid": q, "target_gain": float(g), "nearest_source_query": source_texts[s],
             "source_gain": gain(s)} for (q, g), s in zip(picked, (qids[i] for i in nearest))]
    write_table4(csv, md, rows, published=published, scale=scale)
    return records
