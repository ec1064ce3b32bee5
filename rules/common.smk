# Path constants and the plan every rule file reads. No rules here: what each job does, reads and asks
# for is resolved by zsdr.plan (plain functions of the validated config, unit-tested without Snakemake).

import os

from zsdr.data import registry
from zsdr.models.released import RELEASES
from zsdr.plan.core import Plan
from zsdr.plan.params import Handling, Settings
from zsdr.tables.figures import FIGURES as FIGURE_SPECS
from zsdr.workflow import temp_unless, wait_for_the_job_on_sigusr1

# Inside a SLURM job each rule runs in a Snakemake process under srun: the warning SLURM sends before a
# time limit must not kill it before the training script it started writes its checkpoint.
if os.environ.get("SLURM_JOB_ID"):
    wait_for_the_job_on_sigusr1()


# The whole plan, resolved now: a config mistake stops any command with the key to fix. ROOT is the
# workflow folder (the Snakefile's), the working directory is where outputs and code stamps go.
PLAN = Plan(config, ROOT, BERM_GRID, COCODR_SWEEPS, workdir=os.getcwd())
# Snakemake lists the code stamp folder once while it builds the DAG: every training's stamp is written now.
PLAN.write_training_stamps()
PLAN.write_qrels_stamps()

DOWNLOADS = PLAN.paths.downloads
DATA = PLAN.paths.data
MODELS = PLAN.paths.models
INDEXES = PLAN.paths.indexes
EMBEDDINGS = PLAN.paths.embeddings
RUNS = PLAN.paths.runs
METRICS = PLAN.paths.metrics
STATS = PLAN.paths.stats
RESULTS = PLAN.paths.results
LOGS = PLAN.paths.logs


# On a cluster (profiles/slurm) every dense system's jobs on corpora of one shard form one group job,
# "dense-<system>" (PLAN.work.dense_group): the profile sizes every such group by its "dense" entry of
# `group-components`, and its `dense_slot=1` runs the group's jobs one after another on one GPU. Only a
# run that limits `dense_slot` groups them (without it a group would run its jobs side by side and ask
# for a GPU each).
DENSE_GROUP = (
    PLAN.work.dense_group if "dense_slot" in workflow.global_resources else None
)
workflow.parent_groupids.update(
    {PLAN.work.dense_group_id(s): "dense" for s in PLAN.systems.dense}
)
