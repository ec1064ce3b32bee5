"""COCO-DR's iDRO and the GroupDRO baseline: the weight updates against hand-computed examples,
the robust losses, the query clustering and its files, and training with a term (exact resume)."""

import json
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import mini_with_backbones
from zsdr.io import DataError
from zsdr.losses.contrastive import pairwise_nll
from zsdr.training.idro import (DroConfig, GroupDroTerm, IdroTerm, cluster_stats, clusters_info_path,
                                groupdro_update, idro_update, kmeans, read_clusters, write_clusters)
from zsdr.workflow import section_defaults

DRO = section_defaults("recipes.<name>.dro")   # the schema's defaults, which the workflow fills into a spec


def dro(**keys) -> DroConfig:
    """A ``dro`` section over the schema's defaults."""
    return DroConfig(**{**DRO, **keys})

MINI = {
    "seed": 5, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 160, "train_queries": 64, "dev_queries": 8}],
}
SIZE = {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 64, "max_length": 64, "dropout": 0.0}

# Three clusters, cluster 1 absent. Normalised gradients: ĝ0 = (3, 4) / 5 = (0.6, 0.8), ĝ1 = 0,
# ĝ2 = (0, 1); Gram: <ĝ0, ĝ0> = <ĝ2, ĝ2> = 1, <ĝ0, ĝ2> = 0.8, row/column 1 zero.
# With β = 1/2: L^β = (2, 0, 1), so R00 = 2·2·1 = 4, R02 = R20 = 2·1·0.8 = 1.6, R22 = 1, the rest 0;
# a = ρ · (column means over 3 rows) = ρ · (5.6/3, 0, 2.6/3); minus the max: (0, −5.6ρ/3, −ρ).
LOSSES = torch.tensor([4.0, 0.0, 1.0])
COUNTS = torch.tensor([2.0, 0.0, 1.0])
GRADS = torch.tensor([[3.0, 4.0], [0.0, 0.0], [0.0, 2.0]])


# ------------------------------------------------------------------------------------- iDRO update
def test_idro_update_matches_the_hand_computation():
    # ρ = ln 2: exp(−ρ) = 1/2; h_prev all ones: h ∝ (1, 0, 1/2) -> (2/3, 0, 1/3), the floor lifts cluster 1 to ε
    h = idro_update(torch.ones(3), LOSSES, COUNTS, GRADS, beta=0.5, rho=math.log(2), gamma=0.1, eps=0.01)
    assert torch.allclose(h, torch.tensor([2 / 3, 0.01, 1 / 3]), atol=1e-6)
    # previous weights enter as h_prev^γ: γ = 1/2, h_prev = (0.25, 0.01, 0.64) -> (0.5, 0.1, 0.8);
    # h ∝ (0.5 · 1, 0, 0.8 · 1/2) = (0.5, 0, 0.4) -> (5/9, 0, 4/9); the absent cluster's 0.1 plays no part
    h = idro_update(torch.tensor([0.25, 0.01, 0.64]), LOSSES, COUNTS, GRADS, beta=0.5, rho=math.log(2), gamma=0.5,
                    eps=0.01)
    assert torch.allclose(h, torch.tensor([5 / 9, 0.01, 4 / 9]), atol=1e-6)
    assert math.isclose(float(h.sum()), 1.01, rel_tol=1e-6)        # the floor's mass comes on top of 1


