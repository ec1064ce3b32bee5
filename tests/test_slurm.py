"""The SLURM profile on a real SLURM: a two-node cluster on this machine runs a slice of the mini pipeline
through snakemake-executor-plugin-slurm, and its outputs equal those of the same slice run locally.

The cluster comes from Debian's packages (tests/slurm/cluster.sh: slurmctld, two slurmd, munge), each node a
network and host-name namespace of this machine with its own address; the test installs and starts it where it
runs as root with apt-get and namespaces, and stops it again. Elsewhere it skips, with one line saying why,
unless the same two-node cluster already answers `sinfo`. Job status comes from `squeue` (finished jobs stay
visible for MinJobAge = 7200 s, longer than the test takes) and `sacct -c` (the job completion log: there is no
slurmdbd).

The training runs on both nodes: `training.nodes: 2` x 1 process, one SLURM job of two nodes whose launcher starts
one `srun` step of a task a node, each task a torchrun agent, the agents meeting through a c10d rendezvous on the
first node (DDP over gloo on the CPU, over the nodes' bridge). The local run trains the same recipe as 1 node x 2
processes: the same global batch, data order and all-reduce, so the SLURM run's model must equal it byte for byte.

While it runs, the training job is interrupted three times, as a cluster does: SIGUSR1 to the job's steps (what
`sbatch --signal=USR1@300` sends before a time limit: both nodes' trainers checkpoint and exit, the job fails and
Snakemake's retry resumes); in the retry, `scontrol requeue` (preemption with requeue: the job is killed and
queued again under its id, and resumes from its last periodic checkpoint); and once that has resumed, the second
node dies (its slurmd and everything on it killed): the launcher fails naming the node, nothing is written to the
model folder and SLURM requeues the job (NODE_FAIL). Its requeued run does not get its srun step on this cluster
(step creation stays "temporarily disabled": Requested nodes are busy), so the test cancels it, brings the node
back, and Snakemake's retry resumes from the last checkpoint. The model must still equal the local run's, byte
for byte.
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
NODES = ("zsdr-n1", "zsdr-n2")
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
WORKFLOW = ("Snakefile", "config.yaml", "configs", "rules", "workflow_scripts", "schemas", "src", "report",
            "profiles", "envs")
# Data, a tiny backbone, BM25 (index + search), a training, corpus shards encoded by one job array of two tasks,
# dense search, the system's one-shard corpora in its dense group job, and two small statistics jobs that the
# profile groups into one SLURM job.
TARGETS = ("runs/mini-alpha/bm25-flat.trec", "runs/mini-alpha/dpr.trec", "runs/mini-beta/dpr.trec",
           "stats/mini-alpha.json", "stats/mini-beta.json")
MODEL = "models/trained/dpr"
SAME = ("runs/mini-alpha/bm25-flat.trec", "runs/mini-alpha/dpr.trec", "runs/mini-beta/dpr.trec",
        f"{MODEL}/model.safetensors", "embeddings/mini-alpha/dpr/shard0-of-2",
        "embeddings/mini-alpha/dpr/shard1-of-2", "stats/mini-alpha.json", "stats/mini-beta.json")
TIMINGS = {"seconds", "docs_per_second"}
# Two shards of mini-alpha; every mini domain at half its size (as in the smoke mini run: half the texts to
# index, encode, search and score); the training 72 steps of 2 x 32 examples (8 epochs of the 600 training
# queries: long enough to be interrupted three times) in two processes: one on each of two nodes on SLURM, two on
# one node locally; a checkpoint every 10 steps (the config's 100 leaves no time to interrupt it between two).
OVERLAY = {"dense": {"dataset_shards": {"mini-alpha": 2}}, "training": {"save_every": 10},
           "recipes": {"dpr": {"train": {"epochs": 8}}}}
ONE_NODE = {"processes": 2, "nodes": 1}
TWO_NODES = {"processes": 1, "nodes": 2}
DPR_STEPS = 72
CHECKPOINTS = "models/.checkpoints/dpr"


def _sinfo_nodes() -> set[str] | None:
    """The nodes the SLURM controller knows (None: no controller answers)."""
    if not shutil.which("sinfo"):
        return None
    try:
        proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return None
    return set(proc.stdout.split()) if proc.returncode == 0 else None


@pytest.fixture(scope="module")
def slurm_cluster():
    """The running two-node cluster of tests/slurm/cluster.sh: the one already answering `sinfo`, or one this
    test installs and starts (root with apt-get and namespaces) and stops again. The cluster's own configuration
    applies while it runs (conftest.py points SLURM_CONF at an empty file for the local tests)."""
    original = os.environ.get("ZSDR_TESTS_SLURM_CONF")
    if original:
        os.environ["SLURM_CONF"] = original
    else:
        os.environ.pop("SLURM_CONF", None)
    try:
        yield from _cluster()
    finally:
        os.environ["SLURM_CONF"] = os.devnull


def _cluster_sh(action: str, *args: str, limit: int = 120, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", str(CLUSTER), action, *args], capture_output=True, text=True, timeout=limit)
    if check:
        assert proc.returncode == 0, f"cluster.sh {action} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _cluster():
    known = _sinfo_nodes()
    if known is not None:
        if not set(NODES) <= known:
            pytest.skip(f"a SLURM cluster of nodes {sorted(known)} answers sinfo: the test needs the two-node "
                        f"cluster of tests/slurm/cluster.sh (stop the other one to run it)")
        yield "existing"
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("no SLURM cluster answers sinfo, and starting the two-node one needs root with apt-get")
    _cluster_sh("install", limit=900)
    checked = _cluster_sh("check", check=False)
    if checked.returncode == 3:
        pytest.skip(checked.stderr.strip().splitlines()[-1])
    assert checked.returncode == 0, checked.stderr
    try:
        _cluster_sh("start")
        yield "started"
    finally:
        _cluster_sh("stop", limit=120, check=False)


def _copy_workflow(dest: Path, launch: dict) -> Path:
    dest.mkdir(parents=True)
    for name in WORKFLOW:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    domains = yaml.safe_load((ROOT / "config.yaml").read_text())["mini"]["domains"]
    overlay = {**OVERLAY, "training": {**OVERLAY["training"], **launch},
               "mini": {"domains": smaller_domains(domains, 2)}}
    (dest / "overlay.yaml").write_text(yaml.safe_dump(overlay))
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


def _training_step_running(job: str) -> bool:
    """The training's srun step over both nodes runs (its agents started)."""
    return any(line.startswith(f"{job}.0 ") for line in _slurm("squeue", "-h", "-s", "-o", "%i %N").splitlines())


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


