"""The catalogue of systems: ``systems.yaml``, every system id a table spec may name, with its label,
provenance (T: trained or regenerated here, L: a public checkpoint evaluated here, R: reported
numbers only), the pipeline stage that builds it, and what a cell says when this run cannot produce it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from zsdr.io import safe_yaml
from zsdr.tables.spec_model import PROVENANCES, KeyContext, package_dir

SYSTEMS_FILE = package_dir("systems.yaml")


@dataclass(frozen=True)
class System:
    id: str
    label: str
    provenance: str
    stage: str
    hf: str | None = None
    pooling: str | None = None
    similarity: str | None = None
    reason: str | None = None
    note: str | None = None
    release: str | None = None  # an archive the pipeline converts (zsdr.models.released) where hf is null


@dataclass(frozen=True)
class Stage:
    name: str
    label: str
    built: bool


@functools.lru_cache(maxsize=None)
def _systems_file() -> tuple[dict[str, Stage], dict[str, System]]:
    ctx = KeyContext(SYSTEMS_FILE)
    data = ctx.mapping(safe_yaml(SYSTEMS_FILE.read_text(encoding="utf-8")), "(top level)")
    ctx.only(data, {"stages", "systems"}, "(top level)")
    stages: dict[str, Stage] = {}
    for name, entry in ctx.mapping(data.get("stages", {}), "stages").items():
        entry = ctx.mapping(entry, f"stages.{name}")
        ctx.only(entry, {"state", "label"}, f"stages.{name}")
        if entry.get("state") not in ("built", "planned"):
            raise ctx.error(f"stages.{name}.state", f"{entry.get('state')!r} is neither built nor planned")
        stages[name] = Stage(name=name, label=ctx.text(entry.get("label", name), f"stages.{name}.label"),
                             built=entry["state"] == "built")
    systems: dict[str, System] = {}
    allowed = {"label", "provenance", "stage", "hf", "pooling", "similarity", "reason", "note", "release"}
    for sid, entry in ctx.mapping(data.get("systems"), "systems").items():
        key = f"systems.{sid}"
        entry = ctx.mapping(entry, key)
        ctx.only(entry, allowed, key)
        prov = entry.get("provenance")
        if prov not in PROVENANCES:
            raise ctx.error(f"{key}.provenance", f"{prov!r} is not one of T, L, R")
        stage = entry.get("stage")
        if prov == "R":
            if stage != "none":
                raise ctx.error(f"{key}.stage", "a reported-only (R) system has stage `none`")
            if not entry.get("reason"):
                raise ctx.error(f"{key}.reason", "a reported-only (R) system needs a reason")
        elif stage not in stages:
            raise ctx.error(f"{key}.stage", f"{stage!r} is not listed under `stages`")
        if prov == "L" and not {"hf", "pooling", "similarity"} <= set(entry):
            raise ctx.error(key, "a loaded (L) system names hf (or null), pooling and similarity")
        if prov == "L" and entry.get("hf") is None and not entry.get("reason") and not entry.get("release"):
            raise ctx.error(f"{key}.reason", "an L system without a Hugging Face id needs a release or a reason")
        systems[sid] = System(id=sid, label=ctx.text(entry.get("label", sid), f"{key}.label"), provenance=prov,
                              stage=stage, hf=entry.get("hf"), pooling=entry.get("pooling"),
                              similarity=entry.get("similarity"), reason=entry.get("reason"), note=entry.get("note"),
                              release=entry.get("release"))
    return stages, systems


def load_systems() -> dict[str, System]:
    """``systems.yaml``: every system id a spec may name."""
    return _systems_file()[1]


def load_stages() -> dict[str, Stage]:
    """``systems.yaml`` ``stages``: which stages the pipeline has built."""
    return _systems_file()[0]


def unavailable_reason(system_id: str) -> str:
    """What a cell says when the pipeline cannot produce ``system_id`` in this run."""
    system = load_systems()[system_id]
    if system.reason:
        return system.reason
    if system.provenance == "L":
        return f"checkpoint {system.hf or system.release} not in this run's config (systems.{system_id})"
    stage = load_stages()[system.stage]
    if not stage.built:
        return f"needs the {stage.label} stage (not built yet)"
    return f"not in this run's config (systems.{system_id})"