def test_idro_update_before_the_floor_and_where_the_floor_binds():
    # ε = 0 shows the weights before the floor: present ones sum to exactly 1, the absent one is 0
    h = idro_update(torch.tensor([0.3, 0.9, 0.2]), LOSSES, COUNTS, GRADS, beta=0.5, rho=0.7, gamma=0.1, eps=0.0)
    assert float(h[1]) == 0.0 and math.isclose(float(h[0] + h[2]), 1.0, rel_tol=1e-6)
    # ρ = ln 1000: h ∝ (1, 0, 1/1000) -> (1/1.001, 0, 0.001/1.001 ≈ 0.000999) -> cluster 2 floored at ε
    h = idro_update(torch.ones(3), LOSSES, COUNTS, GRADS, beta=0.5, rho=math.log(1000), gamma=0.1, eps=0.01)
    assert torch.allclose(h, torch.tensor([1 / 1.001, 0.01, 0.01]), atol=1e-6)
    assert bool((h >= 0.01).all())                                 # (0.01 in float32)
    # a cluster held at the floor comes back with the next batch that has it: with ρ = 0 and γ = 0.1,
    # h ∝ h_prev^γ = (0.999^0.1, 0.01^0.1, 0.01^0.1) = (0.9999, 0.631, 0.631), all present
    back = idro_update(h, LOSSES, torch.tensor([2.0, 1.0, 1.0]), GRADS, beta=0.5, rho=0.0, gamma=0.1, eps=0.01)
    a, b = (1 / 1.001) ** 0.1, 0.01 ** 0.1
    assert torch.allclose(back, torch.tensor([a, b, b]) / (a + 2 * b), atol=1e-5)
    # ρ = 0: no gradient information, h ∝ h_prev^γ on the present clusters
    h = idro_update(torch.tensor([1.0, 1.0, 4.0]), LOSSES, COUNTS, GRADS, beta=0.5, rho=0.0, gamma=0.5, eps=0.0)
    assert torch.allclose(h, torch.tensor([1 / 3, 0.0, 2 / 3]), atol=1e-6)


# ------------------------------------------------------------------------------------ the terms
def _tiny_bert(layers=2):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=40, hidden_size=8, num_hidden_layers=layers, num_attention_heads=2,
                     intermediate_size=16, max_position_embeddings=16, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    return BertModel(cfg)


def _clusters_file(tmp_path, assignments):
    path = tmp_path / "clusters.jsonl"
    write_clusters(path, [f"q{i}" for i in range(len(assignments))], np.array(assignments), {"k": 3})
    return path


