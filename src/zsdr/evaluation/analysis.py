"""Dataset statistics and distribution-shift measures (DDR Table 1, COCO-DR Tables 5 and 6).

* :func:`dataset_statistics` — corpus size and average document length, judged queries, their
  average length, qrels rows and relevant documents per query (BEIR Table 1 / DDR Table 1 columns).
* :func:`query_type` / :func:`query_type_distribution` — COCO-DR's nine query types.
* :func:`unigram_distribution` / :func:`weighted_jaccard` — COCO-DR's document similarity.
* :func:`shift_statistics` — query and document weighted Jaccard between a source and a target.

Tokenisation lives in :func:`words` only:

* **lengths** count whitespace-separated tokens (``str.split()``), the convention of the BEIR and
  DDR statistics tables: punctuation stays attached, so ``"cells."`` is one word;
* **vocabularies** (unigram distributions, the first word of a query) use the same whitespace
  tokens, lower-cased and with leading/trailing punctuation stripped (``"(Cells."`` -> ``cells``);
  tokens that are punctuation only are dropped.

Which document text is measured is the ``doc_fields`` parameter: ``"title+text"`` (default; title and
text joined by a blank), ``"text"``, or ``"beir"`` — title and text concatenated *without* a
separator, which merges the title's last word with the text's first. ``"beir"`` reproduces BEIR's
published average document lengths exactly (SciFact: 213.63 words, against 214.63 for
``"title+text"``), so it is evidently how that table was computed. The corpus is streamed, never
loaded: memory is bounded by the vocabulary (unigram counts), not by the number of documents.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

from zsdr.argtypes import positive_int
from zsdr.data.formats import find_file, iter_records, judged_queries, qrels_files, read_qrels
from zsdr.io import DataError, atomic_write

WH_TYPES = ("what", "when", "who", "how", "where", "why", "which")
YES_NO = "Y/N"
DECLARATIVE = "declarative"
QUERY_TYPES = (*WH_TYPES, YES_NO, DECLARATIVE)
YES_NO_WORDS = frozenset({"is", "was", "are", "were", "do", "does", "did", "have", "has", "had", "should",
                          "can", "could", "would", "am", "shall"})
DOC_FIELDS = ("title+text", "text", "beir")

# Stripped from both ends of a token for vocabularies: ASCII punctuation plus common typographic marks.
_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" + "\u2018\u2019\u201a\u201c\u201d\u201e\u00ab\u00bb\u2039\u203a" \
         "\u2026\u2013\u2014\u2212\u00b7\u2022\u00a1\u00bf"
_LEADING_LETTERS = re.compile(r"[^\W\d_]+")


# ---------------------------------------------------------------------------------------------
# Tokenisation (the only place)


def words(text: str, lowercase: bool = False, strip: bool = False) -> list[str]:
    """Whitespace tokens of ``text``; ``lowercase`` lower-cases them, ``strip`` removes leading and
    trailing punctuation and drops tokens left empty (for vocabularies)."""
    if lowercase:
        text = text.lower()
    tokens = text.split()
    if strip:
        tokens = [t for t in (tok.strip(_PUNCT) for tok in tokens) if t]
    return tokens


def _doc_text(record: dict, doc_fields: str) -> str:
    title, text = record.get("title") or "", record["text"]
    if doc_fields == "text":
        return text
    if doc_fields == "beir":
        return title + text
    return f"{title} {text}" if title else text


def _check_doc_fields(doc_fields: str) -> None:
    if doc_fields not in DOC_FIELDS:
        raise ValueError(f"doc_fields must be one of {', '.join(DOC_FIELDS)}, got {doc_fields!r}")


def _check_max_docs(max_docs: int | None) -> None:
    if max_docs is not None and (isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1):
        raise ValueError(f"max_docs must be a positive integer or None, got {max_docs!r}")


def _iter_docs(dataset_dir: str | os.PathLike, max_docs: int | None = None) -> Iterator[dict]:
    """Stream the corpus records (validated by ``iter_records``), the first ``max_docs`` if given."""
    path = find_file(Path(dataset_dir), "corpus.jsonl")
    for n, (_, _, record) in enumerate(iter_records(path, "corpus"), start=1):
        yield record
        if max_docs is not None and n >= max_docs:
            return


# ---------------------------------------------------------------------------------------------
# Dataset statistics


def _judged_queries(dataset_dir: str | os.PathLike, split: str) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """The split's qrels (at least one row required) and the texts of its judged queries."""
    qrels = read_qrels(dataset_dir, split)
    if not qrels:
        raise DataError(qrels_files(dataset_dir)[split], None, f"split {split!r} has no judgements",
                        "write at least one qrels row")
    return qrels, judged_queries(dataset_dir, split, qrels)


