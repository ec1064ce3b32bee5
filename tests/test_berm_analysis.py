"""BERM's unit analyses (Tables 5 and 6): the measures by hand, on a tiny encoder, and the tables they fill."""

import json
import math

import pytest
import torch

from zsdr.data.formats import read_corpus, read_queries
from zsdr.data.mini import generate
from zsdr.data.units import tokenize_with_units
from zsdr.evaluation.metrics import read_metrics
from zsdr.evaluation.unit_analysis import MEASURES, unit_analysis, unit_measures, write_unit_analysis
from zsdr.io import DataError
from zsdr.models.encoder import Encoder
from zsdr.models.tiny import build_tiny_backbone
from zsdr.tables import inputs, published_csv, spec as specs
from zsdr.tables.cells import required_cells
from zsdr.tables.render import render_table
from zsdr.training.unit_labels import label_pairs, select_pairs, unit_statistics

MINI = {
    "seed": 7, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 4, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 200, "train_queries": 40, "dev_queries": 30}],
}
SIZE = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "max_length": 96, "dropout": 0.0}
OPTIONS = {"pooling": "mean", "similarity": "cosine", "doc_format": "title_space_text", "doc_max_length": 96}
SYSTEMS = ("dpr", "dpr-berm", "kd", "kd-berm", "ance", "ance-berm")


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    """A mini dataset, a tiny RoBERTa and the labels of the dataset's dev pairs."""
    root = tmp_path_factory.mktemp("units")
    generate(MINI, root / "data")
    src = root / "data" / "src"
    build_tiny_backbone("roberta", [src], root / "roberta", SIZE, vocab_size=600, seed=0)
    pairs = select_pairs(src, "dev")
    label_pairs(src, pairs, unit_statistics(src, pairs, "units"), root / "labels.jsonl")
    return root


def gelu(x: float) -> float:
    return 0.5 * x * (1 + math.erf(x / math.sqrt(2)))


# ------------------------------------------------------------------------------------- by hand
def test_measures_by_hand():
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    passages = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    units = torch.tensor([[[2.0, 0.0], [0.0, 3.0], [4.0, 1.0]],      # scores 2, 0, 4
                          [[5.0, 3.0], [-1.0, 3.0], [7.0, 3.0]],     # scores 3, 3, 3: balanced
                          [[1.0, 2.0], [9.0, 9.0], [-9.0, 9.0]]])    # one unit (padding ignored)
    mask = torch.tensor([[True, True, True], [True, True, True], [True, False, False]])
    targets = torch.tensor([2, -1, 0])
    out = unit_measures(queries, passages, units, mask, targets)
    assert set(out) == set(MEASURES)
    assert out["unit_variance"][0] == pytest.approx(((2 - 2) ** 2 + (0 - 2) ** 2 + (4 - 2) ** 2) / 3)
    assert out["unit_variance"][1] == pytest.approx(0.0, abs=1e-12)
    assert out["unit_variance"][2] is None and out["unit_similarity"][2] is None      # fewer than two units
    # m = GELU(t_q * t_p) = (gelu(1), gelu(0)) = (0.841, 0): <m, e_i> = 0.841 * (2, 0, 4), argmax 2 = the essential unit
    assert out["unit_accuracy"][0] == 1.0
    assert out["unit_accuracy"][1] is None                                           # no essential unit
    assert out["unit_accuracy"][2] == 1.0
    cos = [0.0, 4 / math.sqrt(17), 1 / math.sqrt(17)]                                # (1,2), (1,3), (2,3)
    assert out["unit_similarity"][0] == pytest.approx(sum(cos) / 3)
    # a miss: the essential unit is not the one m points at
    miss = unit_measures(queries[:1], passages[:1], units[:1], mask[:1], torch.tensor([1]))
    assert miss["unit_accuracy"] == [0.0]
    # the GELU matters: t_q * t_p = (1, -2) would pick unit 2 (score 20), GELU(-2) = -0.045 picks unit 1
    t_q, t_p = torch.tensor([[1.0, -2.0]]), torch.tensor([[1.0, 1.0]])
    e = torch.tensor([[[1.0, 0.0], [0.0, -10.0]]])
    assert gelu(1.0) > -10 * gelu(-2.0)
    assert unit_measures(t_q, t_p, e, torch.tensor([[True, True]]), torch.tensor([0]))["unit_accuracy"] == [1.0]


