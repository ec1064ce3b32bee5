"""Every loss against values computed by hand on small tensors; the registry of the base losses."""

import math
from pathlib import Path

import pytest
import torch

from zsdr.losses.contrastive import MASKED, contrastive, pairwise_nll, relevance_mask
from zsdr.losses.margin_mse import margin_mse


def close(t, value):
    assert float(t.detach()) == pytest.approx(value, abs=1e-6)


def test_pairwise_nll_one_negative():
    # -log(e^2 / (e^2 + e^1)) = log(1 + e^-1); -log(e^0 / (e^0 + e^1)) = log(1 + e)
    loss = pairwise_nll(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0]))
    close(loss, (math.log(1 + math.exp(-1)) + math.log(1 + math.e)) / 2)


def test_pairwise_nll_several_negatives_and_gradient():
    pos = torch.tensor([1.0], requires_grad=True)
    neg = torch.tensor([[0.0, 0.0]], requires_grad=True)
    loss = pairwise_nll(pos, neg)
    close(loss, math.log(1 + 2 / math.e))                # -log(e / (e + 2))
    loss.backward()
    p = math.e / (math.e + 2)
    close(pos.grad[0], p - 1)                            # d/ds+ = softmax+ - 1
    close(neg.grad[0, 0], (1 - p) / 2)                   # d/ds- = softmax-


def test_pairwise_nll_rejects_unpaired_shapes():
    with pytest.raises(ValueError, match="pair up"):
        pairwise_nll(torch.zeros(2), torch.zeros(3, 1))


Q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
D = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


def test_contrastive_in_batch():
    # row 0 logits [1, 0, 1], target 0: log(2 + e^-1); row 1 logits [0, 1, 1], target 1: the same
    close(contrastive(Q, D, torch.tensor([0, 1])), math.log(2 + math.exp(-1)))


def test_contrastive_temperature_scales_logits():
    # scale 2: row 0 logits [2, 0, 2] -> log(2 + e^-2)
    close(contrastive(Q, D, torch.tensor([0, 1]), scale=2.0), math.log(2 + math.exp(-2)))


def test_contrastive_masks_other_relevant_documents_but_never_the_target():
    mask = torch.zeros(2, 3, dtype=torch.bool)
    mask[0, 2] = True            # doc 2 is also relevant to query 0: not a negative for it
    mask[1, 1] = True            # the target itself is never masked
    row0 = math.log(1 + math.exp(-1))        # logits [1, 0, masked]
    row1 = math.log(2 + math.exp(-1))        # unchanged
    close(contrastive(Q, D, torch.tensor([0, 1]), mask), (row0 + row1) / 2)
    assert MASKED < -1000


def test_relevance_mask_marks_every_copy_of_a_relevant_document():
    mask = relevance_mask([{"a", "c"}, set()], ["a", "b", "a", "c"])
    assert mask.tolist() == [[True, False, True, True], [False, False, False, False]]


def test_margin_mse_by_hand():
    # student margins [3-1, 3-2] = [2, 1]; teacher margins [2-1, 2-1] = [1, 1]; mean((1, 0)^2) = 0.5
    close(margin_mse(torch.tensor([3.0]), torch.tensor([[1.0, 2.0]]), torch.tensor([2.0]), torch.tensor([[1.0, 1.0]])),
          0.5)
    # one negative each, given as (n,) vectors: ((1-0) - (2-0))^2 = 1 and ((0-1) - (0-1))^2 = 0
    close(margin_mse(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([2.0, 0.0]),
                     torch.tensor([0.0, 1.0])), 0.5)


def test_margin_mse_gradient_and_shape_check():
    s_pos = torch.tensor([3.0], requires_grad=True)
    loss = margin_mse(s_pos, torch.tensor([[1.0, 2.0]]), torch.tensor([2.0]), torch.tensor([[1.0, 1.0]]))
    loss.backward()
    close(s_pos.grad[0], (2 * 1 + 2 * 0) / 2)            # d/ds+ mean(diff^2) = mean(2 diff)
    with pytest.raises(ValueError, match="differ in shape"):
        margin_mse(torch.zeros(1), torch.zeros(1, 2), torch.zeros(1), torch.zeros(1, 3))


