"""The SLURM profile on a real SLURM: a one-node cluster on this machine runs a slice of the mini pipeline
through snakemake-executor-plugin-slurm, and its outputs equal those of the same slice run locally.

The cluster comes from Debian's packages (tests/slurm/cluster.sh: slurmctld, slurmd, munge), installed and
started by the test where it runs as root with apt-get; elsewhere the test skips unless a cluster already
answers `sinfo`. Job status comes from `squeue`: finished jobs stay visible for MinJobAge = 7200 s, longer
than the test takes (there is no slurmdbd, so `sacct` has no database to ask). A cluster already running
keeps its own MinJobAge, and a shorter one can drop the first jobs from squeue before the test reads it.

The training runs as one SLURM job of two processes (torchrun --standalone, DDP over gloo on the CPU), the
launch path of a multi-GPU training: the job asks for a CPU per process, and the model must equal the local
run's (the same two-process training).

While it runs, the training job is interrupted twice, as a cluster does: SIGUSR1 to the job's steps (what
`sbatch --signal=USR1@300` sends before a time limit: the trainer checkpoints and exits, the job fails and
Snakemake's retry resumes) and, in the retry, `scontrol requeue` (preemption with requeue: the job is killed
and queued again under its id, and resumes from its last periodic checkpoint). The model must still equal the
local run's, byte for byte.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.test_training import checkpoint_steps
from tests.test_workflow import smaller_domains

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "tests" / "slurm" / "cluster.sh"
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
WORKFLOW = ("Snakefile", "config.yaml", "configs", "rules", "workflow_scripts", "schemas", "src", "report",
            "profiles", "envs")
# Data, a tiny backbone, BM25 (index + search), a training, corpus shards encoded by one job array of two tasks,
# dense search, the system's one-shard corpora in its dense group job, and two small statistics jobs that the
# profile groups into one SLURM job.
TARGETS = ("runs/mini-alpha/bm25-flat.trec", "runs/mini-alpha/dpr.trec", "runs/mini-beta/dpr.trec",
           "stats/mini-alpha.json", "stats/mini-beta.json")
SAME = ("runs/mini-alpha/bm25-flat.trec", "runs/mini-alpha/dpr.trec", "runs/mini-beta/dpr.trec",
        "models/trained/dpr/model.safetensors", "embeddings/mini-alpha/dpr/shard0-of-2",
        "embeddings/mini-alpha/dpr/shard1-of-2", "stats/mini-alpha.json", "stats/mini-beta.json")
TIMINGS = {"seconds", "docs_per_second"}
# Two shards of mini-alpha; every mini domain at half its size (as in the smoke mini run: half the texts to
# index, encode, search and score); the training in two processes, 72 steps of 2 x 32 examples (8 epochs of the
# 600 training queries: a training long enough to be interrupted twice); a checkpoint every 10 steps (the
# config's 100 leaves no time to interrupt it between two checkpoints).
OVERLAY = {"dense": {"dataset_shards": {"mini-alpha": 2}}, "training": {"save_every": 10, "processes": 2},
           "recipes": {"dpr": {"train": {"epochs": 8}}}}
DPR_STEPS = 72
CHECKPOINTS = "models/.checkpoints/dpr"


def _sinfo_ok() -> bool:
    if not shutil.which("sinfo"):
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture(scope="module")
def slurm_cluster():
    """A running one-node SLURM cluster: the one already answering `sinfo`, or one this test installs and
    starts (root with apt-get) and stops again. The cluster's own configuration applies while it runs
    (conftest.py points SLURM_CONF at an empty file for the local tests)."""
    original = os.environ.get("ZSDR_TESTS_SLURM_CONF")
    if original:
        os.environ["SLURM_CONF"] = original
    else:
        os.environ.pop("SLURM_CONF", None)
    try:
        yield from _cluster()
    finally:
        os.environ["SLURM_CONF"] = os.devnull


def _cluster():
    if _sinfo_ok():
        yield "existing"
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("no SLURM cluster answers sinfo, and installing one needs root with apt-get")
    for action, limit in (("install", 900), ("start", 120)):
        proc = subprocess.run(["bash", str(CLUSTER), action], capture_output=True, text=True, timeout=limit)
        assert proc.returncode == 0, f"cluster.sh {action} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    try:
        yield "started"
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop"], capture_output=True, timeout=60)


def _copy_workflow(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in WORKFLOW:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    domains = yaml.safe_load((ROOT / "config.yaml").read_text())["mini"]["domains"]
    (dest / "overlay.yaml").write_text(yaml.safe_dump({**OVERLAY, "mini": {"domains": smaller_domains(domains, 2)}}))
    return dest


def _start(args, cwd: Path, limit: int) -> subprocess.Popen:
    """Snakemake under `timeout -k` (Snakemake ignores SIGTERM; the KILL follows 30 s later)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(ROOT / ".cache" / "numba"), "HF_HUB_OFFLINE": "1"}
    cmd = ["timeout", "-k", "30", str(limit), SNAKEMAKE, *args, *TARGETS, "--configfile", "overlay.yaml"]
    return subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def _finish(proc: subprocess.Popen) -> str:
    out = proc.communicate()[0]
    assert proc.returncode == 0, f"{' '.join(proc.args)} failed ({proc.returncode}):\n{out[-8000:]}"
    return out


