"""Converters of raw downloads into the BEIR layout (:mod:`zsdr.data.convert`).

Hand-made fixtures in tests/fixtures/convert/<format>/ mimic each real format (a few lines each);
the real-data tests use ../shared/data (Vaswani, MS MARCO slices) and skip without it.
"""

import gzip
import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from zsdr.data import registry
from zsdr.data.convert import CONVERTERS
from zsdr.data.convert.beir import convert_beir
from zsdr.data.convert.cmedqa2 import convert_cmedqa2
from zsdr.data.convert.cpr import convert_cpr
from zsdr.data.convert.dureader import convert_dureader
from zsdr.data.convert.lotte import convert_lotte
from zsdr.data.convert.msmarco import convert_msmarco, convert_msmarco_triples
from zsdr.data.convert.oagqa import convert_oagqa
from zsdr.data.convert.trec import convert_trec, iter_trec_docs, read_topics
from zsdr.data.formats import iter_trec_qrels, read_corpus, read_qrels, read_queries, validate_beir
from zsdr.io import DataError

FIX = Path(__file__).resolve().parent / "fixtures" / "convert"


def md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def out(tmp_path) -> Path:
    return tmp_path / "out" / "ds"


def copy_fixture(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIX / name, tmp_path / "raw" / name))


def test_converters_cover_the_registry():
    assert set(CONVERTERS) == {"beir", "msmarco", "msmarco_triples", "trec", "lotte", "cpr", "cmedqa2", "dureader",
                               "oagqa"}
    for ds in registry.DATASETS:
        if ds.converter:
            assert ds.converter in CONVERTERS, ds.name


# ---------------------------------------------------------------------------------------------
# BEIR


def test_beir_copies_and_drops_extra_fields(out):
    counts = convert_beir(FIX / "beir", out, subdir="scifact")
    assert counts.as_dict() == {"docs": 3, "queries": 2, "qrels": {"test": 2, "train": 1},
                                "qrels_queries": {"test": 2, "train": 1}}
    assert all(set(d) == {"_id", "title", "text"} for d in lines(out / "corpus.jsonl"))
    assert all(set(q) == {"_id", "text"} for q in lines(out / "queries.jsonl"))
    assert read_corpus(out)["7912"]["title"] == ""
    assert read_qrels(out, "train") == {"3": {"7912": 1}}


def test_beir_nested_subdir(out):
    counts = convert_beir(FIX / "beir", out, subdir="cqadupstack/android")
    assert (counts.docs, counts.queries, counts.qrels) == (2, 1, {"test": 2})
    assert read_qrels(out, "test") == {"11546": {"51829": 1, "12345": 0}}


def test_beir_missing_subdir(out):
    with pytest.raises(DataError, match="BEIR dataset folder not found"):
        convert_beir(FIX / "beir", out, subdir="nfcorpus")
    assert not out.exists()


@pytest.mark.shared_data
def test_beir_real_scifact(shared_data, out):
    counts = convert_beir(shared_data / "beir", out, subdir="scifact")
    assert (counts.docs, counts.queries, counts.qrels) == (5183, 1109, {"test": 339, "train": 919})


# ---------------------------------------------------------------------------------------------
# MS MARCO


def test_msmarco(out):
    counts = convert_msmarco(FIX / "msmarco", out)
    assert counts.as_dict() == {"docs": 5, "queries": 5, "qrels": {"train": 3, "dev": 3},
                                "qrels_queries": {"train": 3, "dev": 2}}
    corpus = read_corpus(out)
    assert corpus["3"] == {"title": "", "text": "You don\u00e2\u0080\u0099t need to be a scientist to understand this."}
    queries = read_queries(out)
    assert queries["2"] == "Androgen receptor define" and queries["121352"] == "define extreme"
    assert read_qrels(out, "dev") == {"1048585": {"3": 1}, "2": {"0": 1, "1": 1}}  # blank-separated qrels read too


