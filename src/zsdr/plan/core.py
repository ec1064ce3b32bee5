"""The plan of a validated config: every job's settings, as plain functions of the config.

``Plan(config, root)`` builds the stages below once, in dependency order, each a pure function of the config
and the stages it names (a frozen dataclass; a config mistake raises a ValueError naming its key):

    datasets -> recipes -> refs -> modir, rmsc, ddr, cocodr, berm -> systems -> tables, figures -> evaluation
             -> work, trainings -> summaries        (code and resources read the config alone)

The rules read the plan through this facade: the stages as attributes (``PLAN.systems.dense_model(...)``), a
training job's whole bundle from one call (:meth:`Plan.train_job` and its siblings), and a few helpers every
rule file uses. Nothing here imports Snakemake, and building a plan writes nothing: the workflow calls
:meth:`Plan.write_training_stamps` itself.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zsdr.data.formats import qrels_stamp
from zsdr.plan.berm import build_berm
from zsdr.plan.cocodr import build_cocodr
from zsdr.plan.code import STAMPS, build_code
from zsdr.plan.datasets import alternation, build_datasets
from zsdr.plan.ddr import build_ddr
from zsdr.plan.evaluation import build_evaluation
from zsdr.plan.figures import build_figures
from zsdr.plan.modir import build_modir
from zsdr.plan import jobs
from zsdr.plan.jobs import RuleJob, wildcards_of
from zsdr.plan.params import Settings
from zsdr.plan.recipes import build_recipes
from zsdr.plan.references import build_model_refs
from zsdr.plan.regressions import build_regressions
from zsdr.plan.resources import build_resources
from zsdr.plan.rmsc import build_rmsc
from zsdr.plan.summary import Note, build_summaries
from zsdr.plan.systems import build_systems
from zsdr.plan.tables import build_tables
from zsdr.plan.trainings import TRAINER_CODE, build_trainings
from zsdr.plan.work import build_work


class MissingDataset(ValueError):
    """A dataset the plan needs is not here (config `datasets.missing: fail`)."""


@dataclass(frozen=True)
class TrainingJob:
    """Everything a training rule needs for one job: what it trains (``spec``, the trainer's input), how it
    starts (``launch``), what it reads, what it asks the cluster for and the line its dry run shows."""

    spec: Settings         # (description, provenance, log and save intervals not compared for reruns)
    launch: Settings
    inputs: list[str]
    gpus: int
    nodes: int
    threads: int
    memory: int            # MB per node
    summary: Note


@dataclass(frozen=True)
class MineJob:
    """What one ANCE mining job does: the previous model at the episode's lengths searches the training queries."""

    model: str
    model_files: list[str]
    options: dict[str, Any]
    shards: list[str]
    mine: dict[str, Any]
    seed: int
    max_examples: int | None


@dataclass(frozen=True)
class ClusterJob:
    """What one iDRO clustering job does: the model that mines the episode embeds the training queries at the
    mining's query length, and K-means groups them."""

    model: str
    model_files: list[str]
    options: dict[str, Any]
    clusters: int
    seed: int


class Plan:
    """The resolved plan of one config (``root``: the workflow folder, for relative code paths; ``workdir``: the
    working directory the workflow runs in, where code stamps go, default ``root``)."""

    TRAINER_CODE = TRAINER_CODE

    def __init__(
        self,
        config: dict[str, Any],
        root: str | os.PathLike,
        berm_grid: dict[tuple[float, float], str] | None = None,
        cocodr_sweeps: dict[tuple[str, float], str] | None = None,
        workdir: str | os.PathLike | None = None,
    ) -> None:
        """``config``: validated (schema defaults filled in); ``berm_grid`` and ``cocodr_sweeps``: the recipes
        :func:`zsdr.workflow.expand_berm_grid` and :func:`~zsdr.workflow.expand_cocodr_sweeps` added to it."""
        self.config = config
        self.code_plan = build_code(root, workdir)
        self.datasets = build_datasets(config)
        self.paths = self.datasets.paths
        self.recipes = build_recipes(config, self.datasets)
        self.refs = build_model_refs(config, self.recipes)
        self.modir = build_modir(config, self.recipes)
        self.rmsc = build_rmsc(config, self.recipes, self.refs)
        self.ddr = build_ddr(config, self.recipes)
        self.cocodr = build_cocodr(config, self.recipes)
        self.berm = build_berm(config, self.datasets, self.refs, berm_grid or {})
        self.systems = build_systems(config, self.recipes, self.refs, self.modir, self.rmsc, self.ddr)
        self.resources = build_resources(config)
        self.tables = build_tables(config, self.systems, self.code_plan)
        self.figures = build_figures(self.systems, self.ddr, self.cocodr, self.berm, cocodr_sweeps or {})
        self.evaluation = build_evaluation(config, self.systems, self.tables, self.figures)
        self.regressions = build_regressions(config, self.datasets, self.systems)
        self.work = build_work(config, self.datasets, self.evaluation, self.berm, self.resources.site)
        self.trainings = build_trainings(self.recipes, self.refs, self.systems, self.cocodr, self.ddr, self.berm,
                                         self.code_plan)
        self.summaries = build_summaries(config, self.recipes, self.systems, self.resources, self.berm)
        if config["offline"]:
            self.refs.check_offline(skip=set(self.regressions.missing_models) - set(self.tables.table1_systems))
        self._jobs: dict[tuple[str, str], Any] = {}
        self._rule_jobs: dict[tuple[str, tuple[tuple[str, Any], ...]], RuleJob] = {}
        self._qrels_written: set[str] = set()
        self._missing_said: set[str] = set()

    # -------------------------------------------------------------------------------- helpers of every rule file
    alternation = staticmethod(alternation)

    def job(self, rule: str, wc: Any = None) -> RuleJob:
        """The job object of one job of ``rule`` (zsdr.plan.jobs): built once per rule and wildcards."""
        names = wildcards_of(wc)
        key = (rule, tuple(sorted(vars(names).items())))
        if key not in self._rule_jobs:
            job_class, build = jobs.builder(rule)
            job = build(self, names)
            if not isinstance(job, job_class):
                raise TypeError(f"rule {rule}: its builder returned {type(job).__name__}, not {job_class.__name__}")
            self._rule_jobs[key] = job
        return self._rule_jobs[key]

    def params(self, rule: str) -> dict[str, Callable[[Any], Any]]:
        """A rule's ``params``: one per field of its job object, each read from :meth:`job` of the job's
        wildcards (``params: **PLAN.params("bm25")``)."""
        job_class, _ = jobs.builder(rule)

        def field(name: str) -> Callable[[Any], Any]:
            return lambda wildcards: getattr(self.job(rule, wildcards), name)

        return {name: field(name) for name in job_class.field_names()}

    @staticmethod
    def note(text: str) -> Note:
        """``text`` for a job's message, not compared for reruns (:class:`zsdr.plan.summary.Note`)."""
        return Note(text)

    def write_training_stamps(self) -> None:
        """Write (or confirm) the code stamp of every training run (the workflow calls this while the
        Snakefile is read; zsdr.plan.trainings)."""
        self.trainings.write_training_stamps()

    def code(self, *modules: str, script: str | None = None) -> str:
        """A job's code input: the stamp of the source files it runs (zsdr.plan.code)."""
        return self.code_plan.code(*modules, script=script)

    def dataset_marker(self, name: str) -> str:
        return self.datasets.dataset_marker(name)

    def convert_inputs(self, wc: Any) -> list[str]:
        """A `convert` job's inputs (zsdr.plan.datasets.Datasets.convert_inputs). A dataset whose local folder holds
        no corpus (a bring-your-own set not provided) stops the plan that needs it, dry runs included, in the words
        its conversion would fail with; with config `datasets.missing: plan` that is said once and the plan goes
        on (its convert job fails when it runs)."""
        files = self.datasets.convert_inputs(wc)
        if not files and wc.dataset not in self._missing_said:
            reason = self.datasets.unavailable(wc.dataset)
            if reason is not None:
                if self.config["datasets"]["missing"] == "fail":
                    raise MissingDataset(f"dataset {wc.dataset} is not here: {reason} (or plan its jobs anyway, "
                                         f"to fail when they run: config datasets.missing: plan)")
                self._missing_said.add(wc.dataset)
                print(f"dataset {wc.dataset} is not here yet, its convert job will fail: {reason}", file=sys.stderr)
        return files

    def eval_qrels(self, name: str) -> str:
        """The qrels an evaluation of ``name`` reads, as an input: a stamp of their content beside the code
        stamps (zsdr.data.formats.qrels_stamp), so that a hand-edited qrels file re-plans the dataset's
        evaluate jobs (no job declares the file itself). Its name holds the dataset's folder, so that scales
        with their own data folders keep their own stamps. :meth:`write_qrels_stamps` writes those of the
        configured datasets when the Snakefile is read; another dataset's is written when first asked for."""
        split, folder = self.datasets.eval_split(name), f"{self.paths.data}/{name}"
        label = "_".join(part for part in re.split(r"[^A-Za-z0-9.-]+", folder) if part)
        rel = f"{STAMPS}/qrels-{label}-{split}.sha256"
        if rel not in self._qrels_written:
            code = self.code_plan
            into = Path(code.workdir if code.runs_elsewhere else code.root)
            qrels_stamp(into / folder, split, into / rel, shown=folder)
            self._qrels_written.add(rel)
        return rel

    def write_qrels_stamps(self) -> None:
        """Write (or confirm) the qrels stamp (:meth:`eval_qrels`) of every configured and evaluated dataset:
        the workflow calls this while the Snakefile is read, as Snakemake lists the stamps' folder once while it
        builds the DAG (a stamp first written by an input function may be missed: MissingInputException)."""
        d = self.datasets
        for name in dict.fromkeys([*d.configured, *d.evaluated, *d.mini, *d.mini_zh]):
            self.eval_qrels(name)

    def runtime(self, minutes: int) -> int:
        return self.resources.runtime(minutes)

    @property
    def training_runtime(self) -> int:
        """A training job's runtime request: `training.runtime`, capped at `site.max_runtime`."""
        return self.resources.runtime(self.resources.training["runtime"])

    def cluster_resources(self, gpus: int | Callable[[Any], int] = 0,
                          nodes: int | Callable[[Any], int] = 1) -> dict[str, Any]:
        return self.resources.cluster_resources(gpus, nodes)

    @staticmethod
    def settings(value: dict[str, Any]) -> Settings:
        """``value`` as a params value whose cosmetic keys Snakemake does not compare (zsdr.plan.params)."""
        return Settings(value)

    @property
    def dense_settings(self) -> Settings:
        """Config `dense` as the encode, search and mining jobs read it (`keep_embeddings` not compared)."""
        return Settings(self.config["dense"])

    @property
    def keep_embeddings(self) -> bool:
        """Config `dense.keep_embeddings`: embeddings kept (mini), or temporary, removed once searched and
        mined (small, paper)."""
        return bool(self.config["dense"]["keep_embeddings"])

    @property
    def dense_env(self) -> str:
        return self.resources.dense_env

    # ------------------------------------------------------------------------------------------ training jobs
    @property
    def training_loop(self) -> dict[str, Any]:
        """How every training's loop runs: ``workers``, the processes preparing batches beside each training
        process (config ``training.loader_workers``, null: :meth:`zsdr.training.trainer.Trainer.loader_workers`
        decides), and ``compile`` (``training.compile``). No number changes with them: a job's params leave
        ``workers`` out of their comparison (zsdr.plan.params) and a checkpoint's fingerprint leaves ``loop`` out."""
        training = self.config["training"]
        return {"workers": training["loader_workers"], "compile": training["compile"]}

    def _training_job(self, kind: str, name: str) -> TrainingJob:
        key = (kind, name)
        job = self._jobs.get(key)
        if job is None:
            t, recipes = self.trainings, self.recipes
            if kind == "train":
                spec, item = t.train_spec(name), recipes.by_name[recipes.runs[name][0]]
            elif kind == "cross_encoder":
                spec, item = t.cross_encoder_spec(name), recipes.cross_encoders[name]
            elif kind == "reader":
                spec, item = t.reader_spec(name), recipes.readers[name]
            elif kind == "coco":
                spec, item = t.coco_spec(name), recipes.pretrained[name]
            elif kind == "generator":
                spec, item = t.generator_spec(name), self.rmsc.generators[name]
            elif kind == "dam":
                spec, item = t.dam_spec(name), self.ddr.dam_settings(name.split("--")[-1])
            else:
                raise ValueError(f"no training job of kind {kind!r}")
            # the recipe's processes laid out on the site's nodes (8 on nodes of 4 GPUs: 2 nodes x 4), and how
            # the training loop runs, which the launcher hands to the Trainer (zsdr.training.launch.run_spec)
            launch = {**self.resources.site_layout(recipes.launch_settings(item)), "loop": self.training_loop}
            job = self._jobs[key] = TrainingJob(
                spec=Settings(spec), launch=Settings(launch), inputs=t.spec_inputs(spec), gpus=self.resources.launch_gpus(launch),
                nodes=int(launch["nodes"]), threads=int(self.resources.training["threads"]) * int(launch["processes"]),
                memory=self.resources.training_memory(spec, launch)[0],
                summary=Note(self.summaries.spec_summary(spec, launch)),
            )
        return job

    def train_job(self, run: str) -> TrainingJob:
        """A recipe's training run (a bi-encoder or an RMSC mixture)."""
        return self._training_job("train", run)

    def cross_encoder_job(self, name: str) -> TrainingJob:
        return self._training_job("cross_encoder", name)

    def reader_job(self, name: str) -> TrainingJob:
        return self._training_job("reader", name)

    def coco_job(self, name: str) -> TrainingJob:
        """COCO pretraining of `cocodr.pretrained.<name>`."""
        return self._training_job("coco", name)

    def generator_job(self, name: str) -> TrainingJob:
        return self._training_job("generator", name)

    def dam_job(self, chain: str) -> TrainingJob:
        """DDR's masked-LM training of the DAM ``chain``."""
        return self._training_job("dam", chain)

    def training_resources(self, job: Callable[[Any], TrainingJob]) -> dict[str, Any]:
        """The cluster resources of a training rule whose job is ``job(wildcards)``: its GPUs and nodes."""
        return self.resources.cluster_resources(lambda wc: job(wc).gpus, nodes=lambda wc: job(wc).nodes)

    def training_request(self, job: Callable[[Any], TrainingJob]) -> dict[str, Any]:
        """Every resource a training rule whose job is ``job(wildcards)`` asks for: its GPUs and nodes
        (:meth:`training_resources`), its memory per node and the training runtime (:attr:`training_runtime`)."""
        return {**self.training_resources(job), "mem_mb": lambda wc: job(wc).memory, "runtime": self.training_runtime}

    def training_shape(self, job: TrainingJob) -> str:
        """What a training job asks the scheduler for, the line its message shows
        (:meth:`zsdr.plan.resources.Resources.job_shape`): its rule's resources (:meth:`training_request`) and
        threads."""
        resources = {k: v(None) if callable(v) else v for k, v in self.training_request(lambda wc: job).items()}
        return self.resources.job_shape(resources, job.threads)

    def mine_job(self, run: str, dataset: str) -> MineJob:
        """The mining job of ANCE run ``run`` on its training dataset."""
        key = ("mine", f"{run}\0{dataset}")
        job = self._jobs.get(key)
        if job is None:
            s = self.systems
            model = s.dense_model(s.previous_system(run), dataset)
            mining = s.mining_system(run)
            embeddings = self.paths.embeddings
            job = self._jobs[key] = MineJob(
                model=model, model_files=self.refs.model_files(model), options=s.mining_options(run, dataset),
                shards=[f"{embeddings}/{dataset}/{mining}/{x}" for x in self.datasets.shards(dataset)],
                **self.trainings.mine_settings(run),
            )
        return job

    def cluster_job(self, run: str, dataset: str) -> ClusterJob:
        """The query-clustering job of iDRO run ``run`` on its training dataset (by the model that mines it)."""
        mine = self.mine_job(run, dataset)
        name, k = self.recipes.runs[run]
        recipe = self.recipes.by_name[name]
        return ClusterJob(model=mine.model, model_files=mine.model_files, options=mine.options,
                          clusters=recipe["dro"]["clusters"],
                          seed=self.recipes.train_settings(recipe)["seed"] + k)


def with_schema_defaults(config: dict[str, Any], schema_path: str | os.PathLike) -> dict[str, Any]:
    """``config`` validated against the JSON schema (Draft 2020-12; the file with the loss and term registries
    laid over it, :func:`zsdr.workflow.config_schema`) with every ``default`` the schema gives filled in, in
    place: the defaults live in the schema only, and the planner reads keys."""
    import jsonschema

    from zsdr.workflow import config_schema

    schema = config_schema(schema_path)
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
