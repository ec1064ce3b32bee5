"""Converters: raw dataset downloads -> the BEIR layout of :mod:`zsdr.data.formats`.

Every converter has the signature ``convert_X(raw, out, **options) -> BeirCounts``: ``raw`` is the
folder holding the downloaded, already extracted files, ``out`` the BEIR folder to write. Output goes
through :class:`~zsdr.data.formats.BeirWriter`, so it is validated on exit and appears atomically;
on any error nothing is left at ``out``. Bad input raises :class:`~zsdr.io.DataError` naming the
file and line. Big files are streamed (MS MARCO has 8.8M passages); only id sets and qrels are
kept in memory.

:data:`CONVERTERS` maps the registry's converter names to the functions. Each function's
docstring says which files it expects inside ``raw`` and where the format is documented.

Conventions shared by all converters

* ``pid<TAB>text`` / ``qid<TAB>text`` files are split on the first tab only (later tabs stay in
  the text); a line without a tab, or with an empty id, is an error. Surrounding blanks of texts
  are stripped unless a converter says otherwise.
* A query id given twice with the same text is written once; with a different text it is an error.
* A judgement ``(split, query, doc)`` given twice is written once (the first grade wins).
* Documents are not de-duplicated by id (that would need the whole id set of an 8.8M-passage
  corpus in memory twice); :func:`~zsdr.data.formats.validate_beir` reports repeated ids.
* A file that is a Git LFS pointer instead of data is reported as such.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import unicodedata
from array import array
from pathlib import Path
from typing import Callable, Iterable, Iterator

from zsdr.data.formats import BeirCounts, BeirWriter, iter_jsonl, iter_qrels_tsv, iter_records, iter_trec_qrels, \
    qrels_files, write_manifest
from zsdr.io import DataError, open_lines, open_text, temp_sibling

log = logging.getLogger("zsdr.convert")

__all__ = [
    "CONVERTERS", "convert_beir", "convert_msmarco", "convert_msmarco_triples", "convert_trec", "convert_lotte",
    "convert_cpr", "convert_cmedqa2", "convert_dureader", "convert_oagqa", "read_topics", "iter_trec_docs",
    "iter_id_text", "text_id",
]

_LFS_POINTER = "version https://git-lfs.github.com/spec/"


# ---------------------------------------------------------------------------------------------
# Small shared helpers


def _collapse(text: str) -> str:
    """Collapse every run of whitespace to one blank and strip the ends."""
    return " ".join(text.split())


def text_id(text: str, prefix: str = "", length: int = 32) -> str:
    """A stable content id: ``prefix`` + the first ``length`` hex digits of md5(UTF-8 text)."""
    return prefix + hashlib.md5(text.encode("utf-8")).hexdigest()[:length]


def _listing(folder: Path, limit: int = 12) -> str:
    if not folder.is_dir():
        return f"{folder} does not exist"
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return f"{folder} holds: {', '.join(names[:limit]) or 'nothing'}{more}"


def _find_file(folder: Path, *names: str, what: str) -> Path:
    """The first of ``names`` (relative to ``folder``; ``NAME.gz`` accepted too) that exists."""
    for name in names:
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise DataError(folder / names[0], None, f"{what} not found",
                    f"expected {' or '.join(names)} in the extracted download; {_listing(folder)}")


def _find_dir(raw: Path, candidates: Iterable[str], marker: str, what: str) -> Path:
    """The first ``raw/<candidate>`` folder that holds ``marker`` (or ``marker.gz``)."""
    tried = []
    for rel in candidates:
        folder = raw / rel if rel else raw
        tried.append(str(folder))
        if (folder / marker).is_file() or (folder / f"{marker}.gz").is_file():
            return folder
    raise DataError(raw, None, f"{what} not found (looked for {marker} in {', '.join(tried)})",
                    f"point raw at the extracted download; {_listing(raw)}")


def _check_lfs(path: Path, lineno: int, text: str) -> None:
    if lineno == 1 and text.startswith(_LFS_POINTER):
        raise DataError(path, 1, "this is a Git LFS pointer file, not the data",
                        "download the real file (git lfs pull, or the repository's 'Download raw file' link)")


def _iter_tsv(path: Path, ncols: int, layout: str, maxsplit: bool = True) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line, columns)`` for the non-blank lines of a tab-separated file.

    With ``maxsplit`` the line is split into at most ``ncols`` columns (the last one keeps any further
    tabs); otherwise exactly ``ncols`` tab-separated columns are required.
    """
    with open_lines(path) as lines:
        for text in lines:
            _check_lfs(path, lines.lineno, text)
            if not text.strip():
                continue
            cols = text.split("\t", ncols - 1) if maxsplit else text.split("\t")
            if len(cols) != ncols:
                raise DataError(path, lines.lineno,
                                f"expected {ncols} tab-separated columns ({layout}), found {len(cols)}",
                                f"every line must read {layout}")
            yield lines.lineno, cols