def test_msmarco_gzip_collection(tmp_path, out):
    raw = copy_fixture("msmarco", tmp_path)
    data = (raw / "collection.tsv").read_bytes()
    (raw / "collection.tsv").unlink()
    with gzip.open(raw / "collection.tsv.gz", "wb") as fh:
        fh.write(data)
    assert convert_msmarco(raw, out).docs == 5


def test_msmarco_triples(out):
    raw = FIX / "msmarco_triples"
    rows = [line.split("\t") for line in (raw / "triples.train.small.tsv").read_text(encoding="utf-8").splitlines()]
    counts = convert_msmarco_triples(raw, out)
    queries = list(dict.fromkeys(r[0] for r in rows))
    docs = {t for r in rows for t in r[1:]}
    assert counts.as_dict() == {"docs": len(docs), "queries": len(queries), "qrels": {"train": 3},
                                "qrels_queries": {"train": 3}}
    corpus = read_corpus(out)
    assert {f"d{md5(t)[:16]}" for t in docs} == set(corpus)
    assert all(corpus[f"d{md5(t)[:16]}"]["text"] == t for t in docs)  # byte for byte, mojibake kept
    assert any("\u00e2\u0080\u0099" in d["text"] for d in corpus.values())
    assert read_queries(out) == {f"q{md5(q)[:16]}": q for q in queries}
    negatives = lines(out / "negatives.jsonl")
    assert [n["qid"] for n in negatives] == [f"q{md5(q)[:16]}" for q in queries]
    first = negatives[0]
    q1_rows = [r for r in rows if r[0] == queries[0]]
    assert first["pos"] == [f"d{md5(q1_rows[0][1])[:16]}"]
    assert first["neg"] == {"triples": [f"d{md5(t)[:16]}" for t in dict.fromkeys(r[2] for r in q1_rows)]}
    assert len(first["neg"]["triples"]) == 2  # the repeated negative appears once


def test_msmarco_triples_limit(out):
    counts = convert_msmarco_triples(FIX / "msmarco_triples", out, limit=2)
    assert (counts.docs, counts.queries, counts.qrels) == (4, 2, {"train": 2})
    assert len(lines(out / "negatives.jsonl")) == 2