def _state(job: str) -> str:
    return _slurm("squeue", "-h", "-j", job, "-o", "%T").strip()


def _release(job: str) -> None:
    """Slurm holds a requeued job back for a while (BeginTime): let it start again at once."""
    _wait_for(lambda: _state(job) == "PENDING", "pending requeued job", 180)
    _slurm("scontrol", "update", f"JobId={job}", "StartTime=now")


def _checkpoint_after_resume(workdir: Path, seen: dict) -> int:
    """The first checkpoint a resumed run writes; the run's rule log so far kept in ``seen`` (the log of the
    training's next run replaces it)."""
    start = _last_checkpoint(workdir)
    step = _wait_for(lambda: (step := _last_checkpoint(workdir)) > start and step, "checkpoint after the resume")
    seen.setdefault("logs", []).append(_rule_log(workdir))
    return step


def _rule_log(workdir: Path) -> str:
    path = workdir / "logs" / "train" / "dpr.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _interrupt_training(workdir: Path, seen: dict) -> None:
    """SIGUSR1 to the first training job once it has a checkpoint; `scontrol requeue` of its retry once that
    one has checkpointed past the step it resumed from; the second node killed once the requeued job has
    checkpointed past its own, and started again once SLURM has requeued the job. Records what it did (or its
    error) in ``seen``."""
    try:
        first = _wait_for(lambda: (job := _running_training()) and _last_checkpoint(workdir) and job,
                          "training job with a checkpoint")
        _slurm("scancel", "--signal=USR1", first)          # the steps only, as --signal=USR1@300 does
        seen["signalled"] = first
        retry = _wait_for(lambda: (job := _running_training()) not in (None, first) and job, "retried training")
        seen["requeue_after"] = _checkpoint_after_resume(workdir, seen)
        _slurm("scontrol", "requeue", retry)
        seen["requeued"] = retry
        _release(retry)
        _wait_for(lambda: _running_training() == retry and _training_step_running(retry), "requeued training")
        seen["kill_after"] = _checkpoint_after_resume(workdir, seen)
        _cluster_sh("kill-node", NODES[1])
        seen["killed"] = time.time()
        # the launcher names the dead node; the controller notices it (SlurmdTimeout), fails the job (NODE_FAIL)
        # and requeues it
        seen["logs"].append(_wait_for(lambda: "training step failed" in (text := _rule_log(workdir)) and text,
                                      "failed training step", 180))
        _wait_for(lambda: _state(retry) in ("PENDING", "REQUEUED", "REQUEUE_FED"), "requeue after the node failure", 180)
        # the model folder (Snakemake makes it, empty, before the job runs) and any temporary sibling of it:
        # nothing in them, the launcher's spec beside them aside
        model = workdir / MODEL
        seen["model_after_failure"] = sorted(
            [str(p.relative_to(workdir)) for p in model.rglob("*")]
            + [p.name for p in model.parent.glob(f".{model.name}*") if p.name != f".{model.name}.spec.json"])
        # SLURM's own rerun of the requeued job does not get its step over both nodes here (srun: "step creation
        # temporarily disabled ... Requested nodes are busy" after the node came back): cancel it, as at a site
        # that does not requeue jobs that lost a node, and Snakemake's retry reruns the training as a new job
        _slurm("scancel", retry)
        _cluster_sh("start-node", NODES[1])
    except Exception as exc:  # reported by the test
        seen["error"] = repr(exc)


