"""The site check: what a SLURM site receives for the paper-scale run, submission by submission.

    .venv/bin/python benchmarks/slurm_site.py [--config configs/paper.yaml] [--target paper/results/all] [--lines N]

1. plan `paper/results/all` of the paper config through the Snakemake API as `snakemake --profile profiles/slurm`
   lays it out on a cluster: unbounded cores (a SLURM run gives Snakemake no core count), the profile's
   default and per-rule resources, its job groups and their component counts, every job forced;
2. turn the jobs into submissions as snakemake-executor-plugin-slurm does: each group job (Snakemake's own
   group layout and resource sums) one submission, the jobs of the rules the profile names in
   `slurm-array-jobs` one array per set of jobs that become ready together (those with the same
   dependencies; at most `slurm-array-limit` tasks an array, every task asking what the array's first
   job asks), every other job one submission;
3. build each submission's `sbatch` command line with the installed plugin's own functions
   (`get_submit_command`, `set_gres_string`, the array's memory fudge; no SLURM needed) and read back what
   it asks: nodes, GPUs, CPUs, memory, time;
4. check every line against two site descriptions (:data:`SITES`): no job or group asks more than one
   node unless it is a multi-node training, none asks more GPUs, CPUs or memory than its nodes have or
   more time than the site's limit, every GPU job asks CPUs and memory. Prints jobs, submissions, GPU jobs
   and GPU-hours requested (GPUs x time limit of every GPU job), by rule, and every violation.

tests/test_site.py runs the same check on one plan for both sites.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))          # the checkout's library, installed or not
from zsdr.plan.site import Site  # noqa: E402

PROFILE = ROOT / "profiles" / "slurm" / "config.v8+.yaml"
TARGET = "paper/results/all"
CORES = 1_000_000            # what a SLURM run gives Snakemake: no core count, so groups are laid out unbounded


# Two common shapes of GPU node (zsdr.plan.site.Site: what the check compares each request with). Memory as
# SLURM counts it (--mem is in MB per node; a node's RealMemory is configured a little below what is
# installed, so 512 GB is taken as 512,000 MB).
SITES = {
    "4 x A100, 64 cores, 512 GB": Site(gpus_per_node=4, cores_per_node=64, mem_mb_per_node=512_000),
    "8 x H100, 96 cores, 1 TB, 48 h": Site(gpus_per_node=8, cores_per_node=96, mem_mb_per_node=1_000_000,
                                           max_runtime=48 * 60),
}


@dataclass
class Submission:
    """One sbatch call: a job, a group job or an array of jobs of one rule."""

    kind: str                 # "job", "group" or "array"
    name: str                 # rule or group name
    jobs: list                # the Snakemake jobs it runs
    line: str                 # the sbatch command line, as the plugin builds it
    asks: dict = field(default_factory=dict)   # nodes, gpus, cpus, mem_mb, runtime (read back from the line)
    tasks_ask: list = field(default_factory=list)   # an array: what each task's own job would ask

    @property
    def tasks(self) -> int:
        return len(self.jobs) if self.kind == "array" else 1

    @property
    def rules(self) -> Counter:
        return Counter(j.rule.name for j in self.jobs)


def read_profile(path: Path = PROFILE) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _resources(values) -> dict:
    """A profile's `default-resources` (a mapping or a list of NAME=VALUE) as a mapping."""
    if isinstance(values, dict):
        return dict(values)
    out = {}
    for item in values or []:
        key, _, value = str(item).partition("=")
        out[key] = int(value) if value.isdigit() else value
    return out


