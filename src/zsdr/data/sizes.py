"""Published corpus statistics: documents, mean words per document and test queries of the datasets the
papers evaluate on, read from the tables the project carries (src/zsdr/tables/published/): BEIR's Table 1
as COCO-DR's Table 5 prints it, and DDR's Table 1 for LoTTE and the Chinese sets (it counts characters
there). They size what the plan cannot see before the data exists: a pretraining job's mapped corpora
(:meth:`zsdr.plan.resources.Resources.corpus_mb`) and the disk benchmark (benchmarks/disk_paper.py).
"""

from __future__ import annotations

import csv
import functools
from importlib import resources

PUBLISHED = resources.files("zsdr") / "tables" / "published"
# text bytes per word of a converted corpus and of its memory-mapped store or span file (measured on SciFact
# with the pipeline's own writers: benchmarks/disk_paper.py prints 7.5 and 7.3)
TEXT_BYTES_PER_WORD = 7.5

# CQADupStack's forums (BEIR, Thakur et al. 2021): documents per forum; COCO-DR's Table 5 gives the total
CQA_FORUMS = {"android": 22_998, "english": 40_221, "gaming": 45_301, "gis": 37_637, "mathematica": 16_705,
              "physics": 38_316, "programmers": 32_176, "stats": 42_269, "tex": 68_184, "unix": 47_382,
              "webmasters": 17_405, "wordpress": 48_605}
# the published tables' dataset names -> the registry's
BEIR_NAMES = {"MS MARCO": "msmarco", "TREC-COVID": "trec-covid", "NFCorpus": "nfcorpus", "BioASQ": "bioasq",
              "NQ": "nq", "HotpotQA": "hotpotqa", "FiQA-2018": "fiqa", "Signal-1M (RT)": "signal1m",
              "TREC-NEWS": "trec-news", "Robust04": "robust04", "ArguAna": "arguana",
              "Touché-2020": "webis-touche2020", "Quora": "quora", "DBPedia": "dbpedia-entity",
              "SCIDOCS": "scidocs", "FEVER": "fever", "Climate-FEVER": "climate-fever", "SciFact": "scifact"}
DDR_NAMES = {"Lotte-Write": "lotte-writing-test", "Lotte-Rec": "lotte-recreation-test",
             "Lotte-Tech": "lotte-technology-test", "Lotte-Life": "lotte-lifestyle-test",
             "Lotte-Sci": "lotte-science-test", "CPR-Ecom": "cpr-ecom", "CPR-Video": "cpr-video",
             "CPR-Medical": "cpr-medical", "cMedQAv2": "cmedqa2"}

# Training sets before they are converted: what an epoch of a training job holds (the hyperparameter card,
# zsdr.plan.card). MS MARCO's counts are ir_datasets' metadata (msmarco-passage/train/triples-small: 39,780,811
# docpairs; msmarco-passage/train/judged: 502,939 queries with a judged passage), the figures its downloads
# are verified against; a hard-negative or teacher-scored set holds at most the judged training queries.
TRAINING_SETS = {
    "msmarco-triples": {"triples": 39_780_811,
                        "source": "ir_datasets msmarco-passage/train/triples-small (39,780,811 lines)"},
    "msmarco": {"queries": 502_939,
                "source": "~ ir_datasets msmarco-passage/train/judged (502,939 judged training queries)"},
}


@functools.lru_cache(maxsize=1)
def published_sizes() -> dict[str, dict[str, float]]:
    """``{dataset: {docs, words, queries}}`` (the registry's names) from the published statistics tables, with
    ``train_pairs`` (the training qrels' pairs) where BEIR publishes them."""
    sizes: dict[str, dict[str, float]] = {}
    with (PUBLISHED / "cocodr_table5.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            q = float(row["test_queries"] or row["dev_queries"] or 0)
            stats = {"docs": float(row["corpus"]), "words": float(row["avg_doc_words"]), "queries": q,
                     **({"train_pairs": float(row["train_pairs"])} if row["train_pairs"] else {})}
            if row["dataset"] == "CQADupStack":
                for forum, n in CQA_FORUMS.items():
                    share = n / sum(CQA_FORUMS.values())
                    sizes[f"cqadupstack-{forum}"] = {**stats, "docs": float(n), "queries": q * share}
            elif row["dataset"] in BEIR_NAMES:
                sizes[BEIR_NAMES[row["dataset"]]] = stats
    sizes["trec-covid-beir"] = sizes["trec-covid"]          # DDR's variant of the same corpus
    with (PUBLISHED / "ddr_table1.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row["dataset"] in DDR_NAMES:
                sizes[DDR_NAMES[row["dataset"]]] = {"docs": float(row["doc_num"]), "words": float(row["doc_avg_words"]),
                                                    "queries": float(row["query_num"])}
    return sizes


def corpus_text_mb(name: str) -> int | None:
    """The text of corpus ``name`` in MB (documents x mean words x :data:`TEXT_BYTES_PER_WORD`, rounded up), or None
    where no published statistics exist."""
    s = published_sizes().get(name)
    return None if s is None else -(-int(s["docs"] * s["words"] * TEXT_BYTES_PER_WORD) // 1_000_000)
