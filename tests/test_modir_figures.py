"""MoDIR Figures 3 and 5, Table 3 (zsdr.tables.modir_figures) and the Table 4 case study
(zsdr.evaluation.case_study) on synthetic domain files, metrics files, train logs and a tiny encoder."""

import json
import random

import numpy as np
import pytest

from tests import test_encoder
from tests.test_tables import read_rows, write_metrics
from zsdr.data.formats import write_beir
from zsdr.io import DataError
from zsdr.tables.published_csv import PUBLISHED_DIR

WORDS = test_encoder.WORDS
tiny = test_encoder.tiny          # the session fixture of test_encoder: a tiny dataset and tiny backbones

PNG = b"\x89PNG\r\n\x1a\n"
STEPS = (0, 20, 60, 100)
RECIPES = {"ance-modir": "w/ Momentum", "ance-modir-single": "w/o Momentum"}


def write_domain(root, name, queries, docs, knn):
    path = root / "domain" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"global_domain_acc": {"queries": queries, "docs": docs}, "knn_source": knn,
                                "knn_k": 100, "counts": {"source_docs": 10, "target_docs": 10}}))
    return str(path)


def write_log(root, recipe, records):
    path = root / "runs" / recipe / "train_log.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def acc(recipe, dataset, step):
    """Deterministic accuracies / KNN-Source of a point: docs falls with the step, more with momentum."""
    drop = (0.003 if recipe == "ance-modir" else 0.001) * step + (0.02 if dataset == "mini-beta" else 0.0)
    return {"docs": 0.95 - drop, "queries": 0.9 - drop / 2, "knn": 0.05 + step / 1000}


@pytest.fixture
def points(tmp_path):
    out = []
    for dataset in ("mini-alpha", "mini-beta"):
        for recipe, label in RECIPES.items():
            for step in STEPS:
                a = acc(recipe, dataset, step)
                knn = 0.123 if (recipe, dataset, step) == ("ance-modir", "mini-alpha", 60) else a["knn"]
                name = f"{dataset}-{recipe}-{step}"
                value = 0.4 + step / 1000 + (0.01 if recipe == "ance-modir" else 0.0)
                out.append({"recipe": recipe, "label": label, "dataset": dataset, "step": step,
                            "domain": write_domain(tmp_path, name, a["queries"], a["docs"], knn),
                            "metrics": str(write_metrics(tmp_path, dataset, name, {"q1": value - 0.1,
                                                                                   "q2": value + 0.1}))})
    return out


@pytest.fixture
def logs(tmp_path):
    modir = [{"step": s, "loss": 1.0, "local_domain_acc_queries": 0.8 - s / 1000,
              "local_domain_acc_docs": 0.85 - s / 500} for s in (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)]
    single = [{"step": s, "loss": 1.0, "local_domain_acc_queries": 0.7, "local_domain_acc_docs": 0.75}
              for s in (50, 100)]
    return {"ance-modir": write_log(tmp_path, "ance-modir", modir),
            "ance-modir-single": write_log(tmp_path, "ance-modir-single", single)}


