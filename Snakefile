"""zsdr: one DAG from raw downloads to the paper tables.

snakemake --cores all results/table1.csv                       # mini scale, CPU, offline
snakemake --cores all data --configfile configs/paper.yaml
"""

import os
import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")

# The workflow runs its own copy of the library, in this process and in every job's.
SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)
os.environ.update(
    PYTHONPATH=os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))
)


from zsdr.workflow import (
    add_paper_configs,
    check_config,
    expand_berm_grid,
    expand_cocodr_sweeps,
    expand_recipes,
    load_yaml,
    system_papers,
)

load_yaml(Path(workflow.basedir) / "config.yaml")  # a syntax error: its line and column


# config.yaml: what the papers share; configs/papers/<paper>.yaml: each paper's recipes and method
# section, with its small- and paper-scale values under `by_scale` (configs/small.yaml and
# configs/paper.yaml set `scale`). --configfile / --config override all of them.
configfile: "config.yaml"


CONFIG_SOURCES = {}
if not workflow.config_settings.replace_workflow_config:
    CONFIG_SOURCES = add_paper_configs(
        config, workflow.basedir, workflow.config_settings.overwrite_config
    )
expand_recipes(config)
check_config(
    config, Path(workflow.basedir) / "schemas" / "config.schema.yaml", CONFIG_SOURCES
)
validate(config, "schemas/config.schema.yaml")  # fills in the schema's defaults
BERM_GRID = expand_berm_grid(config)
COCODR_SWEEPS = expand_cocodr_sweeps(config)

os.environ.setdefault(
    "NUMBA_CACHE_DIR", str(Path(workflow.basedir) / ".cache" / "numba")
)
# A job that runs the `zsdr` command (a multi-process training) logs the traceback of a failure too.
os.environ.setdefault("ZSDR_DEBUG", "1")
if config["offline"]:
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


include: "rules/common.smk"
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


rule all:
    default_target: True
    input:
        f"{RESULTS}/table1.csv",
