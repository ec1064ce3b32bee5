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
from zsdr.tables.published_csv import PUBLISHED_DIR

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


# ---------------------------------------------------------------------------------------------
# The library functions the COCO-DR rules' scripts call (query clusters, Figure 5c / Table 4, spans)


def _train_split(tiny, root):
    """The tiny dataset with its judged queries as the `train` split (a source dataset)."""
    from zsdr.data.formats import judged_queries, read_corpus, read_qrels, read_queries, write_beir

    corpus = {d: {"title": x.get("title", ""), "text": x["text"]} for d, x in read_corpus(tiny["data"]).items()}
    qrels = read_qrels(tiny["data"], "test")
    write_beir(root, corpus, read_queries(tiny["data"]), {"train": qrels})
    assert list(judged_queries(root, "train")) == list(judged_queries(tiny["data"], "test"))
    return root


def test_cluster_training_queries_is_kmeans_of_the_mining_models_query_embeddings(tiny, tmp_path):
    from zsdr.data.formats import judged_queries
    from zsdr.models.encoder import load_encoder
    from zsdr.training.idro import clusters_info_path, kmeans, read_clusters
    from zsdr.training.query_clusters import cluster_training_queries

    source = _train_split(tiny, tmp_path / "source")
    dense = {"device": "cpu", "precision": "fp32", "batch_size": 3, "gpus": 0}
    options = {"pooling": "mean", "similarity": "cosine"}
    kw = dict(model=str(tiny["bert"]), options=options, clusters=3, clustering={"niter": 7, "nredo": 2}, seed=5,
              dense=dense)
    out = cluster_training_queries(source, tmp_path / "c.jsonl", **kw)
    got = read_clusters(out)
    queries = judged_queries(source, "train")
    assert list(got) == list(queries)
    emb = load_encoder(str(tiny["bert"]), **options).encode_queries(list(queries.values()), batch_size=8)
    want, _ = kmeans(emb.astype(np.float32), 3, seed=5, niter=7, nredo=2)
    assert list(got.values()) == want.tolist()
    info = json.loads(clusters_info_path(out).read_text())
    assert info == {"model": str(tiny["bert"]), "clusters": 3, "seed": 5,
                    "sizes": np.bincount(want, minlength=3).tolist(), "niter": 7, "nredo": 2}
    again = cluster_training_queries(source, tmp_path / "again.jsonl", **kw)
    assert again.read_bytes() == out.read_bytes()
    with pytest.raises(KeyError):           # the K-means settings come from the config's schema, never a default
        cluster_training_queries(source, tmp_path / "x.jsonl", **{**kw, "clustering": {"niter": 7}})