def _run(args, cwd: Path, limit: int) -> str:
    return _finish(_start(args, cwd, limit))


def _slurm(*args: str) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, check=True).stdout


def _running_training() -> str | None:
    """The SLURM id of the running training job (the plugin puts the rule's name in the job's comment)."""
    for line in _slurm("squeue", "-h", "-t", "R", "-o", "%i %k").splitlines():
        job, _, comment = line.partition(" ")
        if re.match(r"rule_train(_wildcards_|$)", comment):
            return job
    return None


def _last_checkpoint(workdir: Path) -> int:
    return max(checkpoint_steps(workdir / CHECKPOINTS), default=0)


def _wait_for(condition, what: str, limit: float = 900):
    deadline = time.time() + limit
    while time.time() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.1)
    raise TimeoutError(f"no {what} within {limit} s")


def _interrupt_training(workdir: Path, seen: dict) -> None:
    """SIGUSR1 to the first training job once it has a checkpoint; `scontrol requeue` of its retry once that
    one has checkpointed past the step it resumed from. Records what it did (or its error) in ``seen``."""
    try:
        first = _wait_for(lambda: (job := _running_training()) and _last_checkpoint(workdir) and job,
                          "training job with a checkpoint")
        _slurm("scancel", "--signal=USR1", first)          # the steps only, as --signal=USR1@300 does
        seen["signalled"] = first
        resumed = _wait_for(lambda: (job := _running_training()) not in (None, first) and job, "retried training")
        start = _last_checkpoint(workdir)
        seen["requeue_after"] = _wait_for(lambda: (step := _last_checkpoint(workdir)) > start and step,
                                          "checkpoint after the resume")
        _slurm("scontrol", "requeue", resumed)
        seen["requeued"] = resumed
        # Slurm holds a requeued job back for a while (BeginTime): let it start again at once.
        _wait_for(lambda: "PENDING" in _slurm("squeue", "-h", "-j", resumed, "-o", "%T"), "pending requeued job", 120)
        _slurm("scontrol", "update", f"JobId={resumed}", "StartTime=now")
    except Exception as exc:  # reported by the test
        seen["error"] = repr(exc)


class _Queue(threading.Thread):
    """Every job the cluster shows while the test runs, with its last state and CPU count: squeue forgets a
    finished job after MinJobAge, so the first jobs of a long run may be gone by the time it ends."""

    def __init__(self):
        super().__init__(daemon=True)
        self.jobs: dict[str, tuple[str, str, str]] = {}   # id -> (state, reason, CPUs)
        self.done = threading.Event()

    def poll(self) -> None:
        out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%r|%C"], capture_output=True, text=True,
                             timeout=60).stdout
        for line in out.splitlines():
            job, state, reason, cpus = line.strip().split("|")
            self.jobs[job] = (state, reason, cpus)

    def run(self) -> None:
        while not self.done.wait(2.0):
            try:
                self.poll()
            except (subprocess.SubprocessError, ValueError):
                pass

    def stop(self) -> dict[str, tuple[str, str, str]]:
        self.done.set()
        self.join(timeout=60)
        self.poll()
        return self.jobs

    def table(self) -> str:
        # ids in squeue's order: a job array's tasks are "<id>_<task>", a pending array "<id>_[1-2]"
        def order(kv):
            return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", kv[0])]

        return "\n".join(f"{job:>10} {state:<10} {cpus:>4} CPU(s) {reason}"
                         for job, (state, reason, cpus) in sorted(self.jobs.items(), key=order))


