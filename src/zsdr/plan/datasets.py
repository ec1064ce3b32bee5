"""Datasets: the configured source and targets, their downloads, markers and shards."""

from __future__ import annotations

import re
from collections.abc import Iterable

from zsdr.data import registry
from zsdr.models.released import RELEASES
from zsdr.models.released import remote_files as released_files


class DatasetsPlan:
    """Datasets: the configured source and targets, their downloads, markers and shards (a part of :class:`zsdr.plan.core.Plan`)."""

    def alternation(self, names: Iterable[str]) -> str:
        """A wildcard constraint that matches exactly one of ``names``."""
        return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"

    def dataset_marker(self, name: str) -> str:
        """``data/<name>/dataset.json`` is written last, once the folder is complete and valid."""
        return f"{self.DATA}/{name}/dataset.json"

    def shard_corpus(self, wc) -> list[str]:
        """What an encode shard reads: the dataset, and for a corpus in several shards its store too (each
        shard reads its own rows from it, never parsing the whole ``corpus.jsonl``; zsdr.retrieval.encode)."""
        marker = self.dataset_marker(wc.dataset)
        return [marker] if int(wc.shards) == 1 else [marker, f"{self.DATA}/{wc.dataset}/store/store.json"]

    def overlap_file(self, dataset: str, donor: str) -> str:
        """The map of the documents ``dataset``'s corpus shares with ``donor``'s (zsdr.data.store.corpus_overlap)."""
        return f"{self.DATA}/{dataset}/overlap/{donor}.npy"

    def eval_split(self, name: str) -> str:
        return self.config["datasets"]["eval_splits"].get(name, "test")

    def eval_qrels(self, name: str) -> str:
        """The qrels an evaluation of ``name`` reads, as an input: a stamp of their content in the code
        stamps' folder (zsdr.data.formats.qrels_stamp), so that a hand-edited qrels file re-plans the
        dataset's evaluate jobs (no job declares the file itself)."""
        from pathlib import Path

        from zsdr.data.formats import qrels_stamp
        from zsdr.plan.code import STAMPS

        split = self.eval_split(name)
        into = Path(self.workdir if self.runs_elsewhere else self.root)
        rel = f"{STAMPS}/qrels-{name}-{split}.sha256"
        qrels_stamp(into / self.DATA / name, split, into / rel, shown=f"{self.DATA}/{name}")
        return rel

    def check_dataset(self, name: str) -> str:
        if name not in self.MINI_DATASETS and name not in registry.REGISTRY:
            raise ValueError(
                f"config key datasets: {name!r} is neither a mini domain nor a registry dataset; "
                f"use one of: {', '.join(self.MINI_DATASETS + sorted(registry.REGISTRY))} "
                f"(see `zsdr datasets`)"
            )
        return name

    def released_archive(self, name: str) -> list[str]:
        """The downloaded archive of a release (zsdr.models.released.RELEASES); none for an archive kept in
        a hub repository, which the job reads through the Hugging Face cache like any hub file.
        """
        if RELEASES[name].hub_file:
            return []
        return [f"{self.DOWNLOADS}/{registry.RemoteFile(RELEASES[name].url).local_path}"]

    def downloads_of(self, name: str, extras: bool = False) -> list[str]:
        ds = registry.get(name)
        files = list(ds.files) + (list(ds.extras) if extras else [])
        return [f"{self.DOWNLOADS}/{f.local_path}" for f in files]

    def _setup_datasets(self) -> None:
        """Resolve the output folders (`paths`), the source and target datasets and the backbones built from the mini corpora."""
        self.PATHS = self.config["paths"]
        self.DOWNLOADS = self.PATHS["downloads"]
        self.DATA = self.PATHS["data"]
        self.MODELS = self.PATHS["models"]
        self.INDEXES = self.PATHS["indexes"]
        self.EMBEDDINGS = self.PATHS["embeddings"]
        self.RUNS = self.PATHS["runs"]
        self.METRICS = self.PATHS["metrics"]
        self.STATS = self.PATHS["stats"]
        self.RESULTS = self.PATHS["results"]
        self.LOGS = "logs"

        self.SOURCE = self.config["datasets"]["source"]
        self.TARGETS = list(self.config["datasets"]["targets"])
        self.MINI_DATASETS = [d["name"] for d in self.config["mini"]["domains"]]
        # Tiny backbones are built from the mini corpora, so only a config with mini domains builds them
        # (Snakemake merges --configfile over config.yaml, so the paper config still lists them).
        self.BUILT_BACKBONES = [
            n for n, b in self.config["backbones"].items() if "build" in b and self.MINI_DATASETS
        ]

    def _setup_datasets_2(self) -> None:
        """Resolve the evaluated and fetched datasets (checked against the registry) and every remote file."""
        self.EVAL_DATASETS = [self.check_dataset(self.SOURCE)] + [
            self.check_dataset(t) for t in self.TARGETS
        ]
        self.FETCHED = [
            self.check_dataset(d)
            for d in dict.fromkeys([self.SOURCE, *self.TARGETS, *self.config["datasets"]["extra"]])
            if d not in self.MINI_DATASETS
        ]
        self.REMOTE = {**registry.remote_files(), **released_files()}
        self.SHARED_CORPUS = {}
        for name, donor in self.config["datasets"]["shared_corpus"].items():
            self.check_dataset(name)
            self.check_dataset(donor)
            if donor == name or donor in self.config["datasets"]["shared_corpus"]:
                raise ValueError(f"config key datasets.shared_corpus.{name}: {donor!r} must be another dataset "
                                 "that takes no donor itself")
            self.SHARED_CORPUS[name] = donor
