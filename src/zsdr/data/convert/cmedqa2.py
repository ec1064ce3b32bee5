"""cMedQA2 (zhangsheng93/cMedQA2): questions and answers as retrieval, following DDR's ``process_cmedqav2.py``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

from zsdr.data.convert.common import Qrels, Queries, check_id, check_lfs, finish, listing
from zsdr.data.formats import BeirCounts, BeirWriter
from zsdr.io import DataError, open_lines, temp_sibling


def _csv_rows(path: Path, shown: str, ncols: int, header: tuple[str, ...] | None = None,
              ) -> Iterator[tuple[int, list[str]]]:
    """Rows of cMedQA2's comma-separated files, split as DDR does (``split(",", ncols - 1)``).

    The first line is a header and is skipped. ``shown`` is the name errors use. A content field
    wrapped in double quotes is unquoted (``""`` -> ``"``).
    """
    try:
        with open_lines(path) as lines:
            for text in lines:
                check_lfs(path, lines.lineno, text)
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
                                f"expected {name} or {archive.name}; {listing(raw)}")
            if scratch is None:
                out.parent.mkdir(parents=True, exist_ok=True)
                scratch = temp_sibling(out, is_dir=True, kind="cmedqa2")
            from zsdr.data.archives import extract

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
                qid = check_id(cols[qcol], Path(shown), line, "question_id")
                keys[f"{qid}\t{check_id(cols[pcol], Path(shown), line, 'pos_ans_id')}"] = None
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
                    qid = check_id(cols[qcol], Path(shown), line, "question_id")
                    keys[f"{qid}\t{check_id(cols[acol], Path(shown), line, 'ans_id')}"] = None
    wanted = {key.split("\t", 1)[0] for keys in positives.values() for key in keys}
    with BeirWriter(out) as writer:
        path, shown = files["answer"]
        for line, (ans_id, _qid, content) in _csv_rows(path, shown, 3, ("ans_id", "question_id", "content")):
            writer.add_doc(check_id(ans_id, Path(shown), line, "ans_id"), "", content)
        path, shown = files["question"]
        qset = Queries(writer)
        for line, (qid, content) in _csv_rows(path, shown, 2, ("question_id", "content")):
            qid = check_id(qid, Path(shown), line, "question_id")
            if qid in wanted:
                qset.add(qid, content, shown, line)
        missing = wanted.difference(qset.seen)
        if missing:
            raise DataError(shown, None, f"{len(missing)} judged questions are not in the file "
                                         f"(e.g. {sorted(missing)[0]!r})", "use the complete question.csv")
        qrels = Qrels(writer)
        for split, keys in positives.items():
            for key in keys:
                qid, ans_id = key.split("\t", 1)
                qrels.add(split, qid, ans_id, 1)
    return finish("cmedqa2", writer, qrels)
