"""Stage 6, resources: what each job asks a cluster for (GPUs, CPUs, memory, runtime, partition).

:func:`build_resources` reads the config's `training`, `site` (zsdr.plan.site: with the older names of its keys
under `cluster`), `dense` and `rmsc.weak` sections; a training job's request follows from its spec and launch
settings (zsdr.plan.trainings), passed in, laid out on the site's nodes (:meth:`Resources.site_layout`). The
runtimes of the jobs whose work the corpora's sizes give are the work stage's (zsdr.plan.work).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zsdr.plan.site import Site, site_from_config


PAIR_DOCUMENTS = 3   # a weak pair's texts (query, positive, negative), each at most one document's


@dataclass(frozen=True)
class Resources:
    training: dict[str, Any]        # config `training`
    site: Site                      # config `site` (zsdr.plan.site)
    dense_env: str                  # the conda environment of dense (GPU) jobs
    dense_gpus: int                 # dense.gpus: the GPUs of an encode, search, mining or scoring job
    weak_max_pairs: int | None      # rmsc.weak.max_pairs

    def launch_gpus(self, launch: dict[str, Any]) -> int:
        """GPUs of a training job: `training.gpus` per process x processes per node x nodes."""
        return self.training["gpus"] * launch["processes"] * launch["nodes"]

    def training_threads(self, launch: Callable[[Any], dict[str, Any]]) -> Callable[[Any], int]:
        """A training job's CPU threads (``threads:``): `training.threads` for each of its processes on a
        node, its launch settings being ``launch(wildcards)``. A one-process job computes on them; a
        multi-process one gives each process its share (OMP_NUM_THREADS), so two gloo processes on the
        CPU ask for two cores, not one. (GPU jobs on SLURM ask for `site.cpus_per_gpu` instead.)"""
        return lambda wc: int(self.training["threads"]) * int(launch(wc)["processes"])

    def training_resources(self, launch: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        """:meth:`cluster_resources` of a training job whose launch settings are ``launch(wildcards)``: its
        GPUs (:meth:`launch_gpus`) and nodes."""
        return self.cluster_resources(lambda wc: self.launch_gpus(launch(wc)), nodes=lambda wc: launch(wc)["nodes"])

    def training_memory(self, spec: dict[str, Any], launch: dict[str, Any]) -> tuple[int, str]:
        """A training job's memory request per node (MB) and how it follows from `training.memory`.

        The job first builds its training arrays in one process (:func:`zsdr.data.training_set.build_training_arrays`:
        the store's id -> row dicts, ~`conversion_factor` x the dataset's store, plus the unpickled
        teacher scores of a distillation, `teacher_mb`), then runs its processes, each with its own
        `process_mb` (interpreter, torch, the model, optimizer state, batch workers) beside the dataset's
        store and arrays, mapped once for all of them (`dataset_mb`: the dataset's entry, else
        `default_dataset_mb`). The request is the larger of the two phases; `mb` overrides it."""
        m = self.training["memory"]
        if m["mb"]:
            return int(m["mb"]), f"{m['mb']} MB (training.memory.mb)"
        if spec["kind"] == "coco":
            return self._pretraining_memory(spec, launch)
        if spec["kind"] == "mixture":
            return self._mixture_memory(spec, launch)
        if spec["kind"] == "mlm":
            return self._mlm_memory(spec, launch)
        if spec["kind"] in ("reader", "generator"):
            return self._examples_memory(spec, launch)
        if spec["kind"] not in ("bi_encoder", "cross_encoder"):
            raise ValueError(f"no memory estimate for a {spec['kind']!r} training: set training.memory.mb")
        name = os.path.basename(str(spec.get("dataset") or ""))
        data = int(m["dataset_mb"].get(name, m["default_dataset_mb"]))
        procs = int(launch["processes"])
        run = procs * int(m["process_mb"]) + data
        teacher = int(m["teacher_mb"]) if spec.get("teacher") else 0
        convert = int(round(m["conversion_factor"] * data)) + teacher
        total = max(run, convert)
        why = (f"{total} MB = max({procs} process(es) x {m['process_mb']} + {name or 'data'} {data}, "
               f"arrays conversion {convert}{' incl. teacher ' + str(teacher) if teacher else ''})")
        return total, why

    def corpus_mb(self, name: str) -> tuple[int, str]:
        """A corpus's mapped text in MB and where the figure comes from: `training.memory.dataset_mb`, else
        its published statistics (zsdr.data.sizes: documents x mean words x bytes per word), else
        `default_dataset_mb`."""
        from zsdr.data.sizes import corpus_text_mb

        m = self.training["memory"]
        if name in m["dataset_mb"]:
            return int(m["dataset_mb"][name]), "configured"
        published = corpus_text_mb(name)
        if published is not None:
            return published, "published size"
        return int(m["default_dataset_mb"]), "default"

    def _pretraining_memory(self, spec: dict[str, Any], launch: dict[str, Any]) -> tuple[int, str]:
        """COCO pretraining: its processes, each `process_mb`, beside the span files of its corpora, mapped
        once for all of them (zsdr.pretrain.spans: a span file holds about its corpus's text)."""
        m = self.training["memory"]
        procs = int(launch["processes"])
        corpora = [os.path.basename(os.path.dirname(os.path.dirname(str(p)))) for p in spec["spans"]]
        sizes = [self.corpus_mb(c) for c in corpora]
        spans = sum(mb for mb, _ in sizes)
        sources = ", ".join(f"{n} {k}" for k, n in sorted(Counter(k for _, k in sizes).items()))
        total = procs * int(m["process_mb"]) + spans
        why = (f"{total} MB = {procs} process(es) x {m['process_mb']} + span files of {len(corpora)} "
               f"corpora {spans} ({sources})")
        return total, why

    def _mixture_memory(self, spec: dict[str, Any], launch: dict[str, Any]) -> tuple[int, str]:
        """An RMSC mixture: its processes, each `process_mb`, beside what they map once for all: the stores
        of its datasets and the tables of its weak pairs (zsdr.training.rmsc). A weak table holds
        `rmsc.weak.max_pairs` pairs (one per document without a cap), each at most three documents' text
        (a query, a positive and a negative, each a part of one document): a bound, which for a corpus of
        fewer documents than pairs exceeds the corpus, as such a corpus gives several pairs per document."""
        from zsdr.data.sizes import published_sizes

        m = self.training["memory"]
        procs = int(launch["processes"])
        names = [os.path.basename(str(e["dataset"])) for e in spec["sets"]]
        datasets = list(dict.fromkeys(names))
        stores = sum(self.corpus_mb(n)[0] for n in datasets)
        cap = self.weak_max_pairs
        weak = 0
        for name, entry in zip(names, spec["sets"]):
            if entry.get("pairs"):
                docs = published_sizes().get(name, {}).get("docs")
                share = PAIR_DOCUMENTS * (int(cap) / docs if cap and docs else 1.0)
                weak += -(-int(self.corpus_mb(name)[0] * share * 1000) // 1000)
        total = procs * int(m["process_mb"]) + stores + weak
        why = (f"{total} MB = {procs} process(es) x {m['process_mb']} + stores of {len(datasets)} "
               f"dataset(s) {stores} + weak-pair tables {weak}")
        return total, why

    def _mlm_memory(self, spec: dict[str, Any], launch: dict[str, Any]) -> tuple[int, str]:
        """A DAM's masked-LM training: its processes, each `process_mb`, beside its corpus's store, mapped once
        for all of them (zsdr.pretrain.mlm.CorpusTexts: a process keeps 4 bytes per document, the text is read
        when drawn)."""
        m = self.training["memory"]
        procs = int(launch["processes"])
        name = os.path.basename(str(spec["dataset"]))
        store, source = self.corpus_mb(name)
        total = procs * int(m["process_mb"]) + store
        return total, f"{total} MB = {procs} process(es) x {m['process_mb']} + {name} store {store} ({source})"

    def train_pairs(self, name: str, max_examples: int | None) -> tuple[int | None, str]:
        """The training pairs a reader or generator holds, and where the figure comes from: the first
        `max_examples`, else the dataset's published training pairs (zsdr.data.sizes), else unknown."""
        from zsdr.data.sizes import published_sizes

        published = published_sizes().get(name, {}).get("train_pairs")
        if max_examples is not None and (published is None or max_examples < published):
            return int(max_examples), "max_examples"
        return (int(published), "published") if published is not None else (None, "unknown")

    def _examples_memory(self, spec: dict[str, Any], launch: dict[str, Any]) -> tuple[int, str]:
        """A reader or generator training: each process holds its examples as Python objects (the pairs'
        question, passage and answer: `example_bytes` each) beside its `process_mb`, and the dataset's
        store is mapped once for all of them. Pairs the plan cannot count (no published figure, no
        `max_examples`) are sized as `default_dataset_mb`."""
        m = self.training["memory"]
        procs = int(launch["processes"])
        name = os.path.basename(str(spec["dataset"]))
        store, source = self.corpus_mb(name)
        pairs, counted = self.train_pairs(name, spec.get("max_examples"))
        examples = (-(-pairs * int(m["example_bytes"]) // 1_000_000) if pairs is not None
                    else int(m["default_dataset_mb"]))
        total = procs * (int(m["process_mb"]) + examples) + store
        held = (f"{pairs} pairs ({counted}) x {m['example_bytes']} B" if pairs is not None
                else "pairs unknown: default_dataset_mb")
        return total, (f"{total} MB = {procs} process(es) x ({m['process_mb']} + examples {examples}: {held}) "
                       f"+ {name} store {store} ({source})")

    def runtime(self, minutes: int) -> int:
        """A fixed runtime request (minutes): ``minutes``, capped at `site.max_runtime` (the longest the
        site's partitions allow) where set. A training that needs longer is stopped at the limit
        (SIGUSR1 -> checkpoint) and its retry resumes from the checkpoint."""
        return self.site.capped(minutes)

    def training_retries(self, workflow: Any) -> int | None:
        """A training job's retries (``retries:``): the ``workflow``'s own (Snakemake's `--retries`, the
        profile's value, for failures) plus the attempts its runtime needs beyond the first when `site.max_runtime`
        caps it: a 3-day `training.runtime` at a 24-h cap runs as three attempts, each stopped by the
        time limit's SIGUSR1 and resumed from its checkpoint by the next. None (Snakemake's default) when
        one attempt holds the whole runtime."""
        cap = self.site.max_runtime
        attempts = -(-int(self.training["runtime"]) // int(cap)) if cap else 1
        retries = getattr(getattr(workflow, "execution_settings", None), "retries", 0) or 0
        return int(retries) + attempts - 1 if attempts > 1 else None

    @staticmethod
    def job_shape(resources: Any, threads: int) -> str:
        """What a training job asks the scheduler for, in its message (the dry run's line for it): GPUs,
        nodes, CPUs (per GPU where it has GPUs: the SLURM executor's --cpus-per-gpu, else its threads:
        --cpus-per-task), memory and runtime, e.g. "8 GPU(s), 1 node(s), 64 CPUs (8 per GPU), 52500 MB, 1440 min"."""
        gpus, nodes = int(resources.get("gpu", 0) or 0), int(resources.get("nodes", 1) or 1)
        per_gpu = resources.get("cpus_per_gpu")
        cpus = f"{gpus * int(per_gpu)} CPUs ({per_gpu} per GPU)" if gpus and per_gpu else f"{threads} CPU(s)"
        return (f"{gpus} GPU(s), {nodes} node(s), {cpus}, {resources.get('mem_mb')} MB, "
                f"{resources.get('runtime')} min")

    def cluster_resources(
        self, gpus: int | Callable[[Any], int] = 0, nodes: int | Callable[[Any], int] = 1
    ) -> dict[str, Any]:
        """The scheduler-facing resources every rule adds to its memory and runtime.

        `gpu` is the job's GPU count (an int, or a function of the wildcards): Snakemake's standard GPU
        resource, which the SLURM executor turns into `--gpus` and `profiles/local-gpu` limits with
        `--resources gpu=N`. From config `site`, when set: the account, the partition (GPU jobs use
        `gpu_partition` where given), the GPU model and CPUs per GPU of GPU jobs (data loading and the
        launcher beside each rank; the SLURM executor asks --cpus-per-gpu for GPU jobs only). Unset keys
        are left out, so a profile's default-resources still apply.

        `nodes` (an int, or a function of the wildcards) is given only where a job spans several nodes
        (a training laid out over nodes): a group job adds up its members' resources, nodes too, and
        every single-node job is placed on one node anyway. Such a job also runs its Snakemake in the
        allocation's first task rather than in the executor's one-task step (`mpi`: the SLURM executor's
        name for a job that starts its own tasks, one per node: `tasks`), so the launcher's `srun`
        reaches every node (:func:`zsdr.training.launch.torchrun_command`).
        """
        count = gpus if callable(gpus) else (lambda wc: gpus)
        span = nodes if callable(nodes) else (lambda wc: nodes)

        def pick(gpu_value: str, cpu_value: str) -> Callable[[Any], str]:
            return lambda wc: gpu_value if count(wc) else cpu_value

        def several(value: Any) -> Callable[[Any], Any]:
            return lambda wc: (value if value is not None else int(span(wc))) if int(span(wc)) > 1 else None

        out: dict[str, Any] = {"gpu": gpus}
        if callable(nodes) or int(nodes) > 1:
            # the SLURM executor: `mpi` (any value) runs the job's command in the batch script's own task;
            # its task count is one a node, none per GPU (0: no --ntasks-per-gpu)
            out.update(nodes=several(None), mpi=several("srun"), tasks=several(None), tasks_per_gpu=several(0))
        site = self.site
        if site.account:
            out["slurm_account"] = site.account
        if site.partition or site.gpu_partition:
            cpu_partition = site.partition or ""
            out["slurm_partition"] = pick(site.gpu_partition or cpu_partition, cpu_partition)
        if site.gpu_model:
            out["gpu_model"] = pick(site.gpu_model, "")
        if site.gpu_cpus():
            out["cpus_per_gpu"] = site.gpu_cpus()
        return out

    def site_layout(self, launch: dict[str, Any]) -> dict[str, Any]:
        """A training's launch settings laid out on the site's nodes (:meth:`zsdr.plan.site.Site.layout`):
        8 processes of one GPU each on nodes of 4 GPUs run as 2 nodes of 4 (the same global batch)."""
        processes, nodes = self.site.layout(self.training["gpus"], launch["processes"], launch["nodes"])
        return {**launch, "processes": processes, "nodes": nodes}


def build_resources(config: dict[str, Any]) -> Resources:
    # GPU jobs request `dense.gpus` GPUs (a SLURM profile maps it) and, with conda, the CUDA env.
    return Resources(training=config["training"], site=site_from_config(config),
                     dense_env="../envs/gpu.yaml" if config["dense"]["gpus"] else "../envs/cpu.yaml",
                     dense_gpus=int(config["dense"]["gpus"]),
                     weak_max_pairs=config.get("rmsc", {}).get("weak", {}).get("max_pairs"))
