"""Paper-table machinery: specs, published numbers, rendering, table 1 and the data tables."""

import csv
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from zsdr.io import DataError
from zsdr.tables import catalogue, data_tables, published_csv, spec as specs, spec_model
from zsdr.tables.cells import required_cells, required_statistics
from zsdr.tables.formatting import format_delta, format_value, parse_published
from zsdr.tables.render import render_table
from zsdr.tables.table1 import build_table1, write_table

# Every table of the five papers (TABLES inventory): (paper, table) -> kind.
EXPECTED = {
    ("berm", 1): "metric", ("berm", 2): "metric", ("berm", 3): "metric", ("berm", 4): "metric",
    ("berm", 5): "metric", ("berm", 6): "metric", ("berm", 7): "data", ("berm", 8): "data",
    ("ddr", 1): "data", ("ddr", 2): "metric", ("ddr", 3): "metric", ("ddr", 4): "metric", ("ddr", 5): "metric",
    ("ddr", 6): "metric",
    ("modir", 1): "metric", ("modir", 2): "metric", ("modir", 3): "analysis", ("modir", 4): "analysis",
    ("modir", 5): "static",
    ("cocodr", 1): "metric", ("cocodr", 2): "metric", ("cocodr", 3): "metric", ("cocodr", 4): "analysis",
    ("cocodr", 5): "data", ("cocodr", 6): "data", ("cocodr", 7): "metric",
    ("rmsc", 1): "metric", ("rmsc", 2): "metric",
}
METRICS = ("ndcg@10", "recall@100", "recall@1000", "mrr@10", "hole@10")


# ---------------------------------------------------------------------------------------------
# Synthetic inputs


def write_metrics(root, dataset, system, scores: dict[str, float], metrics=METRICS):
    """A metrics file whose every metric has the per-query ``scores`` (aggregate = their mean)."""
    path = root / "metrics" / dataset / f"{system}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    per_query = {q: {m: v for m in metrics} for q, v in scores.items()}
    mean = sum(scores.values()) / len(scores)
    path.write_text(json.dumps({"aggregate": {m: mean for m in metrics}, "per_query": per_query,
                                "queries": len(scores)}))
    return path


def scores(base: float, n: int = 30, spread: float = 0.05) -> dict[str, float]:
    """Deterministic per-query scores with mean ``base``."""
    return {f"q{i}": base + spread * ((i % 5) - 2) / 2 for i in range(n)}


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def cell(frame: pd.DataFrame, dataset: str, entry: str, metric: str | None = None) -> dict:
    sel = (frame["dataset"] == dataset) & (frame["entry"] == entry)
    if metric is not None:
        sel &= frame["metric"] == metric
    rows = frame[sel].to_dict("records")
    assert len(rows) == 1, (dataset, entry, metric, len(rows))
    return rows[0]


# ---------------------------------------------------------------------------------------------
# Specs and published numbers


def test_every_paper_table_has_a_spec_that_loads():
    loaded = specs.all_specs()
    assert {pt: s.kind for pt, s in loaded.items()} == EXPECTED
    for s in loaded.values():
        assert s.title and s.caption
        if s.kind in ("static", "analysis"):
            assert s.why


def test_every_published_csv_parses_and_matches_its_spec():
    used = set()
    for s in specs.all_specs().values():
        if s.published is None or s.published.file is None:
            assert s.paper == "berm" or s.kind == "analysis"
            continue
        used.add(s.published.file)
        if s.published.marker_file:
            used.add(s.published.marker_file)
        table = published_csv.published_table(s)
        assert table.order, s.name
        if s.kind in ("metric", "data"):
            published_csv.check_published_shape(s)  # every CSV row and column is named by exactly one entry
            n_rows = sum(len(s.metrics) or 1 if e.kind != "info" else 1
                         for e in (s.datasets if s.rows_are_datasets else s.systems)
                         if published_csv.published_row_ref(s, e, s.metrics[0][1] if s.metrics and e.kind != "info" else None))
            assert n_rows == len(table.order), s.name
    on_disk = {p.name for p in published_csv.PUBLISHED_DIR.glob("*.csv")}
    assert on_disk == used
    assert not any(n.startswith("berm_") for n in on_disk)  # no BERM number was recovered
    assert (published_csv.PUBLISHED_DIR / "README.md").is_file()


def test_ddr_table2_imp_is_ddr_over_dr_minus_one():
    for row in published_csv.read_published("ddr_table2.csv"):
        for regime in ("CL", "KD"):
            ratio = float(row[f"{regime}_DDR"]) / float(row[f"{regime}_DR"]) - 1
            assert abs(ratio - parse_published(row[f"{regime}_imp"])) <= 0.006, (row["dataset"], row["metric"])
            assert row[f"{regime}_sig"] in ("", "*", "**")


def test_published_averages_are_the_mean_of_their_cells():
    """Every printed average (with all members printed) checks to 0.0015, but the known slip."""
    known_slips = {("cocodr_table3.csv", ("BM25",), "Avg")}
    checked = 0
    for s in specs.all_specs().values():
        if s.kind != "metric" or s.published is None or s.published.file is None:
            continue
        table = published_csv.published_table(s)
        averages = [e for e in s.datasets if e.kind == "average"]
        for avg in averages:
            idx = s.datasets.index(avg)
            members = [s.datasets[i] for i in range(idx) if s.datasets[i].kind in ("dataset", "group")]
            if avg.members:
                members = [e for e in s.datasets if e.key in avg.members]
            for metric_label in [m for _, m in s.metrics] or [None]:
                for entry in s.systems:
                    if s.rows_are_datasets:
                        col = published_csv.published_column_ref(entry)
                        refs = [published_csv.published_row_ref(s, e, metric_label) for e in [*members, avg]]
                        vals = [table.rows[r][col] for r in refs] if col else []
                    else:
                        row = published_csv.published_row_ref(s, entry)
                        vals = [table.rows[row][published_csv.published_column_ref(e)] for e in [*members, avg]]
                    if not vals or not all(vals) or entry.kind != "system":
                        continue
                    *cells, printed = map(parse_published, vals)
                    slip = (s.published.file, (table.rows[row]["model"],) if not s.rows_are_datasets else None,
                            avg.label) in known_slips
                    assert slip or abs(sum(cells) / len(cells) - printed) <= 0.0015, (s.name, entry.key, avg.key)
                    checked += 1
    assert checked > 50