def test_figure3_global_and_local_domain_acc(tmp_path, points, logs):
    from zsdr.tables.modir_figures import render_domain_acc

    rows = render_domain_acc(points, logs, tmp_path / "f3.png", tmp_path / "f3.csv", dataset="mini-alpha",
                             scale="mini")
    assert (tmp_path / "f3.png").read_bytes().startswith(PNG)
    csv_rows = read_rows(tmp_path / "f3.csv")
    assert list(csv_rows[0]) == ["recipe", "label", "dataset", "kind", "side", "step", "value"]
    assert len(csv_rows) == len(rows) == 2 * 2 * len(STEPS) + 2 * 10 + 2 * 2
    assert {r["dataset"] for r in csv_rows} == {"mini-alpha"}
    glob = {(r["recipe"], r["side"], int(r["step"])): float(r["value"]) for r in csv_rows if r["kind"] == "global"}
    assert glob[("ance-modir", "docs", 60)] == pytest.approx(acc("ance-modir", "mini-alpha", 60)["docs"])
    want = acc("ance-modir-single", "mini-alpha", 100)["queries"]
    assert glob[("ance-modir-single", "queries", 100)] == pytest.approx(want)
    local = [r for r in csv_rows if r["kind"] == "local" and r["recipe"] == "ance-modir" and r["side"] == "docs"]
    assert [int(r["step"]) for r in local] == list(range(10, 101, 10))
    assert float(local[-1]["value"]) == pytest.approx(0.85 - 100 / 500)
    assert {r["label"] for r in csv_rows if r["recipe"] == "ance-modir-single"} == {"w/o Momentum"}

    # A control run without an adversary: no local accuracy in its log, no log at all -> global only.
    control = [dict(p, recipe="ance-noadv", label="w/o adversary") for p in points if p["recipe"] == "ance-modir"]
    plain = write_log(tmp_path, "ance-noadv", [{"step": 100, "loss": 0.5}])
    for given in ({**logs, "ance-noadv": plain}, logs):
        rows = render_domain_acc(points + control, given, tmp_path / "g.png", tmp_path / "g.csv", dataset="mini-alpha")
        assert not [r for r in rows if r["recipe"] == "ance-noadv" and r["kind"] == "local"]
        assert len([r for r in rows if r["recipe"] == "ance-noadv"]) == 2 * len(STEPS)

    bad = write_log(tmp_path, "broken", [{"loss": 1.0}])
    with pytest.raises(DataError, match="broken.*without a numeric step"):
        render_domain_acc(points, {"ance-modir": bad}, tmp_path / "h.png", tmp_path / "h.csv", dataset="mini-alpha")
    with pytest.raises(DataError, match="no MoDIR points for dataset 'nope'.*snakemake modir"):
        render_domain_acc(points, logs, tmp_path / "h.png", tmp_path / "h.csv", dataset="nope")
    broken = tmp_path / "domain" / "bad.json"
    broken.write_text(json.dumps({"global_domain_acc": {"docs": 0.5}}))
    with pytest.raises(DataError, match="bad.json.*global_domain_acc"):
        render_domain_acc([dict(points[0], domain=str(broken))], logs, tmp_path / "h.png", tmp_path / "h.csv",
                          dataset="mini-alpha")
    assert not (tmp_path / "h.png").exists()


def test_figure5_domain_acc_and_quality(tmp_path, points):
    from zsdr.tables.modir_figures import render_acc_and_quality

    rows = render_acc_and_quality(points, tmp_path / "f5.png", tmp_path / "f5.csv", recipe="ance-modir",
                                  datasets=["mini-beta", "mini-alpha"], scale="mini")
    assert (tmp_path / "f5.png").read_bytes().startswith(PNG)
    csv_rows = read_rows(tmp_path / "f5.csv")
    assert list(csv_rows[0]) == ["dataset", "step", "global_domain_acc_docs", "ndcg@10"]
    assert [(r["dataset"], int(r["step"])) for r in csv_rows] == [(d, s) for d in ("mini-beta", "mini-alpha")
                                                                  for s in STEPS]
    assert len(rows) == 8
    by = {(r["dataset"], int(r["step"])): r for r in csv_rows}
    want = acc("ance-modir", "mini-beta", 20)["docs"]
    assert float(by[("mini-beta", 20)]["global_domain_acc_docs"]) == pytest.approx(want)
    assert float(by[("mini-alpha", 100)]["ndcg@10"]) == pytest.approx(0.51)
    with pytest.raises(DataError, match="recipe 'ance-modir' on dataset 'mini-gamma'.*snakemake modir"):
        render_acc_and_quality(points, tmp_path / "x.png", tmp_path / "x.csv", recipe="ance-modir",
                               datasets=["mini-alpha", "mini-gamma"])
    with pytest.raises(DataError, match="'recall@5' was not computed"):
        render_acc_and_quality(points, tmp_path / "x.png", tmp_path / "x.csv", recipe="ance-modir",
                               datasets=["mini-alpha"], metric="recall@5")


