"""DuReader 2.0 (``dureader_preprocessed.zip``) as retrieval, following DDR's ``process_dureader.py``."""

from __future__ import annotations

import os
from pathlib import Path

from zsdr.data.convert.common import Qrels, find_dir, find_file, finish, text_id
from zsdr.data.formats import BeirCounts, BeirWriter, iter_jsonl
from zsdr.io import DataError


def _dureader_clean(text: str) -> str:
    return text.strip().replace("\n", " ").replace("\t", " ").replace("\r", " ")


def convert_dureader(raw: str | os.PathLike, out: str | os.PathLike, positives: str = "answer_docs",
                     all_paragraphs: bool = False) -> BeirCounts:
    """DuReader 2.0 (``dureader_preprocessed.zip``) turned into retrieval as DDR does.

    Expects ``raw/preprocessed/`` (or ``raw`` itself) with ``trainset/search.train.json``,
    ``trainset/zhidao.train.json``, ``devset/search.dev.json``, ``devset/zhidao.dev.json``: JSON lines
    with ``question``, ``question_id``, ``answer_docs`` and ``documents`` (``title``, ``paragraphs``,
    ``most_related_para``, ``is_selected``). Follows DDR's ``process_dureader.py``
    (github.com/jingtaozhan/disentangled-retriever, ``examples/prepare_dataset/chinese-dureader``):
    texts are stripped and their newlines/tabs replaced by blanks; query = question, its id the md5
    of the text; passage = ``title + " " + paragraph`` (just the paragraph when the title is empty),
    its id the md5 of that text; the positive of a question is the ``most_related_para`` of every
    document listed in the record's ``answer_docs`` (``positives="is_selected"`` uses the documents
    flagged ``is_selected`` instead). Qrels splits ``train`` and ``dev``; every question is written
    (DDR writes questions without a positive too).

    Corpus size: DDR's script keeps only the positive paragraphs as its corpus (some 10^5), while the
    DDR paper quotes 8.5M passages for DuReader; ``all_paragraphs=True`` writes every paragraph of
    every document instead (de-duplicated by content; needs memory for the 8.5M ids).
    """
    if positives not in ("answer_docs", "is_selected"):
        raise ValueError(f"positives must be 'answer_docs' or 'is_selected', not {positives!r}")
    raw, out = Path(raw), Path(out)
    root = find_dir(raw, ["preprocessed", "", "dureader_preprocessed/preprocessed"], "trainset/search.train.json",
                    "DuReader preprocessed folder")
    inputs = [(mode, find_file(root, f"{mode}set/{source}.{mode}.json", what=f"DuReader {source}.{mode}"))
              for mode in ("train", "dev") for source in ("search", "zhidao")]
    with BeirWriter(out) as writer:
        queries: set[str] = set()
        docs: set[str] = set()
        qrels = Qrels(writer)
        for split, path in inputs:
            for line, obj in iter_jsonl(path):
                question, documents = obj.get("question"), obj.get("documents")
                if not isinstance(question, str) or not isinstance(documents, list):
                    raise DataError(path, line, 'record without a "question" string or a "documents" list',
                                    "use the files of dureader_preprocessed.zip")
                query = _dureader_clean(question)
                qid = text_id(query)
                if qid not in queries:
                    queries.add(qid)
                    writer.add_query(qid, query)
                answer_docs = obj.get("answer_docs") or []
                for doc_idx, doc in enumerate(documents):
                    if not isinstance(doc, dict) or not isinstance(doc.get("paragraphs", []), list):
                        raise DataError(path, line, f"document {doc_idx} is not an object with a paragraphs list",
                                        "use the files of dureader_preprocessed.zip")
                    selected = doc_idx in answer_docs if positives == "answer_docs" else bool(doc.get("is_selected"))
                    best = doc.get("most_related_para")
                    title = _dureader_clean(doc.get("title") or "")
                    for para_idx, para in enumerate(doc.get("paragraphs") or []):
                        is_positive = selected and best == para_idx
                        if not (is_positive or all_paragraphs):
                            continue
                        para = _dureader_clean(para if isinstance(para, str) else str(para))
                        passage = f"{title} {para}" if title else para
                        pid = text_id(passage)
                        if pid not in docs:
                            docs.add(pid)
                            writer.add_doc(pid, "", passage)
                        if is_positive:
                            qrels.add(split, qid, pid, 1)
    return finish("dureader", writer, qrels)
