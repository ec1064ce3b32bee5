"""zsdr: one DAG from raw downloads to the paper tables.

snakemake --cores all results/table1.csv                       # mini scale, CPU, offline
snakemake --cores all data --configfile configs/paper.yaml
"""

import copy
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("9.0")

# The workflow folder: where this file, rules/, src/, schemas/ and configs/ are, wherever the working
# directory (--directory) is, and also when another workflow imports this one as a module (where
# workflow.basedir is the importing workflow's folder, and workflow.current_basedir this one's).
ROOT = Path(workflow.current_basedir)

# The workflow runs its own copy of the library, in this process and in every job's: also in a process that
# has another copy loaded (one forked from a server that imported it), which forgets it first.
SRC = str(ROOT / "src")
sys.path.insert(0, SRC)
_loaded = sys.modules.get("zsdr")
if _loaded and not Path(_loaded.__file__).resolve().is_relative_to(Path(SRC).resolve()):
    for _name in [m for m in sys.modules if m == "zsdr" or m.startswith("zsdr.")]:
        del sys.modules[_name]
os.environ.update(
    PYTHONPATH=os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))
)


from zsdr.plan.core import with_schema_defaults
from zsdr.plan.scales import check_scale_folders, check_targets, mark_scale_folders
from zsdr.workflow import (
    COMMAND_LINE,
    add_paper_configs,
    check_config,
    expand_berm_grid,
    expand_cocodr_sweeps,
    expand_recipes,
    load_yaml,
    update_config,
    workdir_overlays,
)

load_yaml(ROOT / "config.yaml")  # a syntax error: its line and column

# The command line's --configfile files, read as `zsdr check-config` reads them: Snakemake's own reading
# takes a key given twice silently (the last one wins); here it is refused, with its line.
for _given_file in workflow.config_settings.configfiles or ():
    load_yaml(_given_file)

# What Snakemake hands this file before its configfile: the command line's --configfile / --config,
# or, imported as a module with `config:`, the importing workflow's settings for it.
GIVEN = copy.deepcopy(config)


# config.yaml: what the papers share; configs/papers/<paper>.yaml: each paper's recipes and method
# section, with its small- and paper-scale values under `by_scale` (configs/small.yaml and
# configs/paper.yaml set `scale`). A config.yaml in the working directory (when it is not this
# folder), then --configfile / --config (or a module's `config:`) override all of them. The path is
# absolute: Snakemake reads a relative configfile from the working directory.
configfile: ROOT / "config.yaml"


if workflow.modifier.skip_configfile:
    # Imported as a module with `config:`: Snakemake skipped the configfile above and hands this file
    # the importing workflow's dict, which is laid over this workflow's config, not changed.
    config = update_config(load_yaml(ROOT / "config.yaml"), GIVEN)
    OVERLAYS = [("the importing workflow's `config:` of the module", GIVEN)]
else:
    # The working directory's own config.yaml, when this is the main workflow (not a module).
    MAIN = workflow.modifier.is_main_snakefile()
    OVERLAYS = workdir_overlays(ROOT, os.getcwd()) if MAIN else []
    OVERLAYS.append((COMMAND_LINE, workflow.config_settings.overwrite_config))
CONFIG_SOURCES = {}
if not workflow.config_settings.replace_workflow_config:
    CONFIG_SOURCES = add_paper_configs(config, ROOT, overlays=OVERLAYS)
expand_recipes(config)
check_config(config, ROOT / "schemas" / "config.schema.yaml", CONFIG_SOURCES)
# The schema file with the loss and term registries laid over it (zsdr.workflow.config_schema) fills in its
# defaults, a registered term's section too. Also in a module imported with `skip_validation: True`: that skips
# Snakemake's validate() calls, but the defaults are part of reading this config (the plan reads their keys).
with_schema_defaults(config, ROOT / "schemas" / "config.schema.yaml")
BERM_GRID = expand_berm_grid(config)
COCODR_SWEEPS = expand_cocodr_sweeps(config)

# At most 4 downloads at once, unless --resources (or a profile's `resources`) sets `downloads`: here, not
# in profiles/default, whose `resources` would replace those of a --profile such as profiles/slurm.
if "downloads" not in workflow.global_resources:
    workflow.register_resource("downloads", 4)

os.environ.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".cache" / "numba"))
# A job that runs the `zsdr` command (a multi-process training) logs the traceback of a failure too.
os.environ.setdefault("ZSDR_DEBUG", "1")
if config["offline"]:
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


# Local runs: every Python job forks from one interpreter that has torch and transformers loaded
# (zsdr.warm, config `warm_start`). Started when a local run of at least MIN_JOBS Python jobs starts:
# dry runs, cluster runs and the jobs of a cluster (Snakemake runs them without hooks) never start it.
WARM = {}


onstart:
    from zsdr.warm import (
        preload_for,
        start_server,
        unlimit_local_starts,
        worth_starting,
    )
    from zsdr.workflow import site_problems

    # A cluster run submits nothing, and marks no folder, where a job asks more than config `site` says a
    # node holds (the profile's group sizes included)
    problems = (
        []
        if workflow.local_exec
        else site_problems(workflow.dag, PLAN.resources.site)
    )
    if problems:
        raise WorkflowError(
            "the run asks more than config `site` says a node holds; shrink the profile's "
            "group-components or correct `site`:\n    "
            + "\n    ".join(problems[:20])
        )
    mark_scale_folders(PLAN.paths, config["scale"], os.getcwd())
    # Snakemake's default limit on job starts is for a cluster's submissions (see the function)
    if workflow.local_exec:
        unlimit_local_starts(workflow)
    if config["warm_start"] and workflow.local_exec and worth_starting(workflow):
        WARM.update(
            start_server(
                shell,
                ROOT / "src" / "zsdr" / "warm_client.py",
                preload=preload_for(workflow),
            )
        )


onsuccess:
    from zsdr.warm import stop_server

    stop_server(WARM)


onerror:
    from zsdr.warm import stop_server

    stop_server(WARM)


include: "rules/common.smk"


# Each scale writes its own output folders (paths.root): refuse folders that hold another scale's outputs, and
# a target typed for the mini scale's folders (results/table1.csv asked of the paper scale).
check_scale_folders(PLAN.paths, config["scale"], os.getcwd())
check_targets(PLAN.paths, config)


include: "rules/data.smk"
include: "rules/sparse.smk"
include: "rules/labels.smk"
include: "rules/pretrain.smk"
include: "rules/finetune.smk"
include: "rules/retrieve.smk"
include: "rules/evaluate.smk"
include: "rules/tables.smk"
include: "rules/analysis.smk"
include: "rules/modir.smk"
include: "rules/cocodr.smk"
include: "rules/rmsc.smk"
include: "rules/regressions.smk"


rule all:
    default_target: True
    input:
        f"{RESULTS}/table1.csv",