def test_table3_knn_source_and_metric_beside_published(tmp_path, points):
    from zsdr.tables.modir_figures import write_table3

    settings = {"w/ Momentum": "ance-modir", "w/o Momentum": "ance-modir-single"}
    published = PUBLISHED_DIR / "modir_table3.csv"
    rows = write_table3(points, tmp_path / "t3.csv", tmp_path / "t3.md", dataset="mini-alpha", settings=settings,
                        steps=list(STEPS), published=published, scale="mini")
    csv_rows = read_rows(tmp_path / "t3.csv")
    assert list(csv_rows[0]) == ["setting", "source", "knn_source_0@step0", "knn_source_10k@step20",
                                 "knn_source_30k@step60", "knn_source_50k@step100", "ndcg10_0@step0",
                                 "ndcg10_10k@step20", "ndcg10_30k@step60", "ndcg10_50k@step100"]
    assert [r["setting"] for r in csv_rows] == ["w/ Momentum", "w/ Momentum (published)", "w/o Momentum",
                                                "w/o Momentum (published)"]
    assert [r["source"] for r in rows] == ["zsdr", "published", "zsdr", "published"]
    ours, paper = csv_rows[0], csv_rows[1]
    assert ours["knn_source_30k@step60"] == "12.3%" and ours["knn_source_0@step0"] == "5.0%"
    assert ours["ndcg10_50k@step100"] == "0.510" and csv_rows[2]["ndcg10_10k@step20"] == "0.420"
    assert paper["knn_source_50k@step100"] == "17.2%" and paper["ndcg10_50k@step100"] == "0.724"
    assert csv_rows[3]["knn_source_10k@step20"] == "5.4%"
    md = (tmp_path / "t3.md").read_text()
    assert md.startswith("# MoDIR Table 3: KNN-Source% and nDCG@10 over training")
    assert "scale: mini" in md and "0 / 20 / 60 / 100" in md and "stand-ins" in md
    assert "| w/ Momentum | 5.0% |" in md and "*w/o Momentum (published)*" in md and "12.3%" in md

    # A setting the paper does not have gets no published row; a missing point names recipe, step and fix.
    rows = write_table3(points, tmp_path / "u.csv", tmp_path / "u.md", dataset="mini-alpha",
                        settings={"momentum, no adversary": "ance-modir"}, steps=list(STEPS), published=published)
    assert [r["source"] for r in rows] == ["zsdr"]
    with pytest.raises(DataError, match=r"'ance-modir' \(w/ Momentum\) at step 40.*fix: run snakemake modir"):
        write_table3(points, tmp_path / "v.csv", tmp_path / "v.md", dataset="mini-alpha", settings=settings,
                     steps=[0, 20, 40, 100], published=published)
    assert not (tmp_path / "v.csv").exists() and not (tmp_path / "v.md").exists()
    with pytest.raises(ValueError, match="4 steps"):
        write_table3(points, tmp_path / "v.csv", tmp_path / "v.md", dataset="mini-alpha", settings=settings,
                     steps=[0, 20], published=published)


# ---------------------------------------------------------------------------------------------
# Table 4: the case study


def make_source(root, n=24, seed=1):
    """Source BEIR folder: ``n`` judged training queries (one a duplicate text of another) and two unjudged."""
    rng = random.Random(seed)
    corpus = {f"d{i}": {"title": "", "text": " ".join(rng.choices(WORDS, k=12))} for i in range(10)}
    queries = {}
    while len(queries) < n + 2:
        text = " ".join(rng.choices(WORDS, k=rng.randint(2, 6)))
        if text not in queries.values():
            queries[f"s{len(queries)}"] = text
    queries["sdup"] = queries["s0"]
    train = {q: {f"d{i % 10}": 1} for i, q in enumerate(queries) if q not in ("s1", "s2")}
    write_beir(root, corpus, queries, {"train": train})
    return root, {queries[q] for q in train}, {queries["s1"], queries["s2"]}


def make_target(root, n=6, seed=2):
    rng = random.Random(seed)
    corpus = {f"c{i}": {"title": "", "text": " ".join(rng.choices(WORDS, k=12))} for i in range(8)}
    queries = {f"t{i}": " ".join(rng.choices(WORDS, k=4)) + f" w{i}" for i in range(n)}
    write_beir(root, corpus, queries, {"test": {q: {f"c{i}": 1} for i, q in enumerate(queries)}})
    return root, queries


