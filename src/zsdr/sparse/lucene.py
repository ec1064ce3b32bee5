"""Lucene BM25 and BM25+RM3 through Anserini (the fat jar that ships inside pyserini).

* :func:`build_index` — index a BEIR-layout corpus: ``flat`` (``title + " " + text`` in one
  ``contents`` field, as Pyserini's BEIR flat indexes) or ``multifield`` (``title`` and
  ``contents`` fields, as Pyserini's BEIR multifield indexes). Positions and document vectors are
  stored (RM3 reads the document vectors); raw documents are not (the corpus file has them).
* :func:`search` — BM25 (optionally RM3) top-``depth`` hits for a set of queries.
* :func:`bm25_run` — the judged queries of a split, searched and written as a TREC run.

Java runs in this process (:mod:`zsdr.sparse.jvm`: which Java, the jar, the JVM's options and heap);
nothing here touches it before a function that needs it is called.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Iterator

from zsdr.argtypes import add_dependent, nonnegative_float, positive_int, unit_float
from zsdr.data.formats import find_file, iter_records, judged_queries, write_trec_run
from zsdr.io import DataError, atomic_dir, atomic_write, file_changed, file_record, read_json, scratch_dir
# LuceneUnavailable, size_jvm and start_jvm are also imported from here (the workflow scripts size the JVM)
from zsdr.sparse.jvm import LuceneUnavailable, anserini_args, anserini_jar, java_list, size_jvm, start_jvm  # noqa: F401

log = logging.getLogger(__name__)

FIELDS = ("flat", "multifield")
LANGUAGES = ("en", "zh")
RM3_DEFAULTS: dict[str, Any] = {"fb_terms": 10, "fb_docs": 10, "original_query_weight": 0.5}
MULTIFIELD_WEIGHTS = {"contents": 1.0, "title": 1.0}
METADATA = "zsdr-index.json"  # written beside Lucene's files; Lucene ignores names it does not own
SEARCH_BATCH = 1000           # queries per batch_search call (bounds the hits held in Java at once)


# ---------------------------------------------------------------------------------------------
# Indexing


def _check(fields: str, language: str) -> None:
    if fields not in FIELDS:
        raise ValueError(f"fields must be one of {FIELDS}, got {fields!r}")
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")


def _write_collection(corpus: Path, folder: Path, fields: str, parts: int) -> int:
    """The corpus as Anserini JsonCollection files (``parts`` of them, one per indexing thread).

    Returns the number of documents. Duplicate ids raise DataError.
    """
    from tqdm.auto import tqdm

    handles = [open(folder / f"part-{i:03d}.jsonl", "w", encoding="utf-8", newline="\n") for i in range(parts)]
    seen: dict[str, int] = {}
    try:
        records = tqdm(iter_records(corpus, "corpus"), desc="lucene collection", unit="doc", disable=None)
        for n, (line, did, obj) in enumerate(records):
            if did in seen:
                raise DataError(corpus, line, f"duplicate document id {did!r} (first on line {seen[did]})",
                                "give every document a unique _id")
            seen[did] = line
            title, text = obj.get("title") or "", obj["text"]
            if fields == "flat":
                doc = {"id": did, "contents": f"{title} {text}"}
            else:
                doc = {"id": did, "contents": text, "title": title}
            handles[n % parts].write(json.dumps(doc, ensure_ascii=False) + "\n")
    finally:
        for fh in handles:
            fh.close()
    return len(seen)


def build_index(dataset_dir: str | os.PathLike, index_dir: str | os.PathLike, fields: str = "flat",
                language: str = "en", threads: int = 1) -> Path:
    """Build a Lucene index of ``dataset_dir``'s corpus at ``index_dir`` (replaced whole, atomically)."""
    _check(fields, language)
    dataset_dir, index_dir = Path(dataset_dir), Path(index_dir)
    corpus = find_file(dataset_dir, "corpus.jsonl")
    threads = max(1, int(threads))
    start_jvm()
    from jnius import autoclass

    start = time.perf_counter()
    with atomic_dir(index_dir, kind="Lucene index") as tmp, \
            scratch_dir(index_dir, "collection") as coll:
        docs = _write_collection(corpus, Path(coll), fields, threads)
        if docs == 0:
            raise DataError(corpus, None, "the corpus has no documents", "check the dataset conversion")
        argv = ["-input", str(coll), "-index", str(tmp), "-collection", "JsonCollection",
                "-generator", "DefaultLuceneDocumentGenerator", "-threads", str(threads),
                "-storePositions", "-storeDocvectors", "-language", language]
        if fields == "multifield":
            argv += ["-fields", "title"]
        if not log.isEnabledFor(logging.DEBUG):
            argv.append("-quiet")
        log.info("indexing %d documents of %s (%s, %s, %d threads)", docs, dataset_dir, fields, language, threads)
        indexer = autoclass("io.anserini.index.IndexCollection")(anserini_args("io.anserini.index.IndexCollection$Args",
                                                                            argv))
        indexer.run()
        counters = indexer.getCounters()
        indexed, skipped_empty = int(counters.indexed.get()), int(counters.empty.get())
        problems = {"errors": int(counters.errors.get()), "unindexable": int(counters.unindexable.get()),
                    "skipped": int(counters.skipped.get())}
        if any(problems.values()) or indexed + skipped_empty != docs:
            raise RuntimeError(f"Anserini indexed {indexed} of {docs} documents of {corpus} "
                               f"({skipped_empty} empty, {problems}); rerun with -v for Anserini's log")
        if indexed == 0:
            raise DataError(corpus, None, f"none of the {docs} documents has text to index",
                            "check the dataset conversion (title and text are empty)")
        if skipped_empty:
            log.warning("%d documents of %s have no %s and were not indexed (Anserini skips empty documents, "
                        "as in Pyserini's BEIR %s indexes)", skipped_empty, corpus,
                        "title or text" if fields == "flat" else "text", fields)
        meta = {"fields": fields, "language": language, "documents": docs, "indexed": indexed,
                "empty": skipped_empty, "corpus": str(corpus), "corpus_file": file_record(corpus),
                "anserini": anserini_jar().name, "docvectors": True}
        with atomic_write(Path(tmp) / METADATA) as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")
    log.info("indexed %d documents into %s in %.1f s", indexed, index_dir, time.perf_counter() - start)
    return index_dir