def _check_id(value: str, path: Path, line: int, what: str) -> str:
    value = value.strip()
    if not value:
        raise DataError(path, line, f"empty {what}", f"every line needs a non-empty {what}")
    return value


def iter_id_text(path: str | os.PathLike, what: str = "id", strip: bool = True) -> Iterator[tuple[int, str, str]]:
    """Yield ``(line, id, text)`` from an ``id<TAB>text`` file (MS MARCO, LoTTE, Multi-CPR layout)."""
    path = Path(path)
    for line, (rid, text) in _iter_tsv(path, 2, f"{what}<TAB>text"):
        yield line, _check_id(rid, path, line, what), text.strip() if strip else text


class _Queries:
    """Writes queries once; a repeated id with another text is a DataError naming both places."""

    def __init__(self, writer: BeirWriter):
        self.writer = writer
        self.seen: dict[str, tuple[int, str, int]] = {}
        self._paths: dict[str, str] = {}

    def __contains__(self, qid: str) -> bool:
        return qid in self.seen

    def add(self, qid: str, text: str, path: Path | str, line: int) -> bool:
        digest = hash(text)
        first = self.seen.get(qid)
        if first is not None:
            if first[0] == digest:
                return False
            raise DataError(path, line, f"query id {qid!r} was given another text before ({first[1]}:{first[2]})",
                            "query ids must be unique; fix or drop one of the two lines")
        name = str(path)
        self.seen[qid] = (digest, self._paths.setdefault(name, name), line)
        self.writer.add_query(qid, text)
        return True


class _Qrels:
    """Writes each ``(split, query, doc)`` judgement once (the first grade wins). A source that grades
    one pair twice differently is named in a warning (its first such line), not passed over silently."""

    def __init__(self, writer: BeirWriter):
        self.writer = writer
        self.seen: dict[tuple[str, str, str], tuple[int, str | None]] = {}
        self.repeats = 0
        self.conflicts = 0
        self.first_conflict: str | None = None

    def add(self, split: str, qid: str, did: str, score: int, path=None, line: int | None = None) -> bool:
        key = (split, qid, did)
        where = f"{path}:{line}" if path is not None and line else (str(path) if path is not None else None)
        old = self.seen.get(key)
        if old is not None:
            self.repeats += 1
            if old[0] != score:
                self.conflicts += 1
                if self.first_conflict is None:
                    self.first_conflict = (f"{where or split}: query {qid!r}, document {did!r} graded {score}, "
                                           f"first graded {old[0]}" + (f" at {old[1]}" if old[1] else ""))
            return False
        self.seen[key] = (score, where)
        self.writer.add_qrel(split, qid, did, score)
        return True


def _done(name: str, writer: BeirWriter, qrels: _Qrels | None = None) -> BeirCounts:
    if qrels is not None and qrels.conflicts:
        log.warning("%s: %d judgements repeat a (query, document) pair with another grade; the first grade is kept "
                    "(first: %s)", name, qrels.conflicts, qrels.first_conflict)
    if qrels is not None and qrels.repeats:
        log.info("%s: %d repeated judgements written once", name, qrels.repeats)
    log.info("%s: %s", name, writer.counts.as_dict() if writer.counts else "not validated")
    return writer.counts