def _per_query(bert, ids):
    out = bert(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[:, 0]
    return (out ** 2).mean(dim=1) + 0.1   # positive "losses" with a graph through every layer


def test_idro_term_weights_the_cluster_losses_with_the_previous_weights(tmp_path):
    bert = _tiny_bert()
    cfg = dro(clusters=3, grad_layers=1, beta=0.25, rho=0.05, gamma=0.1, eps=0.01,
                    clusters_file=str(_clusters_file(tmp_path, [0, 0, 2])))
    term = IdroTerm(cfg, SimpleNamespace(backbone=bert))
    # grad_layers = 1 of 2 layers: only layer 1's parameters give the cluster gradients
    assert term.param_names and all("layer.1." in n for n in term.param_names)
    params = [p for n, p in bert.named_parameters() if n in set(term.param_names)]
    ids = torch.tensor([[1, 5, 7, 2], [1, 9, 3, 2], [1, 4, 4, 2]])
    clusters = term.cluster_ids(["q0", "q1", "q2"])
    per_query = _per_query(bert, ids)
    robust, logs = term.loss(per_query, clusters)
    # first step: h_prev = 1 -> L0 + L1 + L2 with L1 = 0 (absent)
    expected = per_query[:2].mean() + per_query[2]
    assert torch.allclose(robust, expected)
    # the update is idro_update of the cluster losses and their gradients over the selected parameters
    losses, counts = cluster_stats(per_query, clusters, 3)
    grads = torch.zeros(3, sum(p.numel() for p in params))
    for k in (0, 2):
        grads[k] = torch.cat([g.reshape(-1) for g in torch.autograd.grad(losses[k], params, retain_graph=True)])
    h1 = idro_update(torch.ones(3), losses.detach(), counts, grads, 0.25, 0.05, 0.1, 0.01)
    assert torch.allclose(term.h, h1) and float(term.h[1]) == pytest.approx(0.01)
    assert logs["dro_present_clusters"] == 2 and logs["dro_max_weight"] == pytest.approx(float(h1.max()))
    assert 0 < logs["dro_entropy"] <= math.log(3)
    # the robust loss trains the whole encoder, not only the gradient layers
    bert.zero_grad()
    robust.backward()
    assert bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert bert.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    # second step: the weights of the first
    per_query = _per_query(bert, ids.flip(0))
    robust, _ = term.loss(per_query, clusters)
    assert torch.allclose(robust, h1[0] * per_query[:2].mean() + h1[2] * per_query[2])
    # update=False (evaluation) uses the weights without moving them
    h2 = term.h.clone()
    term.loss(_per_query(bert, ids), clusters, update=False)
    assert torch.equal(term.h, h2)
    # checkpointed state: a fresh term continues with the same weights
    fresh = IdroTerm(cfg, SimpleNamespace(backbone=bert))
    fresh.load_state_dict(term.state_dict())
    assert torch.equal(fresh.h, h2)
    with pytest.raises(DataError, match="re-run the query clustering"):
        term.cluster_ids(["q0", "unknown"])


def test_idro_term_errors_name_the_fix(tmp_path):
    path = str(_clusters_file(tmp_path, [0, 1, 2]))
    with pytest.raises(ValueError, match="grad_layers"):
        frozen = SimpleNamespace(backbone=_tiny_bert().requires_grad_(False))
        IdroTerm(dro(clusters=3, clusters_file=path), frozen)
    with pytest.raises(DataError, match="dro.clusters"):
        IdroTerm(dro(clusters=2, clusters_file=path), SimpleNamespace(backbone=_tiny_bert()))
    with pytest.raises(ValueError, match="clusters_file is required"):
        dro()
    with pytest.raises(ValueError, match=r"dro: no rho \(the workflow fills every key's default from schemas/"):
        DroConfig.from_dict({**{k: v for k, v in DRO.items() if k != "rho"}, "clusters_file": path})
    with pytest.raises(ValueError, match=r"unknown key\(s\) alpha; expected beta"):
        DroConfig.from_dict({"alpha": 0.25, "clusters_file": path})
    with pytest.raises(ValueError, match="kind"):
        dro(kind="cvar", clusters_file=path)


# --------------------------------------------------------------------------- one-pass gradients
def _step_pair(bert, term, ids, mask, clusters, negatives, chunk, scale):
    """One training forward and backward of a pairwise-NLL bi-encoder (queries ``ids[:n]``, then each query's
    ``1 + negatives`` documents), the CLS vector through :func:`run_in_length_chunks` with ``chunk`` tokens."""
    from zsdr.models.inference import run_in_length_chunks

    def encode(rows):
        fn = lambda **kw: bert(**kw).last_hidden_state[:, 0]  # noqa: E731
        return run_in_length_chunks(fn, {"input_ids": ids[rows], "attention_mask": mask[rows]}, chunk)

    n, group = len(clusters), 1 + negatives
    term.begin(clusters, True)
    with term.encoding(1):
        q = encode(slice(0, n))
    with term.encoding(group):
        d = encode(slice(n, None)).view(n, group, -1)
    own = torch.einsum("nd,nkd->nk", q, d)
    robust, logs = term.loss(pairwise_nll(own[:, 0], own[:, 1:], reduction="none"), clusters)
    bert.zero_grad(set_to_none=True)
    (robust * scale).backward()   # a loss scale (gradient accumulation, fp16 scaling) cancels out
    return {n: p.grad.clone() for n, p in bert.named_parameters() if p.grad is not None}, logs


def test_one_pass_cluster_gradients_equal_the_per_cluster_form(tmp_path):
    """iDRO's cluster weights and the trained parameters, two steps of a pairwise-NLL bi-encoder with 9 of
    K = 10 clusters present: the one-pass form (hooks on the top layers' Linear and LayerNorm modules in the
    step's own backward pass) against one autograd.grad per cluster, the texts run in chunks of similar
    lengths (rows reordered), the loss scaled before its backward; then the recorded gradients of whole
    batches row by row. (tests/test_terms.py pins a task's iDRO steps, which take the one-pass form.)"""
    chunk = 40
    from zsdr.training.base_losses.pairwise_nll import PairwiseNll
    from zsdr.training.idro_onepass import ClusterGradRecorder

    assignments = [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 3, 0]   # 12 queries, clusters 0-8 present, 9 absent
    path = _clusters_file(tmp_path, assignments)
    cfg = dict(clusters=10, grad_layers=2, beta=0.5, rho=2.0, gamma=0.1, eps=0.01, clusters_file=str(path))
    n, negatives = len(assignments), 2
    g = torch.Generator().manual_seed(1)
    rows = n * (2 + negatives)
    lengths = torch.randint(3, 12, (rows,), generator=g)
    ids = torch.randint(3, 40, (rows, 12), generator=g)
    mask = (torch.arange(12)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    results = {}
    for form in ("per_cluster", "one_pass"):
        bert = _tiny_bert(layers=3)
        term = IdroTerm(dro(**cfg, gradients=form), SimpleNamespace(backbone=bert))
        term.bind_task(PairwiseNll(), [])
        assert (term.recorder is not None) == (form == "one_pass")
        clusters = term.cluster_ids([f"q{i}" for i in range(n)])
        opt = torch.optim.SGD(bert.parameters(), lr=0.5)
        hs, grads = [], []
        for step, scale in enumerate((1.0, 0.25)):
            grad, logs = _step_pair(bert, term, ids, mask, clusters, negatives, chunk, scale)
            hs.append(term.h.clone())
            grads.append(grad)
            assert float(logs["dro_max_weight"]) == pytest.approx(float(term.h.max()))
            assert logs["dro_present_clusters"] == 9
            opt.step()
        results[form] = hs, grads, {k: p.detach().clone() for k, p in bert.named_parameters()}
    (h_ref, g_ref, p_ref), (h_one, g_one, p_one) = results["per_cluster"], results["one_pass"]
    for a, b in zip(h_ref, h_one):
        assert not torch.allclose(a, torch.full_like(a, float(a.mean())), atol=1e-3)   # the weights do move
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7), (a, b)
    for a, b in zip(g_ref, g_one):
        assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6) for k in a)
    assert all(torch.allclose(p_ref[k], p_one[k], rtol=1e-4, atol=1e-6) for k in p_ref)

    # the recorded cluster gradients themselves, row by row, against autograd.grad of each cluster's loss
    bert = _tiny_bert(layers=3)
    term = IdroTerm(dro(**cfg, gradients="one_pass"), SimpleNamespace(backbone=bert))
    term.bind_task(PairwiseNll(), [])
    term.h = torch.linspace(0.02, 1.0, 10)   # unequal weights: each cluster's rows are scaled by its own
    clusters = term.cluster_ids([f"q{i}" for i in range(n)])
    seen = {}
    finish = term._one_pass_finish
    term._one_pass_finish = lambda *a: seen.update(zip(("present", "rows"), term.recorder.gradients())) or finish(*a)

    def per_query():
        with term.encoding(1):
            q = bert(input_ids=ids[:n], attention_mask=mask[:n]).last_hidden_state[:, 0]
        with term.encoding(1 + negatives):
            d = bert(input_ids=ids[n:], attention_mask=mask[n:]).last_hidden_state[:, 0].view(n, 1 + negatives, -1)
        own = torch.einsum("nd,nkd->nk", q, d)
        return pairwise_nll(own[:, 0], own[:, 1:], reduction="none")

    reference = term.cluster_grads(*cluster_stats(per_query(), clusters, 10))   # nothing recorded yet
    term.begin(clusters, True)
    robust, _ = term.loss(per_query(), clusters)
    robust.backward()
    assert seen["present"].tolist() == list(range(9)) and seen["rows"].shape == (9, reference.shape[1])
    assert isinstance(term.recorder, ClusterGradRecorder) and term.recorder.step is None   # released
    assert torch.allclose(seen["rows"], reference[:9], rtol=1e-4, atol=1e-6)


