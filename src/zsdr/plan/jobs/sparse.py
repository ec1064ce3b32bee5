"""The jobs of rules/sparse.smk: Lucene indexes and BM25 / BM25+RM3 runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.jobs import RuleJob, builds


@dataclass(frozen=True)
class LuceneIndexJob(RuleJob):
    """A Lucene index of one dataset's corpus (its fields are the job's `fields` wildcard)."""

    dataset: str      # the dataset's folder
    language: str     # the analyzer's language


@dataclass(frozen=True)
class Bm25Job(RuleJob):
    """A top-k BM25 (or BM25+RM3) run of one `kind: bm25` system on one dataset's evaluation split."""

    dataset: str
    split: str
    fields: str                       # flat | multifield: the index searched
    rm3: dict[str, Any] | None        # config bm25.rm3 for a system with `rm3: true`, else None
    language: str
    k1: float
    b: float
    depth: int
    remove_query: bool                # drop a hit whose document id is its query's id


@builds(LuceneIndexJob, "lucene_index")
def lucene_index_job(plan: Any, wc: Any) -> LuceneIndexJob:
    return LuceneIndexJob(dataset=plan.datasets.data_folder(wc.dataset), language=plan.datasets.language(wc.dataset))


@builds(Bm25Job, "bm25")
def bm25_job(plan: Any, wc: Any) -> Bm25Job:
    bm25, system = plan.config["bm25"], plan.systems.by_name[wc.system]
    return Bm25Job(dataset=plan.datasets.data_folder(wc.dataset), split=plan.datasets.eval_split(wc.dataset),
                   fields=system["fields"], rm3=bm25["rm3"] if system["rm3"] else None,
                   language=plan.datasets.language(wc.dataset), k1=bm25["k1"], b=bm25["b"], depth=bm25["depth"],
                   remove_query=bm25["remove_query"])
