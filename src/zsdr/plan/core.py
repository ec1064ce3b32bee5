"""The plan of a validated config: every job's settings, as plain functions of the config.

``Plan(config, root)`` resolves the config once (systems, recipes and their runs, the specs of every
training) and raises a ValueError naming the config key of the first mistake. The Snakemake rules
call into it through thin wildcard adapters; nothing here imports Snakemake.
"""

from __future__ import annotations

import os

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
    """The resolved plan of one config (``root``: the workflow folder, for relative code paths)."""

    def __init__(
        self,
        config: dict,
        root: str | os.PathLike,
        berm_grid: dict[tuple[float, float], str] | None = None,
        cocodr_sweeps: dict[tuple[str, float], str] | None = None,
    ) -> None:
        """``config``: validated (schema defaults filled in); ``berm_grid`` and ``cocodr_sweeps``: the
        recipes :func:`zsdr.workflow.expand_berm_grid` and :func:`~zsdr.workflow.expand_cocodr_sweeps`
        added to it."""
        self.config = config
        self.root = str(root)
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
