"""Stage 3, model references: what a config name (`init`, a system's `model`, a reader, a generator) loads.

A name is a backbone (built by the DAG or a hub id), a recipe (its trained folder), a pretrained model (COCO,
a release or a hub id), a DAM chain, a cross-encoder, a release (zsdr.models.released) or a hub id / folder.
A model the DAG does not build must be usable when the plan is made: a folder must hold a complete model, and
with `offline: true` a hub id must be in the local cache; hub ids known to lack a head a training keeps
(zsdr.models.released.KNOWN_CHECKPOINTS) are refused here, not hours into a job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zsdr.models.released import KNOWN_CHECKPOINTS, RELEASES
from zsdr.plan.recipes import DAM_SEP, Recipes


@dataclass(frozen=True)
class ModelRefs:
    """Model references of one config (``checked``: hub ids and folders already checked on this machine)."""

    recipes: Recipes
    config: dict[str, Any]
    checked: set[str] = field(default_factory=set, compare=False, repr=False)

    @property
    def models(self) -> str:
        return self.recipes.datasets.paths.models

    def on_this_machine(self, ref: str) -> str:
        """``ref``; a model the DAG does not build must be usable, or planning fails naming its config key
        (not a job, minutes later): a folder must hold a complete model, and with `offline: true` a
        Hugging Face id must be in the local cache."""
        from zsdr.workflow import check_model_reference

        if not ref.startswith(f"{self.models}/") and ref not in self.checked:
            check_model_reference(ref, self.config, self.config["offline"])
            self.checked.add(ref)
        return ref

    def model_ref(self, name: str) -> str:
        """What `init` names: a backbone, a recipe's trained model, a cross-encoder, or an HF id/folder."""
        r = self.recipes
        if name in r.backbones:
            b = r.backbones[name]
            return f"{self.models}/backbones/{name}" if "build" in b else self.on_this_machine(b["hf"])
        if name in r.by_name:
            return r.trained_model(name)
        if name in r.pretrained:
            p = r.pretrained[name]
            if "release" in p:
                return self.released_model(p["release"], f"cocodr.pretrained.{name}.release")
            return self.on_this_machine(p["hf"]) if "hf" in p else f"{self.models}/pretrained/{name}"
        if r.is_dam(name):
            return self.dam_path(name, "init")
        if name in r.cross_encoders:
            return f"{self.models}/cross-encoders/{name}"
        if name in RELEASES:
            return f"{self.models}/released/{name}"
        return self.on_this_machine(name)

    def released_model(self, name: str, where: str) -> str:
        """The folder the DAG converts the release ``name`` into (zsdr.models.released), or a config error."""
        if name not in RELEASES:
            raise ValueError(f"config key {where}: {name!r} is not a release (known: {', '.join(sorted(RELEASES))})")
        return f"{self.models}/released/{name}"

    def dam_path(self, chain: str, where: str) -> str:
        self.recipes.dam_parts(chain, where)
        return f"{self.models}/dams/{chain}"

    def model_files(self, ref: str) -> list[str]:
        """The files a job waits for before loading ``ref`` (none for a Hugging Face id; a DAM's snapshot
        exists once its DAM is trained; a converted REM release is its rem.json)."""
        if not ref.startswith(f"{self.models}/"):
            return local_model_files(ref)
        released = f"{self.models}/released/"
        name = ref[len(released):] if ref.startswith(released) else None
        if name in RELEASES and RELEASES[name].kind == "adapter-rem":
            return [f"{ref}/rem.json"]
        return [f"{ref.split('/snapshots/')[0]}/config.json"]

    def named_model(self, name: str, table: dict[str, Any], key: str, table_key: str, folder: str) -> str:
        """What a model named in config key ``key`` loads: its `hf` id / folder from ``table`` (config
        ``table_key``), else the folder the pipeline trains it into, models/<folder>/<name>."""
        if name not in table:
            raise ValueError(
                f"config key {key}: {name!r} is not a key of {table_key} (defined: {', '.join(table) or 'none'})"
            )
        entry = table[name]
        return self.on_this_machine(entry["hf"]) if "hf" in entry else f"{self.models}/{folder}/{name}"

    def reader_path(self, name: str) -> str:
        """What a reader loads: its trained folder (models/readers/<name>) or its `hf` id / folder."""
        return self.named_model(name, self.recipes.readers, "berm.labels.reader", "`readers`", "readers")

    def generator_path(self, name: str) -> str:
        """What a QGen generator loads: its `hf` id / folder or models/generators/<name>."""
        generators = self.config["rmsc"]["qgen"]["generators"]
        return self.named_model(name, generators, "rmsc.qgen.generator", "rmsc.qgen.generators", "generators")

    def check_head_source(self, ref: str, where: str) -> None:
        """A COCO pretraining that continues its init's Condenser head must not start from a hub copy known to
        lack it (zsdr.models.released.KNOWN_CHECKPOINTS): said when the plan is made, not hours into a job."""
        known = KNOWN_CHECKPOINTS.get(ref)
        if known is not None and known.get("condenser_head") is False:
            instead = known.get("instead", "a checkpoint that carries one")
            raise ValueError(
                f"config key {where}: {ref} carries no Condenser head ({known['note']}), which COCO pretraining "
                f"continues; start from {instead} (cocodr.pretrained.<name>: {{release: condenser}}), "
                "or start a new head on purpose with `head: new`"
            )

    def check_ance_head(self, recipe: dict[str, Any], init: str, where: str) -> None:
        """A cls_linear_ln recipe that keeps its init's ANCE head (no `head: new`) must not start from a hub id
        known to carry none (zsdr.models.released.KNOWN_CHECKPOINTS): said when the plan is made."""
        known = KNOWN_CHECKPOINTS.get(init)
        pooling = recipe["encoder"].get("pooling") or self.recipes.recipe_pooling(recipe.get("init"))
        if pooling == "cls_linear_ln" and recipe.get("head") != "new" and known and known.get("ance_head") is False:
            raise ValueError(
                f"config key {where}.head: {init} carries no ANCE head ({known['note']}), which cls_linear_ln "
                "pooling would keep; set `head: new` to start one on purpose, or start from a checkpoint with one"
            )

    def check_offline(self, skip: Iterable[str] = ()) -> None:
        """With `offline: true`, every model the config names must be on this machine when planning starts,
        whether or not the requested targets use it (each is checked once); ``skip``: systems whose model
        may be missing (a regression row of one is NOT RUN, zsdr.plan.regressions)."""
        if not self.config["offline"]:
            return
        skip = set(skip)
        for name, s in self.config["systems"].items():
            if name in skip:
                continue
            if isinstance(s.get("model"), str) and s["model"] not in RELEASES:
                self.on_this_machine(s["model"])
        for _, r in self.recipes.by_name.items():
            if isinstance(r.get("init"), str):
                self.model_ref(r["init"])


def looks_like_a_folder(ref: str) -> bool:
    """Whether a model reference names a folder rather than a Hugging Face id: it exists as one, or is written as
    a path (absolute, ``./``, ``../``, ``~``)."""
    return Path(ref).expanduser().is_dir() or ref.startswith(("/", "./", "../", "~"))


def local_model_files(ref: str) -> list[str]:
    """The files of a local model folder (not one the DAG builds), which the jobs that load it read: replacing one
    re-runs exactly them. None for a Hugging Face id (its cache is not the workflow's) or a missing folder."""
    folder = Path(ref).expanduser()
    if not folder.is_dir():
        return []
    return sorted(str(p) for p in folder.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def build_model_refs(config: dict[str, Any], recipes: Recipes) -> ModelRefs:
    return ModelRefs(recipes=recipes, config=config)


__all__ = ["DAM_SEP", "ModelRefs", "build_model_refs"]