@pytest.mark.shared_data
def test_msmarco_triples_real_head100(shared_data, out):
    raw = shared_data / "msmarco-sample" / "splade-toy"
    name = "triples.train.small.head100.tsv"
    rows = [line.split("\t") for line in (raw / name).read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 100 and all(len(r) == 3 for r in rows)
    counts = convert_msmarco_triples(raw, out, triples=name)
    queries = set(r[0] for r in rows)
    docs = set(r[1] for r in rows) | set(r[2] for r in rows)
    pairs = set((r[0], r[1]) for r in rows)
    assert validate_beir(out).as_dict() == counts.as_dict()
    assert (counts.docs, counts.queries, counts.qrels["train"]) == (len(docs), len(queries), len(pairs))
    assert counts.queries <= 100
    corpus = read_corpus(out)
    assert any("\u00e2\u0080\u0099" in d["text"] for d in corpus.values())  # "donât" kept as is
    negatives = lines(out / "negatives.jsonl")
    assert len(negatives) == len(queries)
    assert sum(len(n["neg"]["triples"]) for n in negatives) == len(set((r[0], r[2]) for r in rows))


# ---------------------------------------------------------------------------------------------
# TREC


def test_trec_sgml_docs_folder_with_gzip():
    docs = {docno: (title, text) for _f, _l, docno, title, text in iter_trec_docs(FIX / "trec" / "docs")}
    assert list(docs) == ["FBIS3-1", "FBIS3-2", "LA010189-0001", "LA010189-0002"]  # fbis3.gz sorts first
    assert docs["LA010189-0001"] == ("HOW TO GET RID OF PESTS",
                                     "Termites and ants are the most common pests. Call an exterminator.")
    assert docs["LA010189-0002"] == ("", "No headline here; only text &amp; an entity.")
    assert docs["FBIS3-1"] == ("Article Type:FBIS Translated Text",
                               "Language: Chinese BEIJING, 1 Mar (XINHUA) -- organized crime.")
    assert docs["FBIS3-2"] == ("", "One-line document.")


def test_trec_topics_sgml_and_tsv():
    sgml = read_topics(FIX / "trec" / "topics.sgml")
    assert sgml == {"301": "International Organized Crime", "302": "Poliomyelitis and Post-Polio"}
    assert read_topics(FIX / "trec" / "topics.tsv") == sgml
    desc = read_topics(FIX / "trec" / "topics.sgml", field="desc")
    assert desc["301"] == "Identify organizations that participate in international criminal activity."
    both = read_topics(FIX / "trec" / "topics.sgml", field="title+desc")
    assert both["302"] == "Poliomyelitis and Post-Polio Is the disease of Poliomyelitis (polio) under control in the world?"
    assert read_topics(FIX / "trec" / "topics.sgml", field="narr")["301"].startswith("A relevant document must")


def test_trec_convert(out):
    counts = convert_trec(FIX / "trec", out, docs="docs", topics="topics.sgml", qrels="qrels", split="test")
    assert counts.as_dict() == {"docs": 4, "queries": 2, "qrels": {"test": 4}, "qrels_queries": {"test": 2}}
    assert read_qrels(out, "test")["302"] == {"LA010189-0002": 2, "FBIS3-2": 0}  # grade 0 kept
    assert read_corpus(out)["LA010189-0001"]["title"] == "HOW TO GET RID OF PESTS"


@pytest.mark.parametrize("text, line, message", [
    ("<DOC>\n<DOCNO>1</DOCNO>\nfine\n</DOC>\n<DOC>\nno id here\n</DOC>\n", 5, "without <DOCNO>"),
    ("<DOC>\n<DOCNO>1</DOCNO>\nnever closed\n", 1, "never closed"),
    ("<DOC>\n<DOCNO>1</DOCNO>\n<DOC>\n<DOCNO>2</DOCNO>\n</DOC>\n", 3, "opened before"),
])
def test_trec_bad_sgml(tmp_path, out, text, line, message):
    raw = copy_fixture("trec", tmp_path)
    (raw / "bad.trec").write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message) as info:
        convert_trec(raw, out, docs="bad.trec", topics="topics.tsv", qrels="qrels")
    assert f"bad.trec:{line}:" in str(info.value)
    assert not out.exists() and list(out.parent.iterdir()) == []


@pytest.mark.shared_data
def test_trec_vaswani_equals_shipped_beir(shared_data, out):
    vaswani = shared_data / "vaswani"
    counts = convert_trec(vaswani, out, docs="corpus/doc-text.trec", topics="query-text.trec", qrels="qrels")
    assert counts.as_dict() == {"docs": 11429, "queries": 93, "qrels": {"test": 2083},
                                "qrels_queries": {"test": 93}}
    shipped = vaswani / "beir-format"
    ours_corpus, shipped_corpus = read_corpus(out), read_corpus(shipped)
    assert list(ours_corpus) == list(shipped_corpus)  # same ids in the same order
    assert ours_corpus == shipped_corpus              # same titles and texts
    assert read_queries(out) == read_queries(shipped)
    assert read_qrels(out, "test") == read_qrels(shipped, "test")


@pytest.mark.shared_data
def test_anserini_topics_and_qrels_parse(shared_data):
    labels = shared_data / "msmarco-sample" / "eval-labels-only"
    dl19 = read_topics(labels / "topics.dl19-passage.txt")
    assert len(dl19) == 43 and dl19["156493"] == "do goldfish grow"
    rows = list(iter_trec_qrels(labels / "qrels.dl19-passage.txt"))
    assert len(rows) == 9260
    assert {qid for _, qid, _, _ in rows} == set(dl19)
    assert {grade for *_, grade in rows} == {0, 1, 2, 3}
    dev = read_topics(labels / "topics.msmarco-passage.dev-subset.txt")
    assert len(dev) == 6980 and dev["2"] == "Androgen receptor define"
    dev_rows = list(iter_trec_qrels(labels / "qrels.msmarco-passage.dev-subset.txt"))
    assert len(dev_rows) == 7437 and {qid for _, qid, _, _ in dev_rows} <= set(dev)