def test_one_pass_is_chosen_only_where_exact(tmp_path):
    from zsdr.training.base_losses.contrastive import Contrastive
    from zsdr.training.base_losses.pairwise_nll import PairwiseNll

    path = str(_clusters_file(tmp_path, [0, 1, 2]))
    make = lambda **kw: IdroTerm(dro(clusters=3, grad_layers=1, clusters_file=path, **kw),  # noqa: E731
                                 SimpleNamespace(backbone=_tiny_bert()))
    term = make()
    assert term.recorder is None   # per cluster until a task binds it
    term.bind_task(PairwiseNll(), [])
    assert term.recorder is not None and term.one_pass_why is None
    term = make()
    term.bind_task(Contrastive(), [])   # in-batch negatives: a query's loss depends on other queries' texts
    assert term.recorder is None and "contrastive" in term.one_pass_why
    term = make()
    term.bind_task(PairwiseNll(), [SimpleNamespace(name="berm")])
    assert term.recorder is None and "berm" in term.one_pass_why
    term = make(gradients="per_cluster")
    term.bind_task(PairwiseNll(), [])
    assert term.recorder is None
    with pytest.raises(ValueError, match="dro.gradients one_pass is not exact here: loss contrastive"):
        make(gradients="one_pass").bind_task(Contrastive(), [])
    with pytest.raises(ValueError, match="dro.gradients 'twice'"):
        dro(clusters_file=path, gradients="twice")
    # a zero weight on a present cluster (eps 0) cannot be divided out: that step goes per cluster
    term = make(eps=0.0)
    term.bind_task(PairwiseNll(), [])
    term.h = torch.tensor([0.0, 1.0, 1.0])
    term.begin(torch.tensor([0, 1]), True)
    assert not term._recording
    term.begin(torch.tensor([1, 2]), True)
    assert term._recording
    term.begin(torch.tensor([1, 2]), False)   # evaluation: nothing recorded
    assert not term._recording