def dataset_statistics(dataset_dir: str | os.PathLike, split: str = "test", doc_fields: str = "title+text") -> dict:
    """Statistics of one BEIR-layout dataset and one qrels split.

    Returns ``{"docs", "doc_avg_words", "queries", "query_avg_words", "qrels", "rel_per_query"}``:
    corpus documents and their mean length in words (text chosen by ``doc_fields``, see the module
    doc); judged queries of ``split`` (at least one qrels row, whatever its grade) and their mean
    length; qrels rows of ``split``; mean number of relevant (grade >= 1) documents per judged query.
    The corpus is streamed; duplicate ids are not checked here (``zsdr validate`` does that).
    """
    _check_doc_fields(doc_fields)
    qrels, texts = _judged_queries(dataset_dir, split)
    docs = doc_words = 0
    for record in _iter_docs(dataset_dir):
        docs += 1
        doc_words += len(words(_doc_text(record, doc_fields)))
    if docs == 0:
        raise DataError(find_file(Path(dataset_dir), "corpus.jsonl"), None, "the corpus is empty",
                        "a dataset needs at least one document")
    relevant = sum(1 for judged in qrels.values() for grade in judged.values() if grade >= 1)
    return {
        "docs": docs,
        "doc_avg_words": doc_words / docs,
        "queries": len(qrels),
        "query_avg_words": sum(len(words(t)) for t in texts.values()) / len(texts),
        "qrels": sum(len(judged) for judged in qrels.values()),
        "rel_per_query": relevant / len(qrels),
    }


# ---------------------------------------------------------------------------------------------
# Query types (COCO-DR App. C)


def query_type(text: str) -> str:
    """One of :data:`QUERY_TYPES`, decided by the query's first word (case and punctuation ignored).

    A wh-word gives its own type, an auxiliary verb (``is``, ``does``, ``can``, ...) gives ``"Y/N"``,
    anything else ``"declarative"``. The first word is cut at its first non-letter, so ``"What's"``
    and ``"how-to"`` count as ``what`` and ``how``, while ``"Whatever"`` stays declarative.
    """
    tokens = words(text, lowercase=True, strip=True)
    if not tokens:
        return DECLARATIVE
    match = _LEADING_LETTERS.match(tokens[0])
    first = match.group(0) if match else ""
    if first in WH_TYPES:
        return first
    if first in YES_NO_WORDS:
        return YES_NO
    return DECLARATIVE


def query_type_distribution(texts: Iterable[str]) -> dict[str, float]:
    """Share of each of the nine query types among ``texts`` (every type a key; all 0.0 if empty)."""
    counts = Counter(query_type(t) for t in texts)
    total = sum(counts.values())
    return {kind: (counts[kind] / total if total else 0.0) for kind in QUERY_TYPES}


# ---------------------------------------------------------------------------------------------
# Unigram distributions and weighted Jaccard


def unigram_distribution(dataset_dir: str | os.PathLike, max_docs: int | None = None, lowercase: bool = True,
                         *, doc_fields: str = "title+text") -> dict[str, float]:
    """Normalised unigram frequencies over the corpus (the first ``max_docs`` documents if given).

    Tokens are :func:`words` with punctuation stripped. Keys are ordered by decreasing frequency,
    ties alphabetically, so the result is deterministic.
    """
    _check_doc_fields(doc_fields)
    _check_max_docs(max_docs)
    counts: Counter[str] = Counter()
    for record in _iter_docs(dataset_dir, max_docs):
        counts.update(words(_doc_text(record, doc_fields), lowercase=lowercase, strip=True))
    total = sum(counts.values())
    if total == 0:
        raise DataError(find_file(Path(dataset_dir), "corpus.jsonl"), None, "the corpus has no words",
                        "a dataset needs documents with text")
    return {term: n / total for term, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def _normalised(dist: dict[str, float], name: str) -> dict[str, float]:
    for key, value in dist.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name}[{key!r}] = {value!r}: weights must be finite and non-negative")
    total = math.fsum(dist.values())
    return {k: v / total for k, v in dist.items()} if total > 0 else {}


def weighted_jaccard(p: dict[str, float], q: dict[str, float]) -> float:
    """``sum_k min(p_k, q_k) / sum_k max(p_k, q_k)`` over the union of keys (a missing key weighs 0).

    Both inputs are first normalised to sum 1 (a no-op for distributions; raw counts work too), so
    the value lies in [0, 1]: 1 for identical distributions, 0 for disjoint supports. If either input
    has no positive weight the similarity is undefined and 0.0 is returned. Sums use ``math.fsum``,
    so the result does not depend on key order.
    """
    p, q = _normalised(p, "p"), _normalised(q, "q")
    if not p or not q:
        return 0.0
    keys = p.keys() | q.keys()
    low = math.fsum(min(p.get(k, 0.0), q.get(k, 0.0)) for k in keys)
    high = math.fsum(max(p.get(k, 0.0), q.get(k, 0.0)) for k in keys)
    return low / high