def test_systems_file_is_consistent():
    systems = catalogue.load_systems()
    for sid in ("bm25-flat", "bm25-multifield", "bm25-rm3"):
        assert systems[sid].provenance == "T" and systems[sid].stage == "bm25"
    assert systems["ance-msmarco"].hf == "castorini/ance-msmarco-passage"
    assert (systems["ance-msmarco"].pooling, systems["ance-msmarco"].similarity) == ("cls_linear_ln", "dot")
    assert (systems["tas-b"].pooling, systems["contriever-msmarco"].pooling) == ("cls", "mean")
    assert systems["cocodr-base-msmarco"].hf == "OpenMatch/cocodr-base-msmarco"
    assert catalogue.unavailable_reason("cpt-l") == "reported only (closed API)"
    assert catalogue.unavailable_reason("ddr-contrast") == "not in this run's config (systems.ddr-contrast)"
    assert catalogue.unavailable_reason("rmsc-cd") == "not in this run's config (systems.rmsc-cd)"


def test_a_system_of_a_stage_not_built_says_so(monkeypatch):
    stages = {**catalogue.load_stages(), "rmsc": catalogue.Stage("rmsc", "RMSC", False)}
    monkeypatch.setattr(catalogue, "load_stages", lambda: stages)
    assert catalogue.unavailable_reason("rmsc-cd") == "needs the RMSC stage (not built yet)"


def test_bad_spec_errors_name_the_file_and_the_key(tmp_path):
    bad = tmp_path / "ddr_table9.yaml"
    base = ("paper: ddr\ntable: 9\nkind: metric\ntitle: t\ncaption: c\nmetric: ndcg@10\n"
            "datasets:\n  - {id: nfcorpus}\nsystems:\n")
    bad.write_text(base + "  - {system: no-such-system}\n")
    with pytest.raises(DataError) as err:
        specs.parse_spec(bad)
    assert "ddr_table9.yaml" in str(err.value) and "systems[0].system" in str(err.value)
    bad.write_text(base.replace("nfcorpus", "nfcorpos") + "  - {system: bm25-flat}\n")
    with pytest.raises(DataError, match=r"datasets\[0\]\.id"):
        specs.parse_spec(bad)
    bad.write_text(base + "  - {system: bm25-flat}\nemphasis: {per: column}\n")
    with pytest.raises(DataError, match="emphasis.per"):
        specs.parse_spec(bad)
    bad.write_text(base + "  - {system: bm25-flat, colour: red}\n")
    with pytest.raises(DataError, match="unknown key"):
        specs.parse_spec(bad)
    bad.write_text(base + "  - {system: bm25-flat}\npublished: {file: ddr_table6.csv, key: [dataset]}\n")
    with pytest.raises(DataError, match="published"):
        specs.parse_spec(bad)


def test_formatting():
    assert format_value(0.60349) == "0.603"
    assert format_value(0.111, "pct1") == "11.1%"
    assert format_value(0.053, "+pct1") == "+5.3%"
    assert format_value(-0.0001, "+d3") == "+0.000"
    assert format_value(171332.0, "int") == "171332"
    assert format_delta(-0.013, "pct1") == "-1.3 pp"
    assert parse_published("+5.3%") == pytest.approx(0.053)
    assert parse_published("−0.002") == pytest.approx(-0.002)
    assert parse_published("66M*18") is None and parse_published("") is None


# ---------------------------------------------------------------------------------------------
# Metric tables


def test_required_cells():
    ddr2 = specs.load_spec("ddr", 2)
    cells = required_cells(ddr2, {"bm25-flat", "bm25-rm3", "tas-b"})
    assert len(cells) == 20 and ("cpr-ecom", "bm25-rm3") in cells and cells == sorted(cells)
    # an alternative stands in for a column whose own system is not produced
    coco7 = required_cells(specs.load_spec("cocodr", 7), {"cocodr-base-msmarco"})
    assert ("scifact", "cocodr-base-msmarco") in coco7 and ("cqadupstack-wordpress", "cocodr-base-msmarco") in coco7
    # reported-only systems are never required; groups expand to their forums
    modir1 = required_cells(specs.load_spec("modir", 1), {"bm25-multifield", "genq"})
    assert {s for _, s in modir1} == {"bm25-multifield"} and len(modir1) == 14 + 12
    # averages over datasets that are not displayed (BERM Table 4)
    berm4 = required_cells(specs.load_spec("berm", 4), {"dpr", "kd"})
    assert len(berm4) == 2 * (13 + 12)
    # mini scale and the datasets of the run
    mini = required_cells(ddr2, {"bm25-flat"}, datasets_override=["mini-alpha", "mini-beta"])
    assert mini == [("mini-alpha", "bm25-flat"), ("mini-beta", "bm25-flat")]
    assert required_cells(ddr2, {"bm25-flat"}, available_datasets={"cpr-ecom"}) == [("cpr-ecom", "bm25-flat")]
    # COCO-DR Table 6 needs metrics for its differences, and shift files
    assert required_statistics(specs.load_spec("cocodr", 6))["shift"][:2] == ["arguana", "bioasq"]
    assert required_cells(specs.load_spec("modir", 5), {"bm25-flat"}) == []
    # COCO-DR Table 1's DPR is the in-batch DPR (COCO-DR App. B.1); BERM's and MoDIR's DPR is the pairwise one
    coco1 = {s for _, s in required_cells(specs.load_spec("cocodr", 1), {"dpr", "dpr-inbatch"})}
    assert coco1 == {"dpr-inbatch"}
    assert {s for _, s in required_cells(specs.load_spec("modir", 1), {"dpr", "dpr-inbatch"})} == {"dpr"}