# ------------------------------------------------------------------------------------- GroupDRO
def test_groupdro_update_matches_the_hand_computation():
    # K = 4, cluster 1 absent; from sum_losses 0 and count_cat 1 with ema 0.1:
    # sum_losses = 0.1 · (2, -, 5, 1) = (0.2, 0, 0.5, 0.1); count_cat = 0.9 + 0.1 · (1, 0, 2, 1) = (1, 0.9, 1.1, 1)
    # fractions (÷ 4) = (0.25, 0.225, 0.275, 0.25); by loss: clusters 2, 0, 3, 1 with fractions
    # 0.275, 0.25, 0.25, 0.225; cumulative 0.275 < 0.5 <= 0.525 -> cutoff 1: h2 = 1 / 0.5 = 2,
    # h0 = (1 - 0.275 / 0.5) / 0.25 = 1.8, the others ε
    s, c, h = groupdro_update(torch.zeros(4), torch.ones(4), torch.tensor([2.0, 0.0, 5.0, 1.0]),
                              torch.tensor([1.0, 0.0, 2.0, 1.0]), fraction=0.5, ema=0.1, eps=0.01)
    assert torch.allclose(s, torch.tensor([0.2, 0.0, 0.5, 0.1]))
    assert torch.allclose(c, torch.tensor([1.0, 0.9, 1.1, 1.0]))
    assert torch.allclose(h, torch.tensor([1.8, 0.01, 2.0, 0.01]), atol=1e-6)
    # every cumulative fraction below `fraction` -> cutoff K - 1: (1 - 0.5 / 1.5) / 0.5 = 4/3 on the last
    _, _, h = groupdro_update(torch.tensor([1.0, 3.0]), torch.ones(2), torch.zeros(2), torch.zeros(2),
                              fraction=1.5, ema=0.0, eps=0.01)
    assert torch.allclose(h, torch.tensor([4 / 3, 1 / 1.5]), atol=1e-6)
    # the straddling cluster never goes below ε: fractions 0.4999 (worst) and 0.5001, cutoff 1;
    # (1 - 0.4999 / 0.5) / 0.5001 = 0.0004 -> ε
    _, _, h = groupdro_update(torch.tensor([3.0, 1.0]), torch.tensor([0.4999, 0.5001]), torch.zeros(2),
                              torch.zeros(2), fraction=0.5, ema=0.0, eps=0.01)
    assert torch.allclose(h, torch.tensor([2.0, 0.01]), atol=1e-6)


def test_groupdro_term_uses_the_weights_before_its_update(tmp_path):
    path = tmp_path / "c.jsonl"
    write_clusters(path, ["a", "b", "c", "d"], np.array([0, 2, 2, 3]), {})
    term = GroupDroTerm(dro(kind="groupdro", clusters=4, fraction=0.5, ema=0.1, eps=0.01,
                                  clusters_file=str(path)))
    per_query = torch.tensor([2.0, 4.0, 6.0, 1.0], requires_grad=True)
    clusters = term.cluster_ids(["a", "b", "c", "d"])
    robust, logs = term.loss(per_query, clusters)
    assert math.isclose(float(robust.detach()), 13 / 4)          # h = 1: the mean
    assert torch.allclose(term.h, torch.tensor([1.8, 0.01, 2.0, 0.01]), atol=1e-6)  # the hand example above
    robust, _ = term.loss(per_query, clusters)
    assert math.isclose(float(robust.detach()), (2 * 1.8 + 10 * 2.0 + 1 * 0.01) / 4, rel_tol=1e-6)
    robust.backward()
    assert torch.allclose(per_query.grad, torch.tensor([1.8, 2.0, 2.0, 0.01]) / 4)
    assert logs["dro_present_clusters"] == 3
    fresh = GroupDroTerm(term.config)
    fresh.load_state_dict(term.state_dict())
    assert all(torch.equal(getattr(fresh, n), getattr(term, n)) for n in ("sum_losses", "count_cat", "h"))


