"""COCO-DR's analyses (zsdr.evaluation.cocodr) and its Figures 3–5 and Table 4 (zsdr.tables.cocodr_figures)
on hand examples, a tiny encoder and synthetic metrics / stats files."""

import json
import math

import numpy as np
import pytest
import torch

from tests import test_encoder
from tests.test_tables import read_rows, write_metrics
from zsdr.evaluation.cocodr import (alignment, cluster_centroids, cluster_training_losses, nearest_clusters,
                                    nearest_source, pick_gains, training_losses, uniformity)
from zsdr.io import DataError
from zsdr.tables.spec import PUBLISHED_DIR

tiny = test_encoder.tiny          # the session fixture of test_encoder: a tiny dataset and tiny backbones

PNG = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------
# Geometry


def test_alignment_and_uniformity_by_hand():
    x = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    assert alignment(x, x) == 0.0
    # unit vectors at 0 and 90 degrees paired with each other: ‖x − y‖² = 2 for both pairs
    e = np.eye(2)
    assert alignment(e, e[::-1]) == pytest.approx(2.0)
    # normalize: [0, 2] and [3, 4] are put on the unit sphere first; raw: the plain squared distances
    y = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 5.0]])
    want = (0 + 0 + (0.6 ** 2 + 0.2 ** 2)) / 3
    assert alignment(x, y) == pytest.approx(want)
    assert alignment(x, y, normalize=False) == pytest.approx((0 + 1 + 10) / 3)

    # two orthogonal unit vectors: one pair at squared distance 2, log exp(−2·2) = −4
    assert uniformity(e) == pytest.approx(-4.0)
    assert uniformity(e * 5) == pytest.approx(-4.0)
    assert uniformity(e * 5, normalize=False) == pytest.approx(-2 * 50)
    assert uniformity(e, t=1.0) == pytest.approx(-2.0)
    # 0, 90 and 180 degrees: squared distances 2, 4, 2
    three = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    assert uniformity(three) == pytest.approx(math.log((2 * math.exp(-4) + math.exp(-8)) / 3))
    assert uniformity(np.ones((4, 3))) == pytest.approx(0.0, abs=1e-12)      # everything at one point
    # blocks: the same value whatever the block size (pairs across blocks counted once)
    cloud = np.random.default_rng(0).standard_normal((37, 5))
    full = uniformity(cloud, block=1000)
    assert uniformity(cloud, block=4) == pytest.approx(full) and uniformity(cloud, block=1) == pytest.approx(full)
    d2 = ((cloud / np.linalg.norm(cloud, axis=1, keepdims=True))[:, None] - cloud[None] /
          np.linalg.norm(cloud, axis=1)[None, :, None]) ** 2
    pairs = d2.sum(-1)[np.triu_indices(37, 1)]
    assert full == pytest.approx(math.log(np.mean(np.exp(-2 * pairs))))

    with pytest.raises(ValueError, match="pair up"):
        alignment(x, x[:2])
    with pytest.raises(ValueError, match="at least 2 rows"):
        uniformity(x[:1])
    with pytest.raises(ValueError, match="zero row"):
        uniformity(np.zeros((3, 2)))


def test_nearest_clusters_by_average_dot_product():
    members = np.array([[1.0, 0.0], [3.0, 0.0], [0.0, 1.0], [0.0, 2.0], [-1.0, -1.0]])
    labels = [0, 0, 1, 1, 3]
    centroids = cluster_centroids(members, labels, 4)
    np.testing.assert_allclose(centroids[[0, 1, 3]], [[2.0, 0.0], [0.0, 1.5], [-1.0, -1.0]])
    assert np.isnan(centroids[2]).all()
    target = np.array([[1.0, 1.0], [0.0, 2.0]])       # mean [0.5, 1.5]
    best, scores = nearest_clusters(target, centroids)
    # the average of <t_i, s_j> over every target query and member equals <mean t, centroid>
    direct = [np.mean(target @ members[np.array(labels) == k].T) for k in (0, 1, 3)]
    np.testing.assert_allclose(scores[[0, 1, 3]], direct)
    assert best == 1 and scores[2] == -np.inf
    assert nearest_clusters(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [1.0, 5.0]]))[0] == 0   # tie: lower
    with pytest.raises(ValueError, match="centroids must be"):
        nearest_clusters(target, np.ones((2, 3)))