def plan(configfiles: list[str], target: str = TARGET, profile: dict | None = None):
    """The Snakemake workflow of ``target`` under ``configfiles`` with its DAG built as a SLURM run of the
    profile lays it out (groups formed). Returns the workflow; the caller reads ``workflow.dag``."""
    saved = dict(os.environ)
    try:
        return _plan(configfiles, target, read_profile() if profile is None else profile)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _plan(configfiles, target, profile):
    import immutables
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        ExecutionSettings,
        GroupSettings,
        OutputSettings,
        ResourceSettings,
    )
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    overwrite = {rule: _resources(res) for rule, res in (profile.get("set-resources") or {}).items()}
    api = SnakemakeApi(OutputSettings(quiet={"all"}))
    api.__enter__()
    wf = api.workflow(
        resource_settings=ResourceSettings(
            cores=CORES, nodes=int(profile.get("jobs", 1)),
            default_resources=_resources(profile.get("default-resources")),
            overwrite_resources=overwrite,
            resources=_resources(profile.get("resources")),
            overwrite_resource_scopes=_resources(profile.get("set-resource-scopes")),
        ),
        # the bring-your-own sets need not be here to size the site: their jobs are planned anyway
        config_settings=ConfigSettings(configfiles=[ROOT / c for c in configfiles],
                                       config={"datasets": {"missing": "plan"}}),
        snakefile=ROOT / "Snakefile",
        workdir=ROOT,
    )
    dag_api = wf.dag(DAGSettings(targets={target}, forceall=True))
    workflow = wf._workflow
    workflow.dag_settings = dag_api.dag_settings
    # as a cluster run: the SLURM executor (groups are formed only where jobs leave this machine) and the
    # profile's groups
    workflow._executor_plugin = ExecutorPluginRegistry().get_plugin("slurm")
    workflow.group_settings = GroupSettings(
        overwrite_groups=immutables.Map(profile.get("groups") or {}),
        group_components=immutables.Map({k: int(v) for k, v in (profile.get("group-components") or {}).items()}),
    )
    workflow.execution_settings = ExecutionSettings(retries=int(profile.get("retries", 0)))
    workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
    workflow._build_dag()
    workflow.async_run(workflow.dag.postprocess(update_needrun=False))
    workflow._zsdr_api = api        # kept open while the caller reads the DAG
    return workflow


def _settings(profile: dict):
    """The plugin's ExecutorSettings as the profile sets them (requeue, arrays, no account probing)."""
    from snakemake_executor_plugin_slurm import ExecutorSettings

    return ExecutorSettings(
        requeue=bool(profile.get("slurm-requeue")),
        array_jobs=profile.get("slurm-array-jobs"),
        array_limit=int(profile.get("slurm-array-limit", 1000)),
        no_account=True,
        status_command="squeue",
    )


class _PluginParts:
    """The plugin's own account and partition arguments (Executor.get_account_arg / get_partition_arg),
    without an Executor: no partition file, no cluster to ask for defaults."""

    _partitions = None
    _fallback_partition = ""
    _fallback_account_arg = ""

    def account(self, job) -> str:
        if job.resources.get("slurm_account"):
            return f" -A {shlex.quote(str(job.resources.get('slurm_account')))}"
        return self._fallback_account_arg

    def partition(self, job) -> str:
        from snakemake_executor_plugin_slurm import Executor

        return Executor.get_partition_arg(self, job)


def _group_resources(group, workflow) -> None:
    """A group job's resources as a cluster run computes them (Snakemake's layered sum, not run locally)."""
    from snakemake.resources import GroupResources

    group._resources = GroupResources.basic_layered(
        toposorted_jobs=group.toposorted, constraints=workflow.global_resources, run_local=False,
        additive_resources=["runtime"], sortby=["runtime"])


