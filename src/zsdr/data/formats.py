"""The BEIR dataset layout and TREC run/qrels files: reading, writing, validating.

BEIR layout (every converter writes it, every reader checks it)::

    <dir>/corpus.jsonl       {"_id": str, "title": str, "text": str, ...}   one document a line
    <dir>/queries.jsonl      {"_id": str, "text": str, ...}                 one query a line
    <dir>/qrels/<split>.tsv  header "query-id<TAB>corpus-id<TAB>score", then one judgement a line

Files may be gzip-compressed (``corpus.jsonl.gz``); a UTF-8 BOM and CRLF line ends are tolerated.
Every problem is reported as ``FILE:LINE: what is wrong (fix: ...)``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterable, Iterator

from zsdr.data.trec_runs import (RUN_COLUMNS, iter_trec_rows, read_trec_run, read_trec_run_table, run_table,  # noqa: F401
                                 write_trec_run)
from zsdr.io import DataError, MultiDataError, atomic_dir, atomic_write, open_lines

log = logging.getLogger("zsdr.formats")

QRELS_HEADER = ("query-id", "corpus-id", "score")
MAX_REPORTED_ERRORS = 20


def find_file(directory: Path, name: str) -> Path:
    """``name`` or ``name.gz`` inside ``directory`` (both: :class:`DataError`, one of them would be read
    silently)."""
    found = [c for c in (directory / name, directory / f"{name}.gz") if c.is_file()]
    if len(found) == 2:
        raise DataError(directory / name, None, f"both {name} and {name}.gz are in {directory}: which one is the "
                        "dataset's?", f"keep one of them (remove or move the other)")
    if found:
        return found[0]
    raise DataError(directory / name, None, "file not found", f"a BEIR dataset needs {name} in {directory}")


def _id_of(value, path: Path, line: int, key: str = "_id") -> str:
    """An id as every reader and writer of the project takes it: a non-empty string (or integer) without
    whitespace, which TREC runs and qrels (blank-separated columns) could not carry. Every reader checks
    ids here, so ``zsdr validate`` refuses what a later step would."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(path, line, f'"{key}" must be a string, got {type(value).__name__}', 'write ids as JSON strings')
    text = str(value)
    parts = text.split()
    if not parts:
        raise DataError(path, line, f'"{key}" is empty', "give every record a non-empty id")
    if len(parts) > 1 or parts[0] != text:
        raise DataError(path, line, f'"{key}" {text!r} contains whitespace, which the blank-separated columns of '
                        "a TREC run cannot hold", "replace the whitespace in the id (e.g. by '_') wherever it is used")
    return text


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` for every non-blank line; bad JSON raises DataError."""
    path = Path(path)
    with open_lines(path) as lines:
        for text in lines:
            if not text.strip():
                continue
            yield lines.lineno, _parse_json_line(text, path, lines.lineno)


def _parse_json_line(text: str, path: Path, line: int) -> dict:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, line, f"invalid JSON: {exc.msg} at column {exc.colno}",
                        "each line must be one complete JSON object") from None
    if not isinstance(obj, dict):
        raise DataError(path, line, f"expected a JSON object, got {type(obj).__name__}",
                        "each line must be one JSON object")
    if "\\u" in text and _ESCAPED_SURROGATE.search(text):
        _check_surrogates(obj, path, line)
    return obj


# A JSON escape of half a UTF-16 surrogate pair: json.loads gives a lone surrogate for one that is not part
# of a pair (``"\ud800"``), a string no UTF-8 writer, tokenizer or Arrow column takes.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def _check_surrogates(value, path: Path, line: int, where: str = "") -> None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            char = value[exc.start]
            raise DataError(path, line, f"{where or 'a key'} holds {char!r}, half of a UTF-16 surrogate pair "
                            "without its other half: not a character any UTF-8 file or model can take",
                            "fix the escape (write the character itself, or both halves of the pair), or drop it"
                            ) from None
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_surrogates(k, path, line, where)
            _check_surrogates(v, path, line, f'"{k}"')
    elif isinstance(value, list):
        for v in value:
            _check_surrogates(v, path, line, where)


def _record_id(obj: dict, path: Path, line: int) -> str:
    if "_id" not in obj:
        raise DataError(path, line, 'missing "_id"', 'every record needs an "_id" field')
    return _id_of(obj["_id"], path, line)


def _check_fields(obj: dict, rid: str, path: Path, line: int, kind: str) -> None:
    if "text" not in obj:
        raise DataError(path, line, f'record {rid!r} has no "text"', 'every record needs a "text" field')
    if not isinstance(obj["text"], str):
        raise DataError(path, line, f'"text" of {rid!r} must be a string', "write the text as a JSON string")
    if kind == "corpus" and not isinstance(obj.get("title", ""), str):
        raise DataError(path, line, f'"title" of {rid!r} must be a string', 'use "" for no title')


def iter_records(path: str | os.PathLike, kind: str) -> Iterator[tuple[int, str, dict]]:
    """Yield ``(line, id, record)`` for a corpus (``kind="corpus"``) or queries file; checks fields."""
    path = Path(path)
    for line, obj in iter_jsonl(path):
        rid = _record_id(obj, path, line)
        _check_fields(obj, rid, path, line, kind)
        yield line, rid, obj


def iter_qrels_tsv(path: str | os.PathLike) -> Iterator[tuple[int, str, str, int]]:
    """Yield ``(line, query_id, corpus_id, score)`` from a BEIR qrels tsv (header optional)."""
    path = Path(path)
    with open_lines(path) as lines:
        for text in lines:
            if not text.strip():
                continue
            cols = text.split("\t")
            if lines.lineno == 1 and tuple(c.strip() for c in cols[:3]) == QRELS_HEADER:
                continue
            if len(cols) != 3:
                raise DataError(path, lines.lineno, f"expected 3 tab-separated columns, found {len(cols)}",
                                "write query-id<TAB>corpus-id<TAB>score")
            qid, did, score = (c.strip() for c in cols)
            line = lines.lineno
            yield line, _id_of(qid, path, line, "query-id"), _id_of(did, path, line, "corpus-id"), \
                _relevance(score, path, line)


def _relevance(value: str, path: Path, line: int) -> int:
    try:
        number = float(value)
    except ValueError:
        raise DataError(path, line, f"relevance {value!r} is not a number",
                        "the score column holds integer relevance grades") from None
    if not math.isfinite(number) or number != int(number):
        raise DataError(path, line, f"relevance {value!r} is not an integer grade",
                        "the score column holds integer relevance grades")
    return int(number)


@dataclass
class BeirCounts:
    docs: int = 0
    queries: int = 0
    qrels: dict[str, int] = field(default_factory=dict)
    qrels_queries: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"docs": self.docs, "queries": self.queries, "qrels": dict(self.qrels),
                "qrels_queries": dict(self.qrels_queries)}


class _Collector:
    def __init__(self):
        self.errors: list[DataError] = []
        self.truncated = False

    def add(self, err: DataError, fatal: bool = False):
        """Record ``err``; past the cap only fatal ones (that stopped reading a file) are kept."""
        if fatal or len(self.errors) < MAX_REPORTED_ERRORS:
            self.errors.append(err)
        else:
            self.truncated = True

    def raise_if_any(self):
        if self.errors:
            raise MultiDataError(self.errors, self.truncated)


def _collect_ids(path: Path, kind: str, errors: _Collector) -> tuple[dict[str, int], bool]:
    """``(id -> first line, complete)``, reporting duplicates and bad records line by line.

    A bad line (invalid JSON, a missing field, a title that is not a string) is reported and
    reading goes on; a record whose fields are wrong still counts its id. ``complete`` is False
    when some line's id could not be read, or the file could not be read to its end (truncated
    gzip, bytes that are not UTF-8): its ids are then not a basis for checking the qrels.
    """
    seen: dict[str, int] = {}
    complete = True
    try:
        with open_lines(path) as lines:
            for text in lines:
                if not text.strip():
                    continue
                line = lines.lineno
                try:
                    obj = _parse_json_line(text, path, line)
                    rid = _record_id(obj, path, line)
                except DataError as err:
                    errors.add(err)
                    complete = False
                    continue
                first = seen.get(rid)
                if first is not None:
                    errors.add(DataError(path, line, f"duplicate id {rid!r} (first seen on line {first})",
                                         "ids must be unique; drop or rename the repeat"))
                else:
                    seen[rid] = line
                try:
                    _check_fields(obj, rid, path, line, kind)
                except DataError as err:
                    errors.add(err)
    except DataError as err:
        errors.add(err, fatal=True)
        complete = False
    return seen, complete


def add_judgement(table: dict[str, dict[str, int]], lines: dict[tuple[str, str], int], qid: str, did: str,
                  grade: int, path: Path, line: int) -> None:
    """Put ``grade`` into ``table[qid][did]``; a second row for the pair with another grade raises
    :class:`DataError` naming both lines (an identical repeat is accepted). ``lines``: pair -> first line."""
    docs = table.setdefault(qid, {})
    old = docs.get(did)
    if old is None:
        docs[did] = grade
        lines[(qid, did)] = line
    elif old != grade:
        raise DataError(path, line, f"query {qid!r}, document {did!r} is judged {grade} here and {old} on line "
                        f"{lines[(qid, did)]}", "keep one grade per (query, document) pair")


QRELS_FIX = "write at least one judgement of grade >= 1 (query-id<TAB>corpus-id<TAB>grade), or remove the file"


def judges_nothing(qrels: dict[str, dict[str, int]]) -> str | None:
    """Why qrels cannot score a run (every metric would be 0), or None: no judgement, or none relevant."""
    if not any(qrels.values()):
        return "the qrels judge nothing (no judgement line)"
    if not any(g >= 1 for docs in qrels.values() for g in docs.values()):
        return "the qrels judge no document relevant (every grade is below 1), so every metric would be 0"
    return None


def qrels_files(directory: str | os.PathLike) -> dict[str, Path]:
    """Split name -> qrels file in ``<dir>/qrels/`` (``test.tsv`` or ``test.tsv.gz``)."""
    qdir = Path(directory) / "qrels"
    if not qdir.is_dir():
        return {}
    out = {}
    for p in sorted(qdir.iterdir()):
        name = p.name.removesuffix(".gz")
        if name.endswith(".tsv"):
            split = name.removesuffix(".tsv")
            if split in out:
                raise DataError(p, None, f"both {out[split].name} and {p.name} are in {qdir}: which one is split "
                                f"{split!r}?", "keep one of them (remove or move the other)")
            out[split] = p
    return out


NO_FILE = "0" * 64   # the digest a qrels stamp lists for a file that does not exist (yet)
_digests: dict[tuple[str, int, int], str] = {}


def qrels_stamp(directory: str | os.PathLike, split: str, stamp: str | os.PathLike,
                shown: str | os.PathLike | None = None) -> Path:
    """Keep ``stamp`` a ``sha256sum`` listing of ``directory``'s qrels of ``split`` (its path shown as
    ``shown/qrels/<split>.tsv``): the workflow's evaluate jobs take it as an input, so that an edit of the
    qrels (a file no job declares) re-plans them. It is rewritten when, and only when, the qrels' content
    changes. A stamp written before the dataset existed (the digest :data:`NO_FILE`), or not yet, takes the
    qrels' modification time when it is rewritten: the evaluation that followed the build is not
    re-planned for it; any later change of content gives it the time of the change."""
    from zsdr.io import atomic_write, file_digest

    folder, stamp = Path(directory), Path(stamp)
    path = qrels_files(folder).get(split) if folder.is_dir() else None
    listed = Path(shown if shown is not None else folder) / "qrels" / (path.name if path else f"{split}.tsv")
    digest = NO_FILE
    if path is not None:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
        digest = _digests.get(key) or _digests.setdefault(key, file_digest(path))
    body = f"{digest}  {listed}\n"
    try:
        before = stamp.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        before = None
    if before == body:
        return stamp
    with atomic_write(stamp) as fh:
        fh.write(body)
    if path is not None and (before is None or before.startswith(NO_FILE)):
        os.utime(stamp, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns))
    return stamp


def validate_beir(directory: str | os.PathLike, require_qrels: bool = True) -> BeirCounts:
    """Check a BEIR-layout dataset; return its counts or raise :class:`MultiDataError`.

    Checks: UTF-8, complete gzip streams, valid JSON, ``_id`` and ``text`` present, unique ids,
    a non-empty corpus, integer relevance grades, one grade per (query, document) pair, and qrels
    that name only known query and document ids (checked only against a file whose every id could
    be read, so one bad record does not make its judgements look unknown).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(directory, None, "dataset folder not found", "run the fetch/convert step first")
    errors = _Collector()
    counts = BeirCounts()
    corpus_path = find_file(directory, "corpus.jsonl")
    queries_path = find_file(directory, "queries.jsonl")
    docs, docs_complete = _collect_ids(corpus_path, "corpus", errors)
    queries, queries_complete = _collect_ids(queries_path, "queries", errors)
    counts.docs, counts.queries = len(docs), len(queries)
    if not docs and not errors.errors:
        errors.add(DataError(corpus_path, None, "the corpus is empty", "a dataset needs at least one document"))
    files = qrels_files(directory)
    if require_qrels and not files:
        errors.add(DataError(directory / "qrels", None, "no qrels/<split>.tsv files",
                             "write at least one qrels split"))
    for split, path in files.items():
        rows, judged, table, first_lines = 0, set(), {}, {}
        try:
            for line, qid, did, score in iter_qrels_tsv(path):
                rows += 1
                judged.add(qid)
                try:
                    add_judgement(table, first_lines, qid, did, score, path, line)
                except DataError as err:
                    errors.add(err)
                if queries_complete and qid not in queries:
                    errors.add(DataError(path, line, f"query id {qid!r} is not in {queries_path.name}",
                                         "drop the judgement or add the query"))
                if docs_complete and did not in docs:
                    errors.add(DataError(path, line, f"corpus id {did!r} is not in {corpus_path.name}",
                                         "drop the judgement or add the document"))
        except DataError as err:
            errors.add(err, fatal=True)
        else:
            problem = judges_nothing(table)
            if problem:
                errors.add(DataError(path, None, problem, QRELS_FIX))
        counts.qrels[split] = rows
        counts.qrels_queries[split] = len(judged)
    errors.raise_if_any()
    return counts


# ---------------------------------------------------------------------------------------------
# Reading whole datasets (small and medium corpora; big ones are streamed with iter_records)


def read_corpus(directory: str | os.PathLike) -> dict[str, dict]:
    path = find_file(Path(directory), "corpus.jsonl")
    return {rid: {"title": obj.get("title", "") or "", "text": obj["text"]} for _, rid, obj in iter_records(path, "corpus")}


def read_queries(directory: str | os.PathLike) -> dict[str, str]:
    path = find_file(Path(directory), "queries.jsonl")
    return {rid: obj["text"] for _, rid, obj in iter_records(path, "queries")}


def read_qrels(directory_or_file: str | os.PathLike, split: str | None = None) -> dict[str, dict[str, int]]:
    """Qrels as ``{query_id: {corpus_id: grade}}`` from a BEIR folder + split, or a tsv file."""
    path = Path(directory_or_file)
    if split is not None:
        if not path.is_dir():
            raise DataError(path, None, "dataset folder not found",
                            "check the path, or build it (`zsdr fetch NAME`, `snakemake data/NAME/dataset.json`)")
        files = qrels_files(path)
        if not files and not any(path.glob("corpus.jsonl*")) and not any(path.glob("queries.jsonl*")):
            raise DataError(path, None, "not a BEIR dataset folder (no corpus.jsonl, queries.jsonl or qrels/)",
                            "check the path, or build it (`zsdr fetch NAME`, `snakemake data/NAME/dataset.json`)")
        if split not in files:
            raise DataError(path / "qrels" / f"{split}.tsv", None, f"no qrels for split {split!r}",
                            f"available splits: {', '.join(files) or 'none'}")
        path = files[split]
    out: dict[str, dict[str, int]] = {}
    first_lines: dict[tuple[str, str], int] = {}
    for line, qid, did, score in iter_qrels_tsv(path):
        add_judgement(out, first_lines, qid, did, score, path, line)
    return out


def read_trec_qrels(path: str | os.PathLike) -> dict[str, dict[str, int]]:
    """TREC qrels as ``{query_id: {corpus_id: grade}}``; conflicting repeats raise :class:`DataError`."""
    path = Path(path)
    out: dict[str, dict[str, int]] = {}
    first_lines: dict[tuple[str, str], int] = {}
    for line, qid, did, grade in iter_trec_qrels(path):
        add_judgement(out, first_lines, qid, did, grade, path, line)
    return out


# ---------------------------------------------------------------------------------------------
# Writing


def judged_queries(directory: str | os.PathLike, split: str,
                   qrels: dict[str, dict[str, int]] | None = None) -> dict[str, str]:
    """The queries ``split``'s qrels judge (at least one row, any grade), id -> text, in qrels order.

    ``qrels``: the split's qrels when already read. A judged query missing from ``queries.jsonl``
    raises :class:`DataError` naming the qrels file.
    """
    if qrels is None:
        qrels = read_qrels(directory, split)
    texts = read_queries(directory)
    missing = [qid for qid in qrels if qid not in texts]
    if missing:
        raise DataError(qrels_files(directory)[split], None,
                        f"{len(missing)} judged queries are not in queries.jsonl (first: {missing[0]!r})",
                        f"add the queries or drop their judgements (`zsdr validate {directory}` lists them all)")
    return {qid: texts[qid] for qid in qrels}


def _dump(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


class BeirWriter:
    """Stream a dataset into BEIR layout; the folder appears only once it is complete and valid.

    >>> with BeirWriter("data/foo") as w:            # doctest: +SKIP
    ...     w.add_doc("d1", "A title", "Some text")
    ...     w.add_query("q1", "a question")
    ...     w.add_qrel("test", "q1", "d1", 1)

    On exit the output is validated with :func:`validate_beir` (so every converter validates its
    own output) and the temporary folder is renamed onto ``directory``; on any error nothing is
    left behind.
    """

    def __init__(self, directory: str | os.PathLike, compress: bool = False, validate: bool = True):
        self.directory = Path(directory)
        self.compress = compress
        self.validate = validate
        self.counts: BeirCounts | None = None
        self._stack = None

    def __enter__(self) -> "BeirWriter":
        import contextlib

        self._stack = contextlib.ExitStack()
        self.root = self._stack.enter_context(atomic_dir(self.directory, kind="dataset"))
        suffix = ".gz" if self.compress else ""
        (self.root / "qrels").mkdir()
        self._corpus = self._open(self.root / f"corpus.jsonl{suffix}")
        self._queries = self._open(self.root / f"queries.jsonl{suffix}")
        self._qrels: dict[str, IO] = {}
        return self

    def _open(self, path: Path) -> IO:
        if path.suffix == ".gz":
            import gzip
            import io

            return io.TextIOWrapper(gzip.GzipFile(path, "wb", mtime=0), encoding="utf-8", newline="\n")
        return open(path, "w", encoding="utf-8", newline="\n")

    def add_doc(self, doc_id: str, title: str, text: str, **extra) -> None:
        self._corpus.write(_dump({"_id": str(doc_id), "title": title or "", "text": text, **extra}) + "\n")

    def add_query(self, query_id: str, text: str, **extra) -> None:
        self._queries.write(_dump({"_id": str(query_id), "text": text, **extra}) + "\n")

    def add_qrel(self, split: str, query_id: str, doc_id: str, score: int) -> None:
        fh = self._qrels.get(split)
        if fh is None:
            fh = self._qrels[split] = open(self.root / "qrels" / f"{split}.tsv", "w", encoding="utf-8", newline="\n")
            fh.write("\t".join(QRELS_HEADER) + "\n")
        fh.write(f"{query_id}\t{doc_id}\t{int(score)}\n")

    def add_docs(self, docs: Iterable[tuple[str, str, str]]) -> None:
        for doc_id, title, text in docs:
            self.add_doc(doc_id, title, text)

    def __exit__(self, exc_type, exc, tb) -> bool:
        for fh in (self._corpus, self._queries, *self._qrels.values()):
            fh.close()
        try:
            if exc_type is None and self.validate:
                self.counts = validate_beir(self.root)
        except BaseException:
            self._stack.__exit__(*__import__("sys").exc_info())
            raise
        return bool(self._stack.__exit__(exc_type, exc, tb))


def write_beir(directory: str | os.PathLike, corpus: dict[str, dict], queries: dict[str, str],
               qrels: dict[str, dict[str, dict[str, int]]]) -> BeirCounts:
    """Write in-memory data (``qrels`` keyed by split) as a validated BEIR folder."""
    with BeirWriter(directory) as w:
        for did, doc in corpus.items():
            w.add_doc(did, doc.get("title", ""), doc["text"])
        for qid, text in queries.items():
            w.add_query(qid, text)
        for split, table in qrels.items():
            for qid, docs in table.items():
                for did, score in docs.items():
                    w.add_qrel(split, qid, did, score)
    return w.counts


def write_manifest(directory: str | os.PathLike, counts: BeirCounts, **info) -> None:
    """``<dir>/dataset.json``: counts plus provenance. Written last: its presence marks a complete folder."""
    with atomic_write(Path(directory) / "dataset.json") as fh:
        json.dump({**info, **counts.as_dict()}, fh, indent=1)
        fh.write("\n")


# ---------------------------------------------------------------------------------------------
# TREC files


def iter_trec_qrels(path: str | os.PathLike) -> Iterator[tuple[int, str, str, int]]:
    """Yield ``(line, qid, docid, grade)`` from TREC qrels (``qid iter docid rel``, blank-separated)."""
    path = Path(path)
    for line, cols in iter_trec_rows(path, "qid iter docid rel", "TREC qrels have four blank-separated columns"):
        yield line, cols[0], cols[2], _relevance(cols[3], path, line)