def test_pick_gains_and_nearest_source():
    before = {"a": 0.5, "b": 0.2, "c": 0.1, "d": 0.9, "e": 0.0, "only_before": 0.0}
    after = {"a": 0.7, "b": 0.4, "c": 0.4, "d": 0.8, "e": 0.0, "only_after": 1.0}
    picked = pick_gains(before, after, n=3)
    assert [q for q, _ in picked] == ["c", "a", "b"]     # a and b tie at +0.2: qid order
    assert picked[0][1] == pytest.approx(0.3)
    assert [q for q, _ in pick_gains(before, after, n=10)] == ["c", "a", "b", "e", "d"]
    with pytest.raises(ValueError, match="share no query"):
        pick_gains({"x": 1.0}, {"y": 1.0})
    source = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.7, 0.7]])
    # [0, 2]: rows 1 and 2 tie, the lower wins; [-1, -1]: rows 0, 1, 2 tie at -1
    assert nearest_source(np.array([[0.0, 2.0], [1.0, 0.1], [-1.0, -1.0], [1.0, 1.0]]), source) == [1, 0, 0, 3]


# ---------------------------------------------------------------------------------------------
# Training losses on the source


@pytest.fixture
def negatives(tiny, tmp_path):
    """Hard negatives for the tiny dataset's queries q0..q11 (each: one positive, four negatives)."""
    from zsdr.data.training_set import Example, write_negatives

    examples = [Example(f"q{i}", (f"d{(7 * i) % 60}",), tuple(f"d{(7 * i + j) % 60}" for j in (2, 3, 5, 9)))
                for i in range(12)]
    path = tmp_path / "negatives.jsonl"
    write_negatives(path, examples, "bm25")
    return path


def test_cluster_training_losses_equal_a_direct_computation(tiny, negatives):
    from zsdr.losses.contrastive import pairwise_nll
    from zsdr.models.encoder import Encoder
    from zsdr.data.training_set import TrainingSet

    options = {"pooling": "mean", "similarity": "cosine"}
    clusters = {"q0": 0, "q1": 1, "q2": 0, "q3": 2, "q5": 0, "q6": 1, "q9": 1, "q10": 0, "gone": 3}
    kw = dict(negatives_per_query=2, scale=20.0, seed=3, batch_size=4, device="cpu")
    out = cluster_training_losses(str(tiny["bert"]), options, tiny["data"], negatives, clusters, 4, **kw)
    assert list(out) == [0, 1, 2, 3]
    assert [out[c]["queries"] for c in range(4)] == [4, 3, 1, 0] and out[3]["loss"] is None

    # cluster 0 by hand: the same draws, the encoder's embeddings, the project's pairwise NLL
    data, enc = TrainingSet(tiny["data"], negatives), Encoder.from_pretrained(tiny["bert"], **options)
    index = {ex.qid: i for i, ex in enumerate(data.examples)}
    pos, neg = [], []
    for qid in ("q0", "q2", "q5", "q10"):
        ex, p, ns = data.sample(index[qid], epoch=0, seed=3, negatives=2)
        q = enc.encode_queries([data.queries[qid]])[0]
        d = enc.encode_docs([data.corpus[x] for x in (p, *ns)])
        scores = 20.0 * (d @ q)
        pos.append(scores[0])
        neg.append(scores[1:])
    want = float(pairwise_nll(torch.tensor(np.array(pos)), torch.tensor(np.array(neg))))
    assert out[0]["loss"] == pytest.approx(want, rel=1e-5)

    per_query = training_losses(str(tiny["bert"]), options, tiny["data"], negatives, qids=["q0", "q2", "q5", "q10"],
                                **kw)
    assert sorted(per_query) == ["q0", "q10", "q2", "q5"]
    assert np.mean(list(per_query.values())) == pytest.approx(out[0]["loss"])
    # a sample of at most 3 queries, the same whichever order clusters are listed in
    sample = cluster_training_losses(str(tiny["bert"]), options, tiny["data"], negatives, clusters, 4,
                                     max_queries=3, **{k: v for k, v in kw.items() if k != "batch_size"})
    assert sum(v["queries"] for v in sample.values()) == 3
    with pytest.raises(ValueError, match="not an integer in 0..3"):
        cluster_training_losses(str(tiny["bert"]), options, tiny["data"], negatives, {"q0": 4}, 4)