def submissions(workflow, profile: dict | None = None) -> list[Submission]:
    """Every sbatch call of the planned run, built by the plugin's code."""
    from snakemake_executor_plugin_slurm.submit_string import apply_mem_fudge, get_submit_command
    from snakemake_executor_plugin_slurm.utils import get_job_wildcards, set_gres_string

    profile = read_profile() if profile is None else profile
    settings = _settings(profile)
    arrays = {r.strip() for r in re.split(r"[,;]", settings.array_jobs or "") if r.strip()}
    dag = workflow.dag
    parts = _PluginParts()

    def line(job, comment: str, array: int = 0) -> str:
        params = {"run_uuid": "RUN", "slurm_logfile": "logs/slurm/%j.log", "comment_str": comment,
                  "account": parts.account(job), "partition": parts.partition(job), "workdir": str(ROOT)}
        call = get_submit_command(job, params, settings=settings, failed_nodes=set())
        call += set_gres_string(job)
        if array:
            call = apply_mem_fudge(call, "x" * 200 * array) + f" --array=1-{array}"
        return call

    out: list[Submission] = []
    groups = {}
    waves: dict[tuple, list] = defaultdict(list)
    for job in sorted(dag.needrun_jobs(), key=lambda j: j.jobid):
        group = dag._group.get(job)
        if group is not None:
            groups.setdefault(id(group), group)
        elif job.rule.name in arrays or "all" in arrays:
            deps = frozenset(d.jobid for d in dag._dependencies[job])
            waves[(job.rule.name, deps)].append(job)
        else:
            wc = get_job_wildcards(job)
            out.append(Submission("job", job.rule.name, [job],
                                  line(job, f"rule_{job.rule.name}" + (f"_wildcards_{wc}" if wc else ""))))
    for group in groups.values():
        _group_resources(group, workflow)
        out.append(Submission("group", group.groupid, list(group.jobs), line(group, f"group_{group.groupid}")))
    for (rule, _), jobs in sorted(waves.items(), key=lambda kv: kv[1][0].jobid):
        if len(jobs) == 1:
            out.append(Submission("job", rule, jobs, line(jobs[0], f"rule_{rule}")))
            continue
        for start in range(0, len(jobs), settings.array_limit):
            chunk = jobs[start:start + settings.array_limit]
            sub = Submission("array", rule, chunk, line(chunk[0], f"rule_{rule}", array=len(chunk)))
            sub.tasks_ask = [read_line(line(j, f"rule_{rule}")) for j in chunk]
            out.append(sub)
    for sub in out:
        sub.asks = read_line(sub.line)
    return out


def read_line(call: str) -> dict:
    """What an sbatch line asks, per the options the plugin writes: nodes (1 where not given: SLURM's
    default for a one-task job), GPUs in all, CPUs in all, memory per node (MB) and minutes."""
    words = shlex.split(call.split(" --wrap=")[0])
    opts: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("--") and "=" in w:
            key, value = w[2:].split("=", 1)
            opts[key] = value
        elif w.startswith("-") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            opts[w.lstrip("-")] = words[i + 1]
            i += 1
        else:
            opts[w.lstrip("-")] = ""
        i += 1
    gpus = int(opts["gpus"].split(":")[-1]) if "gpus" in opts else 0
    if "gres" in opts and opts["gres"].startswith("gpu"):
        gpus = int(opts["gres"].split(":")[-1]) * int(opts.get("nodes", 1))
    tasks = int(opts.get("ntasks", 1))
    cpus = (gpus * int(opts["cpus-per-gpu"]) if "cpus-per-gpu" in opts and gpus
            else tasks * int(opts.get("cpus-per-task", 1)))
    return {"nodes": int(opts.get("nodes", 1)), "gpus": gpus, "cpus": cpus,
            "cpus_given": "cpus-per-gpu" in opts or "cpus-per-task" in opts,
            "mem_mb": int(opts["mem"]) if "mem" in opts else None,
            "runtime": int(opts["t"]) if "t" in opts else None}


def violations(site: Site, subs: list[Submission]) -> list[str]:
    """Every way a submission breaks ``site`` (:meth:`zsdr.plan.site.Site.problems`: more than one node for
    what is not a multi-node training, more GPUs, CPUs or memory per node than a node has, more time than
    the limit, a GPU job without a CPU or memory request), and every array task that needs more than its
    array asks (the plugin gives each task the first job's resources)."""
    out = []
    for sub in subs:
        a = sub.asks
        what = f"{sub.kind} {sub.name} ({sum(sub.rules.values())} job(s)) {_short(a)}"
        multi = sub.kind == "job" and _is_training(sub.jobs[0])
        out += site.problems(what, nodes=a["nodes"], gpus=a["gpus"], cpus=a["cpus"], mem_mb=a["mem_mb"],
                             runtime=a["runtime"], multi_node=multi, cpus_given=a["cpus_given"])
        for job, task in zip(sub.jobs, sub.tasks_ask):
            more = [k for k in ("nodes", "gpus", "cpus", "mem_mb", "runtime") if (task[k] or 0) > (a[k] or 0)]
            if more:
                out.append(f"{what}: its task {job} asks more {', '.join(more)} than the array: {_short(task)}")
    return out


