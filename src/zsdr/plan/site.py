"""The site a cluster run lands on: config ``site:`` as one frozen value, and the pure functions that shape
jobs for it (GPU layouts across nodes, CPUs per GPU, runtimes from the work a job does, Lucene threads, how
many small jobs a node holds) and check a request against its nodes.

Nothing here reads the plan or Snakemake: :meth:`zsdr.plan.resources.ResourcesPlan` asks these functions
for every job's resources, and the site check (benchmarks/slurm_site.py, tests/test_site.py, the SLURM
run's start) reads the same limits back from what each job asks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# Keys that configs before the `site:` section gave under `cluster:`; they are read from either place.
MOVED = ("account", "partition", "gpu_partition", "gpu_model", "cpus_per_gpu", "max_runtime")

# What one job of each kind gets through per second, as config `site.throughput` names it.
KINDS = {
    "encode": "words of documents encoded (a dense encode job)",
    "search": "query-document scores of an exact search at 768 dimensions",
    "index": "words of documents indexed by one Lucene thread",
    "label": "(query, passage) pairs scored by BERM's reader",
}


@dataclass(frozen=True)
class Site:
    """The cluster's nodes, limits and job throughput (config ``site:``; None: not known, not checked)."""

    account: str | None = None
    partition: str | None = None
    gpu_partition: str | None = None
    gpu_model: str | None = None
    cpus_per_gpu: int | None = 8           # null in config: 8
    max_runtime: int | None = None          # minutes
    gpus_per_node: int | None = None
    cores_per_node: int | None = None
    mem_mb_per_node: int | None = None
    floor: int = 5                          # minutes: the least any job asks
    safety: float = 3.0                     # x the estimated seconds of work
    startup_s: float = 60.0                 # a job's start before its work: interpreter, CUDA, model load
    throughput: dict[str, float] = field(default_factory=dict)   # per kind (KINDS), per second
    index_threads: int = 16                 # most threads a Lucene index job asks

    # --------------------------------------------------------------------------------------- runtimes
    def seconds(self, kind: str, units: float) -> float:
        """Estimated seconds of ``units`` of work of ``kind`` (:data:`KINDS`) at the configured throughput."""
        rate = self.throughput.get(kind)
        if not rate:
            raise ValueError(f"config key site.throughput.{kind}: not set; give the {KINDS.get(kind, kind)} per second")
        return float(units) / float(rate)

    def minutes(self, seconds: float, attempt: int = 1, what: str = "a job") -> int:
        """A runtime request (minutes) for ``seconds`` of estimated work: ``safety`` x (work + a job's start),
        at least ``floor``; each retry (``attempt`` 2, 3, ...) asks that many times as much, within
        ``max_runtime``. Work that does not fit ``max_runtime`` at the first attempt is an error naming
        ``what``: such a job would be killed at the limit every time."""
        base = max(int(self.floor), math.ceil(self.safety * (self.startup_s + max(0.0, seconds)) / 60))
        if self.max_runtime and base > self.max_runtime:
            raise ValueError(f"config key site.max_runtime: {what} needs about {base} min (site.safety {self.safety:g} x an estimated "
                             f"{seconds / 60:.0f} min of work), more than site.max_runtime {self.max_runtime}: "
                             f"split its work (e.g. more dense.dataset_shards) or raise site.throughput")
        asked = base * max(1, int(attempt))
        return min(asked, self.max_runtime) if self.max_runtime else asked

    def capped(self, minutes: int) -> int:
        """A fixed runtime request, capped at ``max_runtime`` where set (a training stopped at the limit
        resumes from its checkpoint in the retry)."""
        return min(int(minutes), self.max_runtime) if self.max_runtime else int(minutes)

    def lucene_threads(self, words: float) -> int:
        """Threads of a Lucene index job over ``words`` words: one per hour of single-thread work, at most
        ``index_threads`` and the node's cores."""
        hours = self.seconds("index", words) / 3600
        most = min(self.index_threads, self.cores_per_node or self.index_threads)
        return max(1, min(most, math.ceil(hours)))

    # ---------------------------------------------------------------------------------------- layouts
    def layout(self, gpus_per_process: int, processes: int, nodes: int) -> tuple[int, int]:
        """``(processes per node, nodes)`` of a training of ``processes`` per node on ``nodes`` nodes where a
        node has ``gpus_per_node`` GPUs: the same processes in all (the same global batch, the same run),
        spread over the fewest nodes that hold them with the same count on each."""
        total = int(processes) * int(nodes)
        per_gpu = max(1, int(gpus_per_process))
        if not self.gpus_per_node or int(processes) * per_gpu <= self.gpus_per_node or not gpus_per_process:
            return int(processes), int(nodes)
        for n in range(max(int(nodes), 1), total + 1):
            if total % n == 0 and (total // n) * per_gpu <= self.gpus_per_node:
                return total // n, n
        raise ValueError(f"config key site.gpus_per_node: a training of {total} process(es) with {per_gpu} GPU(s) each does not fit nodes of "
                         f"site.gpus_per_node {self.gpus_per_node}")

    def gpu_cpus(self) -> int | None:
        """CPUs per GPU of a GPU job: ``cpus_per_gpu`` (8 where unset), at most the node's cores shared out
        over its GPUs (so a node's GPUs never ask more cores than it has)."""
        if not self.cpus_per_gpu:
            return None
        if self.cores_per_node and self.gpus_per_node:
            return max(1, min(int(self.cpus_per_gpu), self.cores_per_node // self.gpus_per_node))
        return int(self.cpus_per_gpu)

    def group_size(self, mem_mb: int, threads: int, cap: int | None = None) -> int:
        """How many jobs of ``mem_mb`` and ``threads`` each one node holds side by side (Snakemake runs a
        group's independent jobs at once and asks their sum): within ``cap``."""
        n = cap or 10**9
        if self.mem_mb_per_node:
            n = min(n, self.mem_mb_per_node // max(1, int(mem_mb)))
        if self.cores_per_node:
            n = min(n, self.cores_per_node // max(1, int(threads)))
        return max(1, n)

    # ------------------------------------------------------------------------------------------ checks
    def problems(self, what: str, *, nodes: int = 1, gpus: int = 0, cpus: int = 1, mem_mb: int | None = None,
                 runtime: int | None = None, multi_node: bool = False, cpus_given: bool = True) -> list[str]:
        """Every way a request breaks this site, one line each naming ``what``: more than one node where it
        is not a multi-node training, more GPUs, CPUs or memory (per node) than its nodes have, more time
        than the limit, a GPU job without a CPU or memory request."""
        out = []
        if nodes > 1 and not multi_node:
            out.append(f"{what} asks {nodes} nodes")
        if self.gpus_per_node is not None and gpus > self.gpus_per_node * nodes:
            out.append(f"{what} asks {gpus} GPUs, {nodes} node(s) have {self.gpus_per_node * nodes}")
        if self.cores_per_node is not None and cpus > self.cores_per_node * nodes:
            out.append(f"{what} asks {cpus} CPUs, {nodes} node(s) have {self.cores_per_node * nodes}")
        if self.mem_mb_per_node is not None and mem_mb is not None and mem_mb > self.mem_mb_per_node:
            out.append(f"{what} asks {mem_mb} MB a node, a node has {self.mem_mb_per_node}")
        if self.max_runtime and (runtime or 0) > self.max_runtime:
            out.append(f"{what} asks {runtime} min, the limit is {self.max_runtime}")
        if gpus and (not cpus_given or mem_mb is None):
            out.append(f"{what} is a GPU job without a CPU or memory request")
        return out


def site_from_config(config: dict[str, Any]) -> Site:
    """The ``site:`` section as a :class:`Site`, with the keys configs gave under ``cluster:`` before it
    (:data:`MOVED`) read from there where ``site:`` leaves them unset; the same key set differently in
    both is an error naming both."""
    site = dict(config.get("site") or {})
    cluster = config.get("cluster") or {}
    for key in MOVED:
        old, new = cluster.get(key), site.get(key)
        if old is not None and new is not None and old != new:
            raise ValueError(f"config key site.{key}: cluster.{key} ({old!r}) and site.{key} ({new!r}) disagree: set site.{key} only "
                             f"(cluster.{key} is its older name)")
        if new is None and old is not None:
            site[key] = old
    runtime = site.pop("runtime", None) or {}
    kwargs = {k: v for k, v in site.items() if k in Site.__dataclass_fields__ and v is not None}
    for key in ("floor", "safety", "startup_s"):
        if runtime.get(key) is not None:
            kwargs[key] = runtime[key]
    if "throughput" in kwargs:
        unknown = sorted(set(kwargs["throughput"]) - set(KINDS))
        if unknown:
            raise ValueError(f"config key site.throughput.{unknown[0]}: no job kind of that name (known: {', '.join(KINDS)})")
        kwargs["throughput"] = {k: float(v) for k, v in kwargs["throughput"].items() if v}
    return Site(**kwargs)