def test_render_ddr_table2(tmp_path):
    spec = specs.load_spec("ddr", 2)
    produced = {"bm25-flat", "bm25-rm3", "ddr-dr-contrast", "ddr-contrast"}
    files = {}
    for d in ("trec-covid-beir", "cpr-ecom"):
        files[(d, "bm25-flat")] = write_metrics(tmp_path, d, "bm25-flat", scores(0.30))
        files[(d, "bm25-rm3")] = write_metrics(tmp_path, d, "bm25-rm3", scores(0.28))
        files[(d, "ddr-dr-contrast")] = write_metrics(tmp_path, d, "ddr-dr-contrast", scores(0.40))
        files[(d, "ddr-contrast")] = write_metrics(tmp_path, d, "ddr-contrast",
                                                   {q: v + 0.02 + 0.001 * (i % 3) for i, (q, v) in
                                                    enumerate(scores(0.40).items())} if d == "cpr-ecom"
                                                   else scores(0.40))
    assert set(files) == set(required_cells(spec, produced, available_datasets={"trec-covid-beir", "cpr-ecom"}))
    out_csv, out_md = tmp_path / "results" / "ddr" / "table2.csv", tmp_path / "results" / "ddr" / "table2.md"
    frame = render_table(spec, files, out_csv, out_md, produced_systems=produced,
                         available_datasets={"trec-covid-beir", "cpr-ecom"})
    assert len(frame) == 10 * 3 * 8 and read_rows(out_csv)[0].keys() == set(frame.columns)
    c = cell(frame, "cpr-ecom", "cl-ddr", "ndcg@10")
    assert c["reproduced"] == pytest.approx(0.421, abs=1e-6) and c["emphasis"] == "bold"
    assert c["published"] == "0.313" and c["delta"] == pytest.approx(0.421 - 0.313, abs=1e-6)
    assert c["provenance"] == "T" and c["system"] == "ddr-contrast"
    imp = cell(frame, "cpr-ecom", "cl-imp", "recall@100")
    assert imp["reproduced"] == pytest.approx(0.421 / 0.4 - 1, abs=1e-6)
    assert imp["marker"] == "**" and imp["display"] == "5.2%"
    assert imp["published"] == "12.8%" and imp["published_marker"] == "**"
    assert imp["delta"] == pytest.approx(0.421 / 0.4 - 1 - 0.128, abs=1e-6)
    assert "cl-ddr vs cl-dr" in imp["p_values"]
    # identical scores: no marker; second best is underlined
    assert cell(frame, "trec-covid-beir", "cl-imp", "ndcg@10")["marker"] == ""
    assert cell(frame, "cpr-ecom", "cl-dr", "ndcg@10")["emphasis"] == "underline"
    assert cell(frame, "cpr-ecom", "bm25", "ndcg@10")["emphasis"] == ""
    # cells the pipeline cannot produce say why
    kd = cell(frame, "cpr-ecom", "kd-ddr", "ndcg@10")
    assert pd.isna(kd["reproduced"]) or kd["reproduced"] == ""
    assert kd["note"] == "not in this run's config (systems.ddr-distill)" and kd["published"] == "0.318"
    lotte = cell(frame, "lotte-writing-test", "bm25", "recall@100")
    assert lotte["note"] == "dataset lotte-writing-test not in this run"
    md = out_md.read_text()
    assert "| Chinese | CPR-Ecom | NDCG@10 |".replace(" ", "") in md.replace(" ", "")
    assert "**0.421**" in md and "<u>0.400</u>" in md and "5.2%\\*\\*" in md and "12.8%\\*\\*" in md
    assert "*not in this run's config (systems.ddr-distill)*" in md and "+0.108" in md
    assert "two-tailed paired t-test" in md
    render_table(spec, files, tmp_path / "again.csv", tmp_path / "again.md", produced_systems=produced,
                 available_datasets={"trec-covid-beir", "cpr-ecom"})
    assert out_csv.read_bytes() == (tmp_path / "again.csv").read_bytes()
    assert out_md.read_bytes() == (tmp_path / "again.md").read_bytes()


def test_missing_metrics_file_of_a_produced_system_is_an_error(tmp_path):
    spec = specs.load_spec("ddr", 6)
    with pytest.raises(DataError, match="no metrics file"):
        render_table(spec, {}, tmp_path / "t.csv", tmp_path / "t.md", produced_systems={"ddr-contrast"})
    assert not (tmp_path / "t.csv").exists()


def test_groups_averages_and_pooled_significance(tmp_path):
    """RMSC Table 1: average rows over topics with pooled queries; MoDIR Table 1: CQADupStack, Hole@10."""
    spec = specs.load_spec("rmsc", 1)
    produced = {"bm25-flat", "contriever-msmarco", "cocodr-rn", "rmsc-co"}
    files = {}
    topics = ["lotte-writing-test", "lotte-lifestyle-test", "lotte-recreation-test", "lotte-science-test",
              "lotte-technology-test"]
    for k, d in enumerate(topics):
        files[(d, "bm25-flat")] = write_metrics(tmp_path, d, "bm25-flat", scores(0.2 + 0.01 * k))
        files[(d, "contriever-msmarco")] = write_metrics(tmp_path, d, "contriever-msmarco", scores(0.3))
        files[(d, "cocodr-rn")] = write_metrics(tmp_path, d, "cocodr-rn", scores(0.3, spread=0.04))
        files[(d, "rmsc-co")] = write_metrics(tmp_path, d, "rmsc-co", {q: v + 0.03 + 0.002 * (i % 4) for i, (q, v)
                                                                       in enumerate(scores(0.3).items())})
    frame = render_table(spec, files, tmp_path / "t.csv", tmp_path / "t.md", produced_systems=produced)
    avg = cell(frame, "avg", "bm25", "ndcg@10")
    assert avg["reproduced"] == pytest.approx(0.22, abs=1e-9)
    assert avg["published"] == "0.258" and avg["delta"] == pytest.approx(0.22 - 0.258, abs=1e-6)
    co = cell(frame, "avg", "rmsc-co", "recall@1000")
    assert co["marker"] == "‡‡" and co["published"] == "0.828" and co["published_marker"] == "‡‡"
    assert co["emphasis"] == "bold"
    assert cell(frame, "avg", "rmsc-cd", "ndcg@10")["note"] == "not in this run's config (systems.rmsc-cd)"

    spec = specs.load_spec("modir", 1)
    files = {}
    for k, forum in enumerate(spec_model.CQADUPSTACK_FORUMS):
        d = f"cqadupstack-{forum}"
        files[(d, "bm25-multifield")] = write_metrics(tmp_path, d, "bm25-multifield", scores(0.1 + 0.01 * k))
        files[(d, "ance-msmarco")] = write_metrics(tmp_path, d, "ance-msmarco", scores(0.2))
    frame = render_table(spec, files, tmp_path / "m.csv", tmp_path / "m.md",
                         produced_systems={"bm25-multifield", "ance-msmarco"},
                         available_datasets={f"cqadupstack-{f}" for f in spec_model.CQADUPSTACK_FORUMS})
    cqa = cell(frame, "cqadupstack", "bm25")
    assert cqa["reproduced"] == pytest.approx(0.155, abs=1e-9) and cqa["metric"] == "ndcg@10"
    hole = cell(frame, "cqadupstack", "hole-bm25")
    assert hole["metric"] == "hole@10" and hole["display"] == "15.5%" and hole["published"] == "94.8%"
    assert "-79.3 pp" in (tmp_path / "m.md").read_text()
    assert cell(frame, "cqadupstack", "rel-ance")["note"] == "not in this run's config (systems.ance-modir)"