# ---------------------------------------------------------------------------------------------
# LoTTE, Multi-CPR, cMedQA2, DuReader, OAG-QA


def test_lotte(out):
    counts = convert_lotte(FIX / "lotte", out, topic="writing", split="test")
    assert counts.as_dict() == {"docs": 4, "queries": 5, "qrels": {"forum": 4, "search": 2},
                                "qrels_queries": {"forum": 3, "search": 2}}
    assert read_queries(out)["forum-2"] == "Comma before and?"
    assert read_qrels(out, "forum")["forum-1"] == {"3": 1, "1": 1}
    assert read_qrels(out, "search") == {"search-0": {"0": 1}, "search-1": {"1": 1}}


def test_lotte_missing_topic(out):
    with pytest.raises(DataError, match="LoTTE science/test not found"):
        convert_lotte(FIX / "lotte", out, topic="science", split="test")


def test_cpr_medical_corpus_parts(out):
    counts = convert_cpr(FIX / "cpr", out, domain="medical")
    assert counts.as_dict() == {"docs": 4, "queries": 3, "qrels": {"train": 2, "dev": 1},
                                "qrels_queries": {"train": 2, "dev": 1}}
    assert list(read_corpus(out)) == ["1", "2", "3", "4"]  # corpus_split_1, _2, _10 in numeric order
    assert read_corpus(out)["4"]["text"] == '"发烧"时可以物理降温'
    assert read_queries(out)["200000"] == "发烧怎么办"


def test_cpr_single_corpus_and_domain_folder_as_raw(out):
    counts = convert_cpr(FIX / "cpr" / "data" / "ecom", out, domain="ecom")
    assert (counts.docs, counts.queries, counts.qrels) == (2, 2, {"train": 1, "dev": 1})


def test_cpr_git_lfs_pointer_is_reported(tmp_path, out):
    raw = copy_fixture("cpr", tmp_path)
    (raw / "data/ecom/corpus.tsv").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n")
    with pytest.raises(DataError, match="Git LFS pointer") as info:
        convert_cpr(raw, out, domain="ecom")
    assert "corpus.tsv:1" in str(info.value) and not out.exists()


def test_cmedqa2_zipped_and_plain_files(out):
    counts = convert_cmedqa2(FIX / "cmedqa2", out)
    assert counts.as_dict() == {"docs": 5, "queries": 3, "qrels": {"train": 2, "dev": 1, "test": 1},
                                "qrels_queries": {"train": 1, "dev": 1, "test": 1}}
    corpus = read_corpus(out)
    assert corpus["2"]["text"] == "去医院检查一下, 验个血"  # content keeps its commas
    assert corpus["3"]["text"] == '可以吃，但是每天不超过一个，"蛋黄"少吃'  # csv quotes undone
    assert set(read_queries(out)) == {"45619783", "26571125", "71400000"}  # only judged questions
    assert read_qrels(out, "train") == {"45619783": {"1": 1, "2": 1}}
    assert read_qrels(out, "dev") == {"26571125": {"3": 1}}
    assert [p.name for p in out.parent.iterdir()] == ["ds"]  # the scratch folder is gone


def test_cmedqa2_error_inside_a_zip_names_the_member(tmp_path, out):
    raw = copy_fixture("cmedqa2", tmp_path)
    with zipfile.ZipFile(raw / "answer.zip", "w") as zf:
        zf.writestr("answer.csv", "ans_id,question_id,content\n1,45619783,fine\nbroken line without commas\n")
    with pytest.raises(DataError) as info:
        convert_cmedqa2(raw, out)
    assert "answer.zip!answer.csv:3:" in str(info.value)
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_dureader_follows_ddr(out):
    counts = convert_dureader(FIX / "dureader", out)
    assert counts.as_dict() == {"docs": 4, "queries": 4, "qrels": {"train": 3, "dev": 2},
                                "qrels_queries": {"train": 2, "dev": 2}}
    q1 = md5("微信分享链接打开app")
    p1 = "微信分享链接打开app - 知乎 iOS 9 之后 使用通用链接。"  # title + " " + most_related_para, newline blanked
    assert read_queries(out)[q1] == "微信分享链接打开app"
    assert read_corpus(out)[md5(p1)] == {"title": "", "text": p1}
    assert read_qrels(out, "train")[q1] == {md5(p1): 1}
    assert read_qrels(out, "dev")[q1] == {md5(p1): 1}
    q2 = md5("怎样去除甲醛")  # stripped, tab removed
    assert read_qrels(out, "train")[q2] == {md5("开窗通风。"): 1, md5("甲醛？ 活性炭吸附。"): 1}  # empty title: paragraph only
    assert md5("猪肉怎么做好吃") in read_queries(out)  # kept without positives, as DDR does