def test_case_study_picks_gain_and_loss_and_nearest_source_queries(tmp_path, tiny):
    from zsdr.evaluation.case_study import case_study, source_queries
    from zsdr.tables.modir_figures import write_table4
    from zsdr.models.encoder import Encoder

    source, judged, unjudged = make_source(tmp_path / "src")
    target, tq = make_target(tmp_path / "tgt")
    base = {f"t{i}": 0.5 for i in range(6)}
    after = {**base, "t0": 0.6, "t2": 0.9, "t3": 0.45, "t4": 0.2}
    mb, ma = base, after
    opts_b, opts_a = {"pooling": "cls", "similarity": "dot"}, {"pooling": "mean", "similarity": "dot"}
    rows = case_study(str(tiny["bert"]), str(tiny["bert"]), opts_b, opts_a, str(source), str(target), "test", mb, ma,
                      neighbours=3, batch_size=8)
    assert [r["qid"] for r in rows] == ["t2", "t4"]
    assert rows[0]["gain"] == pytest.approx(0.4) and rows[1]["gain"] == pytest.approx(-0.3)
    assert [r["target_query"] for r in rows] == [tq["t2"], tq["t4"]]
    pool = source_queries(source)
    assert len(pool) == len(judged) == 24 and set(pool) == judged    # the duplicate text counts once
    for r in rows:
        for side in ("before", "after"):
            assert len(r[side]) == 3 and len(set(r[side])) == 3 and set(r[side]) <= judged
            assert not set(r[side]) & unjudged
    # The neighbours are the exact inner-product nearest source queries of each model.
    for side, opts in (("before", opts_b), ("after", opts_a)):
        enc = Encoder.from_pretrained(tiny["bert"], **opts)
        scores = enc.encode_queries([tq["t2"]]) @ enc.encode_queries(pool).T
        want = [pool[i] for i in np.argsort(-scores[0], kind="stable")[:3]]
        assert rows[0][side] == want

    sampled = case_study(str(tiny["bert"]), str(tiny["bert"]), opts_b, opts_a, str(source), str(target), "test", mb,
                         ma, neighbours=2, max_source_queries=5, seed=3)
    sample = source_queries(source, 5, seed=3)
    assert len(sample) == 5 and sample == source_queries(source, 5, seed=3)
    assert all(len(r[s]) == 2 and set(r[s]) <= set(sample) for r in sampled for s in ("before", "after"))
    with pytest.raises(DataError, match="fewer than the 6 neighbours"):
        case_study(str(tiny["bert"]), str(tiny["bert"]), opts_b, opts_a, str(source), str(target), "test", mb, ma,
                   neighbours=6, max_source_queries=5)

    published = PUBLISHED_DIR / "modir_table4.csv"
    write_table4(tmp_path / "t4.csv", tmp_path / "t4.md", rows, published=published, scale="mini")
    csv_rows = read_rows(tmp_path / "t4.csv")
    assert list(csv_rows[0]) == ["source", "target_query", "qid", "ndcg10_gain", "nearest_source_queries_before",
                                 "nearest_source_queries_after"]
    assert [r["source"] for r in csv_rows] == ["zsdr", "zsdr", "published", "published"]
    assert csv_rows[0]["ndcg10_gain"] == "0.400" and csv_rows[1]["ndcg10_gain"] == "-0.300"
    assert csv_rows[0]["nearest_source_queries_before"].split(" | ") == rows[0]["before"]
    assert csv_rows[3]["ndcg10_gain"] == "-0.12"
    md = (tmp_path / "t4.md").read_text()
    assert md.startswith("# MoDIR Table 4: case study") and "Scale: mini" in md
    assert md.index(tq["t2"]) < md.index("*(published)*") and md.count("*(published)*") == 2
    assert "+0.400" in md


def test_case_study_checks_its_inputs(tmp_path):
    from zsdr.evaluation.case_study import case_study

    target, _ = make_target(tmp_path / "tgt")
    mb = {"t0": 0.5, "t1": 0.5}
    other = {"x9": 0.5}
    stranger = {"t0": 0.4, "zz": 0.1}
    args = ("m", "m", {}, {}, str(tmp_path / "src"), str(target), "test")
    with pytest.raises(ValueError, match="per-query 'ndcg@10' share no query"):
        case_study(*args, mb, other)
    with pytest.raises(DataError, match="not judged.*'test' split"):
        case_study(*args, {"t0": 0.5, "zz": 0.5}, stranger)