# ------------------------------------------------------------------------------------ clustering
def test_kmeans_is_deterministic_and_finds_separated_blobs():
    import faiss

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 8)) * 20
    truth = np.repeat(np.arange(3), 40)
    x = (centers[truth] + rng.normal(size=(120, 8))).astype(np.float32)
    threads = faiss.omp_get_max_threads()
    a, ca = kmeans(x, 3, seed=7, niter=20, nredo=2)
    b, cb = kmeans(x, 3, seed=7, niter=20, nredo=2)
    assert faiss.omp_get_max_threads() == threads                 # the thread setting is restored
    assert a.dtype == np.int64 and a.shape == (120,) and ca.shape == (3, 8)
    assert np.array_equal(a, b) and np.array_equal(ca, cb)
    # the blobs come back whole: one cluster per blob, each centroid near its blob's centre
    assert all(len(set(a[truth == t])) == 1 for t in range(3)) and len(set(a)) == 3
    for t in range(3):
        assert np.linalg.norm(ca[a[truth == t][0]] - centers[t]) < 1.0
    noise = rng.normal(size=(300, 8)).astype(np.float32)
    assert np.array_equal(kmeans(noise, 5, seed=1, niter=10, nredo=5)[1],
                          kmeans(noise, 5, seed=1, niter=10, nredo=5)[1])
    with pytest.raises(ValueError, match="cannot form 4 clusters"):
        kmeans(x[:3], 4, seed=0, niter=10, nredo=1)