def test_dureader_options(tmp_path):
    selected = convert_dureader(FIX / "dureader", tmp_path / "a", positives="is_selected")
    assert (selected.docs, selected.qrels) == (4, {"train": 4, "dev": 1})
    every = convert_dureader(FIX / "dureader", tmp_path / "b", all_paragraphs=True)
    assert (every.docs, every.qrels) == (8, {"train": 3, "dev": 2})


def test_oagqa_one_topic(out):
    counts = convert_oagqa(FIX / "oagqa", out, topic="polynomial")
    assert counts.as_dict() == {"docs": 3, "queries": 3, "qrels": {"test": 2}, "qrels_queries": {"test": 2}}
    corpus = read_corpus(out)
    assert corpus["53e99785b7602d9701f3e2a0"] == {"title": "On the Zeros of Polynomials",
                                                  "text": 'An abstract with a "quoted" word\tand a tab.'}
    assert read_qrels(out, "test") == {"0": {"53e99784b7602d9701f3e15d": 1}, "1": {"53e99785b7602d9701f3e2a0": 1}}


def test_oagqa_contains_and_all_topics(tmp_path):
    loose = convert_oagqa(FIX / "oagqa", tmp_path / "a", topic="polynomial", match="contains")
    assert loose.qrels == {"test": 3}  # "On the zeros of polynomials: a survey" contains the answer title
    every = convert_oagqa(FIX / "oagqa", tmp_path / "b")
    assert (every.docs, every.queries, every.qrels) == (4, 4, {"test": 3})
    assert read_qrels(tmp_path / "b", "test")["geometry/0"] == {"geometry/53e99784b7602d9701f3e15d": 1}
    with pytest.raises(DataError, match="topic 'algebra' not found"):
        convert_oagqa(FIX / "oagqa", tmp_path / "c", topic="algebra")


# ---------------------------------------------------------------------------------------------
# Malformed lines: the error names FILE:LINE and nothing is left at `out`

