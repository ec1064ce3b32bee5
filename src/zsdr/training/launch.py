"""Running a training: one recipe spec (:mod:`zsdr.training.recipes`) trained in this process, or in the
processes started for it.

:func:`run_spec` trains a spec in this process: the task the recipe builds, its loop settings (``loop``: the
batch-preparing workers and compiling, config ``training.loader_workers`` and ``training.compile``) and
checkpoints handed to the one :class:`~zsdr.training.trainer.Trainer`; ``zsdr train SPEC.json`` runs it from the
command line. :func:`launch` is what a workflow training job runs. One process trains the spec in itself
(:func:`run_spec`); several (per node, or on several nodes) are started by
``torchrun`` (:func:`torchrun_command`; on several nodes one ``srun`` step of one torchrun agent a node,
:func:`srun_environment`), or by a configured launcher such as ``accelerate launch``, each process running
``zsdr train SPEC.json``. The launching process holds the checkpoint folder's lock, builds the training
arrays the processes map, passes time-limit and preemption signals on, and turns a failed step into one
line naming the node or tasks it lost (:func:`step_failure`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from zsdr.argtypes import positive_int
from zsdr.devices import THREAD_VARIABLES
from zsdr.io import job_outputs_environment
from zsdr.training.lock import LOCK_WAIT, checkpoint_lock
from zsdr.training.recipes import build_task, spec_fingerprint, training_arrays, training_set

log = logging.getLogger(__name__)


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list (``gpu[01-04],cpu7`` -> ``gpu01``), without ``scontrol``."""
    head = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not head or not head.group(1):
        raise ValueError(f"SLURM_JOB_NODELIST {nodelist!r}: no host in it")
    if not head.group(2):
        return head.group(1)
    first = head.group(2).split(",")[0].split("-")[0]
    return head.group(1) + first