def _content(path: Path):
    """A file's bytes; a JSON record without its wall-clock timings (they differ between any two runs)."""
    if path.suffix == ".json":
        record = json.loads(path.read_text())
        if isinstance(record, dict):
            return {k: v for k, v in record.items() if k not in TIMINGS}
    return path.read_bytes()


def _same(a: Path, b: Path) -> bool:
    if a.is_dir():
        names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
        return names == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
            _content(a / n) == _content(b / n) for n in names)
    return _content(a) == _content(b)


def test_slurm_profile_runs_the_mini_slice_like_the_local_run(slurm_cluster, tmp_path, capsys):
    local = _copy_workflow(tmp_path / "local")
    on_slurm = _copy_workflow(tmp_path / "slurm")
    _run(["--cores", "2"], local, 900)
    seen: dict = {}
    watcher = threading.Thread(target=_interrupt_training, args=(on_slurm, seen), daemon=True)
    watcher.start()
    cluster_queue = _Queue()
    cluster_queue.start()
    log = _run(["--profile", "profiles/slurm", "--slurm-status-command", "squeue",
                "--slurm-init-seconds-before-status-checks", "2", "--slurm-no-account"], on_slurm, 1500)
    watcher.join(timeout=60)
    assert "error" not in seen and {"signalled", "requeued"} <= seen.keys(), seen
    jobs = {line.split("SLURM jobid ")[1].split()[0] for line in log.splitlines() if "SLURM jobid" in line}
    # the shard encodes: one array (the profile's slurm-array-jobs), each task a job of its own in squeue
    arrays = re.findall(r"Submitted array job with Snakemake IDs \S+ and SLURM job ID (\d+)\. "
                        r"The individual task IDs are (\d+)-(\d+)", log)
    assert [(lo, hi) for _, lo, hi in arrays] == [("1", "2")], log[-3000:]
    jobs |= {f"{job}_{task}" for job, lo, hi in arrays for task in range(int(lo), int(hi) + 1)}
    assert len(jobs) >= 10, log[-3000:]                    # the retry of the training included
    # the two statistics jobs ran as one SLURM job of the profile's `statistics` group, the dense system's
    # one-shard corpora as its group job
    assert "group job statistics" in log.lower() and "group job dense-dpr" in log.lower(), log[-3000:]
    states = cluster_queue.stop()
    queue = cluster_queue.table()
    assert jobs <= states.keys(), (jobs, queue)
    for job in jobs:                                     # the signalled job failed; every other one completed
        assert states[job][0] == ("FAILED" if job == seen["signalled"] else "COMPLETED"), (job, queue)
    # the training ran as one job of two processes, with a CPU for each
    trainings = {seen["signalled"], seen["requeued"]}
    assert all(states[job][2] == "2" for job in trainings), (trainings, queue)
    # the signalled job: this Snakemake outlived SIGUSR1, the trainer checkpointed and exited
    [first_log] = (on_slurm / "logs" / "slurm").rglob(f"{seen['signalled']}.log")
    text = first_log.read_text()
    assert "SIGUSR1 received: waiting for the running job to checkpoint and stop" in text, text[-3000:]
    stopped = re.search(r"stopped by SIGUSR1 at step (\d+): checkpoint written", text)
    assert stopped, text[-3000:]
    # the requeued run resumed from the checkpoint its first run wrote after resuming from the signal's
    rule_log = (on_slurm / "logs" / "train" / "dpr.log").read_text()
    assert re.search(r"launching: .*--nproc_per_node 2 --standalone", rule_log), rule_log[-3000:]
    resumed = re.search(rf"resuming from \S+ \(step (\d+) of {DPR_STEPS}\)", rule_log)   # 148 at one process
    assert resumed and int(resumed.group(1)) >= seen["requeue_after"] > int(stopped.group(1)), (seen, rule_log[-2000:])
    with capsys.disabled():                      # the cluster's own account of the run, in the test log
        print(f"\nSLURM jobs of the mini slice ({slurm_cluster} cluster), from squeue:\n{queue}")
    for name in SAME:
        assert (on_slurm / name).exists(), name
        assert _same(local / name, on_slurm / name), f"{name} differs between the local and the SLURM run"
    # a no-op second submission: everything is up to date
    again = _run(["--profile", "profiles/slurm", "--slurm-status-command", "squeue", "--slurm-no-account", "-n"],
                 on_slurm, 300)
    assert "Nothing to be done" in again