class _Queue(threading.Thread):
    """Every job and job step the cluster shows while the test runs, with the job's last state, CPU count and
    nodes, and the step's nodes and tasks: squeue forgets a finished job after MinJobAge, so the first jobs of
    a long run may be gone by the time it ends, and a step only shows while it runs."""

    def __init__(self, rule_log: Path):
        super().__init__(daemon=True)
        self.rule_log = rule_log
        self.runs: list[str] = []     # the training's rule log of every run (each run's Snakemake replaces it)
        self.jobs: dict[str, tuple[str, str, str, str, str]] = {}   # id -> (state, reason, CPUs, nodes, node list)
        self.steps: dict[str, tuple[str, str]] = {}                 # step id -> (node list, tasks)
        self.done = threading.Event()

    def poll(self) -> None:
        text = self.rule_log.read_text(errors="replace") if self.rule_log.exists() else ""
        if text and self.runs and text.startswith(self.runs[-1][:200]):
            self.runs[-1] = text
        elif text:
            self.runs.append(text)
        out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i|%T|%r|%C|%D|%N"], capture_output=True,
                             text=True, timeout=60).stdout
        for line in out.splitlines():
            job, state, reason, cpus, nodes, nodelist = line.strip().split("|")
            self.jobs[job] = (state, reason, cpus, nodes, nodelist or self.jobs.get(job, ("",) * 5)[4])
        out = subprocess.run(["squeue", "-h", "-s", "-o", "%i|%N|%A"], capture_output=True, text=True,
                             timeout=60).stdout
        for line in out.splitlines():
            step, nodelist, tasks = line.strip().split("|")
            self.steps[step] = (nodelist, tasks)

    def run(self) -> None:
        while not self.done.wait(1.0):
            try:
                self.poll()
            except (subprocess.SubprocessError, ValueError):
                pass

    def stop(self) -> dict[str, tuple[str, str, str, str, str]]:
        self.done.set()
        self.join(timeout=60)
        self.poll()
        return self.jobs

    def table(self) -> str:
        # ids in squeue's order: a job array's tasks are "<id>_<task>", a pending array "<id>_[1-2]"
        def order(kv):
            return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", kv[0])]

        jobs = [f"{job:>10} {state:<10} {cpus:>4} CPU(s) {nodes} node(s) {nodelist:<16} {reason}"
                for job, (state, reason, cpus, nodes, nodelist) in sorted(self.jobs.items(), key=order)]
        steps = [f"{step:>10} step on {nodelist}, {tasks} task(s)"
                 for step, (nodelist, tasks) in sorted(self.steps.items(), key=order)]
        return "\n".join(jobs + steps)


