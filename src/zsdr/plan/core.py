"""The plan of a validated config: every job's settings, as plain functions of the config.

``Plan(config, root)`` resolves the config once (systems, recipes and their runs, the specs of every
training) and raises a ValueError naming the config key of the first mistake. The Snakemake rules
call into it through thin wildcard adapters; nothing here imports Snakemake.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zsdr.plan.berm import BermPlan
from zsdr.plan.cocodr import CocodrPlan
from zsdr.plan.code import CodePlan
from zsdr.plan.datasets import DatasetsPlan
from zsdr.plan.ddr import DdrPlan
from zsdr.plan.figures import FiguresPlan
from zsdr.plan.modir import ModirPlan
from zsdr.plan.recipes import RecipesPlan
from zsdr.plan.resources import ResourcesPlan
from zsdr.plan.rmsc import RmscPlan
from zsdr.plan.summary import SummaryPlan
from zsdr.plan.systems import SystemsPlan
from zsdr.plan.tables import TablesPlan
from zsdr.plan.training import TrainingPlan


class Plan(
    DatasetsPlan,
    CodePlan,
    RecipesPlan,
    ModirPlan,
    RmscPlan,
    DdrPlan,
    SystemsPlan,
    ResourcesPlan,
    TablesPlan,
    CocodrPlan,
    TrainingPlan,
    BermPlan,
    FiguresPlan,
    SummaryPlan,
):
    """The resolved plan of one config (``root``: the workflow folder, for relative code paths;
    ``workdir``: the working directory the workflow runs in, where code stamps go, default ``root``)."""

    def __init__(
        self,
        config: dict[str, Any],
        root: str | os.PathLike,
        berm_grid: dict[tuple[float, float], str] | None = None,
        cocodr_sweeps: dict[tuple[str, float], str] | None = None,
        workdir: str | os.PathLike | None = None,
    ) -> None:
        """``config``: validated (schema defaults filled in); ``berm_grid`` and ``cocodr_sweeps``: the
        recipes :func:`zsdr.workflow.expand_berm_grid` and :func:`~zsdr.workflow.expand_cocodr_sweeps`
        added to it."""
        self.config = config
        self.root = str(root)
        self.workdir = str(root if workdir is None else workdir)
        self.BERM_GRID = berm_grid or {}
        self.COCODR_SWEEPS = cocodr_sweeps or {}
        self._setup_datasets()
        self._setup_datasets_2()
        self._setup_recipes()
        self._setup_modir()
        self._setup_rmsc()
        self._setup_modir_2()
        self._setup_ddr()
        self._setup_systems()
        self._setup_resources()
        self._setup_tables()
        self._setup_cocodr()
        self._setup_training()
        self._setup_berm()
        self._setup_figures()
        self._setup_training_2()
        self._setup_rmsc_2()
        self._setup_ddr_2()
        self.MODEL_CARDS = self.model_cards()  # routes every table-1 system to its folders: last
        self.write_training_stamps()


def with_schema_defaults(config: dict[str, Any], schema_path: str | os.PathLike) -> dict[str, Any]:
    """``config`` validated against the JSON schema (Draft 2020-12) with every ``default`` the schema
    gives filled in, in place: the defaults live in the schema only, and the planner reads keys."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text(encoding="utf-8"))
    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def properties_with_defaults(
        validator: Any, properties: dict[str, Any], instance: Any, schema: dict[str, Any]
    ) -> Iterator[Any]:
        for key, sub in properties.items():
            if "default" in sub and isinstance(instance, dict):
                instance.setdefault(key, sub["default"])
        yield from check_properties(validator, properties, instance, schema)

    validator = jsonschema.validators.extend(base, {"properties": properties_with_defaults})
    validator(schema).validate(config)
    return config


def load_plan(root: str | os.PathLike, *configfiles: str | os.PathLike) -> Plan:
    """The plan of the workflow under ``root`` with ``--configfile configfiles``, read as the Snakefile
    reads it (config.yaml, the paper files, the given files over them; recipe ``extends``, BERM's grid
    and COCO-DR's sweeps expanded; checked and completed by the schema), without Snakemake."""
    from zsdr.workflow import (
        check_config,
        expand_berm_grid,
        expand_cocodr_sweeps,
        expand_recipes,
        read_config,
    )

    root = Path(root)
    schema = root / "schemas" / "config.schema.yaml"
    config = read_config(root, *configfiles)
    expand_recipes(config)
    check_config(config, schema)
    with_schema_defaults(config, schema)
    return Plan(config, root, expand_berm_grid(config), expand_cocodr_sweeps(config))