# ---------------------------------------------------------------------------------------------
# 1. BEIR


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
                        f"subdir must name the folder inside the extracted zip; {_listing(raw)}")
    corpus = _find_file(src, "corpus.jsonl", what="BEIR corpus")
    queries = _find_file(src, "queries.jsonl", what="BEIR queries")
    splits = qrels_files(src)
    if not splits:
        raise DataError(src / "qrels", None, "no qrels/<split>.tsv files", f"{_listing(src)}")
    with BeirWriter(out) as writer:
        for _line, did, obj in iter_records(corpus, "corpus"):
            writer.add_doc(did, obj.get("title") or "", obj["text"])
        qset = _Queries(writer)
        for line, qid, obj in iter_records(queries, "queries"):
            qset.add(qid, obj["text"], queries, line)
        qrels = _Qrels(writer)
        for split, path in splits.items():
            for line, qid, did, score in iter_qrels_tsv(path):
                qrels.add(split, qid, did, score, path, line)
    return _done(f"beir:{subdir}", writer, qrels)


# ---------------------------------------------------------------------------------------------
# 2. MS MARCO passage


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
    collection = _find_file(raw, "collection.tsv", what="MS MARCO collection")
    query_files = [_find_file(raw, "queries.train.tsv", what="MS MARCO train queries"),
                   _find_file(raw, "queries.dev.small.tsv", what="MS MARCO dev.small queries")]
    qrel_files = {"train": _find_file(raw, "qrels.train.tsv", what="MS MARCO train qrels"),
                  "dev": _find_file(raw, "qrels.dev.small.tsv", what="MS MARCO dev.small qrels")}
    with BeirWriter(out) as writer:
        for _line, pid, text in iter_id_text(collection, "pid"):
            writer.add_doc(pid, "", text)
        qset = _Queries(writer)
        for path in query_files:
            for line, qid, text in iter_id_text(path, "qid"):
                qset.add(qid, text, path, line)
        qrels = _Qrels(writer)
        for split, path in qrel_files.items():
            for line, qid, pid, score in iter_trec_qrels(path):
                qrels.add(split, qid, pid, score, path, line)
    return _done("msmarco", writer, qrels)


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
    path = _find_file(raw, triples, what="MS MARCO triples file")
    layout = "query<TAB>positive<TAB>negative"

    def key(text: str) -> tuple[int, str]:
        digest = hashlib.md5(text.encode("utf-8")).hexdigest()[:16]
        return int(digest, 16), digest

    docs_seen: set[int] = set()
    per_query: dict[int, tuple[array, array]] = {}
    with BeirWriter(out) as writer:
        qrels = _Qrels(writer)
        for n, (line, (query, pos, neg)) in enumerate(_iter_tsv(path, 3, layout, maxsplit=False)):
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
    return _done("msmarco-triples", writer, qrels)


def triples_to_beir(path: str | os.PathLike, out: str | os.PathLike, limit: int | None = None) -> BeirCounts:
    """A triples file (``.tsv``, ``.tsv.gz``, or a ``.tar.gz``/``.zip`` holding one) -> BEIR + negatives.jsonl.

    The training-side twin of :func:`convert_msmarco_triples` for a file anywhere (MS MARCO's
    ``triples.train.small.tar.gz`` download, the mini source's ``triples.train.tsv``); writes
    ``out/dataset.json`` last.
    """
    from zsdr.data.download import extract

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


# ---------------------------------------------------------------------------------------------
# 4. TREC (SGML documents and topics, TREC qrels)

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
    return _collapse(_ANY_TAG.sub(" ", text))


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
        value = _collapse(value)
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
            _check_lfs(path, lines.lineno, text)
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
            put(qid, _collapse(text), line)
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
        raise DataError(qrels_path, None, "TREC qrels not found", f"{_listing(qrels_path.parent)}")
    with BeirWriter(out) as writer:
        for _file, _line, docno, title, text in iter_trec_docs(raw / docs):
            writer.add_doc(docno, title, text)
        for qid, text in topic_texts.items():
            writer.add_query(qid, text)
        judged = _Qrels(writer)
        for line, qid, did, score in iter_trec_qrels(qrels_path):
            judged.add(split, qid, did, score, qrels_path, line)
    return _done(f"trec:{raw.name}", writer, judged)