def index_metadata(index_dir: str | os.PathLike) -> dict | None:
    """What :func:`build_index` recorded about an index (None for indexes built elsewhere)."""
    path = Path(index_dir) / METADATA
    if not path.is_file():
        return None
    return read_json(path, "rebuild the index")


def check_index_corpus(index_dir: str | os.PathLike, dataset_dir: str | os.PathLike) -> None:
    """Refuse (:class:`DataError`) to search ``index_dir`` for ``dataset_dir``'s queries when the index was
    built from another corpus than the dataset's ``corpus.jsonl`` as it is now (:func:`build_index`
    records the corpus's size, time and checksum; a copy of the same corpus passes on its checksum).
    An index built elsewhere records nothing and is searched as it is."""
    index_dir, corpus = Path(index_dir), find_file(Path(dataset_dir), "corpus.jsonl")
    meta = index_metadata(index_dir)
    if meta is None:
        return
    built_from = meta.get("corpus", "another corpus")
    record = meta.get("corpus_file")
    if isinstance(record, dict):
        problem = file_changed(corpus, record)
    else:  # an index of an earlier zsdr: only the corpus's path was recorded
        old = Path(str(built_from))
        same = not old.is_file() or os.path.samefile(old, corpus) or old.stat().st_size == corpus.stat().st_size
        problem = None if same else f"{corpus.stat().st_size} bytes, {old.stat().st_size} in {old}"
    if problem:
        raise DataError(index_dir / METADATA, None,
                        f"the index was built from {built_from}, not from {corpus} as it is now: {problem}",
                        f"search the index of {dataset_dir}, or build one (zsdr bm25 --dataset {dataset_dir} "
                        "--index NEW_FOLDER builds it there)")


