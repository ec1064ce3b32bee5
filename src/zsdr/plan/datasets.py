"""Stage 1, datasets: the output folders, the source and target datasets, their downloads, markers and shards.

:func:`build_datasets` reads the config's ``paths``, ``datasets``, ``mini``, ``mini_zh``, ``backbones`` and ``dense``
sections into a :class:`Datasets`; nothing here depends on another stage.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from zsdr.data import registry
from zsdr.models.released import RELEASES
from zsdr.models.released import remote_files as released_files


def alternation(names: Iterable[str]) -> str:
    """A wildcard constraint that matches exactly one of ``names``."""
    return "|".join(re.escape(n) for n in sorted(names)) or "(?!)"


@dataclass(frozen=True)
class Paths:
    """The output folders (config `paths`: every one under `paths.root`, the scale's own folder) and the input
    folders every scale shares (downloads, bring-your-own datasets)."""

    downloads: str
    data: str
    models: str
    indexes: str
    embeddings: str
    runs: str
    metrics: str
    stats: str
    results: str
    byo: str
    logs: str
    root: str = ""                        # the scale's own folder every output folder lies in ("": none)

    OUTPUTS = ("data", "models", "indexes", "embeddings", "runs", "metrics", "stats", "results", "logs")
    """The folders a run writes (each scale its own)."""


def build_paths(paths: dict[str, Any]) -> Paths:
    """The folders of config `paths`: an output folder given relative lies in `paths.root` (none: as given)."""
    root = paths.get("root") or ""

    def under_root(name: str) -> str:
        folder = paths.get(name, name)
        return folder if not root or os.path.isabs(folder) else f"{root.rstrip('/')}/{folder}"

    return Paths(downloads=paths["downloads"], byo=paths["byo"], root=root.rstrip("/"),
                 **{k: under_root(k) for k in Paths.OUTPUTS})


@dataclass(frozen=True)
class Datasets:
    """The configured datasets and where their files go."""

    paths: Paths
    source: str
    targets: list[str]
    mini: list[str]                 # the mini benchmark's domains (none at small and paper scale)
    mini_sources: list[str]         # its source domains (those with training files)
    mini_zh: list[str]              # the Chinese mini benchmark's domains (config `mini_zh`; DDR's tables only)
    mini_zh_source: str | None      # its source domain (None: no Chinese mini benchmark)
    mini_zh_targets: list[str]      # its target domains: the Chinese rows of DDR's tables at mini scale
    configured: list[str]           # source, targets and extra datasets, in that order
    evaluated: list[str]            # the source, then the targets
    fetched: list[str]              # the configured registry datasets (downloaded and converted)
    backbone_corpus: dict[str, list[str]]  # tiny backbone built from the mini corpora -> the domains it learns from
    shared_corpus: dict[str, str]         # dataset -> the dataset whose corpus holds its documents
    remote: dict[str, Any]                # local download path -> registry.RemoteFile
    eval_splits: dict[str, str]
    shard_counts: dict[str, int]
    default_shards: int
    # config `datasets.local`: registry datasets read from a local folder, and datasets the config adds
    local: dict[str, Any] = field(default_factory=dict)

    def dataset(self, name: str) -> registry.Dataset:
        """A dataset as this config defines it: its `datasets.local` entry, else the registry's."""
        return self.local[name] if name in self.local else registry.get(name)

    @property
    def built_backbones(self) -> list[str]:
        """The tiny backbones built from the mini corpora (config `backbones` with `build`, of a language whose mini
        benchmark this config has)."""
        return list(self.backbone_corpus)

    @property
    def convertible(self) -> list[str]:
        """Every dataset a `convert` job builds: the registry's and those config `datasets.local` adds."""
        return sorted({*registry.REGISTRY, *self.local})

    def local_folder(self, name: str):
        """The local BEIR-layout folder ``name`` is read from (`datasets.local`, a bring-your-own folder), or None."""
        return self.dataset(name).folder(self.paths.byo)

    def unavailable(self, name: str) -> str | None:
        """Why ``name`` cannot be built here (a local folder without a corpus, a dataset with neither a folder
        nor a download), or None: the words a conversion would fail with."""
        if name in self.mini:
            return None
        try:
            ds = self.dataset(name)
        except KeyError as exc:
            return str(exc.args[0])
        folder = ds.folder(self.paths.byo)
        if folder is not None:
            return None if registry.local_files(folder) else str(registry.missing_local(ds, folder))
        return None if ds.files else f"dataset {name!r} has no download and no local folder (config datasets.local)"

    def convert_inputs(self, wc: Any) -> list[str]:
        """What a `convert` job reads: the files of the dataset's local folder (replacing one reconverts it),
        else its downloads; none for a local folder that holds no corpus (:meth:`unavailable` says why, and the
        job fails with the same words)."""
        folder = self.local_folder(wc.dataset)
        if folder is None:
            return self.downloads_of(wc.dataset)
        return [str(f) for f in registry.local_files(folder)]

    def data_folder(self, name: str) -> str:
        """``data/<name>``: the converted dataset's folder, as the jobs that read it are given it."""
        return f"{self.paths.data}/{name}"

    def dataset_marker(self, name: str) -> str:
        """``data/<name>/dataset.json`` is written last, once the folder is complete and valid."""
        return f"{self.data_folder(name)}/dataset.json"

    def shard_corpus(self, wc: Any) -> list[str]:
        """What an encode shard reads: the dataset, and for a corpus in several shards its store too (each
        shard reads its own rows from it, never parsing the whole ``corpus.jsonl``; zsdr.retrieval.encode)."""
        marker = self.dataset_marker(wc.dataset)
        return [marker] if int(wc.shards) == 1 else [marker, f"{self.paths.data}/{wc.dataset}/store/store.json"]

    def overlap_file(self, dataset: str, donor: str) -> str:
        """The map of the documents ``dataset``'s corpus shares with ``donor``'s (zsdr.data.store.corpus_overlap)."""
        return f"{self.paths.data}/{dataset}/overlap/{donor}.npy"

    def eval_split(self, name: str) -> str:
        return self.eval_splits.get(name, "test")

    def check_dataset(self, name: str) -> str:
        return check_dataset(name, [*self.mini, *self.mini_zh], self.local)

    def language(self, name: str) -> str:
        """Analyzer language of a dataset: the registry's or its `datasets.local` entry's; the domains of `mini_zh`
        are Chinese, those of `mini` English."""
        if name in self.mini_zh:
            return "zh"
        if name in self.local:
            return self.local[name].language
        return registry.REGISTRY[name].language if name in registry.REGISTRY else "en"

    def backbone_corpora(self, backbone: dict[str, Any]) -> list[str]:
        """The mini domains a built backbone's tokenizer learns from: `mini_zh`'s for a Chinese one, else `mini`'s."""
        return backbone_corpora(backbone, self.mini, self.mini_zh)

    def shards(self, dataset: str) -> list[str]:
        """The corpus shard folders of a dataset: `dense.dataset_shards` or else `dense.shards`."""
        n = self.shard_counts.get(dataset, self.default_shards)
        return [f"shard{i}-of-{n}" for i in range(n)]

    def released_archive(self, name: str) -> list[str]:
        """The downloaded archive of a release (zsdr.models.released.RELEASES); none for an archive kept in
        a hub repository, which the job reads through the Hugging Face cache like any hub file."""
        if RELEASES[name].hub_file:
            return []
        return [f"{self.paths.downloads}/{registry.RemoteFile(RELEASES[name].url).local_path}"]

    def downloads_of(self, name: str, extras: bool = False) -> list[str]:
        ds = self.dataset(name)
        if ds.folder(self.paths.byo) is not None:
            return []
        files = list(ds.files) + (list(ds.extras) if extras else [])
        return [f"{self.paths.downloads}/{f.local_path}" for f in files]


def backbone_corpora(backbone: dict[str, Any], mini: list[str], mini_zh: list[str]) -> list[str]:
    """The mini domains a backbone (config `backbones.<name>`) learns its tokenizer from: ``mini_zh`` for a Chinese
    one, else ``mini``."""
    return list(mini_zh if backbone.get("language") == "zh" else mini)


def check_dataset(name: str, mini: Iterable[str], local: Iterable[str] = ()) -> str:
    """``name``, or a ValueError naming config key `datasets` when it is neither a mini domain, a registry dataset
    nor one of config `datasets.local`."""
    mini = list(mini)
    if name not in mini and name not in registry.REGISTRY and name not in local:
        raise ValueError(
            f"config key datasets: {name!r} is neither a mini domain nor a registry dataset (nor one of datasets.local); "
            f"use one of: {', '.join(mini + sorted({*registry.REGISTRY, *local}))} (see `zsdr datasets`), or add "
            f"it under datasets.local (a BEIR-layout folder, or a url and its checksum)"
        )
    return name


def build_local(config: dict[str, Any], mini: list[str]) -> dict[str, registry.Dataset]:
    """Config `datasets.local` as datasets: each a registry dataset read from a local folder, or a new one."""
    out = {}
    for name, spec in (config["datasets"].get("local") or {}).items():
        where = f"config key datasets.local.{name}"
        if name in mini:
            raise ValueError(f"{where}: {name!r} is a mini domain (generated, not read from a folder); use another name")
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", name):
            raise ValueError(f"{where}: a dataset name is letters, digits, '.', '_' and '-' (it names folders)")
        if name not in registry.REGISTRY and not spec.get("path") and not spec.get("url"):
            raise ValueError(f"{where}: a new dataset needs `path` (a BEIR-layout folder) or `url` (a zip of one)")
        if spec.get("url") and not (spec.get("md5") or spec.get("archive_sha256")):
            raise ValueError(f"{where}.url: give the archive's `md5` or `archive_sha256`, which the download verifies")
        for rel in spec.get("sha256") or {}:
            if rel not in ("corpus.jsonl", "queries.jsonl", "corpus.jsonl.gz", "queries.jsonl.gz") and not re.fullmatch(r"qrels/[^/]+\.tsv", rel):
                raise ValueError(f"{where}.sha256.{rel}: not a file of a BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
        out[name] = registry.config_dataset(name, spec)
    return out


def build_datasets(config: dict[str, Any]) -> Datasets:
    """The datasets stage of a validated config."""
    paths = build_paths(config["paths"])
    d = config["datasets"]
    source, targets = d["source"], list(d["targets"])
    mini = list(m["name"] for m in config["mini"]["domains"])
    mini_zh_domains = (config.get("mini_zh") or {}).get("domains") or []
    mini_zh = list(m["name"] for m in mini_zh_domains)
    zh_sources = [m["name"] for m in mini_zh_domains if m["role"] == "source"]
    if mini_zh and len(zh_sources) != 1:
        raise ValueError(f"config key mini_zh.domains: the Chinese mini benchmark needs exactly one domain of role "
                         f"source, found {len(zh_sources)} ({', '.join(zh_sources) or 'none'})")
    if set(mini) & set(mini_zh):
        raise ValueError(f"config key mini_zh.domains: {sorted(set(mini) & set(mini_zh))[0]!r} is also a domain "
                         "of `mini`; give the Chinese domains their own names")
    configured = list(dict.fromkeys([source, *targets, *d["extra"]]))
    generated = [*mini, *mini_zh]
    local = build_local(config, generated)
    evaluated = list(check_dataset(x, generated, local) for x in (source, *targets))
    fetched = list(check_dataset(x, generated, local) for x in configured if x not in generated)
    shared = {}
    for name, donor in d["shared_corpus"].items():
        check_dataset(name, generated, local)
        check_dataset(donor, generated, local)
        if donor == name or donor in d["shared_corpus"]:
            raise ValueError(f"config key datasets.shared_corpus.{name}: {donor!r} must be another dataset "
                             "that takes no donor itself")
        shared[name] = donor
    for name in config["dense"]["dataset_shards"]:
        if name not in configured:
            raise ValueError(
                f"config key dense.dataset_shards.{name}: {name!r} is not a configured dataset "
                f"(datasets.source, datasets.targets or datasets.extra)"
            )
    # Tiny backbones are built from the mini corpora, so only a config with mini domains builds them
    # (Snakemake merges --configfile over config.yaml, so the paper config still lists them).
    built = {n: corpora for n, b in config["backbones"].items()
             if "build" in b and (corpora := backbone_corpora(b, mini, mini_zh))}
    return Datasets(paths=paths, source=source, targets=targets, mini=mini,
                    mini_sources=[m["name"] for m in config["mini"]["domains"] if m["role"] == "source"],
                    mini_zh=mini_zh,
                    mini_zh_source=zh_sources[0] if zh_sources else None,
                    mini_zh_targets=[m["name"] for m in mini_zh_domains if m["role"] == "target"],
                    configured=configured,
                    evaluated=evaluated, fetched=fetched, backbone_corpus=built,
                    shared_corpus=shared,
                    remote={**registry.remote_files(), **released_files(),
                            **{f.local_path: f for ds in local.values() for f in ds.files}},
                    eval_splits=dict(d["eval_splits"]), shard_counts=dict(config["dense"]["dataset_shards"]),
                    default_shards=config["dense"]["shards"], local=local)
