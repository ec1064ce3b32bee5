"""The plan's config checks: each raises a ValueError that names the config key to fix, before any job runs.

The schema (schemas/config.schema.yaml, zsdr.workflow.check_config) checks every key's type and value; what
it cannot say — how recipes, systems, datasets and sections fit together — is checked here, by the stage
that resolves them (each check is called from its stage's build function).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def check_recipe(name: str, r: dict[str, Any], recipes: dict[str, Any]) -> None:
    """A recipe's settings fit together (episodes, init, head, DRO, mixtures)."""
    e = r["episodes"]
    if e > 1 and r["negatives"] != "ance":
        raise ValueError(f"config key recipes.{name}.episodes: {e} episodes need `negatives: ance`")
    if r["negatives"] == "ance" and r["init"] not in recipes and not r.get("base_system"):
        raise ValueError(
            f"config key recipes.{name}.init: ANCE episodes mine with the previous model, "
            f"so init must be another recipe (got {r['init']!r}) or `base_system` must name "
            f"the system that mines"
        )
    if r.get("head") == "new" and r["init"] in recipes:
        raise ValueError(
            f"config key recipes.{name}.head: `new` would discard the head of the trained "
            f"{r['init']!r} it starts from (set `head: checkpoint`, or init from a plain backbone)"
        )
    if r.get("dro") and r["negatives"] != "ance":
        raise ValueError(
            f"config key recipes.{name}.dro: the query clusters are refreshed with each ANCE "
            f"episode's negatives, so a `dro` recipe needs `negatives: ance`"
        )
    if r.get("mixture") and (r["negatives"] != "random" or r["loss"] != "contrastive"):
        raise ValueError(
            f"config key recipes.{name}.mixture: RMSC's joint training draws one random "
            f"negative per query (set negatives: random, loss: contrastive)"
        )
    if r.get("mixture") and not r["train"].get("max_steps"):
        raise ValueError(
            f"config key recipes.{name}.train.max_steps: a mixture recipe is evaluated at "
            f"snapshots, so its length is given in steps"
        )
    if r["negatives"] == "random" and not r.get("mixture"):
        raise ValueError(
            f"config key recipes.{name}.negatives: random negatives come with a `mixture` "
            f"section (the supervision sets)"
        )


def _single_run(name: str, key: str, why: str, r: dict[str, Any]) -> None:
    """A recipe section that trains one model per target: no episodes, no REM."""
    if r["episodes"] > 1 or r.get("rem"):
        raise ValueError(f"config key recipes.{name}.{key}: {why}")


def check_per_target_init(name: str, r: dict[str, Any]) -> None:
    _single_run(name, "per_target_init", "per-target training is for single-episode full fine-tuning (no "
                "episodes, no rem)", r)


def check_modir_recipe(name: str, r: dict[str, Any]) -> None:
    _single_run(name, "modir", "MoDIR continues one model per target (set episodes: 1, no rem)", r)
    if not r["train"].get("max_steps"):
        raise ValueError(
            f"config key recipes.{name}.train.max_steps: MoDIR evaluates every target at a "
            f"fixed step, so its length is given in steps"
        )


def check_mixture_recipe(name: str, r: dict[str, Any]) -> None:
    _single_run(name, "mixture", "a mixture recipe is one run per target (set episodes: 1, no rem)", r)


def check_recipe_targets(name: str, wanted: Iterable[str], targets: Iterable[str]) -> list[str]:
    """A per-target recipe's `targets`, each a configured target."""
    targets = list(targets)
    unknown = [d for d in wanted if d not in targets]
    if unknown:
        raise ValueError(
            f"config key recipes.{name}.targets: {unknown} are not configured targets "
            f"(datasets.targets / datasets.extra)"
        )
    return list(wanted)


def check_members(names: Iterable[str], allowed: Iterable[str], key: str, what: str) -> None:
    """Every name of config key ``key`` is one of ``allowed`` (``what`` says what they must be)."""
    allowed = set(allowed)
    for name in names:
        if name not in allowed:
            raise ValueError(f"config key {key}: {name!r} is not {what}")


def check_source_context(context: list[str]) -> None:
    domain, relevance = context
    if domain not in ("source", "target") or relevance not in ("human", "weak"):
        raise ValueError(
            f"config key rmsc.source_context: {context} must be [domain, relevance], "
            "domain source or target, relevance human or weak (e.g. [target, human])"
        )


def check_system_name(name: str, systems: dict[str, Any], where: str) -> str:
    if name not in systems:
        raise ValueError(
            f"config key {where}: system {name!r} is not defined under `systems` (defined: {', '.join(systems)})"
        )
    return name


def check_evaluation(config: dict[str, Any], evaluated: Iterable[str], eval_split: Any) -> None:
    """What evaluation jobs would fail on, said when the plan is made: every metric of `evaluation.metrics` known
    (zsdr.evaluation.metrics), every metric a table or figure reads among them, and every evaluated registry
    dataset's split one it has."""
    from zsdr.data import registry
    from zsdr.evaluation.metrics import parse_metrics

    metrics = config["evaluation"]["metrics"]
    try:
        parse_metrics(metrics)
    except ValueError as exc:
        raise ValueError(f"config key evaluation.metrics: {exc}") from None
    for key, name in (("table1.metric", config["table1"]["metric"]),
                      ("ddr.figure4.metric", config["ddr"]["figure4"].get("metric"))):
        if name is not None and name not in metrics:
            raise ValueError(
                f"config key {key}: {name!r} is not computed; add it to evaluation.metrics (computed: {', '.join(metrics)})"
            )
    # the mini benchmark's source has train and dev queries, its targets test queries (zsdr.data.mini)
    mini = {m["name"]: ("train", "dev") if m.get("role") == "source" else ("test",)
            for m in [*config["mini"]["domains"], *(config.get("mini_zh") or {}).get("domains", [])]}
    for name in evaluated:
        split = eval_split(name)
        local = (config["datasets"].get("local") or {}).get(name) or {}
        known = (tuple(local["splits"]) if local.get("splits") else
                 registry.REGISTRY[name].splits if name in registry.REGISTRY else
                 ("test",) if local else mini.get(name))
        if known is not None and split not in known:
            raise ValueError(
                f"config key datasets.eval_splits.{name}: {name} has no split {split!r} (its splits: {', '.join(known)})"
            )