# --------------------------------------------------------------------------------- tiny encoder
def test_tiny_encoder_matches_a_direct_computation_and_is_deterministic(mini, tmp_path):
    src, labels = mini / "data" / "src", mini / "labels.jsonl"
    out = write_unit_analysis(mini / "roberta", src, labels, tmp_path / "a.units.json", batch_size=7, device="cpu",
                              meta={"dataset": "src", "system": "tiny"}, **OPTIONS)
    write_unit_analysis(mini / "roberta", src, labels, tmp_path / "b.units.json", batch_size=7, device="cpu",
                        meta={"dataset": "src", "system": "tiny"}, **OPTIONS)
    assert (tmp_path / "a.units.json").read_bytes() == (tmp_path / "b.units.json").read_bytes()
    rows = [json.loads(x) for x in labels.read_text().splitlines()]
    assert out["pairs"] == len(rows) == len(out["per_query"]) == 30 and out["system"] == "tiny"
    # one pair recomputed from the encoder's own outputs, unit by unit
    enc = Encoder.from_pretrained(mini / "roberta", **OPTIONS)
    corpus, queries = read_corpus(src), read_queries(src)
    row = rows[3]
    doc = corpus[row["pid"]]
    features, spans = tokenize_with_units(enc, [doc], [[tuple(u) for u in row["units"]]])
    with torch.no_grad():
        t_p, hidden = enc(**enc.collate(features), return_hidden=True)
        t_q = enc(**enc.collate(enc.tokenize_queries([queries[row["qid"]]])))
    e = torch.stack([hidden[0, s:t].mean(0) for s, t in spans[0]]).double()
    scores = e @ t_p[0].double()
    m = torch.nn.functional.gelu(t_q[0] * t_p[0]).double()
    normed = torch.nn.functional.normalize(e, dim=-1)
    n = len(e)
    want = {"unit_variance": float(scores.var(unbiased=False)),
            "unit_accuracy": float(int((e @ m).argmax()) == row["essential"]),
            "unit_similarity": float(((normed @ normed.T).sum() - n) / (n * (n - 1)))}
    got = out["per_query"][f"{row['qid']}\t{row['pid']}"]
    assert got["units"] == n and all(got[k] == pytest.approx(v, abs=1e-5) for k, v in want.items())
    # the aggregates are the means over the pairs, and the table reader takes the file as it is
    data = read_metrics(tmp_path / "a.units.json")
    for measure in MEASURES:
        value, per_pair = inputs.metric_scores(data, tmp_path / "a.units.json", measure)
        assert len(per_pair) == out["counts"][measure] == 30
        assert value == pytest.approx(sum(per_pair.values()) / len(per_pair))


def test_truncated_units_leave_pairs_out(mini):
    src, labels = mini / "data" / "src", mini / "labels.jsonl"
    short = unit_analysis(mini / "roberta", src, labels, device="cpu", **{**OPTIONS, "doc_max_length": 20})
    counts, per_pair = short["counts"], short["per_query"].values()
    # a pair whose essential unit truncation cut off is scored against the best unit left (the label is
    # recomputed for the length); only a pair left without units has no label
    assert counts["unit_accuracy"] == sum(r["unit_accuracy"] is not None for r in per_pair)
    assert counts["unit_accuracy"] == sum(r["units"] >= 1 for r in per_pair) > 0
    assert counts["unit_variance"] == counts["unit_similarity"] == sum(r["units"] >= 2 for r in per_pair)
    assert max(r["units"] for r in per_pair) < 5


def test_a_pair_outside_the_dataset_is_a_data_error(mini, tmp_path):
    bad = tmp_path / "labels.jsonl"
    bad.write_text(json.dumps({"qid": "nope", "pid": "nope", "units": [[0, 3]], "essential": 0}) + "\n")
    with pytest.raises(DataError, match="not in") as err:
        unit_analysis(mini / "roberta", mini / "data" / "src", bad, device="cpu", **OPTIONS)
    assert "labels.jsonl" in str(err.value) and "label_units" in str(err.value)


# ---------------------------------------------------------------------------------------- tables
def write_units(root, dataset, system, aggregate: dict) -> str:
    """A `.units.json` file with the given aggregates (per-pair values: the aggregate; one pair without a label)."""
    path = inputs.cell_file(root / "metrics", dataset, system, "units")
    pairs = {f"q{i}\tp{i}": {**aggregate, "units": 4} for i in range(4)}
    pairs["q4\tp4"] = {**aggregate, "unit_accuracy": None, "units": 4}
    (root / "metrics" / dataset).mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        json.dump({"aggregate": aggregate, "per_query": pairs, "pairs": 5}, fh)
    return path


