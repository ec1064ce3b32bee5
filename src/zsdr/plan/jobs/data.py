"""The jobs of rules/data.smk: the generated mini benchmarks, downloads, conversions, tiny backbones and the
documents a dataset's corpus shares with its donor's. (The released-model, text-store and `data` rules take no
params: what they do follows from their wildcards and files.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds
from zsdr.plan.params import Handling, Settings


@dataclass(frozen=True)
class MiniBenchmarkJob(RuleJob):
    """A generated mini benchmark (zsdr.data.mini.generate): the English one, or the Chinese one."""

    mini: dict[str, Any]          # config `mini` (mini_benchmark) or `mini_zh` (mini_benchmark_zh): its domains,
                                  # sizes and seed


@dataclass(frozen=True)
class DownloadJob(RuleJob):
    """One remote file (its local path is the job's `path` wildcard), resumable and checksum-verified."""

    spec: Settings     # the file's url and checksums (registry.RemoteFile.as_spec; where a checksum comes from
                       # is not compared)
    fetch: Handling    # where from and how long and often (config `mirror`, `download.retries`, `download.timeout`):
                       # the checksum decides the bytes, so not compared for reruns


@dataclass(frozen=True)
class ConvertJob(RuleJob):
    """One dataset converted to the BEIR layout and validated: from its downloads, or from a local folder."""

    folders: Handling                 # the downloads and bring-your-own folders its inputs are in (the files
                                      # are compared as inputs): moving them reruns nothing
    local: dict[str, Any] | None      # its config `datasets.local` entry (a local folder or a new dataset), or None


@dataclass(frozen=True)
class TinyBackboneJob(RuleJob):
    """A tiny masked LM and its tokenizer (zsdr.models.tiny), trained on the mini corpora of its language."""

    build: dict[str, Any]   # config `backbones.<backbone>.build`: kind, vocabulary size, shape
    datasets: list[str]     # the folders of the mini domains its tokenizer learns from
    seed: int               # config `seed`


@dataclass(frozen=True)
class CorpusOverlapJob(RuleJob):
    """The documents a dataset's corpus shares with its `datasets.shared_corpus` donor's."""

    dataset: str   # the dataset's folder
    donor: str     # the donor's folder


@builds(MiniBenchmarkJob, "mini_benchmark")
def mini_benchmark_job(plan: Any, wc: Any) -> MiniBenchmarkJob:
    return MiniBenchmarkJob(mini=plan.config["mini"])


@builds(MiniBenchmarkJob, "mini_benchmark_zh")
def mini_benchmark_zh_job(plan: Any, wc: Any) -> MiniBenchmarkJob:
    return MiniBenchmarkJob(mini=plan.config["mini_zh"])


@builds(DownloadJob, "download")
def download_job(plan: Any, wc: Any) -> DownloadJob:
    config = plan.config
    return DownloadJob(spec=Settings(plan.datasets.remote[wc.path].as_spec()),
                       fetch=Handling({"mirror": config["mirror"], "retries": config["download"]["retries"],
                                       "timeout": config["download"]["timeout"]}))


@builds(ConvertJob, "convert")
def convert_job(plan: Any, wc: Any) -> ConvertJob:
    return ConvertJob(folders=Handling({"downloads": plan.paths.downloads, "byo": plan.paths.byo}),
                      local=plan.config["datasets"]["local"].get(wc.dataset))


@builds(TinyBackboneJob, "tiny_backbone")
def tiny_backbone_job(plan: Any, wc: Any) -> TinyBackboneJob:
    return TinyBackboneJob(build=plan.config["backbones"][wc.backbone]["build"],
                           datasets=[plan.datasets.data_folder(n) for n in plan.datasets.backbone_corpus[wc.backbone]],
                           seed=plan.config["seed"])


@builds(CorpusOverlapJob, "corpus_overlap")
def corpus_overlap_job(plan: Any, wc: Any) -> CorpusOverlapJob:
    return CorpusOverlapJob(dataset=plan.datasets.data_folder(wc.dataset), donor=plan.datasets.data_folder(wc.donor))
