"""OAG-QA (THUDM/P-tuning-v2's ``PT-Retrieval``): papers and questions per topic, relevance by title match."""

from __future__ import annotations

import ast
import csv
import logging
import os
import sys
import unicodedata
from pathlib import Path
from typing import Iterator

from zsdr.data.convert.common import LFS_POINTER, Qrels, check_id, check_lfs, collapse, finish, listing
from zsdr.data.formats import BeirCounts, BeirWriter
from zsdr.io import DataError, open_text

log = logging.getLogger("zsdr.convert")


def _dpr_tokens(text: str) -> tuple[str, ...]:
    """Lower-cased tokens as DPR's ``SimpleTokenizer`` makes them (runs of letters/digits/marks, or
    single other non-blank characters) after NFD normalisation; used to match answer titles."""
    text = unicodedata.normalize("NFD", text)
    tokens, current = [], []
    for ch in text:
        kind = unicodedata.category(ch)[0]
        if kind in "LNM":
            current.append(ch)
            continue
        if current:
            tokens.append("".join(current).lower())
            current = []
        if kind not in "ZC":
            tokens.append(ch.lower())
    if current:
        tokens.append("".join(current).lower())
    return tuple(tokens)


def _csv_tsv(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Rows of a DPR-style tsv (csv quoting rules, tab delimiter) with the line each row ends on."""
    limit = max(csv.field_size_limit(), min(sys.maxsize, 1 << 30))
    csv.field_size_limit(limit)
    with open_text(path) as fh:
        reader = csv.reader(fh, delimiter="\t")
        try:
            for row in reader:
                if reader.line_num == 1 and row and row[0].startswith(LFS_POINTER):
                    check_lfs(path, 1, row[0])
                if row and any(c.strip() for c in row):
                    yield reader.line_num, row
        except UnicodeDecodeError as exc:
            raise DataError(path, reader.line_num + 1, f"bytes that are not UTF-8 ({exc.reason})",
                            "re-encode the file as UTF-8") from None
        except csv.Error as exc:
            raise DataError(path, reader.line_num, f"malformed tsv: {exc}", "check the quoting of this line") from None


def _oagqa_topics(raw: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(raw.rglob("*-papers-10k.tsv*")):
        if path.is_file():
            topic = path.name.split("-papers-10k.tsv")[0]
            found.setdefault(topic, path)
    return found


def convert_oagqa(raw: str | os.PathLike, out: str | os.PathLike, topic: str | None = None,
                  match: str = "exact") -> BeirCounts:
    """OAG-QA (THUDM/P-tuning-v2, ``PT-Retrieval``; Google Drive ``oagqa-topic-v2``) -> BEIR.

    Expects, anywhere below ``raw`` (normally ``raw/oagqa-topic-v2/``), for each topic the two files
    the PT-Retrieval scripts read (``eval_scripts/evaluate_on_oagqa.sh``, ``dense_retriever.py``):
    ``<topic>-papers-10k.tsv`` (DPR ctx format, csv quoting: ``id<TAB>abstract<TAB>title``, an
    optional ``id`` header row) and ``<topic>-questions.tsv`` (DPR qa format:
    ``question<TAB>['paper title', ...]``, a Python list literal). Topic names are those of
    ``PT-Retrieval/oagqa_eval_lists/*`` (e.g. ``polynomial``, ``geometry``).

    The release has no explicit qrels: PT-Retrieval counts a retrieved paper as a hit when its
    *title* contains one of the question's answer titles (``--oagqa`` matches ``doc[1]``, the
    title, with DPR's uncased token matching). Here a paper is relevant (grade 1) when its title
    equals an answer title token for token after that same normalisation (``match="exact"``,
    the default), or contains it as a token sequence (``match="contains"``, PT-Retrieval's rule,
    looser). Query ids are the 0-based row numbers of the questions file; questions whose answers
    match no paper are kept without qrels (and counted in the log). Qrels split ``test``.

    ``topic=None`` converts every topic found into one dataset with ids ``<topic>/<id>`` (docs) and
    ``<topic>/<n>`` (queries); per-topic evaluation, as in the papers, needs ``topic=...``.

    Unverified: no copy of the data could be inspected; the column layout is taken from the
    PT-Retrieval code that reads it (and from a third-party BEIR conversion, which matches titles
    exactly), not from the files themselves.
    """
    if match not in ("exact", "contains"):
        raise ValueError(f"match must be 'exact' or 'contains', not {match!r}")
    raw, out = Path(raw), Path(out)
    available = _oagqa_topics(raw)
    if topic is not None:
        if topic not in available:
            raise DataError(raw / f"{topic}-papers-10k.tsv", None, f"OAG-QA topic {topic!r} not found",
                            f"topics found below {raw}: {', '.join(sorted(available)) or 'none'}")
        chosen = {topic: available[topic]}
    else:
        chosen = available
        if not chosen:
            raise DataError(raw, None, "no OAG-QA <topic>-papers-10k.tsv files found", listing(raw))
    unmatched = 0
    with BeirWriter(out) as writer:
        qrels = Qrels(writer)
        for name, papers in chosen.items():
            prefix = "" if topic is not None else f"{name}/"
            questions = papers.with_name(papers.name.replace("-papers-10k.tsv", "-questions.tsv"))
            if not questions.is_file():
                raise DataError(questions, None, "OAG-QA questions file not found", listing(papers.parent))
            titles: dict[tuple[str, ...], list[str]] = {}
            postings: dict[str, list[int]] = {}
            title_tokens: list[tuple[tuple[str, ...], str]] = []
            for line, row in _csv_tsv(papers):
                if row[0].strip() == "id":
                    continue
                if len(row) != 3:
                    raise DataError(papers, line, f"expected 3 tab-separated columns (id, abstract, title), "
                                                  f"found {len(row)}", "use the files of the OAG-QA release")
                pid = prefix + check_id(row[0], papers, line, "paper id")
                writer.add_doc(pid, row[2].strip(), row[1].strip())
                tokens = _dpr_tokens(row[2])
                titles.setdefault(tokens, []).append(pid)
                if match == "contains":
                    for token in set(tokens):
                        postings.setdefault(token, []).append(len(title_tokens))
                    title_tokens.append((tokens, pid))
            for n, (line, row) in enumerate(_csv_tsv(questions)):
                if len(row) != 2:
                    raise DataError(questions, line, f"expected 2 tab-separated columns (question, answers), "
                                                     f"found {len(row)}", "use the files of the OAG-QA release")
                try:
                    answers = ast.literal_eval(row[1].strip())
                except (ValueError, SyntaxError):
                    answers = None
                if not isinstance(answers, (list, tuple)) or not all(isinstance(a, str) for a in answers):
                    raise DataError(questions, line, "the answers column is not a list of strings",
                                    "write answers as ['title one', 'title two']")
                qid = f"{prefix}{n}"
                writer.add_query(qid, collapse(row[0]))
                hits: dict[str, None] = {}
                for answer in answers:
                    tokens = _dpr_tokens(answer)
                    if not tokens:
                        continue
                    if match == "exact":
                        hits.update(dict.fromkeys(titles.get(tokens, ())))
                        continue
                    rarest = min(tokens, key=lambda t: len(postings.get(t, ())))
                    for idx in postings.get(rarest, ()):
                        cand, pid = title_tokens[idx]
                        k = len(tokens)
                        if any(cand[i:i + k] == tokens for i in range(len(cand) - k + 1)):
                            hits[pid] = None
                if not hits:
                    unmatched += 1
                for pid in hits:
                    qrels.add("test", qid, pid, 1)
    if unmatched:
        log.warning("oagqa: %d questions match no paper title and have no qrels", unmatched)
    return finish(f"oagqa:{topic or 'all'}", writer, qrels)