def test_render_berm_tables_5_and_6_from_units_files(tmp_path):
    datasets = ["mini-alpha", "mini-beta"]
    t5, t6 = specs.load_spec("berm", 5), specs.load_spec("berm", 6)
    assert t5.source == t6.source == "units" and t5.kind == "metric"
    cells = required_cells(t5, set(SYSTEMS), datasets)
    assert cells == required_cells(t6, set(SYSTEMS), datasets) and len(cells) == 12
    paths = []
    for d, s in cells:
        k = SYSTEMS.index(s) + (0.5 if d == "mini-beta" else 0)
        agg = {"unit_variance": 0.01 * k, "unit_accuracy": 0.1 * k, "unit_similarity": 0.5 - 0.05 * k}
        if (d, s) == ("mini-beta", "kd-berm"):
            agg["unit_similarity"] = None                    # no passage with two units
        paths.append(write_units(tmp_path, d, s, agg))
    files = inputs.metric_files_by_cell(paths)
    assert sorted(files) == cells and str(files[("mini-alpha", "dpr-berm")]).endswith("dpr-berm.units.json")
    frame = render_table(t5, files, tmp_path / "t5.csv", tmp_path / "t5.md", scale="mini", datasets_override=datasets,
                         produced_systems=set(SYSTEMS))
    assert len(frame) == 6 * 3 * 2                            # systems x (2 datasets + Avg) x 2 measures

    def cell(f, dataset, entry, metric):
        rows = f[(f["dataset"] == dataset) & (f["entry"] == entry) & (f["metric"] == metric)].to_dict("records")
        assert len(rows) == 1
        return rows[0]

    c = cell(frame, "mini-alpha", "kd", "unit_variance")
    assert c["reproduced"] == pytest.approx(0.02) and c["display"] == "0.0200" and c["system"] == "kd"
    assert cell(frame, "mini-beta", "ance", "unit_accuracy")["display"] == "45.0%"
    assert cell(frame, "avg", "dpr-berm", "unit_variance")["reproduced"] == pytest.approx((0.01 + 0.015) / 2)
    assert cell(frame, "mini-alpha", "dpr", "unit_accuracy")["system"] == "dpr"    # berm-dpr is not produced
    md = (tmp_path / "t5.md").read_text()
    assert "| mini-alpha Variance" in md and "mini-beta Accuracy" in md and "| DPR+BERM" in md
    frame6 = render_table(t6, files, tmp_path / "t6.csv", tmp_path / "t6.md", scale="mini",
                          datasets_override=datasets, produced_systems=set(SYSTEMS))
    assert set(frame6["metric"]) == {"unit_similarity"} and len(frame6) == 6 * 3
    assert cell(frame6, "mini-alpha", "ance", "unit_similarity")["reproduced"] == pytest.approx(0.3)
    missing = cell(frame6, "mini-beta", "kd-berm", "unit_similarity")
    assert missing["reproduced"] == "" or math.isnan(missing["reproduced"])
    assert missing["note"].startswith("unit_similarity applies to no query of mini-beta")
    assert "incomplete" in cell(frame6, "avg", "kd-berm", "unit_similarity")["note"]
    # a file the rule did not list is named with its `.units.json` path
    with pytest.raises(DataError, match=r"mini-alpha/dpr\.units\.json"):
        render_table(t5, {}, tmp_path / "x.csv", tmp_path / "x.md", scale="mini", datasets_override=datasets,
                     produced_systems={"dpr"})


def test_units_source_is_validated_and_published_columns_expand_by_metric(tmp_path, monkeypatch):
    path = tmp_path / "berm_table9.yaml"
    base = ("paper: berm\ntable: 9\nkind: metric\ntitle: t\ncaption: c\norientation: systems-as-rows\n"
            "datasets:\n  - {id: nfcorpus, label: NFCorpus}\nsystems:\n  - {system: dpr}\n  - {system: kd}\n")
    path.write_text(base + "source: units\nmetric: ndcg@10\n")
    with pytest.raises(DataError, match="not a unit analysis measure"):
        specs.parse_spec(path)
    path.write_text(base + "metric: unit_variance\n")
    with pytest.raises(DataError, match="not a metric name"):
        specs.parse_spec(path)
    path.write_text(base + "source: runs\nmetric: ndcg@10\n")
    with pytest.raises(DataError, match="key source"):
        specs.parse_spec(path)
    # systems-as-rows with `metrics`: one column per dataset and metric, named "<dataset> <label>"
    monkeypatch.setattr(published_csv, "PUBLISHED_DIR", tmp_path)
    published_csv.read_published.cache_clear()
    (tmp_path / "units9.csv").write_text("System,NFCorpus Var.,NFCorpus Acc.\nDPR,0.12,30.0%\nKD,0.10,35.5%\n")
    path.write_text(base + "source: units\nmetrics:\n  - {metric: unit_variance, label: Var.}\n"
                    "  - {metric: unit_accuracy, label: Acc.}\npublished: {file: units9.csv, key: [System]}\n")
    spec = specs.parse_spec(path)
    files = {("nfcorpus", s): write_units(tmp_path, "nfcorpus", s, {"unit_variance": 0.1, "unit_accuracy": 0.4,
                                                                      "unit_similarity": 0.2})
             for s in ("dpr", "kd")}
    frame = render_table(spec, files, tmp_path / "t.csv", tmp_path / "t.md", produced_systems={"dpr", "kd"})
    row = frame[(frame["entry"] == "kd") & (frame["metric"] == "unit_accuracy")].to_dict("records")[0]
    assert row["published"] == "35.5%" and row["delta"] == pytest.approx(0.4 - 0.355)
    (tmp_path / "units9.csv").write_text("System,NFCorpus Var.\nDPR,0.12\nKD,0.10\n")
    published_csv.read_published.cache_clear()
    with pytest.raises(DataError, match="NFCorpus Acc."):
        specs.parse_spec(path)
    published_csv.read_published.cache_clear()