BAD_LINES = [
    ("msmarco", "collection.tsv", 3, "2 no tab here", lambda raw, out: convert_msmarco(raw, out)),
    ("msmarco", "queries.train.tsv", 2, "634306", lambda raw, out: convert_msmarco(raw, out)),
    ("msmarco", "qrels.train.tsv", 2, "634306\t0\t1", lambda raw, out: convert_msmarco(raw, out)),
    ("msmarco_triples", "triples.train.small.tsv", 4, "only\ttwo", lambda raw, out: convert_msmarco_triples(raw, out)),
    ("trec", "topics.tsv", 2, "302 no tab", lambda raw, out: convert_trec(raw, out, "docs", "topics.tsv", "qrels")),
    ("trec", "qrels", 3, "302 0 LA010189-0002", lambda raw, out: convert_trec(raw, out, "docs", "topics.tsv", "qrels")),
    ("lotte", "lotte/writing/test/collection.tsv", 2, "1", lambda raw, out: convert_lotte(raw, out, "writing", "test")),
    ("lotte", "lotte/writing/test/questions.forum.tsv", 3, "\tempty id",
     lambda raw, out: convert_lotte(raw, out, "writing", "test")),
    ("lotte", "lotte/writing/test/qas.forum.jsonl", 2, '{"qid": 1, "answer_pids": [3,',
     lambda raw, out: convert_lotte(raw, out, "writing", "test")),
    ("cpr", "data/medical/corpus_split_2.tsv", 1, "3", lambda raw, out: convert_cpr(raw, out, "medical")),
    ("cpr", "data/medical/train.query.txt", 2, "2 高血压吃什么", lambda raw, out: convert_cpr(raw, out, "medical")),
    ("cpr", "data/medical/qrels.dev.tsv", 1, "200000\t0\t4", lambda raw, out: convert_cpr(raw, out, "medical")),
    ("cmedqa2", "dev_candidates.txt", 3, "26571125,5", lambda raw, out: convert_cmedqa2(raw, out)),
    ("dureader", "preprocessed/trainset/search.train.json", 2, '{"question": "怎样去除甲醛", "documents": [{"title": "甲醛',
     lambda raw, out: convert_dureader(raw, out)),
    ("dureader", "preprocessed/devset/zhidao.dev.json", 1, '{"question": "猪肉怎么做好吃", "documents": "不是列表"}',
     lambda raw, out: convert_dureader(raw, out)),
    ("cpr", "data/ecom/dev.query.txt", 1, "200001 华为手机壳", lambda raw, out: convert_cpr(raw, out, "ecom")),
    ("oagqa", "oagqa-topic-v2/polynomial-papers-10k.tsv", 3, "53e99785b7602d9701f3e2a0\tno title column",
     lambda raw, out: convert_oagqa(raw, out, topic="polynomial")),
    ("oagqa", "oagqa-topic-v2/polynomial-questions.tsv", 2, "Where?\tnot a list",
     lambda raw, out: convert_oagqa(raw, out, topic="polynomial")),
]


@pytest.mark.parametrize("fixture, rel, run", [
    ("cpr", "data/ecom/corpus.tsv", lambda raw, out: convert_cpr(raw, out, "ecom")),
    ("dureader", "preprocessed/trainset/search.train.json", lambda raw, out: convert_dureader(raw, out)),
], ids=["cpr", "dureader"])
def test_a_chinese_line_not_in_utf8_names_file_line_and_its_encoding(tmp_path, out, fixture, rel, run):
    """A Chinese file saved as GBK/GB18030 (not UTF-8): one line naming FILE:LINE and the iconv call that fixes it."""
    raw = copy_fixture(fixture, tmp_path)
    path = raw / rel
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].decode("utf-8").encode("gb18030")
    path.write_bytes(b"".join(lines))
    with pytest.raises(DataError) as info:
        run(raw, out)
    message = str(info.value)
    assert f"{path.name}:2:" in message and "iconv -f gb18030 -t utf-8" in message and "\n" not in message
    assert not out.exists()


@pytest.mark.parametrize("fixture, rel, line, bad, run", BAD_LINES,
                         ids=[f"{f}:{Path(r).name}" for f, r, *_ in BAD_LINES])
def test_malformed_line_names_file_and_line(tmp_path, out, fixture, rel, line, bad, run):
    raw = copy_fixture(fixture, tmp_path)
    path = raw / rel
    text = path.read_text(encoding="utf-8").splitlines()
    text[line - 1] = bad
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        run(raw, out)
    assert f"{path.name}:{line}:" in str(info.value)
    assert not out.exists()
    assert not out.parent.exists() or list(out.parent.iterdir()) == []


def test_triples_to_beir_reads_an_archive_and_marks_the_folder_done(tmp_path, out):
    import tarfile

    from zsdr.data.convert.msmarco import triples_to_beir

    archive = tmp_path / "triples.train.small.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(FIX / "msmarco_triples" / "triples.train.small.tsv", arcname="triples.train.small.tsv")
    counts = triples_to_beir(archive, out)
    plain = convert_msmarco_triples(FIX / "msmarco_triples", tmp_path / "plain")
    assert counts.as_dict() == plain.as_dict()
    assert (out / "negatives.jsonl").read_text() == (tmp_path / "plain" / "negatives.jsonl").read_text()
    assert json.loads((out / "dataset.json").read_text())["role"] == "training"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]     # the scratch folder is gone
    with pytest.raises(DataError, match="not found"):
        triples_to_beir(tmp_path / "missing.tsv", tmp_path / "x")
