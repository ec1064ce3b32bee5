"""BEIR layout: reading, writing, and the validator's error messages on corrupted copies."""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zsdr.data.formats import (
    BeirWriter,
    read_corpus,
    read_qrels,
    read_queries,
    read_trec_run,
    validate_beir,
    write_beir,
    write_trec_run,
)
from zsdr.io import DataError, atomic_dir, atomic_write

CORPUS = [
    {"_id": "d1", "title": "Alpha", "text": "first document"},
    {"_id": "d2", "title": "", "text": "second document"},
    {"_id": "d3", "title": "Gamma", "text": "third document"},
]
QUERIES = [{"_id": "q1", "text": "first?"}, {"_id": "q2", "text": "second?"}]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\nq2\td3\t0\n"


def make_dataset(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS), encoding="utf-8")
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES), encoding="utf-8")
    (root / "qrels" / "test.tsv").write_text(QRELS, encoding="utf-8")
    return root


def test_valid_dataset_counts(tmp_path):
    counts = validate_beir(make_dataset(tmp_path / "ds"))
    assert counts.as_dict() == {"docs": 3, "queries": 2, "qrels": {"test": 3}, "qrels_queries": {"test": 2}}


def test_bom_crlf_and_gzip_are_tolerated(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    corpus = (ds / "corpus.jsonl").read_text(encoding="utf-8")
    (ds / "corpus.jsonl").unlink()
    with gzip.open(ds / "corpus.jsonl.gz", "wb") as fh:
        fh.write(corpus.encode("utf-8"))
    (ds / "queries.jsonl").write_bytes(b"\xef\xbb\xbf" + (ds / "queries.jsonl").read_bytes().replace(b"\n", b"\r\n"))
    (ds / "qrels" / "test.tsv").write_bytes(b"\xef\xbb\xbf" + QRELS.replace("\n", "\r\n").encode())
    assert validate_beir(ds).docs == 3
    assert read_queries(ds) == {"q1": "first?", "q2": "second?"}
    assert read_qrels(ds, "test") == {"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 0}}


def _replace_line(path: Path, lineno: int, new: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[lineno - 1] = new
    path.write_bytes(b"\n".join(lines))


def _truncate_gzip(ds: Path) -> None:
    docs = [{"_id": f"d{i}", "text": f"document number {i}"} for i in range(1, 2000)]
    data = gzip.compress("".join(json.dumps(d) + "\n" for d in docs).encode())
    (ds / "corpus.jsonl").unlink()
    (ds / "corpus.jsonl.gz").write_bytes(data[: len(data) // 2])


# (fault name, corruption, file named in the message, line named in the message, words in the message)
CORRUPTIONS = [
    ("invalid json", lambda ds: _replace_line(ds / "corpus.jsonl", 2, b'{"_id": "d2", "text": '),
     "corpus.jsonl", 2, "invalid JSON"),
    ("missing _id", lambda ds: _replace_line(ds / "corpus.jsonl", 3, b'{"title": "x", "text": "y"}'),
     "corpus.jsonl", 3, '"_id"'),
    ("missing text", lambda ds: _replace_line(ds / "queries.jsonl", 2, b'{"_id": "q2"}'),
     "queries.jsonl", 2, '"text"'),
    ("duplicate doc id", lambda ds: _replace_line(ds / "corpus.jsonl", 3, b'{"_id": "d1", "text": "again"}'),
     "corpus.jsonl", 3, "duplicate id 'd1' (first seen on line 1)"),
    ("duplicate query id", lambda ds: _replace_line(ds / "queries.jsonl", 2, b'{"_id": "q1", "text": "again"}'),
     "queries.jsonl", 2, "first seen on line 1"),
    ("empty corpus", lambda ds: (ds / "corpus.jsonl").write_text("", encoding="utf-8"),
     "corpus.jsonl", None, "empty"),
    ("unknown query in qrels", lambda ds: _replace_line(ds / "qrels" / "test.tsv", 3, b"q9\td2\t1"),
     "test.tsv", 3, "query id 'q9'"),
    ("unknown doc in qrels", lambda ds: _replace_line(ds / "qrels" / "test.tsv", 2, b"q1\td99\t1"),
     "test.tsv", 2, "corpus id 'd99'"),
    ("non-numeric relevance", lambda ds: _replace_line(ds / "qrels" / "test.tsv", 4, b"q2\td3\thigh"),
     "test.tsv", 4, "not a number"),
    ("fractional relevance", lambda ds: _replace_line(ds / "qrels" / "test.tsv", 4, b"q2\td3\t0.5"),
     "test.tsv", 4, "integer grade"),
    ("non-utf8 bytes", lambda ds: _replace_line(ds / "corpus.jsonl", 2, b'{"_id": "d2", "text": "caf\xe9"}'),
     "corpus.jsonl", 2, "not UTF-8"),
    ("truncated gzip", _truncate_gzip, "corpus.jsonl.gz", None, "truncated"),
    ("wrong column count", lambda ds: _replace_line(ds / "qrels" / "test.tsv", 2, b"q1 d1 1"),
     "test.tsv", 2, "3 tab-separated columns"),
    ("non-string id", lambda ds: _replace_line(ds / "corpus.jsonl", 1, b'{"_id": ["d1"], "text": "x"}'),
     "corpus.jsonl", 1, "must be a string"),
]


@pytest.mark.parametrize("fault,corrupt,filename,line,words", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_validator_names_file_and_line(tmp_path, fault, corrupt, filename, line, words):
    ds = make_dataset(tmp_path / "ds")
    corrupt(ds)
    with pytest.raises(DataError) as info:
        validate_beir(ds)
    message = str(info.value)
    where = f"{filename}:{line}:" if line else f"{filename}"
    assert where in message, message
    assert words in message, message
    assert "fix:" in message


@pytest.mark.parametrize("fault,corrupt,filename,line,words", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_writer_leaves_nothing_behind_on_bad_data(tmp_path, fault, corrupt, filename, line, words):
    """Copying a corrupted dataset through BeirWriter fails and leaves no output folder."""
    src = make_dataset(tmp_path / "src")
    corrupt(src)
    out = tmp_path / "out"
    with pytest.raises(DataError):
        with BeirWriter(out) as w:
            for name in ("corpus.jsonl", "corpus.jsonl.gz", "queries.jsonl"):
                if (src / name).exists():
                    shutil.copy(src / name, w.root / name.replace(".gz", ""))  # raw copy: validation must catch it
            shutil.copy(src / "qrels" / "test.tsv", w.root / "qrels" / "test.tsv")
            if (src / "corpus.jsonl.gz").exists():  # keep the compressed corruption as it is
                (w.root / "corpus.jsonl").unlink()
                shutil.copy(src / "corpus.jsonl.gz", w.root / "corpus.jsonl.gz")
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["src"]


def test_cli_validate_exit_codes(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    ok = subprocess.run([sys.executable, "-m", "zsdr", "validate", str(ds)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["docs"] == 3
    _replace_line(ds / "qrels" / "test.tsv", 3, b"q9\td2\t1")
    bad = subprocess.run([sys.executable, "-m", "zsdr", "validate", str(ds)], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "test.tsv:3: query id 'q9'" in bad.stderr


def test_several_errors_reported_together(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    (ds / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq8\td1\t1\nq9\td2\t1\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        validate_beir(ds)
    assert "test.tsv:2:" in str(info.value) and "test.tsv:3:" in str(info.value)


def test_writer_roundtrip_and_atomicity(tmp_path):
    out = tmp_path / "ds"
    counts = write_beir(out, {"a": {"title": "T", "text": "x"}, "b": {"text": "y"}}, {"q": "query"},
                        {"test": {"q": {"a": 1}}})
    assert counts.docs == 2 and counts.qrels == {"test": 1}
    assert read_corpus(out)["b"] == {"title": "", "text": "y"}
    # A failing writer leaves the previous complete folder untouched.
    with pytest.raises(RuntimeError):
        with BeirWriter(out) as w:
            w.add_doc("z", "", "new")
            raise RuntimeError("boom")
    assert set(read_corpus(out)) == {"a", "b"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_atomic_write_and_dir(tmp_path):
    target = tmp_path / "f.txt"
    with pytest.raises(ValueError):
        with atomic_write(target) as fh:
            fh.write("partial")
            raise ValueError
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with atomic_write(tmp_path / "g.txt.gz") as fh:
        fh.write("hello\n")
    assert gzip.decompress((tmp_path / "g.txt.gz").read_bytes()) == b"hello\n"
    with atomic_dir(tmp_path / "d") as d:
        (d / "x").write_text("1")
    assert (tmp_path / "d" / "x").read_text() == "1"


def test_trec_run_roundtrip(tmp_path):
    run = {"q1": {"d1": 1.5, "d2": 2.5, "d3": 2.5}, "q2": {"d9": -1.0}}
    write_trec_run(tmp_path / "r.trec", run, tag="t", depth=2)
    lines = (tmp_path / "r.trec").read_text().splitlines()
    assert lines[0] == "q1 Q0 d2 1 2.500000 t" and lines[1] == "q1 Q0 d3 2 2.500000 t" and len(lines) == 3
    assert read_trec_run(tmp_path / "r.trec") == {"q1": {"d2": 2.5, "d3": 2.5}, "q2": {"d9": -1.0}}


def test_real_scifact_counts(shared_data):
    counts = validate_beir(shared_data / "beir" / "scifact")
    assert (counts.docs, counts.queries, counts.qrels["test"], counts.qrels["train"]) == (5183, 1109, 339, 919)


def test_real_vaswani_counts(shared_data):
    counts = validate_beir(shared_data / "vaswani" / "beir-format")
    assert (counts.docs, counts.queries, counts.qrels["test"]) == (11429, 93, 2083)


def test_read_json_names_the_file_line_and_fix(tmp_path):
    from zsdr.io import read_json

    path = tmp_path / "meta.json"
    with pytest.raises(DataError, match=r"meta.json: file not found \(fix: redo it\)"):
        read_json(path, "redo it")
    path.write_text('{"a": 1,\n "b": }\n')
    with pytest.raises(DataError, match=r"meta.json:2: not readable as JSON"):
        read_json(path, "redo it")
    path.write_text("[1, 2]\n")
    with pytest.raises(DataError, match="expected a JSON object"):
        read_json(path, "redo it")
    assert read_json(path, "redo it", expect=list) == [1, 2]
    assert read_json(path, "redo it", expect=None) == [1, 2]


# ---------------------------------------------------------------- validate applies every reader's rules


@pytest.mark.parametrize("where, bad", [("corpus", "d 1"), ("corpus", "d\u00a01"), ("corpus", " d1"),
                                        ("queries", "q\t1"), ("qrels", "d 2"), ("qrels", "")])
def test_an_id_a_trec_run_cannot_carry_is_refused_by_validate_and_every_reader(tmp_path, capsys, where, bad):
    """An id with a space passed validate, then a run written with it was refused at line 11,382."""
    from zsdr.data.formats import iter_qrels_tsv, iter_records

    from .test_reliability import error_lines, zsdr

    ds = make_dataset(tmp_path / "ds")
    if where == "qrels":
        path, line = ds / "qrels" / "test.tsv", 2
        path.write_text(QRELS.replace("q1\td1", f"q1\t{bad}"))
        read = lambda: list(iter_qrels_tsv(path))   # noqa: E731
    else:
        path, line = ds / f"{where}.jsonl", 1
        text = path.read_text()
        first = '"d1"' if where == "corpus" else '"q1"'
        path.write_text(text.replace(first, json.dumps(bad), 1))
        read = lambda: list(iter_records(path, where))   # noqa: E731
    with pytest.raises(DataError, match=f"^{path}:{line}: "):
        read()
    code, out, err = zsdr(capsys, "validate", ds)
    assert code == 1 and out == ""
    assert any(e.startswith(f"{path}:{line}: ") or e.startswith(f"zsdr validate: error: {path}:{line}: ")
               for e in error_lines(err)), err
    assert "whitespace" in err or "is empty" in err


def test_a_lone_surrogate_is_refused_naming_the_file_and_line(tmp_path, capsys):
    """`\\ud800` in a JSON line became "unexpected UnicodeEncodeError/TypeError" with no file named."""
    from .test_reliability import error_lines, the_error_line, zsdr

    ds = make_dataset(tmp_path / "ds")
    queries = ds / "queries.jsonl"
    queries.write_text(queries.read_text() + '{"_id": "q3", "text": "paired \\ud83d\\ude00, lone \\ud800"}\n')
    expected = (f"{queries}:3: \"text\" holds '\\ud800', half of a UTF-16 surrogate pair without its other half: not "
                "a character any UTF-8 file or model can take (fix: fix the escape (write the character itself, or "
                "both halves of the pair), or drop it)")
    code, _, err = zsdr(capsys, "validate", ds)
    assert code == 1 and expected in error_lines(err)[-1], err
    code, _, err = zsdr(capsys, "store", ds)
    assert code == 1 and the_error_line(err) == f"zsdr store: error: {expected}" and not (ds / "store").exists()
    queries.write_text(queries.read_text().replace(", lone \\ud800", ""))   # a pair is one character: fine
    assert validate_beir(ds).queries == 3


@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_a_file_present_plain_and_gzipped_is_refused_naming_both(tmp_path, capsys, name):
    from zsdr.data.formats import read_qrels

    from .test_reliability import the_error_line, zsdr

    ds = make_dataset(tmp_path / "ds")
    plain = ds / name
    with gzip.open(ds / f"{name}.gz", "wb") as fh:
        fh.write(plain.read_bytes())
    code, out, err = zsdr(capsys, "validate", ds)
    assert code == 1 and out == ""
    line = the_error_line(err)
    assert f"both {plain.name} and {plain.name}.gz are in {plain.parent}" in line and "fix: keep one of them" in line
    with pytest.raises(DataError, match="both"):
        read_qrels(ds, "test") if name.startswith("qrels") else read_corpus(ds) if name.startswith("corpus") \
            else read_queries(ds)