def node_agent(processes: int, nodes: int, endpoint: str | None = None, rdzv_id: str | None = None) -> list[str]:
    """The torchrun agent that starts ``processes`` training processes on one node: on one node alone
    ``--standalone`` (a free local rendezvous port, so several multi-process trainings share a machine
    without colliding on a port); one of ``nodes`` agents meeting through a c10d rendezvous at
    ``endpoint`` (host:port) under ``rdzv_id`` otherwise."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    if nodes <= 1:
        return [*torchrun, "--standalone", "--nnodes", "1"]
    return [*torchrun, "--nnodes", str(nodes), "--rdzv_backend", "c10d", "--rdzv_endpoint", str(endpoint),
            "--rdzv_id", str(rdzv_id)]


def torchrun_command(processes: int, nodes: int, env: dict[str, str] | None = None, cpus: int | None = None,
                     gpus: int | None = None) -> list[str]:
    """The command that starts ``processes`` training processes on each of ``nodes`` nodes.

    One node: :func:`node_agent` alone. Several nodes (inside a SLURM allocation of that many nodes): one
    ``srun`` step of one task a node, each task a torchrun agent with the node's ``cpus`` and ``gpus``
    (without them a step's task gets one CPU), the agents meeting through a c10d rendezvous on the
    allocation's first host (``SLURM_JOB_NODELIST``), or on this one where the executor passed no node list
    (this process runs on a node of the allocation, and every node runs an agent), on a port derived from
    the job id. Run it with :func:`srun_environment`.
    """
    env = os.environ if env is None else env
    if nodes <= 1:
        return node_agent(processes, 1)
    job, nodelist = env.get("SLURM_JOB_ID"), env.get("SLURM_JOB_NODELIST")
    if not job:
        raise ValueError(f"training on {nodes} nodes needs a SLURM allocation of {nodes} nodes (run it with "
                         f"--profile profiles/slurm), or config training.launcher naming a multi-node launcher")
    host = first_host(nodelist) if nodelist else socket.gethostname()
    port = 20000 + int(job) % 20000
    step = ["srun", "--overlap", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
            "--kill-on-bad-exit=1"]
    step += [f"--cpus-per-task={cpus}"] if cpus else []
    step += [f"--gpus-per-task={gpus}"] if gpus else []
    return [*step, *node_agent(processes, nodes, f"{host}:{port}", job)]


# What a SLURM job's environment says about the allocation as a whole: every other SLURM_ (and SRUN_,
# SBATCH_, SALLOC_) variable describes the step or task the launcher runs in. The SLURM executor runs a
# job's Snakemake in a step of one task (`srun -n1`: SLURM_NTASKS=1, SLURM_NNODES=1, its CPUs, GPUs and
# binding), and srun reads those variables as its own options: the step over every node would get one task.
SLURM_ALLOCATION = ("SLURM_JOB_", "SLURM_JOBID", "SLURM_CONF", "SLURM_CLUSTER_NAME", "SLURM_SUBMIT_",
                    "SLURM_ARRAY_")
SLURM_PREFIXES = ("SLURM_", "SRUN_", "SBATCH_", "SALLOC_")


def srun_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` for the multi-node launcher's ``srun``: the allocation's variables kept, the inherited step's
    and task's (:data:`SLURM_ALLOCATION`) dropped, so the new step is what :func:`torchrun_command` asks."""
    return {k: v for k, v in env.items() if not k.startswith(SLURM_PREFIXES) or k.startswith(SLURM_ALLOCATION)}


# The signals torchrun's agent handles by passing them to its workers and waiting for them to end. Its
# default leaves out SIGUSR1 (what `sbatch --signal=USR1@...` sends before a time limit), which would kill
# the agent at once and, with it, the job step around workers still writing their checkpoint. Recent
# torchrun reads the list from its --signals-to-handle option (environment PET_SIGNALS_TO_HANDLE), older
# ones from TORCHELASTIC_SIGNALS_TO_HANDLE; the agent then waits up to TORCH_ELASTIC_SHUTDOWN_TIMEOUT
# seconds (default 30) for the workers to finish their step and checkpoint: 240, within the 300 s the
# SLURM profile's warning leaves.
TORCHRUN_SIGNALS = {"PET_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
                    "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1",
                    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "240"}


def launch(spec: dict, *, processes: int = 1, nodes: int = 1, launcher: list[str] | None = None,
           spec_path: str | os.PathLike | None = None, progress: bool = False,
           log_file: str | os.PathLike | None = None, loop: dict | None = None,
           threads: int | None = None, cpus: int | None = None, gpus: int | None = None,
           lock_wait: float = LOCK_WAIT) -> None:
    """Train ``spec`` with ``processes`` processes per node (``torchrun``) or in this process when 1.

    ``launcher`` replaces the default command (:func:`torchrun_command`), e.g. ``accelerate launch
    --multi_gpu ...``. ``loop`` (``{"workers": ..., "compile": ...}``, config ``training.loader_workers``
    and ``training.compile``) says how the training loop runs; it changes no result. ``threads`` are the
    job's CPU threads on this node: each of several processes gets its share (``OMP_NUM_THREADS``,
    ``MKL_NUM_THREADS`` and the other :data:`THREAD_VARIABLES`). ``cpus`` and ``gpus`` are the job's CPUs
    and GPUs on each node, which a launch on several nodes asks for each node's agent.

    One training writes a checkpoint folder at a time: the spec's ``checkpoint_dir`` is locked while it
    trains (:func:`zsdr.training.lock.checkpoint_lock`; another job of the same run waits up to
    ``lock_wait`` seconds, then fails naming the holder).

    When the processes stop at a signal (a time limit, preemption), their "stopped by ..." line is
    repeated here, where the job's console sees it, and this process exits as they did (128 + the
    signal): the retry resumes from their checkpoint.
    """
    with checkpoint_lock(spec.get("checkpoint_dir"), wait=lock_wait):
        _launch(spec, processes, nodes, launcher, spec_path, progress, log_file, loop, threads, cpus, gpus)


def _launch(spec, processes, nodes, launcher, spec_path, progress, log_file, loop, threads, cpus, gpus) -> None:
    if loop:
        spec = {**spec, "loop": dict(loop)}
    if processes <= 1 and nodes <= 1 and not launcher:
        run_spec(spec, progress=progress)
        return
    if training_arrays(spec) is not None:  # built once here; the processes below map it
        training_set(spec)
    if spec.get("kind") == "mixture" and spec.get("checkpoint_dir"):   # the weak pairs' tables, likewise
        from zsdr.training.rmsc import prepare_pairs_tables

        prepare_pairs_tables(spec)
    spec_path = Path(spec_path or Path(spec["out"]).parent / f".{Path(spec['out']).name}.spec.json")
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(json.dumps(spec, indent=1))
    cmd = list(launcher) if launcher else torchrun_command(processes, nodes, cpus=cpus, gpus=gpus)
    cmd += ["-m", "zsdr", "train", str(spec_path), "--quiet", "--log-info"]
    log.info("launching: %s", " ".join(cmd))
    # torchrun's agent must handle (and pass on) SIGUSR1 too: see TORCHRUN_SIGNALS.
    # the job's declared output folders are the processes' to replace, as the job's own (zsdr.io.atomic_dir)
    env = {**os.environ, **TORCHRUN_SIGNALS, **job_outputs_environment()}
    if nodes > 1 and not launcher:
        env = srun_environment(env)
    if threads:  # every math library's pool (torch's matmuls go through MKL): one share per process, not
        # the whole job's count in each, which oversubscribes the job's CPUs (6x slower on 2 x 1 CPU)
        share = str(max(1, int(threads) // max(1, processes)))
        env.update(dict.fromkeys(THREAD_VARIABLES, share))
    fh = open(log_file, "a", encoding="utf-8") if log_file else None
    start = fh.tell() if fh else 0
    try:
        with _outlive_stop_signals():
            rc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT if fh else None).wait()
    finally:
        if fh:
            fh.close()
    if rc:
        stop = _workers_stop(log_file, start) if log_file else None
        if stop:
            signum, line = stop
            log.warning("%s", line)
            raise SystemExit(128 + signum)
        if nodes > 1 and not launcher:
            with _outlive_stop_signals():      # the job may be ending around this process (a node failure)
                nodelist = env.get("SLURM_JOB_NODELIST") or _job_nodes(env.get("SLURM_JOB_ID"))
                message = step_failure(_log_text(log_file, start), nodelist, rc)
            log.error("%s", message)
            raise StepFailed(message)
        raise subprocess.CalledProcessError(rc, cmd)


class StepFailed(RuntimeError):
    """The training step over several nodes failed; the message names the node(s) it lost or the tasks
    that ended."""


# srun's own lines about a step's nodes and tasks (Slurm's wording)
_NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")
_TASK_ENDED = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): (.+)")
# How long a failed multi-node step waits for the controller to say whether one of its nodes died (a node
# that stops answering is "not responding" after slurmd's ping interval, a fraction of SlurmdTimeout).
NODE_WAIT = 45.0


def _log_text(log_file, start: int) -> str:
    if not log_file:
        return ""
    with open(log_file, "rb") as f:
        f.seek(start)
        return f.read().decode("utf-8", errors="replace")


def _job_nodes(job: str | None) -> str | None:
    """The node list of SLURM job ``job`` (``squeue``), where the job's environment does not give it."""
    if not job or not shutil.which("squeue"):
        return None
    try:
        proc = subprocess.run(["squeue", "-h", "-j", str(job), "-o", "%N"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def lost_nodes(nodelist: str | None) -> dict[str, str] | None:
    """The allocation's nodes the SLURM controller sees as dead (not responding, down, failing), with their
    state as `sinfo` prints it (``down*``); None where no controller answers."""
    if not nodelist or not shutil.which("sinfo"):
        return None
    try:
        proc = subprocess.run(["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N|%t"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode:
        return None
    lost = {}
    for line in proc.stdout.split():
        node, _, state = line.partition("|")
        if state.endswith("*") or state.rstrip("*~#$@^-") in ("down", "fail", "failg", "drain", "drng", "unk"):
            lost[node] = state
    return lost


def step_failure(text: str, nodelist: str | None, rc: int, wait: float | None = None) -> str:
    """One line on a failed training step over several nodes: the node(s) it lost (srun's "Node failure on
    <node>", else the controller's account of the allocation's nodes, waited for up to ``wait`` seconds: a
    dead node stops the other nodes' processes before the controller marks it), then the tasks srun saw end.
    """
    wait = NODE_WAIT if wait is None else wait
    dead = dict.fromkeys(_NODE_FAILURE.findall(text), "node failure")
    deadline = time.monotonic() + wait
    while not dead:
        found = lost_nodes(nodelist)
        if found:
            dead = found
        if found is None or dead or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    tasks = "; ".join(f"{node}: task {task}: {what.strip()}" for node, task, what in _TASK_ENDED.findall(text))
    if dead:
        names = ", ".join(f"{node} ({state})" for node, state in dead.items())
        head = f"training step failed: node {names} died or stopped answering SLURM"
    else:
        head = f"training step failed (exit status {rc}) on {nodelist or 'this node'}"
    return (f"{head}{'; srun: ' + tasks if tasks else ''}; the processes' checkpoints are kept: the job's retry "
            f"(or SLURM's requeue) resumes from the last one")


_STOPPED = re.compile(r"stopped by (SIG[A-Z0-9]+) at step (\d+): ([^\[\n]*?)\s*\[process \d+ of (\d+)\]")


def _workers_stop(log_file: str | os.PathLike, start: int) -> tuple[int, str] | None:
    """The signal that stopped the training processes and one line saying so, from what they wrote to
    ``log_file`` after byte ``start`` (their "stopped by SIG... at step N: ... [process r of w]" lines);
    None when they did not stop at a signal."""
    with open(log_file, "rb") as f:
        f.seek(start)
        found = _STOPPED.findall(f.read().decode("utf-8", errors="replace"))
    if not found:
        return None
    name, step, what, world = found[-1]
    line = f"stopped by {name} at step {step}: {what} [{len(found)} of {world} processes]"
    return int(getattr(signal.Signals, name)), line


class _outlive_stop_signals:
    """While the training processes run, SIGTERM / SIGUSR1 (preemption, a time limit) do not end this
    parent: SLURM signals every process of the job, the workers write their checkpoint and stop, and this
    process then fails with their exit status. Dying first would end the job step and SIGKILL the workers
    in the middle of that checkpoint. A handler, not SIG_IGN: the workers must not inherit an ignore."""

    SIGNALS = (signal.SIGTERM, signal.SIGUSR1)

    def __enter__(self):
        self.previous = {}
        try:
            for s in self.SIGNALS:
                self.previous[s] = signal.signal(s, self._note)
        except ValueError:                      # not the main thread: leave the handlers alone
            self.previous = {}
        return self

    @staticmethod
    def _note(signum, frame):
        log.warning("%s received: waiting for the training processes to checkpoint and stop",
                    signal.Signals(signum).name)

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        return False


def run_spec(spec: dict, *, cpu: bool | None = None, progress: bool = True, stop_after: int | None = None) -> Path | None:
    """Train the recipe ``spec`` in this process (one of several under torchrun / accelerate launch)."""
    from zsdr.training.config import TrainConfig
    from zsdr.training.trainer import Trainer

    cfg = TrainConfig.from_dict(spec["train"])
    task = build_task(spec)
    loop = spec.get("loop") or {}
    trainer = Trainer(task, cfg, spec["out"], checkpoint_dir=spec.get("checkpoint_dir"),
                      fingerprint=spec_fingerprint(spec), cpu=cpu, progress=progress, stop_after=stop_after,
                      workers=loop.get("workers"), compile=bool(loop.get("compile")),
                      info={"recipe": spec.get("info", {}), "init": spec["init"], "dataset": spec.get("dataset"),
                            "spans": spec.get("spans"),
                            "negatives": spec.get("negatives"), "units": spec.get("units"),
                            "teacher": spec.get("teacher"),
                            "loss": spec.get("loss"), "negatives_per_query": spec.get("negatives_per_query"),
                            **({"sets": spec["sets"]} if spec.get("sets") else {})})
    return trainer.train()


def cmd_train(args) -> int:
    from zsdr.io import read_json

    from zsdr.io import DataError

    spec = read_json(args.spec, "write the spec as one JSON object (see zsdr.training.recipes and zsdr.training.launch)")
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing:
        raise DataError(args.spec, None, f"the spec has no {', '.join(repr(k) for k in missing)} "
                        f"(a spec needs {', '.join(SPEC_KEYS)})",
                        "use the spec the workflow's train rule writes, or see zsdr.training.recipes and zsdr.training.launch")
    if args.log_info:
        logging.getLogger().setLevel(logging.INFO)
    run_spec(spec, cpu=True if args.cpu else None, progress=not args.quiet, stop_after=args.stop_after)
    return 0


SPEC_KEYS = ("init", "out", "train")   # what every recipe spec carries (run_spec)


def register_cli(sub) -> None:
    p = sub.add_parser("train", help="train a recipe spec (JSON); run under torchrun for several processes")
    p.add_argument("spec", help="JSON file: the resolved recipe (see zsdr.training.recipes and zsdr.training.launch)")
    p.add_argument("--cpu", action="store_true", help="train on the CPU even where a GPU is present")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--log-info", action="store_true",
                   help="log the run's progress (INFO: resumes, checkpoints, progress lines) to stderr; the "
                        "workflow's multi-process trainings pass it, so their job log shows what the processes do")
    p.add_argument("--stop-after", type=positive_int, default=None,
                   help="stop after this many steps, without saving (a testing aid for resumption)")
    p.set_defaults(func=cmd_train)
