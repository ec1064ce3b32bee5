"""Stage 10b, work (beside the trainings): what the dense, Lucene and labelling jobs have to do, and what that asks of a cluster.

An encode, search, index or labelling job's runtime follows from its work: the corpus's published size
(zsdr.data.sizes: documents x mean words to encode or index, queries x documents to search, a split's pairs to
label) at the site's throughput per job kind (config `site.throughput`), made a request by
:meth:`zsdr.plan.site.Site.minutes`. The stage also names the group job of each dense system's one-shard
corpora on a cluster (:meth:`Work.dense_group`) and the embeddings an encode writes (:meth:`Work.embeddings_mb`,
the resource profiles/slurm bounds). :func:`build_work` reads config `dense` and the datasets, evaluation and
BERM stages, and the site of the resources stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zsdr.plan.berm import Berm
from zsdr.plan.datasets import Datasets
from zsdr.plan.evaluation import Evaluation
from zsdr.plan.site import Site

DIMENSIONS = 768          # the search throughput's dimensions (site.throughput.search), and an embedding's
ID_BYTES = 10             # a document id beside its embedding (ids.txt; benchmarks/disk_paper.py measures ~8)


@dataclass(frozen=True)
class Work:
    site: Site
    datasets: Datasets
    evaluation: Evaluation
    berm: Berm
    sizes: dict[str, dict[str, float]]     # the published statistics of the configured datasets that have them
    embedding_bytes: int                   # an embedding (768 dimensions in `dense.dtype`) and its id
    largest_shard: tuple[float, float]     # (documents, words a document) of the largest shard with statistics
    most_queries: float                    # the most queries of a configured dataset with statistics
    shard_work: dict[str, float]           # seconds of the largest shard of each sharded job kind
    bm25_threads: int                      # bm25.threads: the least a Lucene index job asks

    # ------------------------------------------------------------------------------------- dense group jobs
    @staticmethod
    def dense_group_id(system: str) -> str:
        """The group job of ``system``'s dense jobs on corpora of one shard (a cluster run only)."""
        return f"dense-{system}"

    def dense_group(self, wc: Any) -> str | None:
        """``group:`` of the dense rules: a system's encode and search jobs on a corpus of one shard, and its
        `dense_search_group` job, are one group job on a cluster (:meth:`dense_group_id`); the shards of a
        larger corpus are jobs of their own (arrays of them, profiles/slurm)."""
        dataset = getattr(wc, "dataset", None)
        if dataset is not None and len(self.datasets.shards(dataset)) > 1:
            return None
        return self.dense_group_id(wc.system)

    def embeddings_mb(self, wc: Any) -> int:
        """The embeddings an encode job writes (MB: its documents x :attr:`embedding_bytes`), the resource
        profiles/slurm bounds for the encodes running at once (`embeddings_mb`); a `dense_search_group` job
        writes every dataset of its group."""
        if getattr(wc, "dataset", None) is None:
            parts = [(d, 1) for d in self.evaluation.group_datasets]
        else:
            parts = [(wc.dataset, int(wc.shards))]
        return max(1, round(sum(self.corpus_size(d)[0] / n for d, n in parts) * self.embedding_bytes / 1e6))

    # ------------------------------------------------------------------------------------ the work of a job
    def corpus_size(self, dataset: str) -> tuple[float, float]:
        """(documents, mean words a document) of ``dataset``'s corpus: its published statistics, else those of
        the largest shard of a configured corpus that has them (shards are sized alike, dense.dataset_shards),
        as a corpus of one such shard."""
        s = self.sizes.get(dataset)
        return (float(s["docs"]), float(s["words"])) if s is not None else self.largest_shard

    def corpus_queries(self, dataset: str) -> float:
        """The queries a search of ``dataset`` scores: its published test (or dev) queries, else the most of
        any configured dataset."""
        s = self.sizes.get(dataset)
        return float(s["queries"]) if s is not None and s.get("queries") else self.most_queries

    def encode_seconds(self, dataset: str, shards: int = 1) -> float:
        """Estimated seconds of a job that encodes one of ``shards`` shards of ``dataset``'s corpus."""
        return encode_seconds(self.site, self.corpus_size(dataset), shards)

    def search_seconds(self, dataset: str, shards: int = 1) -> float:
        """Estimated seconds of an exact search of ``dataset``'s queries over one of ``shards`` shards."""
        return search_seconds(self.site, self.corpus_size(dataset), self.corpus_queries(dataset), shards)

    def index_words(self, dataset: str) -> float:
        docs, words = self.corpus_size(dataset)
        return docs * words

    # ------------------------------------------------------------------------------------------- requests
    def encode_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`encode_corpus`: its shard's work; a shard of a corpus of several asks what the largest such
        shard of the config asks, so an array of shard jobs (profiles/slurm `slurm-array-jobs`, where every
        task gets the first's resources) fits each of them."""
        if int(wc.shards) > 1:
            return self.site.minutes(self.shard_work["encode"], attempt, "an encode job of a corpus shard")
        return self.site.minutes(self.encode_seconds(wc.dataset), attempt, f"encoding {wc.dataset}")

    def search_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`dense_search`: the queries scored over every shard (a merge of scattered shards: a job's start);
        `search_shard`: as the largest shard's search of the config (see :meth:`encode_runtime`)."""
        if getattr(wc, "shard", None) is not None:
            return self.site.minutes(self.shard_work["search"], attempt, "a search job of a corpus shard")
        seconds = 0.0 if self.evaluation.scattered(wc.dataset) else self.search_seconds(wc.dataset)
        return self.site.minutes(seconds, attempt, f"searching {wc.dataset}")

    def queries_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`encode_queries`: the dataset's queries (mean query length taken as a tenth of a document's)."""
        _, words = self.corpus_size(wc.dataset)
        seconds = self.site.seconds("encode", self.corpus_queries(wc.dataset) * words / 10)
        return self.site.minutes(seconds, attempt, f"encoding the queries of {wc.dataset}")

    def group_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`dense_search_group`: every dataset of the group encoded and searched, one job start for all."""
        seconds = sum(self.encode_seconds(d) + self.search_seconds(d) for d in self.evaluation.group_datasets)
        return self.site.minutes(seconds, attempt, f"the group job of {wc.system}")

    def index_threads(self, wc: Any) -> int:
        """`lucene_index`: one thread per hour of one thread's work (at least `bm25.threads`)."""
        return max(self.bm25_threads, self.site.lucene_threads(self.index_words(wc.dataset)))

    def index_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`lucene_index`: the corpus's words over its threads (Anserini indexes in parallel)."""
        seconds = self.site.seconds("index", self.index_words(wc.dataset)) / self.index_threads(wc)
        return self.site.minutes(seconds, attempt, f"indexing {wc.dataset}")

    def label_runtime(self, wc: Any, attempt: int = 1) -> int:
        """`label_units_shard`: as the largest shard of labelled pairs of the config (see
        :meth:`encode_runtime`)."""
        return self.site.minutes(self.shard_work["label"], attempt, "a BERM labelling shard")


def encode_seconds(site: Site, size: tuple[float, float], shards: int = 1) -> float:
    """Seconds of encoding one of ``shards`` shards of a corpus of ``size`` (documents, words a document)."""
    docs, words = size
    return site.seconds("encode", docs / max(1, shards) * words)


def search_seconds(site: Site, size: tuple[float, float], queries: float, shards: int = 1) -> float:
    """Seconds of an exact search of ``queries`` over one of ``shards`` shards of a corpus of ``size``."""
    return site.seconds("search", queries * size[0] / max(1, shards))


def label_pairs(sizes: dict[str, dict[str, float]], dataset: str, split: str, cap: int | None,
                most_queries: float) -> float:
    """The pairs a split's labelling scores: at most the sample of ``cap`` (BERM's analyses); a split's own
    pairs where published (training pairs, test queries), else the sample, else ``most_queries``."""
    s = sizes.get(dataset.removesuffix("-triples")) or {}
    known = s.get("train_pairs") if split == "train" else s.get("queries")
    if cap is not None:
        return float(min(cap, known)) if known else float(cap)
    return float(known) if known else most_queries


def build_work(config: dict[str, Any], datasets: Datasets, evaluation: Evaluation, berm: Berm, site: Site) -> Work:
    from zsdr.data.sizes import published_sizes

    published = published_sizes()
    configured = datasets.configured
    sizes = {d: dict(published[d]) for d in configured if d in published}
    largest = max(((s["docs"] / len(datasets.shards(d)), s["words"]) for d, s in sizes.items()),
                  key=lambda t: t[0] * t[1], default=(1.0, 1.0))
    most_queries = max((float(s["queries"]) for s in sizes.values() if s.get("queries")), default=1.0)

    def size(d: str) -> tuple[float, float]:
        return (float(sizes[d]["docs"]), float(sizes[d]["words"])) if d in sizes else largest

    def queries(d: str) -> float:
        return float(sizes[d]["queries"]) if d in sizes and sizes[d].get("queries") else most_queries

    # Every job of a sharded kind asks what the largest shard of the config needs: a job array's tasks all get
    # the first's resources, and arrays mix corpora that are ready at the same time.
    sharded = [d for d in configured if len(datasets.shards(d)) > 1] or configured
    shards = max(1, int(berm.labels["shards"]))
    shard_work: dict[str, float] = {}
    if site.throughput:
        shard_work = {
            "encode": max((encode_seconds(site, size(d), len(datasets.shards(d))) for d in sharded), default=0.0),
            "search": max((search_seconds(site, size(d), queries(d), len(datasets.shards(d))) for d in sharded),
                          default=0.0),
            "label": max((site.seconds("label", label_pairs(sizes, d, split, berm.label_max_pairs(split),
                                                            most_queries)) / shards
                          for d in configured for split in ("train", "test")), default=0.0),
        }
    width = DIMENSIONS * (2 if config["dense"].get("dtype") == "float16" else 4) + ID_BYTES
    return Work(site=site, datasets=datasets, evaluation=evaluation, berm=berm, sizes=sizes, embedding_bytes=width,
                largest_shard=largest, most_queries=most_queries, shard_work=shard_work,
                bm25_threads=int(config["bm25"]["threads"]))