def test_cluster_files_round_trip_and_bad_lines(tmp_path):
    path = tmp_path / "clusters.jsonl"
    write_clusters(path, ["q1", "q2", "7"], np.array([2, 0, 2]), {"k": 3, "seed": 1})
    assert path.read_text().splitlines()[0] == '{"qid": "q1", "cluster": 2}'
    assert read_clusters(path) == {"q1": 2, "q2": 0, "7": 2}
    assert json.loads(clusters_info_path(path).read_text()) == {"k": 3, "seed": 1}
    assert clusters_info_path(path).name == "clusters.info.json"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"qid": "q1", "cluster": 0}\n{"qid": "q2", "cluster": "x"}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: \"cluster\" must be an integer"):
        read_clusters(bad)
    bad.write_text('{"qid": "q1", "cluster": 0}\n{"qid": "q1", "cluster": 1}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: query 'q1' appears twice"):
        read_clusters(bad)


# --------------------------------------------------------------------------- with the trainer
def write_query_clusters(root: Path) -> None:
    """``root/clusters.jsonl``: the training queries of ``root/data/src`` in 4 K-means clusters of their
    ``root/bert`` embeddings."""
    from zsdr.models.encoder import Encoder
    from zsdr.data.training_set import TrainingSet

    data = TrainingSet(root / "data" / "src", root / "data" / "src" / "negatives.jsonl")
    qids = sorted({ex.qid for ex in data.examples})
    enc = Encoder.from_pretrained(str(root / "bert"), pooling="mean", similarity="dot", query_max_length=16)
    assignments, _ = kmeans(enc.encode_queries([data.queries[q] for q in qids], device="cpu"), 4, seed=0, niter=20,
                            nredo=5)
    write_clusters(root / "clusters.jsonl", qids, assignments, {"k": 4, "seed": 0})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = mini_with_backbones(tmp_path_factory.mktemp("idro"), MINI, SIZE, kinds=("bert",))
    write_query_clusters(root)
    return root


def _spec(tiny, name, kind="idro", **train):
    return {"kind": "bi_encoder", "init": str(tiny / "bert"), "dataset": str(tiny / "data" / "src"),
            "negatives": str(tiny / "data" / "src" / "negatives.jsonl"), "systems": None, "teacher": None,
            "out": str(tiny / "out" / name), "checkpoint_dir": str(tiny / "ckpt" / name),
            "encoder": {"pooling": "mean", "similarity": "dot", "query_max_length": 16, "doc_max_length": 32},
            "loss": "pairwise_nll", "negatives_per_query": 1, "scale": 1.0, "dropout": 0.0,
            "dro": {**DRO, "kind": kind, "clusters": 4, "grad_layers": 1, "rho": 0.5, "beta": 0.5,
                    "clusters_file": str(tiny / "clusters.jsonl")},
            "train": {"batch_size": 8, "max_steps": 6, "lr": 1e-3, "optimizer": "adamw", "warmup_steps": 1,
                      "seed": 3, "save_every": 3, "log_every": 1, **train}}


def test_task_updates_weights_only_in_training_steps(tiny):
    from zsdr.training.recipes import build_task

    task = build_task(_spec(tiny, "task"))
    batch = task.make_batch(list(range(8)), 0)
    assert batch["clusters"].dtype == torch.long and batch["clusters"].shape == (8,)
    before = task.dro.h.clone()
    with torch.no_grad():
        loss, logs = task(batch)
    assert torch.equal(task.dro.h, before)
    task.eval()
    task(batch)
    assert torch.equal(task.dro.h, before)
    task.train()
    loss, logs = task(batch)
    # pairwise_nll alone: the cluster gradients come from the step's backward pass, the weights move with it
    assert task.dro.recorder is not None and torch.equal(task.dro.h, before)
    loss.backward()
    assert not torch.equal(task.dro.h, before)
    assert float(logs["dro_max_weight"]) == pytest.approx(float(task.dro.h.max()))
    # first step: h = 1, so the robust loss is the sum of the cluster means; task_loss the plain mean
    assert {"dro_max_weight", "dro_present_clusters", "dro_entropy", "task_loss", "accuracy"} <= set(logs)
    per_query = pairwise_nll(*_own(task, batch), reduction="none")
    assert logs["task_loss"] == pytest.approx(float(per_query.mean()), rel=1e-5)
    means, _ = cluster_stats(per_query, batch["clusters"], 4)
    assert float(loss.detach()) == pytest.approx(float(means.sum()), rel=1e-5)
    spec = _spec(tiny, "bad")
    spec["loss"] = "contrastive"
    with pytest.raises(ValueError, match="pairwise_nll only"):
        build_task(spec)


def _own(task, batch):
    with torch.no_grad():
        q, d = task.encoder(**batch["q"]), task.encoder(**batch["d"])
    own = torch.einsum("nd,nkd->nk", q.float(), d.float().view(q.shape[0], 2, -1))
    return own[:, 0], own[:, 1:]


def test_training_with_idro_resumes_exactly(tiny, caplog):
    from zsdr.training.launch import run_spec

    full = _spec(tiny, "full")
    run_spec(full, cpu=True, progress=False)
    log = [json.loads(x) for x in (Path(full["out"]) / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 6 and all(r["dro_present_clusters"] >= 1 for r in log)
    assert len({r["dro_max_weight"] for r in log}) > 1             # the weights move
    # killed after step 4 (checkpoint at step 3): the resumed run restores the cluster weights
    cut = _spec(tiny, "cut")
    assert run_spec(cut, cpu=True, progress=False, stop_after=4) is None
    # custom_checkpoint_0 is the scheduler, 1 the term
    saved = torch.load(Path(cut["checkpoint_dir"]) / "step-000000003" / "custom_checkpoint_1.pkl", weights_only=False)
    assert saved["h"].shape == (4,) and not torch.equal(saved["h"], torch.ones(4))
    caplog.set_level(logging.INFO, logger="zsdr.training.trainer")
    run_spec(cut, cpu=True, progress=False)
    assert "resuming from" in caplog.text and "step-000000003" in caplog.text
    a, b = load_file(f"{full['out']}/model.safetensors"), load_file(f"{cut['out']}/model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    cut_log = [json.loads(x) for x in (Path(cut["out"]) / "train_log.jsonl").read_text().splitlines()]
    assert [r["dro_max_weight"] for r in cut_log] == [r["dro_max_weight"] for r in log]
    assert [r["loss"] for r in cut_log] == [r["loss"] for r in log]


def test_training_with_groupdro(tiny):
    from zsdr.training.launch import run_spec

    spec = _spec(tiny, "gdro", kind="groupdro", max_steps=3)
    spec["dro"] = {**DRO, "kind": "groupdro", "clusters": 4, "fraction": 0.5, "clusters_file": str(tiny / "clusters.jsonl")}
    run_spec(spec, cpu=True, progress=False)
    log = [json.loads(x) for x in (Path(spec["out"]) / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 3 and log[0]["loss"] == pytest.approx(log[0]["task_loss"], rel=1e-5)  # h = 1 at first
    assert 1.0 < log[1]["dro_max_weight"] <= 2.0 + 1e-6              # at most 1 / fraction