# ---------------------------------------------------------------------------------------------
# 5. LoTTE


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
    folder = _find_dir(raw, [f"lotte/{topic}/{split}", f"{topic}/{split}", ""], "collection.tsv",
                       f"LoTTE {topic}/{split}")
    collection = _find_file(folder, "collection.tsv", what="LoTTE collection")
    kinds = ("forum", "search")
    questions = {k: _find_file(folder, f"questions.{k}.tsv", what=f"LoTTE {k} questions") for k in kinds}
    answers = {k: _find_file(folder, f"qas.{k}.jsonl", what=f"LoTTE {k} answers") for k in kinds}
    with BeirWriter(out) as writer:
        for _line, pid, text in iter_id_text(collection, "pid"):
            writer.add_doc(pid, "", text)
        qset, qrels = _Queries(writer), _Qrels(writer)
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
    return _done(f"lotte:{topic}/{split}", writer, qrels)


# ---------------------------------------------------------------------------------------------
# 6. Multi-CPR


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
    folder = _find_dir(raw, [f"data/{domain}", domain, f"Multi-CPR/data/{domain}", ""], "train.query.txt",
                       f"Multi-CPR {domain}")
    single = [p for p in (folder / "corpus.tsv", folder / "corpus.tsv.gz") if p.is_file()]
    parts = single[:1] or sorted((p for p in folder.glob("corpus_split_*.tsv*") if p.is_file()), key=_natural_key)
    if not parts:
        raise DataError(folder / "corpus.tsv", None, "Multi-CPR corpus not found",
                        f"expected corpus.tsv or corpus_split_*.tsv; {_listing(folder)}")
    query_files = {"train": _find_file(folder, "train.query.txt", what="Multi-CPR train queries"),
                   "dev": _find_file(folder, "dev.query.txt", what="Multi-CPR dev queries")}
    qrel_files = {"train": _find_file(folder, "qrels.train.tsv", what="Multi-CPR train qrels"),
                  "dev": _find_file(folder, "qrels.dev.tsv", what="Multi-CPR dev qrels")}
    with BeirWriter(out) as writer:
        for part in parts:
            for _line, pid, text in iter_id_text(part, "pid"):
                writer.add_doc(pid, "", text)
        qset, qrels = _Queries(writer), _Qrels(writer)
        for path in query_files.values():
            for line, qid, text in iter_id_text(path, "qid"):
                qset.add(qid, text, path, line)
        for split, path in qrel_files.items():
            for line, qid, pid, score in iter_trec_qrels(path):
                qrels.add(split, qid, pid, score, path, line)
    return _done(f"cpr:{domain}", writer, qrels)


# ---------------------------------------------------------------------------------------------
# 7. cMedQA2


def _csv_rows(path: Path, shown: str, ncols: int, header: tuple[str, ...] | None = None,
              ) -> Iterator[tuple[int, list[str]]]:
    """Rows of cMedQA2's comma-separated files, split as DDR does (``split(",", ncols - 1)``).

    The first line is a header and is skipped. ``shown`` is the name errors use. A content field
    wrapped in double quotes is unquoted (``""`` -> ``"``).
    """
    try:
        with open_lines(path) as lines:
            for text in lines:
                _check_lfs(path, lines.lineno, text)
                if lines.lineno == 1 or not text.strip():
                    continue
                cols = text.split(",", ncols - 1)
                if len(cols) != ncols:
                    raise DataError(path, lines.lineno,
                                    f"expected {ncols} comma-separated columns, found {len(cols)}",
                                    f"every line must read {','.join(header or ())}")
                last = cols[-1].strip()
                if len(last) >= 2 and last[0] == last[-1] == '"':
                    cols[-1] = last[1:-1].replace('""', '"')
                yield lines.lineno, [c.strip() for c in cols]
    except DataError as err:
        if str(path) == shown:
            raise
        raise DataError(shown, err.line, err.message, err.fix) from None


