"""Resources: what each job asks a cluster for (GPUs, memory, runtime, partition)."""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from zsdr.plan.site import site_from_config

DIMENSIONS = 768          # the search throughput's dimensions (site.throughput.search), and an embedding's
ID_BYTES = 10             # a document id beside its embedding (ids.txt; benchmarks/disk_paper.py measures ~8)


class ResourcesPlan:
    """Resources: what each job asks a cluster for (GPUs, memory, runtime, partition) (a part of :class:`zsdr.plan.core.Plan`)."""

    def launch_gpus(self, launch: dict[str, Any]) -> int:
        """GPUs of a training job: `training.gpus` per process x processes per node x nodes."""
        return self.TRAINING["gpus"] * launch["processes"] * launch["nodes"]

    def training_threads(
        self, item: Callable[[Any], dict[str, Any]] | None = None, launch: Callable[[Any], dict[str, Any]] | None = None
    ) -> Callable[[Any], int]:
        """A training job's CPU threads (``threads:``): `training.threads` for each of its processes on a
        node, the recipe being ``item(wildcards)`` (or its launch settings ``launch(wildcards)``). A
        one-process job computes on them; a multi-process one gives each process its share
        (OMP_NUM_THREADS), so two gloo processes on the CPU ask for two cores, not one. (GPU jobs on
        SLURM ask for `site.cpus_per_gpu` instead.)"""
        settings = launch or (lambda wc: self.launch_settings(item(wc)))
        return lambda wc: int(self.TRAINING["threads"]) * int(settings(wc)["processes"])

    def training_resources(self, item: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
        """:meth:`cluster_resources` of a training job, whose recipe (cross-encoder, reader, ...) is
        ``item(wildcards)``: its GPUs (:meth:`launch_gpus`) and nodes from its launch settings."""
        return self.cluster_resources(
            lambda wc: self.launch_gpus(self.launch_settings(item(wc))),
            nodes=lambda wc: self.launch_settings(item(wc))["nodes"],
        )

    def training_memory(self, spec: dict[str, Any], launch: dict[str, Any]) -> tuple[int, str]:
        """A training job's memory request per node (MB) and how it follows from `training.memory`.

        The job first builds its training arrays in one process (:func:`zsdr.training.data.build_training_arrays`:
        the store's id -> row dicts, ~`conversion_factor` x the dataset's store, plus the unpickled
        teacher scores of a distillation, `teacher_mb`), then runs its processes, each with its own
        `process_mb` (interpreter, torch, the model, optimizer state, batch workers) beside the dataset's
        store and arrays, mapped once for all of them (`dataset_mb`: the dataset's entry, else
        `default_dataset_mb`). The request is the larger of the two phases; `mb` overrides it."""
        m = self.TRAINING["memory"]
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

        m = self.TRAINING["memory"]
        if name in m["dataset_mb"]:
            return int(m["dataset_mb"][name]), "configured"
        published = corpus_text_mb(name)
        if published is not None:
            return published, "published size"
        return int(m["default_dataset_mb"]), "default"

    def _pretraining_memory(self, spec: dict[str, Any], launch: dict[str, Any]) -> tuple[int, str]:
        """COCO pretraining: its processes, each `process_mb`, beside the span files of its corpora, mapped
        once for all of them (zsdr.pretrain.spans: a span file holds about its corpus's text)."""
        m = self.TRAINING["memory"]
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
        of its datasets and the tables of its weak pairs (zsdr.training.rmsc). A weak table holds at most
        `rmsc.weak.max_pairs` of its corpus's documents' text (all of it without a cap)."""
        from zsdr.data.sizes import published_sizes

        m = self.TRAINING["memory"]
        procs = int(launch["processes"])
        names = [os.path.basename(str(e["dataset"])) for e in spec["sets"]]
        datasets = list(dict.fromkeys(names))
        stores = sum(self.corpus_mb(n)[0] for n in datasets)
        cap = self.config.get("rmsc", {}).get("weak", {}).get("max_pairs")
        weak = 0
        for name, entry in zip(names, spec["sets"]):
            if entry.get("pairs"):
                docs = published_sizes().get(name, {}).get("docs")
                share = min(1.0, int(cap) / docs) if cap and docs else 1.0
                weak += -(-int(self.corpus_mb(name)[0] * share * 1000) // 1000)
        total = procs * int(m["process_mb"]) + stores + weak
        why = (f"{total} MB = {procs} process(es) x {m['process_mb']} + stores of {len(datasets)} "
               f"dataset(s) {stores} + weak-pair tables {weak}")
        return total, why

    def _mlm_memory(self, spec: dict[str, Any], launch: dict[str, Any]) -> tuple[int, str]:
        """A DAM's masked-LM training: its processes, each `process_mb`, beside its corpus's store, mapped once
        for all of them (zsdr.pretrain.mlm.CorpusTexts: a process keeps 4 bytes per document, the text is read
        when drawn)."""
        m = self.TRAINING["memory"]
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
        m = self.TRAINING["memory"]
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
        return self.SITE.capped(minutes)

    def training_retries(self, workflow: Any) -> int | None:
        """A training job's retries (``retries:``): the ``workflow``'s own (Snakemake's `--retries`, the
        profile's value, for failures) plus the attempts its runtime needs beyond the first when `site.max_runtime`
        caps it: a 3-day `training.runtime` at a 24-h cap runs as three attempts, each stopped by the
        time limit's SIGUSR1 and resumed from its checkpoint by the next. None (Snakemake's default) when
        one attempt holds the whole runtime."""
        cap = self.SITE.max_runtime
        attempts = -(-int(self.TRAINING["runtime"]) // int(cap)) if cap else 1
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
        reaches every node (:func:`zsdr.training.recipes.torchrun_command`).
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
        site = self.SITE
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
        processes, nodes = self.SITE.layout(self.TRAINING["gpus"], launch["processes"], launch["nodes"])
        return {**launch, "processes": processes, "nodes": nodes}

    # ------------------------------------------------------------------------- dense group jobs
    @staticmethod
    def dense_group_id(system: str) -> str:
        """The group job of ``system``'s dense jobs on corpora of one shard (a cluster run only)."""
        return f"dense-{system}"

    def dense_group(self, wc: Any) -> str | None:
        """``group:`` of the dense rules: a system's encode and search jobs on a corpus of one shard, and its
        `dense_search_group` job, are one group job on a cluster (:meth:`dense_group_id`); the shards of a
        larger corpus are jobs of their own (arrays of them, profiles/slurm)."""
        dataset = getattr(wc, "dataset", None)
        if dataset is not None and len(self.shards(dataset)) > 1:
            return None
        return self.dense_group_id(wc.system)

    def embeddings_mb(self, wc: Any) -> int:
        """The embeddings an encode job writes (MB: its documents x 768 dimensions in `dense.dtype`, and their
        ids), the resource profiles/slurm bounds for the encodes running at once (`embeddings_mb`); a
        `dense_search_group` job writes every dataset of its group."""
        width = DIMENSIONS * (2 if self.config["dense"]["dtype"] == "float16" else 4) + ID_BYTES
        if getattr(wc, "dataset", None) is None:
            parts = [(d, 1) for d in self.GROUP_DATASETS]
        else:
            parts = [(wc.dataset, int(wc.shards))]
        return max(1, round(sum(self.corpus_size(d)[0] / n for d, n in parts) * width / 1e6))

    # ----------------------------------------------------------------------- runtimes from work
    def corpus_size(self, dataset: str) -> tuple[float, float]:
        """(documents, mean words a document) of ``dataset``'s corpus: its published statistics
        (zsdr.data.sizes), else those of the largest shard of a configured corpus that has them (shards are
        sized alike, dense.dataset_shards), as a corpus of one such shard."""
        from zsdr.data.sizes import published_sizes

        s = published_sizes().get(dataset)
        if s is not None:
            return float(s["docs"]), float(s["words"])
        return self.LARGEST_SHARD

    def corpus_queries(self, dataset: str) -> float:
        """The queries a search of ``dataset`` scores: its published test (or dev) queries, else the most of
        any configured dataset."""
        from zsdr.data.sizes import published_sizes

        s = published_sizes().get(dataset)
        return float(s["queries"]) if s is not None and s.get("queries") else self.MOST_QUERIES

    def encode_seconds(self, dataset: str, shards: int = 1) -> float:
        """Estimated seconds of a job that encodes one of ``shards`` shards of ``dataset``'s corpus."""
        docs, words = self.corpus_size(dataset)
        return self.SITE.seconds("encode", docs / max(1, shards) * words)

    def search_seconds(self, dataset: str, shards: int = 1) -> float:
        """Estimated seconds of an exact search of ``dataset``'s queries over one of ``shards`` shards."""
        docs, _ = self.corpus_size(dataset)
        return self.SITE.seconds("search", self.corpus_queries(dataset) * docs / max(1, shards))

    def encode_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`encode_corpus`: its shard's work; a shard of a corpus of several asks what the largest such
        shard of the config asks, so an array of shard jobs (profiles/slurm `slurm-array-jobs`, where every
        task gets the first's resources) fits each of them."""
        shards = int(wc.shards)
        if shards > 1:
            return self.SITE.minutes(self.SHARD_WORK["encode"], attempt, "an encode job of a corpus shard")
        return self.SITE.minutes(self.encode_seconds(wc.dataset), attempt, f"encoding {wc.dataset}")

    def search_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`dense_search`: the queries scored over every shard (a merge of scattered shards: a job's start);
        `search_shard`: as the largest shard's search of the config (see :meth:`encode_runtime`)."""
        if getattr(wc, "shard", None) is not None:
            return self.SITE.minutes(self.SHARD_WORK["search"], attempt, "a search job of a corpus shard")
        seconds = 0.0 if self.scattered(wc.dataset) else self.search_seconds(wc.dataset)
        return self.SITE.minutes(seconds, attempt, f"searching {wc.dataset}")

    def queries_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`encode_queries`: the dataset's queries (mean query length taken as a tenth of a document's)."""
        _, words = self.corpus_size(wc.dataset)
        seconds = self.SITE.seconds("encode", self.corpus_queries(wc.dataset) * words / 10)
        return self.SITE.minutes(seconds, attempt, f"encoding the queries of {wc.dataset}")

    def group_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`dense_search_group`: every dataset of the group encoded and searched, one job start for all."""
        seconds = sum(self.encode_seconds(d) + self.search_seconds(d) for d in self.GROUP_DATASETS)
        return self.SITE.minutes(seconds, attempt, f"the group job of {wc.system}")

    def index_words(self, dataset: str) -> float:
        docs, words = self.corpus_size(dataset)
        return docs * words

    def index_threads(self, wc: Any) -> int:
        """`lucene_index`: one thread per hour of one thread's work (at least `bm25.threads`)."""
        return max(int(self.config["bm25"]["threads"]), self.SITE.lucene_threads(self.index_words(wc.dataset)))

    def index_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`lucene_index`: the corpus's words over its threads (Anserini indexes in parallel)."""
        seconds = self.SITE.seconds("index", self.index_words(wc.dataset)) / self.index_threads(wc)
        return self.SITE.minutes(seconds, attempt, f"indexing {wc.dataset}")

    def label_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`label_units_shard`: as the largest shard of labelled pairs of the config (see
        :meth:`encode_runtime`): a split's pairs (its published training pairs, or the analyses' sample of
        test pairs) over the shards."""
        return self.SITE.minutes(self.SHARD_WORK["label"], attempt, "a BERM labelling shard")

    def label_pairs(self, dataset: str, split: str) -> float:
        """The pairs a split's labelling scores: at most the sample of `label_max_pairs`; a split's own
        pairs where published (training pairs), else the sample, else the most queries of any dataset."""
        from zsdr.data.sizes import published_sizes

        cap = self.label_max_pairs(split)
        s = published_sizes().get(dataset.removesuffix("-triples")) or {}
        known = s.get("train_pairs") if split == "train" else s.get("queries")
        if cap is not None:
            return float(min(cap, known)) if known else float(cap)
        return float(known) if known else self.MOST_QUERIES

    def shards(self, dataset: str) -> list[str]:
        """The corpus shard folders of a dataset: `dense.dataset_shards` or else `dense.shards`."""
        n = self.config["dense"]["dataset_shards"].get(dataset, self.config["dense"]["shards"])
        return [f"shard{i}-of-{n}" for i in range(n)]

    def _setup_resources(self) -> None:
        """Resolve the conda env of dense jobs and the `site` and `cluster` settings."""
        # GPU jobs request `dense.gpus` GPUs (a SLURM profile maps it) and, with conda, the CUDA env.
        self.DENSE_ENV = "../envs/gpu.yaml" if self.config["dense"]["gpus"] else "../envs/cpu.yaml"
        self.CLUSTER = self.config["cluster"]
        self.SITE = site_from_config(self.config)

    @functools.cached_property
    def _corpora(self) -> tuple[list[str], dict[str, dict[str, float]]]:
        """Every dataset of the config, and the published statistics of those that have them."""
        from zsdr.data.sizes import published_sizes

        datasets = list(dict.fromkeys([*self.EVAL_DATASETS, *self.config["datasets"].get("extra", [])]))
        return datasets, {d: published_sizes()[d] for d in datasets if d in published_sizes()}

    @functools.cached_property
    def LARGEST_SHARD(self) -> tuple[float, float]:
        """(documents, words a document) of the largest corpus shard of the config with published statistics:
        the size a corpus without them is taken to have (shards are sized alike, dense.dataset_shards)."""
        _, sizes = self._corpora
        return max(((s["docs"] / len(self.shards(d)), s["words"]) for d, s in sizes.items()),
                   key=lambda t: t[0] * t[1], default=(1.0, 1.0))

    @functools.cached_property
    def MOST_QUERIES(self) -> float:
        """The most queries of any dataset of the config with published statistics."""
        _, sizes = self._corpora
        return max((float(s["queries"]) for s in sizes.values() if s.get("queries")), default=1.0)

    @functools.cached_property
    def SHARD_WORK(self) -> dict[str, float]:
        """Seconds of work of the largest shard of each sharded job kind, which every job of the kind asks
        for: a job array's tasks all get the first's resources, and arrays mix corpora that are ready at
        the same time."""
        datasets, _ = self._corpora
        sharded = [d for d in datasets if len(self.shards(d)) > 1] or datasets
        shards = max(1, int(self.BERM_LABELS["shards"]))
        labelled = [(d, split) for d in datasets for split in ("train", "test")]
        return {
            "encode": max((self.encode_seconds(d, len(self.shards(d))) for d in sharded), default=0.0),
            "search": max((self.search_seconds(d, len(self.shards(d))) for d in sharded), default=0.0),
            "label": max((self.SITE.seconds("label", self.label_pairs(d, s)) / shards for d, s in labelled),
                         default=0.0),
        }
