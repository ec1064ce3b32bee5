"""Stage 10, regressions: which published values are measured here, by which jobs, and why the others are not.

Each published value (zsdr.regressions.published: the project's file and config `regressions.files`) becomes
one row of the report. A row is measured when its system is one of the config's, its dataset can be built here
(a registry download, a local folder: zsdr.plan.datasets) and its model is here (a local folder that exists; a
Hugging Face id, which with `offline: true` must be in the cache); its measured value is then the metrics file of
the `evaluate_regression` job of its (dataset, system). Any other row is NOT RUN, with the reason, and asks for
no job: a missing dataset or checkpoint never fails the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.datasets import Datasets
from zsdr.plan.references import looks_like_a_folder
from zsdr.plan.systems import Systems


@dataclass(frozen=True)
class Regressions:
    rows: list[dict[str, Any]]       # the report's rows: published fields and `metrics` (measured) or `reason`
    pairs: list[tuple[str, str]]     # (dataset, system) measured
    metrics: list[str]               # the metrics every regression evaluation computes
    missing_models: list[str]        # systems whose model is not here (no job loads them)
    metrics_root: str

    @property
    def systems(self) -> list[str]:
        return sorted({s for _, s in self.pairs})

    def metrics_file(self, dataset: str, system: str) -> str:
        return f"{self.metrics_root}/regressions/{dataset}/{system}.json"

    @property
    def metrics_files(self) -> list[str]:
        return [self.metrics_file(d, s) for d, s in self.pairs]


def model_problem(systems: Systems, system: str, dataset: str) -> str | None:
    """Why the model ``system`` loads on ``dataset`` is not here, or None (BM25, a model the DAG builds, a model
    folder that holds a model, a Hugging Face id: in the cache when `offline`)."""
    spec = systems.by_name[system]
    if spec.get("kind") != "dense":
        return None
    raw = spec.get("model")
    if "backbone" in spec and spec["backbone"] in systems.recipes.backbones:
        raw = systems.recipes.backbones[spec["backbone"]].get("hf")
    if isinstance(raw, str) and looks_like_a_folder(raw):
        from pathlib import Path

        if not Path(raw).expanduser().is_dir():
            return f"checkpoint not available: the model folder {raw} (system {system}) does not exist"
    try:
        systems.dense_model(system, dataset)
    except ValueError as exc:   # a ConfigError too: an incomplete folder, a hub id not in the offline cache
        return f"checkpoint not available: {exc}"
    return None


def dataset_problem(datasets: Datasets, name: str) -> str | None:
    """Why ``name`` cannot be evaluated here (zsdr.plan.datasets.Datasets.unavailable; an evaluation split it
    has no qrels for), or None."""
    reason = datasets.unavailable(name)
    if reason is None and name not in datasets.mini:
        split, splits = datasets.eval_split(name), datasets.dataset(name).splits
        if split not in splits:
            reason = (f"dataset {name!r} has no split {split!r} (its splits: {', '.join(splits)}; config key "
                      f"datasets.eval_splits.{name})")
    return reason


def build_regressions(config: dict[str, Any], datasets: Datasets, systems: Systems) -> Regressions:
    from zsdr.regressions.published import PublishedError, read_all

    section = config["regressions"]
    try:
        published = read_all(section.get("files") or [], builtin=section["builtin"])
    except PublishedError as exc:
        raise ValueError(f"config key regressions.files: {exc}") from None
    only_systems, only_datasets = section.get("systems"), section.get("datasets")
    rows, pairs, missing = [], [], set()
    dataset_reason: dict[str, str | None] = {}
    for p in published:
        if only_systems is not None and p.system not in only_systems:
            continue
        if only_datasets is not None and p.dataset not in only_datasets:
            continue
        row = {"system": p.system, "dataset": p.dataset, "metric": p.metric, "value": p.value,
               "tolerance": p.tolerance, "source": p.source, "note": p.note}
        reason = None
        if p.system not in systems.by_name:
            reason = (f"system {p.system!r} is not defined by this config (config key systems; "
                      "configs/regressions.yaml defines the released checkpoints)")
        if reason is None:
            if p.dataset not in dataset_reason:
                dataset_reason[p.dataset] = dataset_problem(datasets, p.dataset)
            reason = dataset_reason[p.dataset]
            if reason is not None:
                reason = f"dataset not available: {reason}"
        if reason is None:
            reason = model_problem(systems, p.system, p.dataset)
            if reason is not None:
                missing.add(p.system)
        if reason is None:
            pair = (p.dataset, p.system)
            if pair not in pairs:
                pairs.append(pair)
            row["metrics"] = f"{datasets.paths.metrics}/regressions/{p.dataset}/{p.system}.json"
        else:
            row["reason"] = reason
        rows.append(row)
    metrics = list(dict.fromkeys([*config["evaluation"]["metrics"], *(r["metric"] for r in rows)]))
    return Regressions(rows=rows, pairs=pairs, metrics=metrics, missing_models=sorted(missing),
                       metrics_root=datasets.paths.metrics)