def test_the_curves_job_writes_figures_3_and_5_and_table_3_in_one_call(tmp_path, points, logs):
    """rules/modir.smk's modir_curves job: write_modir_curves hands each writer its part of the job (Figure 3
    and Table 3 of its dataset, with that dataset's train logs; Figure 5 of its recipe and datasets)."""
    from zsdr.tables.modir_figures import write_modir_curves, write_table3

    settings = {"w/ Momentum": "ance-modir", "w/o Momentum": "ance-modir-single"}
    published = PUBLISHED_DIR / "modir_table3.csv"
    f = [tmp_path / n for n in ("f3.png", "f3.csv", "f5.png", "f5.csv", "t3.csv", "t3.md")]
    write_modir_curves(points, {"mini-beta": logs, "mini-alpha": {}}, dataset="mini-beta",
                       figure5={"recipe": "ance-modir-single", "datasets": ["mini-beta", "mini-alpha"]},
                       table3={"settings": settings, "steps": list(STEPS)}, published=published,
                       figure3_files=(f[0], f[1]), figure5_files=(f[2], f[3]), table3_files=(f[4], f[5]), scale="mini")
    assert f[0].read_bytes().startswith(PNG) and f[2].read_bytes().startswith(PNG)
    figure3 = read_rows(f[1])
    assert {r["dataset"] for r in figure3} == {"mini-beta"}
    assert sum(r["kind"] == "local" for r in figure3) == 2 * 10 + 2 * 2        # mini-beta's train logs
    figure5 = read_rows(f[3])
    assert [(r["dataset"], int(r["step"])) for r in figure5] == [(d, s) for d in ("mini-beta", "mini-alpha")
                                                                 for s in STEPS]
    want = acc("ance-modir-single", "mini-alpha", 60)["docs"]
    assert float(figure5[6]["global_domain_acc_docs"]) == pytest.approx(want)
    write_table3(points, tmp_path / "r.csv", tmp_path / "r.md", dataset="mini-beta", settings=settings,
                 steps=list(STEPS), published=published, scale="mini")
    assert f[4].read_bytes() == (tmp_path / "r.csv").read_bytes()
    assert f[5].read_bytes() == (tmp_path / "r.md").read_bytes()


def test_the_table4_job_reads_both_systems_metrics_files_in_one_call(tmp_path, tiny):
    """rules/modir.smk's modir_table4 job: write_case_study reads the two systems' per-query nDCG@10 from their
    metrics files, in the models' order, and writes the case study's rows with the paper's."""
    from zsdr.tables.modir_figures import write_case_study

    source, _, _ = make_source(tmp_path / "src")
    target, tq = make_target(tmp_path / "tgt")
    base = {f"t{i}": 0.5 for i in range(6)}
    after = {**base, "t1": 0.8, "t5": 0.1}
    metrics = [str(write_metrics(tmp_path, "tgt", name, s)) for name, s in (("before", base), ("after", after))]
    models = [str(tiny["bert"])] * 2
    options = [{"pooling": "cls", "similarity": "dot"}, {"pooling": "mean", "similarity": "dot"}]
    job = dict(models=models, options=options, source=str(source), target=str(target), split="test", neighbours=2,
               max_source_queries=None, seed=0, device="auto", batch_size=8,
               published=PUBLISHED_DIR / "modir_table4.csv", scale="mini")
    rows = write_case_study(tmp_path / "t4.csv", tmp_path / "t4.md", metrics=metrics, **job)
    assert [(r["qid"], r["target_query"]) for r in rows] == [("t1", tq["t1"]), ("t5", tq["t5"])]
    assert rows[0]["gain"] == pytest.approx(0.3) and rows[1]["gain"] == pytest.approx(-0.4)
    assert [r["source"] for r in read_rows(tmp_path / "t4.csv")] == ["zsdr", "zsdr", "published", "published"]
    swapped = write_case_study(tmp_path / "s.csv", tmp_path / "s.md", metrics=metrics[::-1], **job)
    assert [r["qid"] for r in swapped] == ["t5", "t1"]          # after -> before: the gains change sign
    with pytest.raises(ValueError, match="compares two systems"):
        write_case_study(tmp_path / "x.csv", tmp_path / "x.md", metrics=metrics[:1], **job)
    assert not (tmp_path / "x.csv").exists()