def test_transposed_table_alternatives_and_untested_comparisons(tmp_path):
    spec = specs.load_spec("cocodr", 3)
    files = {}
    for d in ("fiqa", "scifact", "trec-covid-beir", "robust04", *spec_model.BUILTIN_GROUPS["cqadupstack"]):
        files[(d, "cocodr-base-msmarco")] = write_metrics(tmp_path, d, "cocodr-base-msmarco", scores(0.4))
    frame = render_table(spec, files, tmp_path / "t.csv", tmp_path / "t.md")
    base = cell(frame, "avg", "cocodr-base")
    assert base["system"] == "cocodr-base-msmarco" and base["provenance"] == "L"
    assert base["reproduced"] == pytest.approx(0.4) and base["published"] == "0.527"
    assert cell(frame, "fiqa", "gpl-tsdae")["note"] == "reported only (GPL paper)"
    md = (tmp_path / "t.md").read_text()
    assert "| Our Method | COCO-DR Base | L |".replace(" ", "") in md.replace(" ", "")
    assert "comparisons with GPL w/ TSDAE not tested: reported only (GPL paper)" in md


def test_mini_scale_override(tmp_path):
    spec = specs.load_spec("rmsc", 2)
    files = {(d, s): write_metrics(tmp_path, d, s, scores(v))
             for d in ("mini-alpha", "mini-beta") for s, v in (("bm25-multifield", 0.3), ("cocodr-rn", 0.5))}
    produced = {"bm25-multifield", "cocodr-rn"}
    assert sorted(files) == required_cells(spec, produced, ["mini-alpha", "mini-beta"])
    frame = render_table(spec, files, tmp_path / "t.csv", tmp_path / "t.md", scale="mini",
                         datasets_override=["mini-alpha", "mini-beta"], produced_systems=produced)
    assert list(dict.fromkeys(frame["dataset"])) == ["mini-alpha", "mini-beta", "avg"]
    assert cell(frame, "avg", "coco")["reproduced"] == pytest.approx(0.5)
    assert set(frame["published"]) == {""} or frame["published"].isna().all()
    assert "no published counterpart at mini scale" in cell(frame, "mini-alpha", "bm25")["note"]
    md = (tmp_path / "t.md").read_text()
    assert "no published counterpart at mini scale" in md and "| mini-alpha" in md and "| TREC-C" not in md


def test_holm_and_fisher_overrides(tmp_path):
    spec = specs.load_spec("ddr", 2)
    produced = {"ddr-dr-contrast", "ddr-contrast"}
    files = {("cpr-ecom", "ddr-dr-contrast"): write_metrics(tmp_path, "cpr-ecom", "ddr-dr-contrast", scores(0.4)),
             ("cpr-ecom", "ddr-contrast"): write_metrics(tmp_path, "cpr-ecom", "ddr-contrast",
                                                         {q: v + 0.01 * (i % 3) for i, (q, v)
                                                          in enumerate(scores(0.4).items())})}
    kw = dict(produced_systems=produced, available_datasets={"cpr-ecom"})
    plain = render_table(spec, files, tmp_path / "a.csv", tmp_path / "a.md", **kw)
    holm = render_table(spec, files, tmp_path / "b.csv", tmp_path / "b.md", significance={"holm": True}, **kw)
    p_plain = float(cell(plain, "cpr-ecom", "cl-imp", "ndcg@10")["p_values"].split(": ")[1])
    p_holm = float(cell(holm, "cpr-ecom", "cl-imp", "ndcg@10")["p_values"].split(": ")[1])
    assert p_holm == pytest.approx(min(1.0, 3 * p_plain), rel=1e-3)
    assert "Holm-corrected" in (tmp_path / "b.md").read_text()
    fisher = render_table(spec, files, tmp_path / "c.csv", tmp_path / "c.md",
                          significance={"test": "fisher", "trials": 500}, **kw)
    assert cell(fisher, "cpr-ecom", "cl-imp", "ndcg@10")["marker"] == "**"
    assert "Fisher randomization" in (tmp_path / "c.md").read_text()


def test_static_and_analysis_tables(tmp_path):
    frame = render_table(specs.load_spec("modir", 5), {}, tmp_path / "t.csv", tmp_path / "t.md")
    assert list(frame.columns) == ["group", "hyperparameter", "value"] and len(frame) == 8
    md = (tmp_path / "t.md").read_text()
    assert "Not regenerated" in md and "Momentum step n" in md
    render_table(specs.load_spec("modir", 3), {}, tmp_path / "b.csv", tmp_path / "b.md")
    assert "Not regenerated (analysis of the modir stage)" in (tmp_path / "b.md").read_text()


# ---------------------------------------------------------------------------------------------
# Data tables


def stats(docs, doc_words, queries, query_words, rel=1.0):
    return {"docs": docs, "doc_avg_words": doc_words, "queries": queries, "query_avg_words": query_words,
            "qrels": int(queries * rel), "rel_per_query": rel}


def test_ddr_table1_from_statistics_files(tmp_path):
    paths = []
    for d in ("trec-covid-beir", "cpr-ecom"):
        path = tmp_path / "stats" / f"{d}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(stats(171332 if d == "trec-covid-beir" else 1000, 160.6, 50, 10.4)))
        paths.append(path)
    frame = data_tables.ddr_table1(paths, tmp_path / "t.csv", tmp_path / "t.md",
                                   available_datasets={"trec-covid-beir", "cpr-ecom"})
    docs = cell(frame, "trec-covid-beir", "docs")
    assert docs["display"] == "171332" and docs["published"] == "171332" and docs["delta"] == 0
    words = cell(frame, "trec-covid-beir", "doc_avg_words")
    assert words["display"] == "161" and words["published"] == "161"
    assert cell(frame, "trec-covid-beir", "query_avg_words")["published"] == ""  # lost in our copy
    assert cell(frame, "cpr-ecom", "queries")["published"] == "1000"
    md = (tmp_path / "t.md").read_text()
    assert "Document: #Num" in md and "| en | TREC-Covid |".replace(" ", "") in md.replace(" ", "")