def _read_header(path: Path) -> list[str]:
    with open_lines(path) as lines:
        for text in lines:
            return [c.strip().lower() for c in text.split(",")]
    return []


def convert_cmedqa2(raw: str | os.PathLike, out: str | os.PathLike) -> BeirCounts:
    """cMedQA2 (github.com/zhangsheng93/cMedQA2) -> BEIR, following DDR's ``process_cmedqav2.py``.

    Expects in ``raw`` (the repository archive) each of ``question.csv`` (``question_id,content``),
    ``answer.csv`` (``ans_id,question_id,content``), ``train_candidates.txt``
    (``question_id,pos_ans_id,neg_ans_id``) and ``dev_candidates.txt`` / ``test_candidates.txt``
    (``question_id,ans_id,cnt,label``), each either as the file or inside the repository's
    ``<name>.zip`` (``question.zip``, ``answer.zip``, ``train_candidates.zip``, ...), which is
    unpacked to a scratch folder beside ``out`` and removed afterwards. Every file has a header
    line. Formats: the repository's README and DDR's script
    (github.com/jingtaozhan/disentangled-retriever, ``examples/.../process_cmedqav2.py``): lines are
    split on the first commas, the content keeps its commas. Output: corpus = every answer (empty
    title); qrels ``train`` = the ``pos_ans_id`` of each training line, ``dev``/``test`` = candidates
    with ``label > 0``; queries = the questions that have a qrel.
    """
    raw, out = Path(raw), Path(out)
    scratch: Path | None = None
    names = {"question": "question.csv", "answer": "answer.csv", "train": "train_candidates.txt",
             "dev": "dev_candidates.txt", "test": "test_candidates.txt"}
    try:
        files: dict[str, tuple[Path, str]] = {}
        for key, name in names.items():
            plain = [p for p in (raw / name, raw / f"{name}.gz") if p.is_file()]
            if plain:
                files[key] = (plain[0], str(plain[0]))
                continue
            archive = raw / f"{Path(name).stem}.zip"
            if not archive.is_file():
                raise DataError(raw / name, None, "cMedQA2 file not found",
                                f"expected {name} or {archive.name}; {_listing(raw)}")
            if scratch is None:
                out.parent.mkdir(parents=True, exist_ok=True)
                scratch = temp_sibling(out, is_dir=True, kind="cmedqa2")
            from zsdr.data.download import extract

            unpacked = extract(archive, scratch / archive.stem)
            found = [p for p in unpacked.rglob("*") if p.is_file() and p.name == name] or \
                [p for p in unpacked.rglob("*") if p.is_file() and not p.name.startswith(".")]
            if len(found) != 1:
                raise DataError(archive, None, f"expected {name} inside the zip, found {len(found)} files",
                                "download the repository archive again")
            files[key] = (found[0], f"{archive}!{found[0].relative_to(unpacked).as_posix()}")
        return _convert_cmedqa2(files, out)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _convert_cmedqa2(files: dict[str, tuple[Path, str]], out: Path) -> BeirCounts:
    positives: dict[str, dict[str, None]] = {}   # split -> ordered "qid\tans_id" keys
    for split in ("train", "dev", "test"):
        path, shown = files[split]
        header = _read_header(path)
        keys: dict[str, None] = positives.setdefault(split, {})
        if "pos_ans_id" in header or (split == "train" and "label" not in header):
            qcol = header.index("question_id") if "question_id" in header else 0
            pcol = header.index("pos_ans_id") if "pos_ans_id" in header else 1
            for line, cols in _csv_rows(path, shown, max(3, len(header)), tuple(header)):
                qid = _check_id(cols[qcol], Path(shown), line, "question_id")
                keys[f"{qid}\t{_check_id(cols[pcol], Path(shown), line, 'pos_ans_id')}"] = None
        else:
            ncols = max(4, len(header))
            qcol = header.index("question_id") if "question_id" in header else 0
            acol = header.index("ans_id") if "ans_id" in header else 1
            lcol = header.index("label") if "label" in header else ncols - 1
            for line, cols in _csv_rows(path, shown, ncols, tuple(header)):
                try:
                    label = int(float(cols[lcol]))
                except ValueError:
                    raise DataError(shown, line, f"label {cols[lcol]!r} is not a number",
                                    "the label column holds 0 or 1") from None
                if label > 0:
                    qid = _check_id(cols[qcol], Path(shown), line, "question_id")
                    keys[f"{qid}\t{_check_id(cols[acol], Path(shown), line, 'ans_id')}"] = None
    wanted = {key.split("\t", 1)[0] for keys in positives.values() for key in keys}
    with BeirWriter(out) as writer:
        path, shown = files["answer"]
        for line, (ans_id, _qid, content) in _csv_rows(path, shown, 3, ("ans_id", "question_id", "content")):
            writer.add_doc(_check_id(ans_id, Path(shown), line, "ans_id"), "", content)
        path, shown = files["question"]
        qset = _Queries(writer)
        for line, (qid, content) in _csv_rows(path, shown, 2, ("question_id", "content")):
            qid = _check_id(qid, Path(shown), line, "question_id")
            if qid in wanted:
                qset.add(qid, content, shown, line)
        missing = wanted.difference(qset.seen)
        if missing:
            raise DataError(shown, None, f"{len(missing)} judged questions are not in the file "
                                         f"(e.g. {sorted(missing)[0]!r})", "use the complete question.csv")
        qrels = _Qrels(writer)
        for split, keys in positives.items():
            for key in keys:
                qid, ans_id = key.split("\t", 1)
                qrels.add(split, qid, ans_id, 1)
    return _done("cmedqa2", writer, qrels)