def _content(path: Path):
    """A file's bytes; a JSON record without its wall-clock timings (they differ between any two runs)."""
    if path.suffix == ".json":
        record = json.loads(path.read_text())
        if isinstance(record, dict):
            # and without the model folder's content digest: the SLURM run's folder also records its resumed
            # steps, so the digest differs while the weights are byte-equal (compared on their own below)
            return {k: v for k, v in record.items() if k not in TIMINGS and k != "model_sha256"}
    return path.read_bytes()


def _same(a: Path, b: Path) -> bool:
    if a.is_dir():
        names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
        return names == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and all(
            _content(a / n) == _content(b / n) for n in names)
    return _content(a) == _content(b)


def _largest_difference(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    return max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa)


# A job's Snakemake (wait_for_the_job_on_sigusr1) and the rule's script under it; SIGUSR1 to both, as SLURM signals
# every process of a job step: the script stands in for a training that checkpoints and exits 128 + 10.
OUTLIVE = """
import os, signal, subprocess, sys, time
from zsdr.workflow import wait_for_the_job_on_sigusr1
wait_for_the_job_on_sigusr1()
script = "import signal, sys, time; signal.signal(signal.SIGUSR1, lambda *a: sys.exit(138)); print('ready', flush=True); time.sleep(60)"
child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
os.killpg(0, signal.SIGUSR1)
sys.exit(child.wait())
"""


def test_a_jobs_snakemake_outlives_sigusr1_until_its_script_ends():
    """The in-job Snakemake of a one-node job runs in a job step (`srun -n1`), which the time limit's warning
    (sbatch --signal=USR1@300) signals with the training under it: the Snakemake must wait for the training's
    checkpoint and fail with its status, not die at once and take the step with it."""
    proc = subprocess.run([sys.executable, "-c", OUTLIVE], capture_output=True, text=True, timeout=120,
                          start_new_session=True)
    assert proc.returncode == 138, proc.stderr
    assert "SIGUSR1 received: waiting for the running job to checkpoint and stop" in proc.stderr