def test_cocodr_table5_splits_and_groups(tmp_path):
    forums = spec_model.BUILTIN_GROUPS["cqadupstack"]
    stat_in = {f: {"test": stats(100 * (i + 1), 100.0 + i, 10, 8.0)} for i, f in enumerate(forums)}
    stat_in["msmarco"] = {"train": stats(8841823, 56.0, 502939, 6.0, rel=1.06), "dev": stats(8841823, 56.0, 6980, 5.9)}
    frame = data_tables.cocodr_table5(stat_in, tmp_path / "t.csv", tmp_path / "t.md", splits={"msmarco": "dev"},
                                      available_datasets=set(stat_in))
    assert cell(frame, "msmarco", "queries")["reproduced"] == 6980 and cell(frame, "msmarco", "queries")["delta"] == 0
    assert cell(frame, "msmarco", "qrels-train")["reproduced"] == int(502939 * 1.06)
    assert cell(frame, "msmarco", "queries-dev")["reproduced"] == 6980
    cqa = cell(frame, "cqadupstack", "docs")
    assert cqa["reproduced"] == sum(100 * (i + 1) for i in range(12))
    weighted = sum(100 * (i + 1) * (100.0 + i) for i in range(12)) / cqa["reproduced"]
    assert cell(frame, "cqadupstack", "doc_avg_words")["reproduced"] == pytest.approx(weighted, abs=1e-6)
    assert cell(frame, "cqadupstack", "qrels-train")["note"] == "no train split"
    assert cell(frame, "nq", "docs")["note"] == "dataset nq not in this run"


NOT_CONFIGURED = "not in this run's config (systems.cocondenser-base-ance)"


def test_cocodr_table6_shift_and_differences(tmp_path):
    shift = {"scifact": {"query_jaccard": 0.18094, "doc_jaccard": 0.25}}
    files = {("scifact", "ance-msmarco"): write_metrics(tmp_path, "scifact", "ance-msmarco", scores(0.50)),
             ("scifact", "bm25-multifield"): write_metrics(tmp_path, "scifact", "bm25-multifield", scores(0.65))}
    frame = data_tables.cocodr_table6(shift, tmp_path / "t.csv", tmp_path / "t.md", metric_files=files,
                                      available_datasets={"scifact"})
    q = cell(frame, "scifact", "query_jaccard")
    assert q["display"] == "0.1809" and q["published"] == "0.1809" and q["delta"] == pytest.approx(0.00004, abs=1e-6)
    gap = cell(frame, "scifact", "ance-bert-gap")
    assert gap["reproduced"] == pytest.approx(-0.15) and gap["display"] == "-0.150" and gap["published"] == "-0.158"
    # the COCO-DR stage is built; this config trains no coCondenser + ANCE
    assert cell(frame, "scifact", "ance-cocondenser-gap")["note"] == NOT_CONFIGURED
    needs = data_tables.required_inputs(specs.load_spec("cocodr", 6), {"ance-msmarco", "bm25-multifield"},
                                        available_datasets={"scifact"})
    assert needs == {"stats": [], "shift": ["scifact"],
                     "metrics": [("scifact", "ance-msmarco"), ("scifact", "bm25-multifield")]}


def test_bad_statistics_file_is_a_data_error(tmp_path):
    path = tmp_path / "scifact.json"
    path.write_text(json.dumps({"docs": 3}))
    with pytest.raises(DataError, match="lacks"):
        data_tables.render_data_table(specs.load_spec("berm", 7), tmp_path / "t.csv", tmp_path / "t.md",
                                      stats=[path], available_datasets={"scifact"})


# ---------------------------------------------------------------------------------------------
# Table 1


def table1_case(tmp_path, systems=("bm25-flat", "bm25-rm3", "tiny", "same", "weak")):
    """Metrics of a small table 1: ``tiny`` better than the strongest baseline (bm25-rm3), ``weak`` and
    ``bm25-flat`` worse, ``same`` as good; every system's per-query scores vary, so the tests are not degenerate."""
    datasets = ["src", "t1", "t2"]
    base = {"bm25-flat": 0.30, "bm25-rm3": 0.33, "tiny": 0.40, "same": 0.33, "weak": 0.20}
    files = []
    for d in datasets:
        for s in systems:
            per = scores(base[s])
            if s in ("tiny", "weak", "bm25-flat"):
                per = {q: x + 0.01 * (i % 3) for i, (q, x) in enumerate(per.items())}
            files.append(write_metrics(tmp_path, d, s, per))
    labels = {"bm25-flat": "BM25", "bm25-rm3": "BM25+RM3", "tiny": "a tiny model", "same": "as good as RM3",
              "weak": "a weak model"}
    return files, {s: labels[s] for s in systems}, datasets


