"""Planning the paper-scale DAG: how long Snakemake takes to plan every job of every paper table with the
SLURM profile, how many jobs each rule contributes and what they ask of the cluster, and how long a re-run
takes once everything is done.

    .venv/bin/python benchmarks/plan_paper.py [--keep DIR]

1. plan: `snakemake -n --profile profiles/slurm paper/results/all --configfile configs/paper.yaml` in a scratch
   copy of the workflow (code and config only); wall time, jobs per rule, GPUs / nodes / CPUs / memory /
   runtime per job.
2. mark done: every planned output is created empty (folders for directory() outputs) and
   `snakemake --touch` gives them the DAG's order of modification times, as if the whole DAG had run
   (about 25 minutes: Snakemake's touch executor sleeps 0.1 s per job, one job at a time).
3. no-op re-run: the same dry run again must find nothing to do; its wall time against the plan's.
Needs no cluster: a dry run submits nothing.
"""

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
WORKFLOW = ("Snakefile", "config.yaml", "configs", "rules", "workflow_scripts", "schemas", "src", "report",
            "profiles", "envs")
PLAN = ["--profile", "profiles/slurm", "paper/results/all", "--configfile", "configs/paper.yaml"]


def run(args: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc.stdout + proc.stderr


def job_table(out: str) -> dict[str, dict]:
    """Per rule: job count and the sets of GPUs, nodes, CPUs, mem_mb and runtime its jobs request. A job
    block shows its resources (CPUs: threads, or cpus_per_gpu x GPUs for a GPU job, as the SLURM executor
    asks); a training job's message shows its shape instead ("train x (8 GPU(s), 1 node(s), 64 CPUs (8 per
    GPU), 52500 MB, 1440 min): ...")."""
    keys = ("gpu", "nodes", "cpus", "mem_mb", "runtime")
    rules: dict[str, dict] = defaultdict(lambda: {"jobs": 0, **{k: set() for k in keys}})
    for block in re.split(r"\n\s*\n", out):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M)
        res = re.search(r"resources: (.*)", block)
        if rule and res:
            values = dict(kv.split("=", 1) for kv in res.group(1).split(", ") if "=" in kv)
            threads = re.search(r"threads: (\d+)", block)
            gpus = int(values.get("gpu", 0) or 0)
            values["cpus"] = (gpus * int(values["cpus_per_gpu"]) if gpus and "cpus_per_gpu" in values
                              else int(threads.group(1)) if threads else 1)
            values.setdefault("nodes", 1)
            r = rules[rule.group(1)]
            for key in keys:
                if key in values:
                    r[key].add(int(values[key]))
    counts = out.split("Job stats:")[-1]
    for line in counts.splitlines():
        m = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if m and m.group(1) != "total":
            rules[m.group(1)]["jobs"] = int(m.group(2))
    for m in re.finditer(r"^(?:Job \d+: )?(pretrain|train(?: DAM| generator| cross-encoder| reader)?) \S+ "
                         r"\((\d+) GPU\(s\), (\d+) node\(s\), (\d+) CPU.*?, (\d+) MB, (\d+) min\)", out, re.M):
        rule = {"pretrain": "pretrain_coco", "train": "train", "train DAM": "train_dam",
                "train generator": "train_generator", "train cross-encoder": "train_cross_encoder",
                "train reader": "train_reader"}[m.group(1)]
        for key, value in zip(keys, m.groups()[1:]):
            rules[rule][key].add(int(value))
    return dict(rules)


def directory_rules() -> set[str]:
    """Rules whose outputs are directory() outputs (created as folders when marking the DAG done)."""
    found = set()
    for smk in (ROOT / "rules").glob("*.smk"):
        for block in re.split(r"\n(?=rule )", smk.read_text()):
            head = re.match(r"rule (\w+):", block)
            if head and re.search(r"output:\s*\n\s*directory\(", block):
                found.add(head.group(1))
    return found


def mark_done(work: Path) -> tuple[float, int]:
    """Create every planned output (empty) and touch them in DAG order; returns (seconds, outputs)."""
    start = time.perf_counter()
    _, summary = run(["--summary", *PLAN[2:]], work)
    dirs = directory_rules()
    made = 0
    for line in summary.splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) < 3 or not cols[0] or cols[0].startswith(("Using ", "Building ", "Assuming ")):
            continue
        path = work / cols[0]
        if cols[2] in dirs:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        made += 1
    run(["--touch", "--cores", "1", *PLAN[2:]], work)
    return time.perf_counter() - start, made


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, help="plan in this folder (kept) instead of a temporary one")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="zsdr-plan-"))
    if work.exists() and any(work.iterdir()):
        sys.exit(f"{work} is not empty: give a new folder")
    work.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, work / name)
    try:
        plan_s, out = run(["-n", *PLAN], work)
        table = job_table(out)
        total = sum(r["jobs"] for r in table.values())
        print(f"paper-scale plan with profiles/slurm: {total} jobs in {plan_s:.1f} s")
        print(f"{'rule':<22}{'jobs':>7}  {'GPUs/job':<10}{'nodes':<7}{'CPUs':<8}{'mem_mb':<14}{'runtime (min)':<14}")

        def span(values: set) -> str:
            return "-" if not values else (str(min(values)) if len(values) == 1 else f"{min(values)}-{max(values)}")

        for rule, r in sorted(table.items(), key=lambda kv: -kv[1]["jobs"]):
            if r["jobs"]:
                print(f"{rule:<22}{r['jobs']:>7}  {span(r['gpu']):<10}{span(r['nodes']):<7}{span(r['cpus']):<8}"
                      f"{span(r['mem_mb']):<14}{span(r['runtime']):<14}")
        done_s, outputs = mark_done(work)
        print(f"marked done: {outputs} outputs created and touched in {done_s:.1f} s")
        noop_s, again = run(["-n", *PLAN], work)
        nothing = "Nothing to be done" in again
        print(f"no-op re-run: {noop_s:.1f} s, {'nothing to be done' if nothing else 'JOBS PLANNED AGAIN'}")
        print(f"ratio no-op re-run / plan: {noop_s / plan_s:.2f}")
        if not nothing:
            sys.exit(again[-3000:])
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