def _short(a: dict) -> str:
    return ", ".join(f"{k} {a[k]}" for k in ("nodes", "gpus", "cpus", "mem_mb", "runtime"))


TRAINING_RULES = ("train", "train_dam", "pretrain_coco", "train_cross_encoder", "train_reader", "train_generator")


def _is_training(job) -> bool:
    return job.rule.name in TRAINING_RULES


def totals(subs: list[Submission]) -> dict:
    """Jobs, submissions (an array counts once), GPU jobs and GPU-hours requested (GPUs x time limit, every
    array task counted)."""
    gpu = [s for s in subs if s.asks["gpus"]]
    return {
        "jobs": sum(sum(s.rules.values()) for s in subs),
        "submissions": len(subs),
        "gpu_jobs": sum(sum(s.rules.values()) for s in gpu),
        "gpu_submissions": len(gpu),
        "gpu_hours": sum(s.asks["gpus"] * (s.asks["runtime"] or 0) * s.tasks for s in gpu) / 60,
    }


def by_rule(subs: list[Submission]) -> dict[str, dict]:
    """Per rule (a group's or array's jobs under their own rules, its request shared out evenly): jobs,
    submissions, GPU-hours."""
    rows: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "submissions": 0.0, "gpu_hours": 0.0})
    for s in subs:
        n = sum(s.rules.values())
        hours = s.asks["gpus"] * (s.asks["runtime"] or 0) * s.tasks / 60
        for rule, k in s.rules.items():
            rows[rule]["jobs"] += k
            rows[rule]["submissions"] += k / n
            rows[rule]["gpu_hours"] += hours * k / n
    return dict(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", help="config file(s) (default: configs/paper.yaml)")
    ap.add_argument("--target", default=TARGET)
    ap.add_argument("--lines", type=int, default=3, help="example sbatch lines to print per rule")
    args = ap.parse_args(argv)
    profile = read_profile()
    workflow = plan(args.config or ["configs/paper.yaml"], args.target, profile)
    subs = submissions(workflow, profile)
    t = totals(subs)
    print(f"{args.target}: {t['jobs']:,} jobs, {t['submissions']:,} submissions, {t['gpu_jobs']:,} GPU jobs "
          f"({t['gpu_submissions']:,} submissions), {t['gpu_hours']:,.0f} GPU-hours requested")
    print(f"\n{'rule':<28}{'jobs':>8}{'submissions':>13}{'GPU-hours':>12}")
    for rule, row in sorted(by_rule(subs).items(), key=lambda kv: -kv[1]["gpu_hours"]):
        print(f"{rule:<28}{row['jobs']:>8}{row['submissions']:>13.0f}{row['gpu_hours']:>12,.0f}")
    shown = Counter()
    print("\nexample sbatch lines:")
    for s in subs:
        if shown[(s.kind, s.name)] < args.lines:
            shown[(s.kind, s.name)] += 1
            print(f"  [{s.kind} {s.name}, {sum(s.rules.values())} job(s)] {s.line}")
    failed = 0
    for name, site in SITES.items():
        bad = violations(site, subs)
        failed += bool(bad)
        print(f"\nsite {name}: {'passes' if not bad else f'{len(bad)} violation(s)'}")
        kinds = Counter(re.sub(r"\d+", "N", b.split(":")[0]) for b in bad)
        for kind, n in kinds.most_common():
            example = next(b for b in bad if re.sub(r"\d+", "N", b.split(":")[0]) == kind)
            print(f"  {n:>6} x {kind}   e.g. {example[:400]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
