"""The jobs of rules/retrieve.smk: dense retrieval (corpus shards and judged queries encoded, shards searched, a
run merged, or the grouped one-job encode and search of every one-shard evaluation dataset)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds
from zsdr.plan.params import Settings


@dataclass(frozen=True)
class EncodeCorpusJob(RuleJob):
    """One shard of a corpus encoded by a dense system (its shard and shard count are the job's wildcards)."""

    model: str                          # what the system loads on this dataset (folder or Hugging Face id)
    dataset: str                        # the dataset's folder
    options: dict[str, Any]             # the system's encoder settings on this dataset
    donor: tuple[list[str], str] | None  # (the donor's shard folders, the overlap map) with a shared corpus, else None
    dense: Settings                     # config `dense`: batch size, dtype, device, precision


@dataclass(frozen=True)
class EncodeQueriesJob(RuleJob):
    """The judged queries of one split (the job's wildcard) encoded by a dense system."""

    model: str
    dataset: str
    options: dict[str, Any]
    dense: Settings


@dataclass(frozen=True)
class SearchShardJob(RuleJob):
    """One corpus shard searched exactly for the encoded queries (its files are the job's inputs)."""

    dense: Settings                     # config `dense`: its `depth`, the top-k kept


@dataclass(frozen=True)
class DenseSearchJob(RuleJob):
    """A dense system's run on a dataset's evaluation split: its queries encoded and every shard searched, or,
    scattered, the shards' top-k files merged."""

    model: str
    dataset: str
    split: str                          # the dataset's evaluation split
    options: dict[str, Any]
    dense: Settings
    scattered: bool                     # merge per-shard searches (`cluster.scatter_search`, > 1 shard)


@dataclass(frozen=True)
class DenseSearchGroupJob(RuleJob):
    """A table-1 dense system on every one-shard evaluation dataset in one job (`cluster.group_datasets`)."""

    jobs: list[dict[str, Any]]          # per dataset: its folder, split, model, options, embeddings and run paths
    dense: Settings


@builds(EncodeCorpusJob, "encode_corpus")
def encode_corpus_job(plan: Any, wc: Any) -> EncodeCorpusJob:
    systems, donor = plan.systems, plan.evaluation.donor_inputs(wc)
    return EncodeCorpusJob(model=systems.dense_model(wc.system, wc.dataset),
                           dataset=plan.datasets.data_folder(wc.dataset),
                           options=systems.encoder_options(wc.system, wc.dataset),
                           donor=(list(donor[:-1]), donor[-1]) if donor else None, dense=plan.dense_settings)


@builds(EncodeQueriesJob, "encode_queries")
def encode_queries_job(plan: Any, wc: Any) -> EncodeQueriesJob:
    systems = plan.systems
    return EncodeQueriesJob(model=systems.dense_model(wc.system, wc.dataset),
                            dataset=plan.datasets.data_folder(wc.dataset),
                            options=systems.encoder_options(wc.system, wc.dataset), dense=plan.dense_settings)


@builds(SearchShardJob, "search_shard")
def search_shard_job(plan: Any, wc: Any) -> SearchShardJob:
    return SearchShardJob(dense=plan.dense_settings)


@builds(DenseSearchJob, "dense_search")
def dense_search_job(plan: Any, wc: Any) -> DenseSearchJob:
    systems = plan.systems
    return DenseSearchJob(model=systems.dense_model(wc.system, wc.dataset),
                          dataset=plan.datasets.data_folder(wc.dataset),
                          split=plan.datasets.eval_split(wc.dataset),
                          options=systems.encoder_options(wc.system, wc.dataset), dense=plan.dense_settings,
                          scattered=plan.evaluation.scattered(wc.dataset))


@builds(DenseSearchGroupJob, "dense_search_group")
def dense_search_group_job(plan: Any, wc: Any) -> DenseSearchGroupJob:
    return DenseSearchGroupJob(jobs=plan.evaluation.group_jobs(wc.system), dense=plan.dense_settings)