def shift_statistics(source_dir: str | os.PathLike, target_dir: str | os.PathLike, source_split: str = "train",
                     target_split: str = "test", max_docs: int | None = None) -> dict:
    """COCO-DR Table 6 for one target: query-type and unigram weighted Jaccard against the source.

    Queries are the judged queries (at least one qrels row) of ``source_split`` / ``target_split``;
    documents are each corpus (its first ``max_docs`` if given), title and text. Returns
    ``{"query_jaccard", "doc_jaccard", "query_types_source", "query_types_target"}``.
    """
    _check_max_docs(max_docs)
    _, source_queries = _judged_queries(source_dir, source_split)
    _, target_queries = _judged_queries(target_dir, target_split)
    types_source = query_type_distribution(source_queries.values())
    types_target = query_type_distribution(target_queries.values())
    doc_jaccard = weighted_jaccard(unigram_distribution(source_dir, max_docs),
                                   unigram_distribution(target_dir, max_docs))
    return {
        "query_jaccard": weighted_jaccard(types_source, types_target),
        "doc_jaccard": doc_jaccard,
        "query_types_source": types_source,
        "query_types_target": types_target,
    }


# ---------------------------------------------------------------------------------------------
# Command line: `zsdr stats` and `zsdr shift`


def write_dataset_statistics(dataset_dir: str | os.PathLike, out: str | os.PathLike, doc_fields: str) -> dict:
    """:func:`dataset_statistics` of every qrels split of a dataset, written to ``out`` as ``{split: statistics}``
    (JSON, complete or absent); returns them."""
    stats = {split: dataset_statistics(dataset_dir, split=split, doc_fields=doc_fields)
             for split in qrels_files(dataset_dir)}
    with atomic_write(out) as fh:
        json.dump(stats, fh, indent=1)
    return stats


def write_shift_statistics(source_dir: str | os.PathLike, target_dir: str | os.PathLike, out: str | os.PathLike, *,
                           target: str, source_split: str, target_split: str, max_docs: int | None) -> dict:
    """:func:`shift_statistics` of the target ``target`` (its name; ``target_dir`` its folder) against the source,
    written to ``out`` (JSON, complete or absent) with the source's folder and the target's name; returns it."""
    shift = shift_statistics(source_dir, target_dir, source_split=source_split, target_split=target_split,
                             max_docs=max_docs)
    record = {"source": str(source_dir), "target": target, **shift}
    with atomic_write(out) as fh:
        json.dump(record, fh, indent=1)
    return record


def _emit(obj: dict, out: str | None) -> None:
    text = json.dumps(obj, indent=1) + "\n"
    if out:
        with atomic_write(out) as fh:
            fh.write(text)
    sys.stdout.write(text)


def cmd_stats(args) -> int:
    _emit(dataset_statistics(args.directory, split=args.split, doc_fields=args.doc_fields), args.out)
    return 0


def cmd_shift(args) -> int:
    _emit(shift_statistics(args.source, args.target, source_split=args.source_split,
                           target_split=args.target_split, max_docs=args.max_docs), args.out)
    return 0


def register_cli(subparsers) -> None:
    """Add ``stats`` and ``shift`` to the ``zsdr`` command."""
    p = subparsers.add_parser("stats", help="dataset statistics (docs, judged queries, lengths) as JSON")
    p.add_argument("directory", help="a BEIR-layout dataset folder")
    p.add_argument("--split", default="test", help="qrels split (default: test)")
    p.add_argument("--doc-fields", default="title+text", choices=DOC_FIELDS,
                   help="document text measured; 'beir' reproduces BEIR's published lengths")
    p.add_argument("--out", default=None, help="also write the JSON to this file")
    p.set_defaults(func=cmd_stats)

    p = subparsers.add_parser("shift", help="query-type and unigram weighted Jaccard of a target against a source")
    p.add_argument("source", help="source dataset folder (MS MARCO, or the mini source domain)")
    p.add_argument("target", help="target dataset folder")
    p.add_argument("--source-split", default="train",
                   help="qrels split of the source whose judged queries are compared (default: train)")
    p.add_argument("--target-split", default="test",
                   help="qrels split of the target whose judged queries are compared (default: test)")
    p.add_argument("--max-docs", type=positive_int, default=None, help="use only the first N documents of each corpus")
    p.add_argument("--out", default=None, help="also write the JSON to this file")
    p.set_defaults(func=cmd_shift)
