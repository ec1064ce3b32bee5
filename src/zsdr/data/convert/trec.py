"""TREC test collections: SGML documents (``<DOC><DOCNO>``), classic SGML or Anserini topics, and TREC qrels."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Iterator

from zsdr.data.convert.common import Qrels, check_lfs, collapse, finish, iter_id_text, listing
from zsdr.data.formats import BeirCounts, BeirWriter, iter_trec_qrels
from zsdr.io import DataError, open_lines


_DOC_OPEN = re.compile(r"<DOC(?:\s[^>]*)?>", re.I)
_DOC_CLOSE = re.compile(r"</DOC\s*>", re.I)
_TOP_OPEN = re.compile(r"<top(?:\s[^>]*)?>", re.I)
_TOP_CLOSE = re.compile(r"</top\s*>", re.I)
_DOCNO = re.compile(r"<DOCNO>(.*?)</DOCNO\s*>", re.I | re.S)
_ID_ATTR = re.compile(r"""\bid\s*=\s*["']([^"']+)["']""", re.I)
_TITLE_TAGS = ("HEADLINE", "TITLE", "HL", "HEAD", "TI")
_TEXT_TAGS = ("TEXT", "LEADPARA", "LP", "ABSTRACT", "SUMMARY", "BODY")
_META_TAGS = ("DOCID", "DATE", "DATELINE", "FILEID", "FIRST", "SECOND", "PARENT", "BYLINE", "PROFILE", "PUB",
              "PAGE", "SO", "DD", "IN", "AN", "CO", "G", "AU", "DESCRIPT", "LENGTH", "SECTION", "TYPE")


def _element_re(tags: Iterable[str]) -> re.Pattern:
    return re.compile(r"<(%s)(?:\s[^>]*)?>(.*?)</\1\s*>" % "|".join(tags), re.I | re.S)


_TITLE_EL, _TEXT_EL, _META_EL = _element_re(_TITLE_TAGS), _element_re(_TEXT_TAGS), _element_re(_META_TAGS)
_ANY_TAG = re.compile(r"</?[A-Za-z][^>]*>")


def _iter_blocks(path: Path, opener: re.Pattern, closer: re.Pattern, name: str) -> Iterator[tuple[int, str, str]]:
    """Yield ``(first_line, opening_tag, content)`` for every ``<name>...</name>`` block of a file."""
    with open_lines(path) as lines:
        inside, start, opening, parts = False, 0, "", []
        for text in lines:
            pending = text
            while pending:
                if not inside:
                    m = opener.search(pending)
                    if m is None:
                        break
                    inside, start, opening, parts = True, lines.lineno, m.group(0), []
                    pending = pending[m.end():]
                    continue
                close = closer.search(pending)
                reopen = opener.search(pending)
                if reopen is not None and (close is None or reopen.start() < close.start()):
                    raise DataError(path, lines.lineno, f"<{name}> opened before the <{name}> of line {start} "
                                                        f"was closed", f"add the missing </{name}>")
                if close is None:
                    parts.append(pending)
                    break
                parts.append(pending[:close.start()])
                yield start, opening, "\n".join(parts)
                inside = False
                pending = pending[close.end():]
            else:
                if inside:
                    parts.append("")
        if inside:
            raise DataError(path, start, f"<{name}> opened here is never closed", f"add the missing </{name}>")


def _strip_tags(text: str) -> str:
    return collapse(_ANY_TAG.sub(" ", text))


def _trec_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        if files:
            return files
    else:
        files = sorted(p for p in path.parent.glob(path.name) if p.is_file())
        if files:
            return files
    raise DataError(path, None, "TREC documents not found", "docs must name a file, a folder or a glob pattern")


def iter_trec_docs(path: str | os.PathLike) -> Iterator[tuple[Path, int, str, str, str]]:
    """Yield ``(file, line, docno, title, text)`` for every ``<DOC>`` of TREC SGML files.

    ``path`` is a file (plain or gzip), a folder (every file below it, sorted) or a glob pattern.
    The id is ``<DOCNO>`` (or a ``<DOC id="...">`` attribute). The title joins the HEADLINE /
    TITLE / HL / HEAD / TI elements; the text joins the TEXT / LEADPARA / LP / ABSTRACT / SUMMARY /
    BODY elements, or — when a document has none of them (e.g. Vaswani) — everything except
    DOCNO, the title elements and known metadata elements (DOCID, DATE, ...). Inner tags are
    removed and whitespace collapsed; SGML entities are kept as they are.
    """
    for file in _trec_files(Path(path)):
        for line, opening, body in _iter_blocks(file, _DOC_OPEN, _DOC_CLOSE, "DOC"):
            m = _DOCNO.search(body)
            if m is not None:
                docno = _strip_tags(m.group(1))
                body = body[:m.start()] + " " + body[m.end():]
            else:
                attr = _ID_ATTR.search(opening)
                docno = attr.group(1).strip() if attr else ""
            if not docno:
                raise DataError(file, line, "document without <DOCNO>", "every <DOC> needs a <DOCNO>id</DOCNO>")
            title = " ".join(_strip_tags(m.group(2)) for m in _TITLE_EL.finditer(body)).strip()
            texts = [_strip_tags(m.group(2)) for m in _TEXT_EL.finditer(body)]
            if texts:
                text = " ".join(t for t in texts if t)
            else:
                text = _strip_tags(_META_EL.sub(" ", _TITLE_EL.sub(" ", body)))
            yield file, line, docno, title, text


_TOPIC_PREFIXES = {"num": r"(?:Number|No\.?)\s*:", "title": r"Topic\s*:", "desc": r"Description\s*:",
                   "narr": r"Narrative\s*:"}


def _parse_sgml_topic(block: str) -> dict[str, str]:
    block = re.sub(r"</[A-Za-z]+\s*>", " ", block)
    pieces = re.split(r"<([A-Za-z]+)(?:\s[^>]*)?>", block)
    fields: dict[str, str] = {}
    for tag, value in zip(pieces[1::2], pieces[2::2]):
        tag = tag.lower()
        value = collapse(value)
        prefix = _TOPIC_PREFIXES.get(tag)
        if prefix:
            value = re.sub(r"^" + prefix + r"\s*", "", value, flags=re.I)
        fields[tag] = value
    return fields


def read_topics(path: str | os.PathLike, field: str = "title") -> dict[str, str]:
    """Topics as ``{qid: text}`` (file order) from classic TREC SGML or Anserini's tsv topics.

    SGML: ``<top> <num> Number: 301 <title> ... <desc> Description: ... <narr> Narrative: ... </top>``
    (closing tags of the fields optional, ``Number:``/``Topic:``/``Description:``/``Narrative:``
    prefixes removed). ``field`` picks the text: ``title``, ``desc``, ``narr`` or several joined with
    ``+`` (``"title+desc"``). Tsv (Anserini's ``topics.*.txt``/``.tsv``): ``qid<TAB>query``. The
    format is told by the first non-blank character (``<`` = SGML). Whitespace is collapsed.
    """
    path = Path(path)
    first = ""
    with open_lines(path) as lines:
        for text in lines:
            check_lfs(path, lines.lineno, text)
            if text.strip():
                first = text.strip()
                break
    topics: dict[str, str] = {}
    where: dict[str, int] = {}

    def put(qid: str, text: str, line: int) -> None:
        if qid in topics:
            raise DataError(path, line, f"topic {qid!r} repeated (first on line {where[qid]})",
                            "topic ids must be unique")
        topics[qid], where[qid] = text, line

    if first.startswith("<"):
        wanted = [f.strip().lower() for f in field.split("+")]
        for line, _opening, block in _iter_blocks(path, _TOP_OPEN, _TOP_CLOSE, "top"):
            fields = _parse_sgml_topic(block)
            qid = fields.get("num", "")
            if not qid:
                raise DataError(path, line, "topic without <num>", "every <top> needs <num> Number: ID")
            missing = [f for f in wanted if not fields.get(f)]
            if missing:
                raise DataError(path, line, f"topic {qid} has no <{missing[0]}> text",
                                f"pick another topic_field (this topic has: {', '.join(sorted(fields))})")
            put(qid, " ".join(fields[f] for f in wanted), line)
    else:
        for line, qid, text in iter_id_text(path, "qid"):
            put(qid, collapse(text), line)
    if not topics:
        raise DataError(path, None, "no topics found", "expected TREC <top> topics or qid<TAB>query lines")
    return topics


def convert_trec(raw: str | os.PathLike, out: str | os.PathLike, docs: str, topics: str, qrels: str,
                 split: str = "test", topic_field: str = "title") -> BeirCounts:
    """A TREC test collection (SGML documents, topics, qrels) -> BEIR.

    ``docs``, ``topics`` and ``qrels`` are paths relative to ``raw`` (absolute paths work too).
    ``docs``: TREC SGML ``<DOC><DOCNO>id</DOCNO>...</DOC>`` — a file (plain or gzip), a folder of
    such files or a glob (see :func:`iter_trec_docs` for which tags make title and text);
    ``topics``: classic TREC SGML or Anserini's ``qid<TAB>query`` (see :func:`read_topics`;
    ``topic_field`` picks title/desc/narr); ``qrels``: TREC ``qid iter docid rel``. All judgements,
    grade 0 included, go to the qrels split ``split``. Formats: TREC's collection and topic
    descriptions (trec.nist.gov/data/docs_eng.html, trec.nist.gov/data/topics_eng), Anserini's
    ``tools/topics-and-qrels``. Reproduces the shipped BEIR conversion of Vaswani exactly.
    """
    raw, out = Path(raw), Path(out)
    topic_texts = read_topics(raw / topics, field=topic_field)
    qrels_path = raw / qrels
    if not qrels_path.is_file():
        raise DataError(qrels_path, None, "TREC qrels not found", f"{listing(qrels_path.parent)}")
    with BeirWriter(out) as writer:
        for _file, _line, docno, title, text in iter_trec_docs(raw / docs):
            writer.add_doc(docno, title, text)
        for qid, text in topic_texts.items():
            writer.add_query(qid, text)
        judged = Qrels(writer)
        for line, qid, did, score in iter_trec_qrels(qrels_path):
            judged.add(split, qid, did, score, qrels_path, line)
    return finish(f"trec:{raw.name}", writer, judged)
