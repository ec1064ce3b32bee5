"""BEIR's own layout (an extracted BEIR zip) copied through the validating writer."""

from __future__ import annotations

import os
from pathlib import Path

from zsdr.data.convert.common import Qrels, Queries, find_file, finish, listing
from zsdr.data.formats import BeirCounts, BeirWriter, iter_qrels_tsv, iter_records, qrels_files
from zsdr.io import DataError


def convert_beir(raw: str | os.PathLike, out: str | os.PathLike, subdir: str) -> BeirCounts:
    """Copy an extracted BEIR zip through :class:`BeirWriter` (so it is validated).

    Expects ``raw/<subdir>/corpus.jsonl``, ``queries.jsonl`` (or ``.gz``) and ``qrels/<split>.tsv``,
    e.g. ``subdir="scifact"`` or ``"cqadupstack/android"``. Format: BEIR's README
    (github.com/beir-cellar/beir, "Data format"). Documents keep ``_id``, ``title`` and ``text``;
    queries keep ``_id`` and ``text``; every other field (``metadata`` included) is dropped. All
    qrels splits found are copied.
    """
    raw, out = Path(raw), Path(out)
    src = raw / subdir
    if not src.is_dir():
        raise DataError(src, None, "BEIR dataset folder not found",
                        f"subdir must name the folder inside the extracted zip; {listing(raw)}")
    corpus = find_file(src, "corpus.jsonl", what="BEIR corpus")
    queries = find_file(src, "queries.jsonl", what="BEIR queries")
    splits = qrels_files(src)
    if not splits:
        raise DataError(src / "qrels", None, "no qrels/<split>.tsv files", f"{listing(src)}")
    with BeirWriter(out) as writer:
        for _line, did, obj in iter_records(corpus, "corpus"):
            writer.add_doc(did, obj.get("title") or "", obj["text"])
        qset = Queries(writer)
        for line, qid, obj in iter_records(queries, "queries"):
            qset.add(qid, obj["text"], queries, line)
        qrels = Qrels(writer)
        for split, path in splits.items():
            for line, qid, did, score in iter_qrels_tsv(path):
                qrels.add(split, qid, did, score, path, line)
    return finish(f"beir:{subdir}", writer, qrels)