# ---------------------------------------------------------------------------------------------
# 8. DuReader


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
    root = _find_dir(raw, ["preprocessed", "", "dureader_preprocessed/preprocessed"], "trainset/search.train.json",
                     "DuReader preprocessed folder")
    inputs = [(mode, _find_file(root, f"{mode}set/{source}.{mode}.json", what=f"DuReader {source}.{mode}"))
              for mode in ("train", "dev") for source in ("search", "zhidao")]
    with BeirWriter(out) as writer:
        queries: set[str] = set()
        docs: set[str] = set()
        qrels = _Qrels(writer)
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
    return _done("dureader", writer, qrels)


# ---------------------------------------------------------------------------------------------
# 9. OAG-QA


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
                if reader.line_num == 1 and row and row[0].startswith(_LFS_POINTER):
                    _check_lfs(path, 1, row[0])
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
            raise DataError(raw, None, "no OAG-QA <topic>-papers-10k.tsv files found", _listing(raw))
    unmatched = 0
    with BeirWriter(out) as writer:
        qrels = _Qrels(writer)
        for name, papers in chosen.items():
            prefix = "" if topic is not None else f"{name}/"
            questions = papers.with_name(papers.name.replace("-papers-10k.tsv", "-questions.tsv"))
            if not questions.is_file():
                raise DataError(questions, None, "OAG-QA questions file not found", _listing(papers.parent))
            titles: dict[tuple[str, ...], list[str]] = {}
            postings: dict[str, list[int]] = {}
            title_tokens: list[tuple[tuple[str, ...], str]] = []
            for line, row in _csv_tsv(papers):
                if row[0].strip() == "id":
                    continue
                if len(row) != 3:
                    raise DataError(papers, line, f"expected 3 tab-separated columns (id, abstract, title), "
                                                  f"found {len(row)}", "use the files of the OAG-QA release")
                pid = prefix + _check_id(row[0], papers, line, "paper id")
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
                writer.add_query(qid, _collapse(row[0]))
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
    return _done(f"oagqa:{topic or 'all'}", writer, qrels)


CONVERTERS: dict[str, Callable[..., BeirCounts]] = {
    "beir": convert_beir,
    "msmarco": convert_msmarco,
    "msmarco_triples": convert_msmarco_triples,
    "trec": convert_trec,
    "lotte": convert_lotte,
    "cpr": convert_cpr,
    "cmedqa2": convert_cmedqa2,
    "dureader": convert_dureader,
    "oagqa": convert_oagqa,
}