# ------------------------------------------------------------------------------ the base losses' registry
def test_the_registry_knows_each_base_loss_its_class_and_summary():
    from zsdr.training.base_losses import BaseLoss
    from zsdr.training.loss_registry import LOSSES, loss_class

    assert set(LOSSES) == {"pairwise_nll", "contrastive", "margin_mse"}
    for name, info in LOSSES.items():
        cls = loss_class(name)
        assert issubclass(cls, BaseLoss) and cls.name == name and cls.summary == info.summary
        assert info.module == cls.__module__ and "\n" not in info.summary and info.summary
        assert info.per_query == cls.per_query
    assert [n for n, i in LOSSES.items() if i.per_query] == ["pairwise_nll"]


def test_the_config_schema_offers_exactly_the_registered_losses():
    import yaml

    from zsdr.training.loss_registry import LOSSES

    schema = yaml.safe_load((Path(__file__).resolve().parents[1] / "schemas" / "config.schema.yaml").read_text())
    recipe = schema["properties"]["recipes"]["additionalProperties"]["properties"]
    assert sorted(recipe["loss"]["enum"]) == sorted(LOSSES)


def test_an_unknown_loss_names_the_known_ones():
    from zsdr.training.loss_registry import loss_class

    with pytest.raises(ValueError, match="loss 'nll': expected one of contrastive, margin_mse, pairwise_nll"):
        loss_class("nll")


def test_a_new_loss_is_one_module(tmp_path, monkeypatch):
    from zsdr.training.base_losses import BaseLoss, Scores
    from zsdr.training.loss_registry import discover

    package = tmp_path / "mylosses"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hinge.py").write_text(
        "import torch\n"
        "from zsdr.training.base_losses import BaseLoss\n\n\n"
        "class Hinge(BaseLoss):\n"
        "    name = 'hinge'\n"
        "    summary = ('max(0, 1 - s(q, d+) + s(q, d-)) over each query\\'s '\n"
        "               'negatives')\n\n"
        "    def loss(self, scores, batch, reduction='mean'):\n"
        "        self.mean_only(reduction)\n"
        "        own = self.scale * scores.own\n"
        "        return torch.relu(1 - own[:, :1] + own[:, 1:]).mean()\n")
    found = discover(package, "mylosses")
    assert list(found) == ["hinge"]
    assert found["hinge"].target == "mylosses.hinge:Hinge" and not found["hinge"].per_query
    assert found["hinge"].summary == "max(0, 1 - s(q, d+) + s(q, d-)) over each query's negatives"
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    cls = getattr(importlib.import_module("mylosses.hinge"), "Hinge")
    assert issubclass(cls, BaseLoss)
    own = torch.tensor([[2.0, 0.5, 1.5]])
    loss = cls(scale=1.0).loss(Scores(torch.zeros(1, 2), torch.zeros(3, 2), own), {})
    assert torch.allclose(loss, torch.tensor((0.0 + 0.5) / 2))
    with pytest.raises(ValueError, match="no per-query values"):
        cls().loss(Scores(torch.zeros(1, 2), torch.zeros(3, 2), own), {}, reduction="none")


def test_a_loss_named_twice_or_without_a_summary_is_refused(tmp_path):
    from zsdr.training.loss_registry import discover

    for name, body in (("a", "class A:\n    name = 'x'\n    summary = 'one'\n"),
                       ("b", "class B:\n    name = 'x'\n    summary = 'two'\n")):
        (tmp_path / f"{name}.py").write_text(body)
    with pytest.raises(RuntimeError, match="loss 'x' is defined twice: pkg.a:A and pkg.b:B"):
        discover(tmp_path, "pkg")
    (tmp_path / "b.py").write_text("class B:\n    name = 'y'\n")
    with pytest.raises(RuntimeError, match="pkg.b.B: a loss needs a string name and a one-line summary"):
        discover(tmp_path, "pkg")