def test_cocodr_cluster_analysis_records_and_table4(tiny, tmp_path):
    from zsdr.data.formats import judged_queries
    from zsdr.data.training_set import Example, write_negatives
    from zsdr.tables.cocodr_figures import cocodr_cluster_analysis

    source = _train_split(tiny, tmp_path / "source")
    qids = [f"q{i}" for i in range(12) if i % 3]               # the judged queries (train and test)
    clusters = tmp_path / "clusters.jsonl"
    clusters.write_text("".join(json.dumps({"qid": q, "cluster": i % 3}) + "\n" for i, q in enumerate(qids)))
    negatives = tmp_path / "negatives.jsonl"
    write_negatives(negatives, [Example(q, (f"d{(7 * int(q[1:])) % 60}",),
                                        tuple(f"d{(7 * int(q[1:]) + j) % 60}" for j in (2, 3, 5))) for q in qids],
                    "bm25")
    options = {"pooling": "mean", "similarity": "cosine"}
    sides = {k: {"system": s, "model": str(tiny[m]), "options": options, "scale": 20.0}
             for k, s, m in (("with_idro", "idro", "bert"), ("without_idro", "noidro", "roberta"))}
    metrics = {d: {k: str(write_metrics(tmp_path, d, sides[k]["system"],
                                        {q: (0.1 * (i % 4) if k == "with_idro" else 0.05 * (i % 3))
                                         for i, q in enumerate(qids)}))
                   for k in sides} for d in ("alpha", "beta")}
    kw = dict(source=source, targets={"alpha": str(tiny["data"]), "beta": str(tiny["data"])},
              splits={"alpha": "test", "beta": "test"}, with_idro=sides["with_idro"],
              without_idro=sides["without_idro"], metrics=metrics, table4_dataset="beta", queries=3,
              max_source_queries=None, seed=1, dense={"device": "cpu", "batch_size": 4}, scale="mini",
              clusters=str(clusters), negatives=str(negatives), published=PUBLISHED_DIR / "cocodr_table4.csv")
    out = tmp_path / "out"
    files = dict(analysis=[str(out / "alpha.json"), str(out / "beta.json")], csv=out / "t4.csv", md=out / "t4.md")
    records = cocodr_cluster_analysis(**kw, **files)

    # each cluster's training loss is its queries' mean loss under each model (cluster_training_losses)
    assigned = {q: i % 3 for i, q in enumerate(qids)}
    losses = {k: cluster_training_losses(s["model"], s["options"], source, negatives, assigned, 3, scale=20.0, seed=1,
                                         batch_size=4, device="cpu") for k, s in sides.items()}
    for d in ("alpha", "beta"):
        record = json.loads((out / f"{d}.json").read_text())
        assert record == records[d] and record["dataset"] == d
        c = record["nearest_cluster"]
        assert str(c) == max(record["scores"], key=record["scores"].get)
        assert record["cluster_queries"] == sum(1 for q in qids if assigned[q] == c)
        assert record["loss_with"] == pytest.approx(losses["with_idro"][c]["loss"])
        assert record["loss_without"] == pytest.approx(losses["without_idro"][c]["loss"])
        assert (record["with"], record["without"], record["clusters"]) == ("idro", "noidro", str(clusters))
    # Table 4: beta's three queries with the largest gains (with - without), each with a source training query
    rows = [r for r in read_rows(out / "t4.csv") if r["source"] == "zsdr"]
    assert [(r["qid"], r["target_ndcg10_gain"]) for r in rows] == [("q5", "+0.300"), ("q11", "+0.250"),
                                                                   ("q10", "+0.200")]
    assert {r["nearest_source_query"] for r in rows} <= set(judged_queries(source, "train").values())
    with pytest.raises(ValueError, match="Table 4's dataset 'gamma' is not a target"):
        cocodr_cluster_analysis(**{**kw, "table4_dataset": "gamma"}, **files)


def test_corpus_spans_in_shards_merge_to_the_one_pass_file(tiny, tmp_path):
    import random

    from zsdr.data.formats import write_beir
    from zsdr.data.spans import read_spans
    from zsdr.pretrain.spans import write_corpus_spans

    rng = random.Random(2)
    words = [w for d in read_corpus_texts(tiny["data"]) for w in d.split()][:400]
    sentence = lambda: " ".join(rng.choices(words, k=rng.randint(2, 5))).capitalize() + "."   # noqa: E731
    corpus = {f"d{i}": {"title": "", "text": " ".join(sentence() for _ in range(rng.randint(1, 8)))} for i in range(25)}
    data = tmp_path / "data"
    write_beir(data, corpus, {"q0": "w"}, {"test": {"q0": {"d0": 1}}})
    spans = {"max_tokens": 16, "new_span_probability": 0.1, "max_docs": None}
    kw = dict(tokenizer=str(tiny["bert"]), spans=spans, seed=4)
    whole = write_corpus_spans(data, tmp_path / "all.arrow", **kw)
    assert whole["documents"] == 25 and 5 < whole["kept"] < 25
    parts = [tmp_path / f"spans.{i}-of-3.arrow" for i in range(3)]
    for i, part in enumerate(parts):
        write_corpus_spans(data, part, shard=(i, 3), **kw)
    merged = write_corpus_spans(data, tmp_path / "merged.arrow", parts=parts, **kw)
    assert merged == {"documents": whole["kept"], "parts": 3}
    a, b = read_spans(tmp_path / "all.arrow"), read_spans(tmp_path / "merged.arrow")
    assert len(a) == len(b) == whole["kept"] and all(list(a[i]) == list(b[i]) for i in range(len(a)))
    with pytest.raises(ValueError, match="not merged from parts"):
        write_corpus_spans(data, tmp_path / "x.arrow", parts=parts, shard=(0, 3), **kw)
    with pytest.raises(KeyError):           # cocodr.spans comes whole from the config's schema
        write_corpus_spans(data, tmp_path / "y.arrow", **{**kw, "spans": {"max_tokens": 12}})


def read_corpus_texts(dataset):
    from zsdr.data.formats import read_corpus

    return [d["text"] for d in read_corpus(dataset).values()]
