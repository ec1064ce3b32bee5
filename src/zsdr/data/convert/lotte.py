"""LoTTE (ColBERTv2's ``lotte.tar.gz``): one topic and split, with its forum and search queries."""

from __future__ import annotations

import os
from pathlib import Path

from zsdr.data.convert.common import Qrels, Queries, find_dir, find_file, finish, iter_id_text
from zsdr.data.formats import BeirCounts, BeirWriter, iter_jsonl
from zsdr.io import DataError


def convert_lotte(raw: str | os.PathLike, out: str | os.PathLike, topic: str, split: str) -> BeirCounts:
    """One LoTTE topic and split (ColBERTv2's ``lotte.tar.gz``) -> BEIR with forum and search queries.

    Expects ``raw/lotte/<topic>/<split>/`` (or ``raw/<topic>/<split>/``) with ``collection.tsv``
    (``pid<TAB>passage``), ``questions.search.tsv`` / ``questions.forum.tsv`` (``qid<TAB>question``)
    and ``qas.search.jsonl`` / ``qas.forum.jsonl`` (``{"qid": .., "query": .., "answer_pids": [..]}``).
    Format: ColBERT's ``LoTTE.md`` (github.com/stanford-futuredata/ColBERT) and ir_datasets'
    ``lotte`` module (qrels = every answer pid, relevance 1). Output: one corpus; query ids
    ``forum-<qid>`` and ``search-<qid>``; qrels splits ``forum`` and ``search``.
    """
    raw, out = Path(raw), Path(out)
    folder = find_dir(raw, [f"lotte/{topic}/{split}", f"{topic}/{split}", ""], "collection.tsv",
                      f"LoTTE {topic}/{split}")
    collection = find_file(folder, "collection.tsv", what="LoTTE collection")
    kinds = ("forum", "search")
    questions = {k: find_file(folder, f"questions.{k}.tsv", what=f"LoTTE {k} questions") for k in kinds}
    answers = {k: find_file(folder, f"qas.{k}.jsonl", what=f"LoTTE {k} answers") for k in kinds}
    with BeirWriter(out) as writer:
        for _line, pid, text in iter_id_text(collection, "pid"):
            writer.add_doc(pid, "", text)
        qset, qrels = Queries(writer), Qrels(writer)
        for kind in kinds:
            for line, qid, text in iter_id_text(questions[kind], "qid"):
                qset.add(f"{kind}-{qid}", text, questions[kind], line)
        for kind in kinds:
            path = answers[kind]
            for line, obj in iter_jsonl(path):
                qid, pids = obj.get("qid"), obj.get("answer_pids")
                if isinstance(qid, bool) or not isinstance(qid, (int, str)) or str(qid).strip() == "":
                    raise DataError(path, line, 'missing or invalid "qid"', 'each line needs "qid" and "answer_pids"')
                if not isinstance(pids, list) or any(isinstance(p, bool) or not isinstance(p, (int, str))
                                                     for p in pids):
                    raise DataError(path, line, '"answer_pids" must be a list of ids',
                                    'each line needs "qid" and "answer_pids"')
                for pid in pids:
                    qrels.add(kind, f"{kind}-{str(qid).strip()}", str(pid).strip(), 1)
    return finish(f"lotte:{topic}/{split}", writer, qrels)
