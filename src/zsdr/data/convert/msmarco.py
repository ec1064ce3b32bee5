"""MS MARCO passage ranking: the collection with its train and dev.small queries and qrels, and the
text triples (``query<TAB>positive<TAB>negative``) as a training set with content-hash ids and
``negatives.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from array import array
from pathlib import Path

from zsdr.data.convert.common import Qrels, Queries, find_file, finish, iter_id_text, iter_tsv
from zsdr.data.formats import BeirCounts, BeirWriter, iter_trec_qrels, write_manifest
from zsdr.io import DataError, temp_sibling


def convert_msmarco(raw: str | os.PathLike, out: str | os.PathLike) -> BeirCounts:
    """MS MARCO passage ranking from the official ``collectionandqueries.tar.gz``.

    Expects in ``raw`` (or ``.gz`` versions): ``collection.tsv`` (``pid<TAB>passage``),
    ``queries.train.tsv`` and ``queries.dev.small.tsv`` (``qid<TAB>query``), ``qrels.train.tsv`` and
    ``qrels.dev.small.tsv`` (TREC-like ``qid 0 pid 1``, tab- or blank-separated). Format: the
    MS MARCO passage ranking page (microsoft.github.io/msmarco/Datasets, "Passage ranking dataset").
    Output: corpus with empty titles, queries = train + dev.small, qrels splits ``train`` and
    ``dev`` (dev = dev.small, 6,980 queries).
    """
    raw, out = Path(raw), Path(out)
    collection = find_file(raw, "collection.tsv", what="MS MARCO collection")
    query_files = [find_file(raw, "queries.train.tsv", what="MS MARCO train queries"),
                   find_file(raw, "queries.dev.small.tsv", what="MS MARCO dev.small queries")]
    qrel_files = {"train": find_file(raw, "qrels.train.tsv", what="MS MARCO train qrels"),
                  "dev": find_file(raw, "qrels.dev.small.tsv", what="MS MARCO dev.small qrels")}
    with BeirWriter(out) as writer:
        for _line, pid, text in iter_id_text(collection, "pid"):
            writer.add_doc(pid, "", text)
        qset = Queries(writer)
        for path in query_files:
            for line, qid, text in iter_id_text(path, "qid"):
                qset.add(qid, text, path, line)
        qrels = Qrels(writer)
        for split, path in qrel_files.items():
            for line, qid, pid, score in iter_trec_qrels(path):
                qrels.add(split, qid, pid, score, path, line)
    return finish("msmarco", writer, qrels)


def convert_msmarco_triples(raw: str | os.PathLike, out: str | os.PathLike,
                            triples: str = "triples.train.small.tsv", limit: int | None = None) -> BeirCounts:
    """MS MARCO text triples (``query<TAB>positive<TAB>negative``) -> a BEIR training set.

    Expects ``raw/<triples>`` (default ``triples.train.small.tsv`` from ``triples.train.small.tar.gz``;
    ``.gz`` accepted). Format: MS MARCO passage ranking page ("triples.train.small.tsv: query,
    positive passage, negative passage"). The texts carry no ids, so ids are content hashes:
    ``"q"``/``"d"`` + the first 16 hex digits of md5(UTF-8 text); texts are kept byte for byte
    (MS MARCO's mojibake such as ``donât`` included, no stripping). Output: corpus of every
    positive and negative passage, the queries, qrels split ``train`` (query -> positive, grade 1) and
    ``out/negatives.jsonl``: one line per query, in first-seen order,
    ``{"qid": ..., "pos": [...], "neg": {"triples": [...]}}`` (the shape of sentence-transformers'
    msmarco-hard-negatives; negatives de-duplicated, in file order). ``limit`` reads only the first
    ``limit`` lines. Memory: about 8 bytes per triple plus the id sets (one 64-bit key per text).
    """
    raw, out = Path(raw), Path(out)
    path = find_file(raw, triples, what="MS MARCO triples file")
    layout = "query<TAB>positive<TAB>negative"

    def key(text: str) -> tuple[int, str]:
        digest = hashlib.md5(text.encode("utf-8")).hexdigest()[:16]
        return int(digest, 16), digest

    docs_seen: set[int] = set()
    per_query: dict[int, tuple[array, array]] = {}
    with BeirWriter(out) as writer:
        qrels = Qrels(writer)
        for n, (line, (query, pos, neg)) in enumerate(iter_tsv(path, 3, layout, maxsplit=False)):
            if limit is not None and n >= limit:
                break
            if not query.strip() or not pos.strip():
                raise DataError(path, line, "empty query or positive passage", f"every line must read {layout}")
            qkey, qhex = key(query)
            entry = per_query.get(qkey)
            if entry is None:
                entry = per_query[qkey] = (array("Q"), array("Q"))
                writer.add_query(f"q{qhex}", query)
            ids = []
            for text in (pos, neg):
                dkey, dhex = key(text)
                ids.append(dkey)
                if dkey not in docs_seen:
                    docs_seen.add(dkey)
                    writer.add_doc(f"d{dhex}", "", text)
            if ids[0] not in entry[0]:
                entry[0].append(ids[0])
                qrels.add("train", f"q{qhex}", f"d{ids[0]:016x}", 1)
            entry[1].append(ids[1])  # repeated negatives are dropped when negatives.jsonl is written
        with open(writer.root / "negatives.jsonl", "w", encoding="utf-8", newline="\n") as fh:
            for qkey, (pos_ids, neg_ids) in per_query.items():
                fh.write(json.dumps({"qid": f"q{qkey:016x}", "pos": [f"d{d:016x}" for d in pos_ids],
                                     "neg": {"triples": [f"d{d:016x}" for d in dict.fromkeys(neg_ids)]}}) + "\n")
    return finish("msmarco-triples", writer, qrels)


def triples_to_beir(path: str | os.PathLike, out: str | os.PathLike, limit: int | None = None) -> BeirCounts:
    """A triples file (``.tsv``, ``.tsv.gz``, or a ``.tar.gz``/``.zip`` holding one) -> BEIR + negatives.jsonl.

    The training-side twin of :func:`convert_msmarco_triples` for a file anywhere (MS MARCO's
    ``triples.train.small.tar.gz`` download, the mini source's ``triples.train.tsv``); writes
    ``out/dataset.json`` last.
    """
    from zsdr.data.archives import extract

    path, out = Path(path), Path(out)
    if not path.is_file():
        raise DataError(path, None, "triples file not found", "download it (`zsdr fetch msmarco`) or fix the path")
    if path.name.endswith((".tar.gz", ".tgz", ".tar", ".zip")):
        out.parent.mkdir(parents=True, exist_ok=True)
        scratch = temp_sibling(out, is_dir=True, kind="raw")
        try:
            extract(path, scratch)
            found = sorted(p for p in scratch.rglob("*") if p.is_file() and ".tsv" in p.name)
            if not found:
                raise DataError(path, None, "the archive holds no .tsv file", "pass the triples archive or file")
            counts = convert_msmarco_triples(found[0].parent, out, triples=found[0].name, limit=limit)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    else:
        counts = convert_msmarco_triples(path.parent, out, triples=path.name, limit=limit)
    write_manifest(out, counts, name=out.name, group="training", role="training",
                   description=f"text triples of {path.name} with content-hash ids", sources=[str(path)])
    return counts