# ---------------------------------------------------------------------------------------------
# Searching


def _rm3_params(rm3: dict | None) -> dict | None:
    if rm3 is None:
        return None
    unknown = set(rm3) - set(RM3_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown RM3 parameters {sorted(unknown)}; known: {sorted(RM3_DEFAULTS)}")
    params = {**RM3_DEFAULTS, **{k: v for k, v in rm3.items() if v is not None}}
    return {"fb_terms": int(params["fb_terms"]), "fb_docs": int(params["fb_docs"]),
            "original_query_weight": float(params["original_query_weight"])}


def _check_index(index_dir: Path, fields: str, language: str) -> None:
    if not index_dir.is_dir() or not any(index_dir.glob("segments_*")):
        raise DataError(index_dir, None, "not a Lucene index", "build it with zsdr.sparse.lucene.build_index "
                        "(or `zsdr bm25 --index DIR`, which builds a missing index)")
    meta = index_metadata(index_dir)
    if meta is None:
        return
    for key, wanted in (("fields", fields), ("language", language)):
        if meta.get(key) != wanted:
            raise DataError(index_dir / METADATA, None,
                            f"index was built with {key}={meta.get(key)!r}, search asks for {key}={wanted!r}",
                            f"search with {key}={meta.get(key)!r} or build an index with {key}={wanted!r}")


def _open_searcher(index_dir: Path):
    """Anserini's searcher over ``index_dir`` (a damaged index: :func:`_damaged`)."""
    from jnius import JavaException, autoclass

    try:
        return autoclass("io.anserini.search.SimpleSearcher")(str(index_dir))
    except JavaException as exc:
        raise _damaged(index_dir, exc) from None


def _damaged(index_dir: Path, exc) -> DataError:
    """A damaged index (Lucene's CorruptIndexException, a file cut short) as a :class:`DataError` naming the
    folder, not a Java stack trace."""
    what = f"{str(getattr(exc, 'classname', '')).rsplit('.', 1)[-1]}: {getattr(exc, 'innermessage', exc)}"
    return DataError(index_dir, None, f"the Lucene index is damaged or incomplete ({what})",
                     "remove the folder and build it again (zsdr bm25 --index builds a missing index; in the "
                     "workflow, its lucene_index rule)")


def _batches(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def search(index_dir: str | os.PathLike, queries: dict[str, str], k1: float = 0.9, b: float = 0.4,
           rm3: dict | None = None, depth: int = 1000, fields: str = "flat", language: str = "en",
           remove_query: bool = True, threads: int = 1) -> dict[str, dict[str, float]]:
    """BM25 (RM3 when ``rm3`` is a dict, ``{}`` for the defaults) hits, ``{qid: {docid: score}}``.

    ``remove_query`` drops a hit whose docid equals the query id (BEIR's convention, Pyserini's
    ``--remove-query``); ``depth + 1`` hits are fetched so ``depth`` remain. RM3 keeps only
    ``[a-z0-9]+`` feedback terms for English (Anserini's default) and all terms otherwise.
    Every query id is a key of the result, with no hits when its text analyses to nothing.
    """
    _check(fields, language)
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    index_dir = Path(index_dir)
    _check_index(index_dir, fields, language)
    params = _rm3_params(rm3)
    start_jvm()
    from jnius import JavaException, autoclass
    from tqdm.auto import tqdm

    searcher = _open_searcher(index_dir)
    run: dict[str, dict[str, float]] = {}
    start = time.perf_counter()
    try:
        searcher.set_bm25(float(k1), float(b))
        if language != "en":
            searcher.set_language(language)  # before set_rm3: RM3 keeps the analyzer it is given
        if params is not None:
            if searcher.reader.getTermVectors(0) is None:
                raise DataError(index_dir, None, "the index stores no document vectors, which RM3 needs",
                                "rebuild it with zsdr.sparse.lucene.build_index")
            searcher.set_rm3(None, params["fb_terms"], params["fb_docs"], params["original_query_weight"], False,
                             language == "en")
        weights = None
        if fields == "multifield":
            weights = autoclass("java.util.HashMap")()
            jfloat = autoclass("java.lang.Float")
            for name, weight in MULTIFIELD_WEIGHTS.items():
                weights.put(name, jfloat(weight))
        k = depth + 1 if remove_query else depth
        qids = list(queries)
        bar = tqdm(total=len(qids), desc="lucene search", unit="query", disable=None)
        for chunk in _batches(qids, SEARCH_BATCH):
            texts, ids = java_list(queries[q] for q in chunk), java_list(chunk)
            if weights is None:
                results = searcher.batch_search(texts, ids, k, max(1, int(threads)))
            else:
                results = searcher.batch_search_fields(texts, ids, k, max(1, int(threads)), weights)
            found = {entry.getKey(): entry.getValue() for entry in results.entrySet().toArray()}
            for qid in chunk:
                hits = {}
                for hit in found.get(qid) or ():
                    docid = hit.docid
                    if remove_query and docid == qid:
                        continue
                    hits[docid] = float(hit.score)
                    if len(hits) == depth:
                        break
                run[qid] = hits
            bar.update(len(chunk))
        bar.close()
    except JavaException as exc:
        raise _damaged(index_dir, exc) from None
    finally:
        searcher.close()
    log.info("searched %d queries in %s (%s%s) in %.1f s", len(run), index_dir, fields, "+rm3" if params else "",
             time.perf_counter() - start)
    return run


# ---------------------------------------------------------------------------------------------
# Runs and the command line


def default_tag(fields: str, rm3: dict | None) -> str:
    return f"bm25-{fields}" + ("-rm3" if rm3 is not None else "")


def bm25_run(dataset_dir: str | os.PathLike, split: str, out: str | os.PathLike, fields: str = "flat",
             rm3: dict | None = None, k1: float = 0.9, b: float = 0.4, depth: int = 1000, language: str = "en",
             index_dir: str | os.PathLike | None = None, remove_query: bool = True, threads: int = 1,
             tag: str | None = None) -> dict[str, dict[str, float]]:
    """Search the judged queries of ``split`` and write a TREC run to ``out``; returns the run.

    Without ``index_dir`` a temporary index is built beside ``out`` and removed afterwards.
    """
    _check(fields, language)
    queries = judged_queries(dataset_dir, split)
    out = Path(out)
    kwargs = dict(k1=k1, b=b, rm3=rm3, depth=depth, fields=fields, language=language, remove_query=remove_query,
                  threads=threads)
    if index_dir is not None:
        check_index_corpus(index_dir, dataset_dir)
        run = search(index_dir, queries, **kwargs)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        with scratch_dir(out, "index") as tmp:
            index = build_index(dataset_dir, Path(tmp) / "index", fields=fields, language=language, threads=threads)
            run = search(index, queries, **kwargs)
    from zsdr.provenance import corpus_identity

    write_trec_run(out, run, tag=tag or default_tag(fields, rm3), depth=depth,
                   provenance={"kind": "bm25", "corpus": corpus_identity(dataset_dir),
                               "queries": {"dataset": str(dataset_dir), "split": split},
                               "index": None if index_dir is None else str(index_dir)})
    log.info("wrote %s: %d queries", out, len(run))
    return run


def bm25_negatives(dataset_dir: str | os.PathLike, index_dir: str | os.PathLike, out: str | os.PathLike,
                   split: str = "train", depth: int = 200, k1: float = 0.9, b: float = 0.4,
                   language: str = "en", threads: int = 1) -> int:
    """BM25 negatives for a dataset without triples: top ``depth`` of each judged query minus its positives.

    Writes the hard-negatives JSON-lines shape ``{"qid", "pos": [...], "neg": {"bm25": [...]}}`` (rank
    order) that the trainer reads; returns the number of queries written.
    """
    from zsdr.data.formats import read_qrels

    qrels = read_qrels(dataset_dir, split)
    queries = judged_queries(dataset_dir, split, qrels)
    check_index_corpus(index_dir, dataset_dir)
    run = search(index_dir, queries, k1=k1, b=b, depth=depth, language=language, remove_query=True, threads=threads)
    n = 0
    with atomic_write(out) as fh:
        for qid, judged in qrels.items():
            pos = [d for d, g in judged.items() if g > 0]
            negs = [d for d in run.get(qid, {}) if d not in judged or judged[d] <= 0]
            if pos and negs:
                fh.write(json.dumps({"qid": qid, "pos": pos, "neg": {"bm25": negs}}) + "\n")
                n += 1
    log.info("wrote %s: BM25 negatives of %d queries", out, n)
    return n


def _cmd_bm25(args: argparse.Namespace) -> int:
    rm3 = None
    if args.rm3:
        rm3 = {"fb_terms": args.fb_terms, "fb_docs": args.fb_docs, "original_query_weight": args.original_query_weight}
    index = args.index
    if index is not None and not Path(index).exists():
        build_index(args.dataset, index, fields=args.fields, language=args.language, threads=args.threads)
    run = bm25_run(args.dataset, args.split, args.out, fields=args.fields, rm3=rm3, k1=args.k1, b=args.b,
                   depth=args.depth, language=args.language, index_dir=index, remove_query=args.remove_query,
                   threads=args.threads, tag=args.tag)
    print(f"{args.out}: {len(run)} queries")
    return 0


def register_cli(subparsers) -> None:
    """Add ``zsdr bm25`` to an argparse subparsers object."""
    p = subparsers.add_parser("bm25", help="BM25 or BM25+RM3 run with Lucene (Anserini, through pyjnius)",
                              description="Search the judged queries of a split of a BEIR-layout dataset with "
                                          "Lucene BM25 (k1/b as given) and write a TREC run.")
    p.add_argument("--dataset", required=True, help="BEIR-layout dataset folder")
    p.add_argument("--split", default="test", help="qrels split whose queries are searched (default: test)")
    p.add_argument("--out", required=True, help="TREC run file to write")
    p.add_argument("--fields", choices=FIELDS, default="flat",
                   help="flat: title+text in one field; multifield: title and text fields, weights 1:1")
    p.add_argument("--rm3", action="store_true", help="RM3 pseudo-relevance feedback")
    add_dependent(p, "--fb-terms", requires="--rm3", type=positive_int, default=RM3_DEFAULTS["fb_terms"],
                  help=f"RM3: expansion terms taken from the feedback documents (default: {RM3_DEFAULTS['fb_terms']})")
    add_dependent(p, "--fb-docs", requires="--rm3", type=positive_int, default=RM3_DEFAULTS["fb_docs"],
                  help=f"RM3: top-ranked documents used as feedback (default: {RM3_DEFAULTS['fb_docs']})")
    add_dependent(p, "--original-query-weight", requires="--rm3", type=unit_float,
                  default=RM3_DEFAULTS["original_query_weight"],
                  help="RM3: weight of the original query against the expansion, in [0, 1] "
                       f"(default: {RM3_DEFAULTS['original_query_weight']})")
    p.add_argument("--k1", type=nonnegative_float, default=0.9,
                   help="BM25 term-frequency saturation k1 (default: %(default)s, as BEIR's Anserini runs)")
    p.add_argument("--b", type=unit_float, default=0.4,
                   help="BM25 document-length normalisation b, in [0, 1] (default: %(default)s)")
    p.add_argument("--depth", type=positive_int, default=1000, help="hits per query (default 1000)")
    p.add_argument("--language", choices=LANGUAGES, default="en", help="analyzer: en (Porter) or zh (CJK)")
    p.add_argument("--index", help="Lucene index to search; built there first when missing "
                                   "(default: a temporary index)")
    p.add_argument("--keep-query-hits", dest="remove_query", action="store_false",
                   help="keep hits whose docid equals the query id (default: drop them, as BEIR does)")
    p.add_argument("--threads", type=positive_int, default=1,
                   help="search threads (and indexing threads for a new index; default: %(default)s)")
    p.add_argument("--tag", help="run tag (default: bm25-<fields>[-rm3])")
    p.set_defaults(func=_cmd_bm25)