def test_slurm_profile_runs_the_mini_slice_on_two_nodes_like_the_local_run(slurm_cluster, tmp_path, capsys):
    local = _copy_workflow(tmp_path / "local", ONE_NODE)
    on_slurm = _copy_workflow(tmp_path / "slurm", TWO_NODES)
    _run(["--cores", "2"], local, 900)
    seen: dict = {}
    watcher = threading.Thread(target=_interrupt_training, args=(on_slurm, seen), daemon=True)
    watcher.start()
    cluster_queue = _Queue(on_slurm / "logs" / "train" / "dpr.log")
    cluster_queue.start()
    started = time.time()
    log = _run(["--profile", "profiles/slurm", "--slurm-status-command", "squeue",
                "--slurm-init-seconds-before-status-checks", "2", "--slurm-no-account"], on_slurm, 1500)
    slurm_seconds = time.time() - started
    watcher.join(timeout=60)
    states = cluster_queue.stop()
    queue = cluster_queue.table()
    assert "error" not in seen and {"signalled", "requeued", "killed"} <= seen.keys(), (seen, queue)
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
    assert jobs <= states.keys(), (jobs, queue)
    # the signalled job failed, the job that lost a node was cancelled once SLURM had requeued it, and Snakemake's
    # retry (a job of its own) completed the training; every other job completed
    after = [job for job in jobs if job not in (seen["signalled"], seen["requeued"]) and states[job][3] == "2"]
    assert len(after) == 1, (after, queue)
    for job in jobs:
        expected = {seen["signalled"]: "FAILED", seen["requeued"]: "CANCELLED"}.get(job, "COMPLETED")
        assert states[job][0] == expected, (job, after, queue)
    # the training ran as one job on both nodes, a CPU on each, its step one task on each node
    trainings = {seen["signalled"], seen["requeued"], *after}
    for job in trainings:
        assert states[job][2:] == ("2", "2", "zsdr-n[1-2]"), (job, queue)
        assert cluster_queue.steps.get(f"{job}.0") == ("zsdr-n[1-2]", "2"), (job, queue)
    # SLURM's own completion records: the requeued job's every run on both nodes (no slurmdbd: `sacct -c`)
    records = _slurm("sacct", "-c", "-n", "-P", "-j", ",".join(sorted(trainings, key=int)), "-o",
                     "JobID,State,NNodes,NodeList")
    runs = [line.split("|") for line in records.splitlines() if line.strip()]
    ran = [r for r in runs if r[2] != "0"]        # not the requeued run cancelled while it waited
    assert ran and all(r[2:] == ["2", "zsdr-n[1-2]"] for r in ran) and ran[-1][1] == "COMPLETED", records
    assert "NODE_FAIL" in {r[1] for r in runs if r[0] == seen["requeued"]}, records
    # the signalled job: the trainers on both nodes checkpointed and exited (the signal reaches the job's steps,
    # not its batch step, where the Snakemake of a multi-node job runs)
    [first_log] = (on_slurm / "logs" / "slurm").rglob(f"{seen['signalled']}.log")
    text = first_log.read_text()
    stopped = re.search(r"stopped by SIGUSR1 at step (\d+): checkpoint written.* \[2 of 2 processes\]", text)
    assert stopped, text[-3000:]
    rule_log = "\n".join([*cluster_queue.runs, *seen["logs"]])    # every run's, each replaced by the next
    # one srun step of a task a node, each a torchrun agent of one process; every rank said where it ran
    assert re.search(r"launching: srun --overlap --nodes=2 --ntasks=2 --ntasks-per-node=1 .*--nproc_per_node 1 "
                     r"--nnodes 2 --rdzv_backend c10d --rdzv_endpoint zsdr-n1:", rule_log), rule_log[-3000:]
    for rank, node in enumerate(NODES):
        assert f"process {rank} of 2 on {node} (local process 0): global batch 64" in rule_log, rule_log[-3000:]
    # the dead node: the launcher named it, SLURM requeued the job (NODE_FAIL), nothing reached the model folder
    assert re.search(rf"training step failed: node {NODES[1]} ", rule_log), rule_log[-4000:]
    assert seen["model_after_failure"] == [], seen
    # each run resumed from the checkpoint its predecessor wrote: the signal's, then the periodic ones
    resumed = [int(s) for s in re.findall(rf"resuming from \S+ \(step (\d+) of {DPR_STEPS}\)", rule_log)]
    resumed = sorted(set(resumed))          # every process logs it
    assert len(resumed) >= 3, (resumed, rule_log[-3000:])
    assert resumed[0] == int(stopped.group(1)), (resumed, stopped.group(0))
    assert resumed[1] >= seen["requeue_after"] > resumed[0], (seen, resumed)
    assert resumed[-1] >= seen["kill_after"] > resumed[1], (seen, resumed)
    # 2 nodes x 1 process trained as 1 node x 2 processes: the same model, byte for byte
    difference = _largest_difference(local / MODEL, on_slurm / MODEL)
    with capsys.disabled():                      # the cluster's own account of the run, in the test log
        print(f"\nSLURM jobs of the mini slice ({slurm_cluster} cluster, {slurm_seconds:.0f} s), from squeue:\n"
              f"{queue}\nsacct -c of the training job:\n{records.strip()}\ntraining resumed at steps {resumed}; "
              f"after the node failure: Snakemake's retry, job {after[0]}; "
              f"largest weight difference 2 nodes x 1 vs 1 node x 2 processes: {difference}")

    for name in SAME:
        assert (on_slurm / name).exists(), name
        assert _same(local / name, on_slurm / name), f"{name} differs between the local and the SLURM run"
    # a no-op second submission: everything is up to date
    again = _run(["--profile", "profiles/slurm", "--slurm-status-command", "squeue", "--slurm-no-account", "-n"],
                 on_slurm, 300)
    assert "Nothing to be done" in again