def test_table1_significance_both_ways_against_the_strongest_baseline(tmp_path):
    files, systems, datasets = table1_case(tmp_path)
    papers = {"tiny": "berm", "weak": "rmsc"}
    df = build_table1(files, systems, datasets, "src", "ndcg@10", baselines=["bm25-flat", "bm25-rm3"], papers=papers)
    assert list(df.columns) == ["system", "paper", "description", "role", "src", "t1", "t2", "target_mean",
                                "t1_p", "t1_vs_baseline", "t2_p", "t2_vs_baseline"]
    assert df.attrs["reference"] == "bm25-rm3"
    row = df.set_index("system")
    assert row.loc["tiny", "t1_vs_baseline"] == "better" and row.loc["tiny", "t1_p"] < 0.01
    assert row.loc["weak", "t1_vs_baseline"] == "worse" and row.loc["weak", "t1_p"] < 0.01
    assert row.loc["bm25-flat", "t2_vs_baseline"] == "worse"
    assert row.loc["same", "t1_vs_baseline"] == "" and row.loc["same", "t1_p"] == 1.0
    assert row.loc["bm25-rm3", "t1_vs_baseline"] == "" and math.isnan(row.loc["bm25-rm3", "t1_p"])
    assert list(row["paper"]) == ["baselines", "baselines", "berm", "baselines", "rmsc"]
    assert row.loc["bm25-rm3", "role"] == "reference" and row.loc["bm25-flat", "role"] == "baseline"
    assert row.loc["tiny", "role"] == "system"
    assert row.loc["tiny", "target_mean"] == pytest.approx(0.41, abs=1e-4)
    write_table(df, tmp_path / "table1.csv", tmp_path / "table1.md", "Table 1")
    md = (tmp_path / "table1.md").read_text()
    assert "**0.4100**‡" in md and "0.2100▼" in md and "| 0.3300 " in md.split("| same")[1].split("\n")[0]
    assert "t1 (target)" in md and "target mean" in md and "| BERM " in md
    assert "strongest baseline, bm25-rm3" in md and "† p < 0.05, ‡ p < 0.01 better" in md
    assert "▽ p < 0.05, ▼ p < 0.01 worse" in md
    assert md.rstrip().endswith("are spelled out in docs/glossary.md of the zsdr repository.")   # CD / CO, iDRO, ...
    rows = {r["system"]: r for r in read_rows(tmp_path / "table1.csv")}
    assert float(rows["bm25-flat"]["t1"]) == pytest.approx(0.31)
    assert rows["weak"]["t1_vs_baseline"] == "worse" and rows["tiny"]["t2_vs_baseline"] == "better"
    assert rows["same"]["t1_p"] == "1.00e+00" and rows["bm25-rm3"]["t1_p"] == ""
    assert re.fullmatch(r"\d\.\d\de-\d+", rows["weak"]["t1_p"]) and float(rows["weak"]["t1_p"]) > 0
    with pytest.raises(DataError, match="baseline"):
        build_table1(files, systems, datasets, "src", "ndcg@10", baselines=["bm25-multifield"])
    with pytest.raises(DataError, match="unknown paper"):
        build_table1(files, systems, datasets, "src", "ndcg@10", papers={"tiny": "bert"})
    plain = build_table1(files, list(systems), datasets, "src", "ndcg@10")
    assert set(plain["role"]) == {"system"} and plain.attrs["reference"] is None
    assert not any(c.endswith(("_p", "_vs_baseline")) for c in plain.columns)
    assert not math.isnan(plain["target_mean"].iloc[0])


def test_table1_p_values_in_scientific_notation_with_three_significant_digits():
    from zsdr.tables.table1 import direction, marker, p_text

    assert p_text(2.5e-26) == "2.50e-26" and p_text(0.000549) == "5.49e-04" and p_text(1.0) == "1.00e+00"
    assert p_text(1.23456e-300) == "1.23e-300" and p_text(None) == "" and p_text(float("nan")) == ""
    assert direction(0.049, True) == "better" and direction(0.049, False) == "worse"
    assert direction(0.05, False) == "" and direction(1e-9, None) == "" and direction(None, True) == ""
    assert marker(0.001, "better") == "‡" and marker(0.03, "better") == "†"
    assert marker(0.001, "worse") == "▼" and marker(0.03, "worse") == "▽" and marker(0.001, "") == ""


def test_table1_figure_is_written_deterministically_with_both_directions(tmp_path):
    from zsdr.tables.table1 import figure_rows, render_table1_figure

    files, systems, datasets = table1_case(tmp_path)
    df = build_table1(files, systems, datasets, "src", "ndcg@10", baselines=["bm25-flat", "bm25-rm3"],
                      papers={"tiny": "rmsc", "weak": "berm"})
    assert [df["system"].iloc[i] for i in figure_rows(df)] == ["bm25-flat", "bm25-rm3", "same", "weak", "tiny"]
    summary = render_table1_figure(df, tmp_path / "a.png", "Table 1")
    assert summary == {"t1": {"better": 1, "worse": 2}, "t2": {"better": 1, "worse": 2}}
    write_table(df, tmp_path / "t.csv", tmp_path / "t.md", "Table 1", figure=tmp_path / "b.png")
    first = (tmp_path / "a.png").read_bytes()
    assert first.startswith(b"\x89PNG") and len(first) > 10_000
    assert (tmp_path / "b.png").read_bytes() == first
    plain = build_table1(files, systems, datasets, "src", "ndcg@10")      # no baselines: bars only
    assert render_table1_figure(plain, tmp_path / "c.png") == {"t1": {"better": 0, "worse": 0},
                                                               "t2": {"better": 0, "worse": 0}}


def test_system_papers_follow_the_config_file_that_defines_each_system():
    from pathlib import Path

    from zsdr.workflow import system_papers

    root = Path(__file__).resolve().parents[1]
    found = system_papers(root, ["bm25-flat", "tiny-bert-untrained", "dpr", "kd", "dpr-berm", "ddr-dr-contrast",
                                 "ddr-contrast", "ance-modir", "cocodr-base", "rmsc-co", "not-configured"])
    assert found == {"bm25-flat": "baselines", "tiny-bert-untrained": "baselines", "dpr": "baselines",
                     "kd": "baselines", "dpr-berm": "berm", "ddr-dr-contrast": "ddr", "ddr-contrast": "ddr",
                     "ance-modir": "modir", "cocodr-base": "cocodr", "rmsc-co": "rmsc", "not-configured": "baselines"}


# ---------------------------------------------------------------------------------------------
# Figures drawn from tables


def test_every_figure_draws_from_entries_of_an_existing_table():
    from zsdr.tables.figures import FIGURES

    every = specs.all_specs()
    for (paper, n), fig in FIGURES.items():
        assert (paper, fig.table) in every, f"{paper} figure {n}: table {fig.table} has no spec"
        keys = {e.key for e in every[(paper, fig.table)].systems}
        for panel in fig.panels:
            assert {panel.x, panel.y} <= keys, f"{paper} figure {n}: {panel} names an entry the table lacks"


def _table6(tmp_path):
    """COCO-DR Table 6 rendered for three datasets, ANCE(BERT) and BM25 produced."""
    shift = {"scifact": {"query_jaccard": 0.18, "doc_jaccard": 0.25},
             "nfcorpus": {"query_jaccard": 0.24, "doc_jaccard": 0.24},
             "fiqa": {"query_jaccard": 0.33, "doc_jaccard": 0.30}}
    files = {}
    for d, (ance, bm25) in {"scifact": (0.50, 0.65), "nfcorpus": (0.24, 0.32), "fiqa": (0.30, 0.24)}.items():
        files[(d, "ance-msmarco")] = write_metrics(tmp_path, d, "ance-msmarco", scores(ance))
        files[(d, "bm25-multifield")] = write_metrics(tmp_path, d, "bm25-multifield", scores(bm25))
    data_tables.cocodr_table6(shift, tmp_path / "table6.csv", tmp_path / "table6.md", metric_files=files,
                              available_datasets=set(shift))
    return tmp_path / "table6.csv"


