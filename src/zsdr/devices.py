"""GPU assignment for jobs that share one machine.

Snakemake only *counts* GPUs: ``--resources gpu=N`` caps the sum of the running jobs' ``gpu``
resource, but nothing tells a job *which* devices are its own, so two concurrent ``gpu=1`` jobs
would both use ``cuda:0``. A GPU job therefore calls :func:`claim_for_job` first thing (before CUDA
initialises): it claims devices that no other job holds and sets ``CUDA_VISIBLE_DEVICES`` to them,
which child processes (torchrun workers) inherit.

Locks: one file per device, ``<lock_dir>/gpu<id>.lock``, held with ``flock`` by the job process.
The open files stay referenced for the life of the process, so the kernel releases them when it
exits or is killed: no stale locks, nothing to clean up. A claim of several devices is atomic: it
tries them (non-blocking) while holding ``<lock_dir>/claim.lock``, and when too few are free it
gives back what it took and waits, so two jobs never each hold half of what both need.

The pool of devices is the ``pool`` argument, else ``ZSDR_GPUS`` (e.g. ``0,1``), else the
inherited ``CUDA_VISIBLE_DEVICES``, else what ``nvidia-smi`` lists. Under SLURM (``SLURM_JOB_ID``
set) the scheduler has already assigned the devices and nothing is done.

The CPU side: :data:`THREAD_VARIABLES`, the math libraries' thread counts, which Snakemake sets to a
job's ``threads`` and a job of several processes divides among them.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import subprocess
import time
from pathlib import Path
from typing import IO, Iterable

_log = logging.getLogger(__name__)

# The thread-count variables of the math libraries, which Snakemake sets to a job's `threads`.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")

# Lock files of the devices this process holds (kept open: closing one releases its lock).
_HELD: list[IO] = []
_CLAIMED: list[str] = []


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _nvidia_smi() -> list[str]:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def gpu_pool(pool: Iterable[str | int] | None = None) -> list[str]:
    """The device ids jobs may claim: ``pool``, ``ZSDR_GPUS``, ``CUDA_VISIBLE_DEVICES`` or nvidia-smi."""
    if pool is not None:
        ids = [str(p).strip() for p in pool]
    elif _split(os.environ.get("ZSDR_GPUS", "")):
        ids = _split(os.environ["ZSDR_GPUS"])
    elif _split(os.environ.get("CUDA_VISIBLE_DEVICES", "")):
        ids = _split(os.environ["CUDA_VISIBLE_DEVICES"])
    else:
        ids = _nvidia_smi()
    return list(dict.fromkeys(i for i in ids if i))


def _lock_dir(lock_dir: str | os.PathLike | None) -> Path:
    if lock_dir is None:
        lock_dir = os.environ.get("ZSDR_GPU_LOCKS") or Path.cwd() / ".snakemake" / "gpu-locks"
    path = Path(lock_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _lock_file(lock_dir: Path, gpu: str) -> Path:
    return lock_dir / f"gpu{re.sub(r'[^A-Za-z0-9._-]', '_', gpu)}.lock"


def _try_lock(path: Path) -> IO | None:
    """``path`` opened and exclusively locked, or None when another process holds it."""
    fh = open(path, "a+")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")  # who holds it, for whoever looks
    fh.flush()
    return fh


def _unlock(fh: IO) -> None:
    fcntl.flock(fh, fcntl.LOCK_UN)
    fh.close()


def claim_gpus(count: int, *, lock_dir: str | os.PathLike | None = None,
               pool: Iterable[str | int] | None = None, poll: float = 1.0,
               log: logging.Logger | None = None) -> list[str]:
    """Claim ``count`` devices no other process holds, set ``CUDA_VISIBLE_DEVICES``, return their ids.

    Waits (checking every ``poll`` seconds) until enough devices are free. Returns [] and leaves the
    environment alone when ``count`` is 0, under SLURM, or when no device is visible (a warning).
    Raises ValueError when ``count`` exceeds the pool.
    """
    log = log or _log
    count = int(count or 0)
    if count < 0:
        raise ValueError(f"GPU count must be 0 or more, not {count}")
    if count == 0:
        return []
    if os.environ.get("SLURM_JOB_ID"):
        log.debug("SLURM job %s: the scheduler assigned the GPUs", os.environ["SLURM_JOB_ID"])
        return []
    if _CLAIMED:
        if count != len(_CLAIMED):
            raise RuntimeError(f"this process already holds GPU(s) {','.join(_CLAIMED)}; "
                               f"it cannot claim {count} more (call release_gpus() first)")
        return list(_CLAIMED)
    ids = gpu_pool(pool)
    if not ids:
        log.warning("the job asked for %d GPU(s) but none is visible (no ZSDR_GPUS, CUDA_VISIBLE_DEVICES "
                    "or nvidia-smi); it runs on whatever torch finds, or the CPU", count)
        return []
    if count > len(ids):
        raise ValueError(
            f"the job asks for {count} GPU(s) but this machine offers {len(ids)} ({','.join(ids)}); "
            f"lower the rule's GPU count in the config (e.g. dense.gpus, training.gpus) "
            f"or run on a machine with more GPUs")
    locks = _lock_dir(lock_dir)
    waited_since = None
    while True:
        taken: list[tuple[str, IO]] = []
        busy: list[str] = []
        with open(locks / "claim.lock", "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            try:
                for gpu in ids:
                    fh = _try_lock(_lock_file(locks, gpu))
                    if fh is None:
                        busy.append(gpu)
                    else:
                        taken.append((gpu, fh))
                        if len(taken) == count:
                            break
                if len(taken) < count:
                    for _, fh in taken:
                        _unlock(fh)
            finally:
                fcntl.flock(guard, fcntl.LOCK_UN)
        if len(taken) == count:
            break
        if waited_since is None:
            waited_since = time.monotonic()
            log.info("waiting for %d free GPU(s): %s busy (locks in %s)", count, ",".join(busy), locks)
        time.sleep(poll)
    claimed = [gpu for gpu, _ in taken]
    _HELD.extend(fh for _, fh in taken)
    _CLAIMED.extend(claimed)
    if waited_since is not None:
        log.info("got GPU(s) %s after %.0f s", ",".join(claimed), time.monotonic() - waited_since)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(claimed)
    return claimed


def release_gpus() -> None:
    """Give back the devices this process claimed (exiting does the same)."""
    while _HELD:
        _unlock(_HELD.pop())
    _CLAIMED.clear()


def claim_for_job(smk) -> list[str]:
    """Claim the GPUs of a Snakemake job (its ``gpu`` resource) for this process; see :func:`claim_gpus`."""
    count = getattr(smk.resources, "gpu", 0) or 0
    claimed = claim_gpus(int(count))
    if claimed:
        _log.info("job gets GPU(s) %s", ",".join(claimed))
    return claimed


def node_share(smk, nodes: int) -> tuple[int, int, int]:
    """A Snakemake job's nodes (at least one) and its GPUs and CPUs on each: its ``gpu`` resource split evenly over
    the nodes; a GPU job's CPUs its ``cpus_per_gpu`` for each of them (what the SLURM executor asks), else the
    job's threads."""
    nodes = max(1, int(nodes))
    resources = smk.resources
    gpus = int(resources.get("gpu", 0) or 0) // nodes
    cpus = gpus * int(resources.get("cpus_per_gpu", 0) or 0) or smk.threads
    return nodes, gpus, cpus