def test_span_geometry_on_a_tiny_model(tiny, tmp_path):
    from zsdr.evaluation.cocodr import span_geometry
    from zsdr.models.encoder import Encoder
    from zsdr.data.spans import sample_pair
    from zsdr.pretrain.coco import contrastive_loss_on, span_pair_vectors
    from zsdr.pretrain.spans import write_span_documents

    rng = np.random.default_rng(0)
    words = test_encoder.WORDS
    documents = [[" ".join(rng.choice(words, size=int(rng.integers(3, 9)))) for _ in range(int(rng.integers(2, 5)))]
                 for _ in range(10)]
    spans = tmp_path / "spans.arrow"
    write_span_documents(spans, ((f"d{i}", s) for i, s in enumerate(documents)))
    stats = span_geometry(str(tiny["bert"]), spans, docs=7, batch_size=3, seed=2, device="cpu")
    loss = contrastive_loss_on(str(tiny["bert"]), spans, docs=7, batch_size=3, seed=2, device="cpu")
    assert {k: stats[k] for k in loss} == loss and loss["documents"] == 6     # the loss drops a last batch of 1
    assert stats["geometry_documents"] == 7 and stats["max_length"] == 128
    # the pairs of epoch 0 of the first 7 documents of the seeded permutation, [CLS] of the last layer
    order = np.random.default_rng(2).permutation(10)[:7]
    pairs = [sample_pair(len(documents[i]), 2, 0, int(i)) for i in order]
    enc = Encoder.from_pretrained(tiny["bert"], pooling="cls", similarity="dot")
    x1 = enc.encode_queries([documents[i][a] for i, (a, _) in zip(order, pairs)])
    x2 = enc.encode_queries([documents[i][b] for i, (_, b) in zip(order, pairs)])
    got = span_pair_vectors(str(tiny["bert"]), spans, docs=7, seed=2, batch_size=2, device="cpu").numpy()
    np.testing.assert_allclose(got[0::2], x1, atol=1e-5)
    np.testing.assert_allclose(got[1::2], x2, atol=1e-5)
    assert stats["alignment"] == pytest.approx(alignment(x1, x2), abs=1e-6)
    assert stats["uniformity"] == pytest.approx(uniformity(np.concatenate([x1, x2])), abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Figures


def metrics_file(root, dataset, system, value):
    return str(write_metrics(root, dataset, system, {"q1": value - 0.05, "q2": value + 0.05}))


def write_json(root, name, data):
    path = root / "analysis" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return str(path)


TARGETS = ("mini-alpha", "mini-beta")


def test_figure3_average_against_clusters_and_temperature(tmp_path):
    from zsdr.tables.cocodr_figures import render_figure3

    points = []
    for sweep, values in (("clusters", (10, 50, 25)), ("temperature", (0.05, 0.5))):
        for v in values:
            system = f"cocodr-{sweep}-{v}"
            points.append({"sweep": sweep, "value": v, "system": system,
                           "metrics": [metrics_file(tmp_path, d, system, 0.3 + i * 0.1 + v / 1000)
                                       for i, d in enumerate(TARGETS)]})
    reference = {"label": "GPL", "metrics": [metrics_file(tmp_path, d, "gpl", 0.33) for d in TARGETS]}
    rows = render_figure3(points, tmp_path / "f3.png", tmp_path / "f3.csv", reference=reference, scale="mini")
    assert (tmp_path / "f3.png").read_bytes().startswith(PNG)
    csv_rows = read_rows(tmp_path / "f3.csv")
    assert list(csv_rows[0]) == ["sweep", "value", "system", "datasets", "average"]
    assert [(r["sweep"], r["value"]) for r in csv_rows] == [("clusters", "10"), ("clusters", "25"), ("clusters", "50"),
                                                            ("temperature", "0.05"), ("temperature", "0.5"),
                                                            ("reference", "")]
    assert float(csv_rows[2]["average"]) == pytest.approx(0.35 + 50 / 1000)
    assert csv_rows[-1]["system"] == "GPL" and float(csv_rows[-1]["average"]) == pytest.approx(0.33)
    assert len(rows) == 6 and {r["datasets"] for r in csv_rows} == {"2"}

    # only one sweep: the other panel says "not produced"; no reference: no line
    rows = render_figure3(points[:3], tmp_path / "g.png", tmp_path / "g.csv")
    assert [r["sweep"] for r in rows] == ["clusters"] * 3
    bad = dict(points[0], metrics=points[0]["metrics"][:1])
    with pytest.raises(DataError, match="scores \\['mini-alpha'\\].*fix: run snakemake cocodr"):
        render_figure3([points[1], bad], tmp_path / "h.png", tmp_path / "h.csv")
    broken = tmp_path / "metrics" / "mini-alpha" / "broken.json"
    broken.write_text("{}")
    with pytest.raises(DataError, match="broken.json.*'aggregate'"):
        render_figure3([dict(points[0], metrics=[str(broken)])], tmp_path / "h.png", tmp_path / "h.csv")
    assert not (tmp_path / "h.png").exists() and not (tmp_path / "h.csv").exists()


def test_figure4_metric_per_episode(tmp_path):
    from zsdr.tables.cocodr_figures import render_figure4

    points = [{"variant": variant, "episode": e, "dataset": d,
               "metrics": metrics_file(tmp_path, d, f"{variant}-{e}", 0.2 + 0.05 * e + (0.02 if variant == "COCO-DR"
                                                                                       else 0.0))}
              for d in ("mini-beta", "mini-alpha") for variant in ("COCO-DR", "w/o iDRO") for e in (3, 1, 2)]
    rows = render_figure4(points, tmp_path / "f4.png", tmp_path / "f4.csv", scale="mini")
    assert (tmp_path / "f4.png").read_bytes().startswith(PNG)
    csv_rows = read_rows(tmp_path / "f4.csv")
    assert list(csv_rows[0]) == ["dataset", "variant", "episode", "label", "ndcg@10"]
    assert [(r["dataset"], r["variant"], r["label"]) for r in csv_rows[:4]] == [
        ("mini-beta", "COCO-DR", "Epi-1"), ("mini-beta", "COCO-DR", "Epi-2"), ("mini-beta", "COCO-DR", "Epi-3"),
        ("mini-beta", "w/o iDRO", "Epi-1")]
    assert float(csv_rows[2]["ndcg@10"]) == pytest.approx(0.37) and len(rows) == 12
    with pytest.raises(ValueError, match="two Figure 4 points"):
        render_figure4(points + points[:1], tmp_path / "x.png", tmp_path / "x.csv")
    with pytest.raises(DataError, match="'recall@5' was not computed"):
        render_figure4(points, tmp_path / "x.png", tmp_path / "x.csv", metric="recall@5")


def test_figure5_three_panels_and_empty_ones(tmp_path):
    from zsdr.tables.cocodr_figures import render_figure5

    loss_points = [{"dataset": d, "before": write_json(tmp_path, f"{d}-before", {"contrastive_loss": 4.0}),
                    "after": write_json(tmp_path, f"{d}-after", {"contrastive_loss": 2.0 + i}),
                    "with": metrics_file(tmp_path, d, "coco", 0.44),
                    "without": metrics_file(tmp_path, d, "nococo", 0.4)}
                   for i, d in enumerate(TARGETS)]
    geometry = [{"label": m, "dataset": d, "stats": write_json(tmp_path, f"geo-{m}-{d}",
                                                               {"alignment": 0.5 + i, "uniformity": -3.0 + j})}
                for i, m in enumerate(("Condenser", "COCO")) for j, d in enumerate(TARGETS)]
    clusters = [{"dataset": "mini-alpha", "analysis": write_json(tmp_path, "c-alpha", {
        "nearest_cluster": 7, "loss_without": 0.5, "loss_with": 0.4}),
        "with": metrics_file(tmp_path, "mini-alpha", "idro", 0.3), "without": metrics_file(tmp_path, "mini-alpha",
                                                                                          "noidro", 0.25)}]
    rows = render_figure5(loss_points, geometry, clusters, tmp_path / "f5.png", tmp_path / "f5.csv", scale="mini")
    assert (tmp_path / "f5.png").read_bytes().startswith(PNG)
    csv_rows = read_rows(tmp_path / "f5.csv")
    assert list(csv_rows[0]) == ["panel", "label", "dataset", "x", "y"]
    assert [r["panel"] for r in csv_rows] == ["a", "a", "b", "b", "b", "b", "c"] and len(rows) == 7
    a = {r["dataset"]: (float(r["x"]), float(r["y"])) for r in csv_rows if r["panel"] == "a"}
    assert a["mini-alpha"] == pytest.approx((0.5, 0.1)) and a["mini-beta"] == pytest.approx((0.25, 0.1))
    b = [r for r in csv_rows if r["panel"] == "b"]
    assert (b[3]["label"], b[3]["dataset"], float(b[3]["x"]), float(b[3]["y"])) == ("COCO", "mini-beta", -2.0, 1.5)
    c = csv_rows[-1]
    assert (float(c["x"]), float(c["y"])) == pytest.approx((0.2, 0.2))

    rows = render_figure5([], [], clusters, tmp_path / "g.png", tmp_path / "g.csv")
    assert [r["panel"] for r in rows] == ["c"] and (tmp_path / "g.png").read_bytes().startswith(PNG)
    assert render_figure5([], [], [], tmp_path / "e.png", tmp_path / "e.csv") == []
    assert read_rows(tmp_path / "e.csv") == []

    bad = write_json(tmp_path, "bad", {"contrastive_loss": "high"})
    with pytest.raises(DataError, match="bad.json.*'contrastive_loss'.*fix: run snakemake cocodr"):
        render_figure5([dict(loss_points[0], after=bad)], [], [], tmp_path / "x.png", tmp_path / "x.csv")
    zero = write_json(tmp_path, "zero", {"contrastive_loss": 0.0})
    with pytest.raises(DataError, match="zero.json.*not > 0"):
        render_figure5([dict(loss_points[0], before=zero)], [], [], tmp_path / "x.png", tmp_path / "x.csv")
    with pytest.raises(DataError, match="geo.json.*'uniformity'"):
        render_figure5([], [dict(geometry[0], stats=write_json(tmp_path, "geo", {"alignment": 1.0}))], [],
                       tmp_path / "x.png", tmp_path / "x.csv")
    with pytest.raises(DataError, match="nc.json.*nearest_cluster"):
        render_figure5([], [], [dict(clusters[0], analysis=write_json(tmp_path, "nc", {"loss_without": 1.0,
                                                                                        "loss_with": 1.0}))],
                       tmp_path / "x.png", tmp_path / "x.csv")
    with pytest.raises(DataError, match="missing.json.*file not found"):
        render_figure5([], [dict(geometry[0], stats=str(tmp_path / "missing.json"))], [], tmp_path / "x.png",
                       tmp_path / "x.csv")
    assert not (tmp_path / "x.png").exists()


def test_table4_our_rows_beside_the_published(tmp_path):
    from zsdr.tables.cocodr_figures import write_table4

    rows = [{"target_query": "what is w1 | w2", "qid": "t3", "target_gain": 0.25,
             "nearest_source_query": "w1 w7 gene", "source_gain": 0.0412},
            {"target_query": "Alpha protein", "qid": "t1", "target_gain": 0.1, "nearest_source_query": "cell Beta",
             "source_gain": None}]
    write_table4(tmp_path / "t4.csv", tmp_path / "t4.md", rows, PUBLISHED_DIR / "cocodr_table4.csv", "mini")
    csv_rows = read_rows(tmp_path / "t4.csv")
    assert list(csv_rows[0]) == ["source", "target_query", "qid", "target_ndcg10_gain", "nearest_source_query",
                                 "source_gain"]
    assert [r["source"] for r in csv_rows] == ["zsdr"] * 2 + ["published"] * 5
    assert (csv_rows[0]["target_ndcg10_gain"], csv_rows[0]["source_gain"]) == ("+0.250", "+0.041")
    assert csv_rows[1]["source_gain"] == "" and csv_rows[1]["qid"] == "t1"
    assert csv_rows[2]["nearest_source_query"] == "different types of hiv virus"
    assert csv_rows[2]["target_ndcg10_gain"] == "+0.174" and csv_rows[2]["qid"] == ""
    md = (tmp_path / "t4.md").read_text()
    assert md.startswith("# COCO-DR Table 4: case study") and "Scale: mini" in md
    assert "| what is w1 \\| w2 (t3) | +0.250 | w1 w7 gene | +0.041 |" in md
    assert "| Alpha protein (t1) | +0.100 | cell Beta | — |" in md
    assert md.count("*(published)*") == 5 and md.index("Alpha protein") < md.index("*(published)*")
    assert "how long does hep c live outside body" in md

    write_table4(tmp_path / "u.csv", tmp_path / "u.md", [], scale="mini")      # the default published file
    assert [r["source"] for r in read_rows(tmp_path / "u.csv")] == ["published"] * 5
    bad = tmp_path / "pub.csv"
    bad.write_text("target_query,gain\nx,1\n")
    with pytest.raises(DataError, match="pub.csv.*no column"):
        write_table4(tmp_path / "v.csv", tmp_path / "v.md", rows, bad)
    assert not (tmp_path / "v.csv").exists()
