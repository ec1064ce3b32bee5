"""Multi-CPR (Alibaba-NLP/Multi-CPR): one of its e-commerce, video and medical domains."""

from __future__ import annotations

import os
import re
from pathlib import Path

from zsdr.data.convert.common import Qrels, Queries, find_dir, find_file, finish, iter_id_text, listing
from zsdr.data.formats import BeirCounts, BeirWriter, iter_trec_qrels
from zsdr.io import DataError


def _natural_key(path: Path) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def convert_cpr(raw: str | os.PathLike, out: str | os.PathLike, domain: str) -> BeirCounts:
    """One Multi-CPR domain (github.com/Alibaba-NLP/Multi-CPR, ``data/{ecom,video,medical}``) -> BEIR.

    Expects ``raw/data/<domain>/`` (the repository archive; ``raw/<domain>/`` or ``raw`` itself also
    work) with ``corpus.tsv`` (``pid<TAB>passage``; the medical corpus may come as
    ``corpus_split_*.tsv`` parts, read in numeric order as DDR's ``cat corpus_split_*.tsv``),
    ``train.query.txt`` and ``dev.query.txt`` (``qid<TAB>query``), ``qrels.train.tsv`` and
    ``qrels.dev.tsv`` (``qid<TAB>0<TAB>pid<TAB>1``, as in the repository's README table and files).
    Output: qrels splits ``train`` and ``dev`` (papers evaluate on dev).
    """
    raw, out = Path(raw), Path(out)
    folder = find_dir(raw, [f"data/{domain}", domain, f"Multi-CPR/data/{domain}", ""], "train.query.txt",
                      f"Multi-CPR {domain}")
    single = [p for p in (folder / "corpus.tsv", folder / "corpus.tsv.gz") if p.is_file()]
    parts = single[:1] or sorted((p for p in folder.glob("corpus_split_*.tsv*") if p.is_file()), key=_natural_key)
    if not parts:
        raise DataError(folder / "corpus.tsv", None, "Multi-CPR corpus not found",
                        f"expected corpus.tsv or corpus_split_*.tsv; {listing(folder)}")
    query_files = {"train": find_file(folder, "train.query.txt", what="Multi-CPR train queries"),
                   "dev": find_file(folder, "dev.query.txt", what="Multi-CPR dev queries")}
    qrel_files = {"train": find_file(folder, "qrels.train.tsv", what="Multi-CPR train qrels"),
                  "dev": find_file(folder, "qrels.dev.tsv", what="Multi-CPR dev qrels")}
    with BeirWriter(out) as writer:
        for part in parts:
            for _line, pid, text in iter_id_text(part, "pid"):
                writer.add_doc(pid, "", text)
        qset, qrels = Queries(writer), Qrels(writer)
        for path in query_files.values():
            for line, qid, text in iter_id_text(path, "qid"):
                qset.add(qid, text, path, line)
        for split, path in qrel_files.items():
            for line, qid, pid, score in iter_trec_qrels(path):
                qrels.add(split, qid, pid, score, path, line)
    return finish(f"cpr:{domain}", writer, qrels)