def test_figure_points_take_both_series_from_the_table_and_skip_averages(tmp_path):
    from zsdr.tables.figures import entry_note, figure_points, fit

    points = figure_points(_table6(tmp_path), "query_jaccard", "ance-bert-gap")
    ours = {label: (x, y) for label, x, y in points["reproduced"]}
    assert set(ours) == {"SciFact", "NFCorpus", "FiQA-2018"}
    assert ours["FiQA-2018"][0] == pytest.approx(0.33) and ours["FiQA-2018"][1] == pytest.approx(0.06, abs=1e-9)
    paper = {label: (x, y) for label, x, y in points["published"]}
    assert paper["SciFact"] == (pytest.approx(0.1809), pytest.approx(-0.158))   # the paper's printed cells
    assert len(paper) == 18 and not any(label.lower().startswith("avg") for label in paper)
    slope, _, r = fit(points["reproduced"])
    assert slope > 0 and 0 < r <= 1
    assert fit(points["reproduced"][:2]) is None
    only_ours = figure_points(_table6(tmp_path), "query_jaccard", "ance-cocondenser-gap")
    assert only_ours["reproduced"] == [] and len(only_ours["published"]) == 18
    assert entry_note(tmp_path / "table6.csv", "ance-cocondenser-gap") == NOT_CONFIGURED
    assert entry_note(tmp_path / "table6.csv", "ance-bert-gap").endswith("not in this run")   # the other datasets


def test_render_figure_is_deterministic_and_checks_its_table(tmp_path):
    from zsdr.tables.figures import FIGURES, render_figure

    table = _table6(tmp_path)
    spec = FIGURES[("cocodr", 2)]
    summary = render_figure(spec, table, tmp_path / "a.png", scale="small")
    render_figure(spec, table, tmp_path / "b.png", scale="small")
    data = (tmp_path / "a.png").read_bytes()
    assert data.startswith(b"\x89PNG") and data == (tmp_path / "b.png").read_bytes()
    assert summary["(a) ANCE (BERT)"]["reproduced"] == 3 and summary["(b) ANCE (coCondenser)"]["reproduced"] == 0
    with pytest.raises(ValueError, match="png"):
        render_figure(spec, table, tmp_path / "c.gif")
    assert not (tmp_path / "c.gif").exists()
    bad = tmp_path / "bad.csv"
    bad.write_text("dataset,entry\nscifact,x\n")
    with pytest.raises(DataError, match="bad.csv.*not a rendered paper table"):
        render_figure(spec, bad, tmp_path / "d.png")
    with pytest.raises(DataError, match="no entry 'doc_jaccard'"):
        pd.read_csv(table).query("entry != 'doc_jaccard'").to_csv(bad, index=False)
        render_figure(spec, bad, tmp_path / "d.png")


def test_ddr_table5_parameter_rows_come_from_the_rems(tmp_path):
    """Table 5's #Train / #Infer Params rows are the trained REMs' counts (rem.json), kept at mini scale;
    a column the run does not train keeps the printed value."""
    spec = specs.load_spec("ddr", 5)
    produced = {"ddr-rem-lora96", "ddr-rem-pa192", "ddr-contrast"}
    files = {(d, s): write_metrics(tmp_path, d, s, scores(0.5)) for d in ("mini-alpha",) for s in produced}
    rem_stats = {"lora96": {"train_pct": 3.2468, "infer_pct": 0.0}, "pa192": {"train_pct": 3.26, "infer_pct": 3.26},
                 "lora-pa": {"train_pct": 9.7612, "infer_pct": 3.2561}}
    frame = render_table(spec, files, tmp_path / "t.csv", tmp_path / "t.md", scale="mini",
                         datasets_override=["mini-alpha"], produced_systems=produced, rem_stats=rem_stats)
    rows = list(dict.fromkeys(frame["dataset"]))
    assert rows[:2] == ["train-params", "infer-params"] and "mini-alpha" in rows
    md = (tmp_path / "t.md").read_text()
    assert "9.76%" in md and "+3.26%" in md and "3.25%" in md and "+0.00%" in md
    assert "6.50%" in md          # LoRA (192) is not trained here: the paper's value stays
    with pytest.raises(DataError, match="train_pct"):
        render_table(spec, files, tmp_path / "u.csv", tmp_path / "u.md", scale="mini", datasets_override=["mini-alpha"],
                     produced_systems=produced, rem_stats={"lora96": {"infer_pct": 0.0}})


def test_ddr_figure4_curves_from_snapshots(tmp_path):
    from zsdr.tables.ddr_figures import render_dam_curves

    dam = tmp_path / "dam"
    (dam / "snapshots").mkdir(parents=True)
    (dam / "snapshots" / "snapshots.json").write_text(json.dumps(
        [{"step": 100, "train_seconds": 360.0, "path": "snapshots/step-000000100"},
         {"step": 200, "train_seconds": 720.0, "path": "."}]))
    points = [{"dataset": "mini-alpha", "step": s, "system": name,
               "metrics": write_metrics(tmp_path, "mini-alpha", name, scores(v))}
              for s, name, v in ((0, "ddr.dam-step0", 0.4), (100, "ddr.dam-step100", 0.5), (None, "ddr", 0.6))]
    base = {"mini-alpha": write_metrics(tmp_path, "mini-alpha", "dr", scores(0.45))}
    rows = render_dam_curves(points, {"mini-alpha": dam}, base, "ndcg@10", tmp_path / "f.png", tmp_path / "f.csv",
                             devices={"mini-alpha": 2})
    assert [(r["step"], r["device_hours"]) for r in rows] == [(0, 0.0), (100, 0.2), (200, 0.4)]
    assert [round(r["value"], 6) for r in rows] == [0.4, 0.5, 0.6] and rows[0]["baseline"] == pytest.approx(0.45)
    assert (tmp_path / "f.png").read_bytes().startswith(b"\x89PNG")
    assert read_rows(tmp_path / "f.csv")[2]["system"] == "ddr"
    points[1]["step"] = 150                        # a step the DAM never saved
    with pytest.raises(DataError, match="no snapshot at step 150"):
        render_dam_curves(points, {"mini-alpha": dam}, base, "ndcg@10", tmp_path / "g.png", tmp_path / "g.csv")


