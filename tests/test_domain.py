"""MoDIR's domain-invariance analyses: Global Domain-Acc, KNN-Source% and the driver over two BEIR folders."""

import json

import numpy as np
import pytest
import torch

from tests import test_encoder
from tests.test_encoder import make_dataset
from zsdr.evaluation.domain import domain_analysis, global_domain_accuracy, knn_source_share, write_domain_analysis

tiny = test_encoder.tiny  # the session fixture (a dataset and tiny backbones) shared with test_encoder


def clouds(n_source: int, n_target: int, shift: float, dim: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unit Gaussians centred at -shift/2 and +shift/2 in every coordinate (about the origin: 500 Adam steps
    at 5e-4 move the bias by at most ~0.25, so a boundary far from the origin would not be learnt)."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n_source, dim)) - shift / 2, rng.standard_normal((n_target, dim)) + shift / 2


# ------------------------------------------------------------------------------------ Domain-Acc
def test_domain_accuracy_separates_shifted_clouds():
    source, target = clouds(300, 300, shift=3.0)
    assert global_domain_accuracy(source, target, seed=0) > 0.95


def test_domain_accuracy_near_chance_on_one_distribution():
    source, target = clouds(300, 300, shift=0.0)
    assert 0.3 < global_domain_accuracy(source, target, seed=1) < 0.7


def test_domain_accuracy_deterministic_and_leaves_global_rng_alone():
    source, target = clouds(200, 150, shift=0.3)
    torch.manual_seed(123)
    expected, threads = torch.rand(3), torch.get_num_threads()
    torch.manual_seed(123)
    first = global_domain_accuracy(source, target, seed=5)
    assert torch.equal(torch.rand(3), expected) and torch.get_num_threads() == threads
    assert global_domain_accuracy(source, target, seed=5) == first
    assert global_domain_accuracy(source.astype(np.float16), target.astype(np.float16), seed=5) == \
        pytest.approx(first, abs=0.05)


def test_domain_accuracy_equalises_sizes_and_options():
    source, target = clouds(300, 60, shift=3.0)
    # 60 rows each: 42 train, 18 test per domain, so accuracies are multiples of 1/36
    acc = global_domain_accuracy(source, target, seed=0)
    assert acc > 0.95 and (acc * 36) == pytest.approx(round(acc * 36))
    short = global_domain_accuracy(target, source, seed=0, train_fraction=0.5, steps=20, batch_size=7, lr=1e-2)
    assert 0.0 <= short <= 1.0 and (short * 60) == pytest.approx(round(short * 60))


def test_domain_accuracy_rejects_bad_input():
    source, target = clouds(10, 10, shift=1.0)
    with pytest.raises(ValueError, match="at least 4 rows"):
        global_domain_accuracy(source, target[:3], seed=0)
    with pytest.raises(ValueError, match="dims differ"):
        global_domain_accuracy(source, target[:, :5], seed=0)
    with pytest.raises(ValueError, match="2-D"):
        global_domain_accuracy(source[0], target, seed=0)
    with pytest.raises(ValueError, match="train_fraction"):
        global_domain_accuracy(source, target, seed=0, train_fraction=1.0)
    with pytest.raises(ValueError, match="not finite"):
        global_domain_accuracy(np.full((5, 2), np.inf, dtype=np.float16), np.zeros((5, 2)), seed=0)


# ----------------------------------------------------------------------------------- KNN-Source%
# source documents at 0 and ~37 degrees, target documents at ~53 and 90 degrees
SOURCE_DOCS = np.array([[1.0, 0.0], [0.8, 0.6]])
TARGET_DOCS = np.array([[0.0, 1.0], [0.6, 0.8]])
DIAGONAL = np.sqrt(0.5)


def test_knn_source_share_by_hand():
    up, between, right = [0.0, 1.0], [DIAGONAL, DIAGONAL], [1.0, 0.0]
    # up: target docs score 1 and .8, source docs .6 and 0
    assert knn_source_share(SOURCE_DOCS, TARGET_DOCS, np.array([up]), k=2) == 0.0
    # between: [.8, .6] and [.6, .8] both score .99, the two axes .71: one of each
    assert knn_source_share(SOURCE_DOCS, TARGET_DOCS, np.array([between]), k=2) == 0.5
    assert knn_source_share(SOURCE_DOCS, TARGET_DOCS, np.array([right]), k=2) == 1.0
    assert knn_source_share(SOURCE_DOCS, TARGET_DOCS, np.array([up, between]), k=2) == 0.25
    assert knn_source_share(SOURCE_DOCS, TARGET_DOCS, np.array([up, right]), k=1) == 0.5


def test_knn_source_share_caps_k_and_checks_input():
    queries = np.array([[0.0, 1.0], [DIAGONAL, DIAGONAL]], dtype=np.float16)
    # k capped at the 5 documents: every query sees them all, 3 of them source documents
    assert knn_source_share(np.vstack([SOURCE_DOCS, [[0.5, 0.5]]]), TARGET_DOCS, queries) == pytest.approx(0.6)
    assert knn_source_share(np.zeros((0, 2)), TARGET_DOCS, queries, k=1) == 0.0
    with pytest.raises(ValueError, match="dims differ"):
        knn_source_share(SOURCE_DOCS, TARGET_DOCS, np.ones((1, 3)))
    with pytest.raises(ValueError, match="k must be"):
        knn_source_share(SOURCE_DOCS, TARGET_DOCS, queries, k=0)


# ---------------------------------------------------------------------------------------- driver
@pytest.fixture
def domains(tmp_path):
    """A source with 12 judged dev queries and 60 documents; a target with 20 judged test queries and 50."""
    source = make_dataset(tmp_path / "source", docs=60, queries=18, seed=1)
    (source / "qrels" / "test.tsv").rename(source / "qrels" / "dev.tsv")
    target = make_dataset(tmp_path / "target", docs=50, queries=30, seed=2)
    return source, target


def test_domain_analysis_end_to_end(tiny, domains, tmp_path):
    source, target = domains
    args = dict(model=str(tiny["bert"]), options={"pooling": "mean", "similarity": "cosine"}, source=str(source),
                source_split="dev", target=str(target), target_split="test", queries=16, docs=40, knn_docs=30,
                knn_k=10, seed=0, classifier={"steps": 50}, device="cpu")
    result = domain_analysis(**args)
    assert list(result) == ["global_domain_acc", "knn_source", "knn_k", "counts"]
    assert set(result["global_domain_acc"]) == {"queries", "docs"}
    assert all(0.0 <= v <= 1.0 for v in result["global_domain_acc"].values())
    assert 0.0 <= result["knn_source"] <= 1.0 and result["knn_k"] == 10
    assert result["counts"] == {"source_queries": 12, "target_queries": 12, "source_docs": 40, "target_docs": 40,
                                "knn_source_docs": 30, "knn_target_docs": 30, "knn_queries": 16}
    assert domain_analysis(**args) == result

    # every document indexed and k above their number: the share is the source's share of the index
    out = tmp_path / "out" / "domain.json"
    written = write_domain_analysis(out, **{**args, "knn_docs": None, "knn_k": 1000, "docs": 100})
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data == written
    assert (data["model"], data["source"], data["source_split"], data["target"], data["target_split"]) == \
        (str(tiny["bert"]), str(source), "dev", str(target), "test")
    assert data["knn_source"] == pytest.approx(60 / 110)
    assert data["counts"]["source_docs"] == data["counts"]["target_docs"] == 50
    assert (data["counts"]["knn_source_docs"], data["counts"]["knn_target_docs"]) == (60, 50)


def test_domain_analysis_checks_sizes_before_loading_the_model(domains):
    source, target = domains
    with pytest.raises(ValueError, match="at least 4 queries"):
        domain_analysis("no-such-model", {}, str(source), "dev", str(target), "test", queries=3, docs=10,
                        knn_docs=None, knn_k=5, seed=0, classifier={})
    with pytest.raises(ValueError, match="knn_docs must be >= 1"):
        domain_analysis("no-such-model", {}, str(source), "dev", str(target), "test", queries=10, docs=10,
                        knn_docs=0, knn_k=5, seed=0, classifier={})