def test_the_readme_table_is_written_from_table1_and_checked_against_it(tmp_path):
    from zsdr import readme_table as rt

    csv_file = tmp_path / "table1.csv"
    csv_file.write_text("system,paper,description,role,mini-source,mini-alpha,mini-beta,target_mean,mini-alpha_p,"
                        "mini-alpha_vs_baseline,mini-beta_p,mini-beta_vs_baseline\n"
                        "bm25-flat,baselines,BM25,reference,0.5914,0.8171,0.7969,0.807,,,,\n"
                        "dpr,baselines,DPR,system,0.2194,0.3566,0.3061,0.3314,1.2e-05,worse,3.0e-04,worse\n")
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n{rt.START}\n\n| old |\n\n{rt.END}\n\nafter\n")
    assert rt.write_readme(readme, csv_file) and not rt.write_readme(readme, csv_file)
    text = readme.read_text()
    assert "| system | mini-source (dev) | mini-alpha | mini-beta | target mean |" in text
    assert "| dpr | 0.219 | 0.357 | 0.306 | 0.331 |" in text and "| old |" not in text
    assert text.startswith("intro\n") and text.endswith("after\n")
    assert rt.differences(readme, csv_file) == []
    # another machine's run: within the tolerance passes, past it is named cell by cell
    other = tmp_path / "other.csv"
    other.write_text(csv_file.read_text().replace("0.3566", "0.3766").replace("0.5914", "0.6514"))
    assert rt.differences(readme, other) == [
        f"bm25-flat mini-source (dev): README 0.591, run 0.651 (more than {rt.TOLERANCE} apart)"]
    assert rt.differences(readme, other, tolerance=0.01)[1].startswith("dpr mini-alpha: README 0.357, run 0.377")
    missing = tmp_path / "missing.csv"
    missing.write_text("\n".join(csv_file.read_text().splitlines()[:2]) + "\n")
    assert rt.differences(readme, missing) == [f"dpr: in the README's table, not in {missing}"]
    assert rt.main(["--check", "--readme", str(readme), "--csv", str(other)]) == 1
    assert rt.main(["--check", "--readme", str(readme), "--csv", str(tmp_path / "none.csv")]) == 2
    (tmp_path / "plain.md").write_text("no markers\n")
    with pytest.raises(rt.TableError, match="plain.md: no table between"):
        rt.write_readme(tmp_path / "plain.md", csv_file)


def test_the_readme_has_its_table_between_the_markers():
    from zsdr import readme_table as rt

    shown = rt.readme_values(Path(__file__).resolve().parents[1] / "README.md")
    assert len(shown) >= 20 and set(next(iter(shown.values()))) == {"mini-source (dev)", "mini-alpha", "mini-beta",
                                                                     "target mean"}


def test_write_table1_is_table1_of_the_significance_settings_under_its_scale_title(tmp_path):
    """The table1 job's one call: the same bytes as building and writing the table by hand, the significance
    settings (config evaluation.significance) reaching the test, and the title naming the scale and metric."""
    from zsdr.tables.table1 import write_table1

    files, systems, datasets = table1_case(tmp_path)
    kw = dict(systems=systems, datasets=datasets, source="src", metric="ndcg@10", scale="mini",
              baselines=["bm25-flat", "bm25-rm3"], papers={"tiny": "berm"})
    df = write_table1(files, tmp_path / "a.csv", tmp_path / "a.md", None,
                      significance={"test": "ttest", "trials": 10000, "holm": False}, **kw)
    by_hand = build_table1(files, systems, datasets, "src", "ndcg@10", baselines=kw["baselines"], papers=kw["papers"])
    write_table(by_hand, tmp_path / "b.csv", tmp_path / "b.md", "Table 1 (mini scale): ndcg@10")
    for suffix in ("csv", "md"):
        assert (tmp_path / f"a.{suffix}").read_bytes() == (tmp_path / f"b.{suffix}").read_bytes()
    assert (tmp_path / "a.md").read_text().startswith("# Table 1 (mini scale): ndcg@10")
    holm = write_table1(files, tmp_path / "h.csv", tmp_path / "h.md", None,
                        significance={"test": "ttest", "trials": 10000, "holm": True}, **kw)
    assert (holm["t1_p"].dropna() >= df["t1_p"].dropna()).all() and not holm["t1_p"].equals(df["t1_p"])


def test_write_paper_table_reads_its_files_and_the_rems_parameter_counts(tmp_path):
    """The paper_table job's one call: the cell files and each REM's rem.json as the run wrote them (DDR Table 5);
    a REM file that is not there names itself."""
    from zsdr.tables.paper_table import write_paper_table

    produced = ["ddr-rem-lora96", "ddr-contrast"]
    files = [write_metrics(tmp_path, "mini-alpha", s, scores(0.5)) for s in produced]
    rem = tmp_path / "models" / "lora96" / "rem" / "rem.json"
    rem.parent.mkdir(parents=True)
    rem.write_text(json.dumps({"train_pct": 3.2468, "infer_pct": 0.0}))
    kw = dict(scale="mini", datasets_override=["mini-alpha"], produced_systems=produced)
    frame = write_paper_table("ddr", 5, files, tmp_path / "t.csv", tmp_path / "t.md", rem_files={"lora96": rem}, **kw)
    assert {"train-params", "infer-params", "mini-alpha"} <= set(frame["dataset"])
    assert "3.25%" in (tmp_path / "t.md").read_text()
    with pytest.raises(DataError, match=r"lora-pa.*rem\.json.*file not found"):
        write_paper_table("ddr", 5, files, tmp_path / "u.csv", tmp_path / "u.md",
                          rem_files={"lora96": rem, "lora-pa": tmp_path / "lora-pa" / "rem.json"}, **kw)
    assert not (tmp_path / "u.csv").exists()


def test_results_manifest_is_sha256sum_of_every_file_once_in_path_order(tmp_path):
    import hashlib

    from zsdr.tables.manifest import write_manifest

    (tmp_path / "b.csv").write_text("b\n")
    (tmp_path / "a.png").write_bytes(bytes(range(256)) * 5000)
    paths = [str(tmp_path / "b.csv"), str(tmp_path / "a.png"), str(tmp_path / "b.csv")]
    write_manifest(paths, tmp_path / "all")
    expected = "".join(f"{hashlib.sha256(Path(p).read_bytes()).hexdigest()}  {p}\n" for p in sorted(set(paths)))
    assert (tmp_path / "all").read_text() == expected
    with pytest.raises(FileNotFoundError):
        write_manifest([tmp_path / "gone.csv"], tmp_path / "again")
    assert not (tmp_path / "again").exists()
