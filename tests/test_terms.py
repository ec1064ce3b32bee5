"""Loss terms of the bi-encoder task: the built-in terms (BERM, MoDIR, iDRO / GroupDRO) give the
losses, logs and gradients they gave when the task special-cased each of them."""

import math

import pytest
import torch

from tests.conftest import mini_with_backbones
from tests.test_idro import write_query_clusters
from zsdr.training.modir import build_target_triples
from zsdr.training.recipes import build_task
from zsdr.training.trainer import TrainConfig
from zsdr.training.unit_labels import label_pairs, select_pairs, unit_statistics

MINI = {
    "seed": 5, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 240, "train_queries": 120, "dev_queries": 10},
                {"name": "tgt", "role": "target", "docs": 120, "test_queries": 30}],
}
SIZE = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "max_length": 64, "dropout": 0.0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A source and a target domain, a tiny BERT, BERM labels, MoDIR triples and query clusters."""
    root = mini_with_backbones(tmp_path_factory.mktemp("terms"), MINI, SIZE, kinds=("bert",))
    src = root / "data" / "src"
    pairs = select_pairs(src, "train")
    label_pairs(src, pairs, unit_statistics(src, pairs, "units"), root / "labels.jsonl")
    build_target_triples(root / "data" / "tgt", "test", root / "triples.tsv")
    write_query_clusters(root)
    return root


def sections(tiny) -> dict:
    """Each built-in term's recipe section, for the tiny fixture."""
    return {
        "berm": {"labels": str(tiny / "labels.jsonl"), "r1_weight": 1.0, "r2_weight": 0.1},
        "modir": {"triples": str(tiny / "triples.tsv"), "target": str(tiny / "data" / "tgt"),
                  "momentum_steps": 3, "chunk": 2, "classifier_lr": 1e-2, "lambda_half_life": 4},
        "dro": {"kind": "idro", "clusters": 4, "grad_layers": 1, "rho": 0.5, "beta": 0.5,
                "clusters_file": str(tiny / "clusters.jsonl")},
        "groupdro": {"kind": "groupdro", "clusters": 4, "fraction": 0.5,
                     "clusters_file": str(tiny / "clusters.jsonl")},
    }


def task_spec(tiny, loss: str = "pairwise_nll", negatives: int = 1, dropout: float = 0.0, **terms) -> dict:
    return {"kind": "bi_encoder", "init": str(tiny / "bert"), "dataset": str(tiny / "data" / "src"),
            "negatives": str(tiny / "data" / "src" / "negatives.jsonl"), "systems": None, "teacher": None,
            "out": str(tiny / "out"), "checkpoint_dir": None,
            "encoder": {"pooling": "mean", "similarity": "dot", "query_max_length": 16, "doc_max_length": 48},
            "loss": loss, "negatives_per_query": negatives, "scale": 1.0, "dropout": dropout,
            "train": {"batch_size": 8, "max_steps": 4, "lr": 1e-3, "seed": 3}, **terms}


def two_steps(spec: dict) -> list[dict]:
    """Two training forwards of the task ``spec`` builds on fixed batches (examples 0-7, then 8-15):
    the loss, the logs and the norm of the encoder's gradient of each."""
    task = build_task(spec)
    attach = getattr(task, "attach", None)
    if attach is not None:
        attach(TrainConfig.from_dict(spec["train"]), 4, torch.device("cpu"))
    task.train()
    out = []
    for step, indices in enumerate((list(range(8)), list(range(8, 16)))):
        task.on_step(step, step, True)
        batch = task.make_batch(indices, 0)
        task.encoder.zero_grad(set_to_none=True)
        loss, logs = task(batch)
        loss.backward()
        grad = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in task.encoder.parameters()
                             if p.grad is not None))
        out.append({"loss": float(loss.detach()), "grad_norm": grad, **logs})
    return out


# The values these term combinations gave before the terms were generic (same seeds, same batches).
PINNED = {
    "berm": [
        {"loss": 0.873930037021637, "grad_norm": 5.907727878146698, "accuracy": 0.625, "r1": 0.08504842221736908,
         "r2": 1.121701717376709, "unit_accuracy": 0.4285714328289032, "task_loss": 0.6767114400863647},
        {"loss": 0.8473276495933533, "grad_norm": 6.085062383733821, "accuracy": 0.625, "r1": 0.06419272720813751,
         "r2": 1.1400066614151, "unit_accuracy": 0.5714285969734192, "task_loss": 0.669134259223938},
    ],
    "berm_contrastive": [
        {"loss": 2.8327901363372803, "grad_norm": 6.438524589017163, "accuracy": 0.625, "r1": 0.08504842221736908,
         "r2": 1.121701717376709, "unit_accuracy": 0.4285714328289032, "task_loss": 2.6355714797973633},
        {"loss": 2.777163028717041, "grad_norm": 6.7057552028772145, "accuracy": 0.625, "r1": 0.06419272720813751,
         "r2": 1.1400066614151, "unit_accuracy": 0.5714285969734192, "task_loss": 2.5989696979522705},
    ],
    "modir": [
        {"loss": 3.4580821990966797, "grad_norm": 4.879241975679002, "accuracy": 0.625,
         "local_domain_acc_queries": 0.5, "local_domain_acc_docs": 0.5, "classifier_loss": 0.7195292711257935,
         "adversarial_loss": 2.7813706398010254, "adversarial_lambda": 1.0, "task_loss": 0.6767114400863647},
        {"loss": 3.013373851776123, "grad_norm": 4.868870818223537, "accuracy": 0.625,
         "local_domain_acc_queries": 0.5625, "local_domain_acc_docs": 0.5, "classifier_loss": 0.6907985806465149,
         "adversarial_loss": 2.7877862453460693, "adversarial_lambda": 0.8408964152537145,
         "task_loss": 0.669134259223938},
    ],
    "idro": [
        {"loss": 2.6951091289520264, "grad_norm": 17.093109891867215, "accuracy": 0.625,
         "dro_max_weight": 0.2610330581665039, "dro_present_clusters": 4.0, "dro_entropy": 1.3857839107513428,
         "task_loss": 0.6767114400863647},
        {"loss": 0.6275953054428101, "grad_norm": 4.698934893768686, "accuracy": 0.625,
         "dro_max_weight": 0.257232129573822, "dro_present_clusters": 4.0, "dro_entropy": 1.3858137130737305,
         "task_loss": 0.669134259223938},
    ],
    "groupdro": [
        {"loss": 0.6767114400863647, "grad_norm": 3.9572919698713482, "accuracy": 0.625, "dro_max_weight": 2.0,
         "dro_present_clusters": 4.0, "dro_entropy": 0.7244945168495178, "task_loss": 0.6767114400863647},
        {"loss": 0.8771733641624451, "grad_norm": 6.355888091451253, "accuracy": 0.625, "dro_max_weight": 2.0,
         "dro_present_clusters": 4.0, "dro_entropy": 0.7246758937835693, "task_loss": 0.669134259223938},
    ],
    "berm_modir_idro": [
        {"loss": 7.245057106018066, "grad_norm": 24.649384058693403, "accuracy": 0.375,
         "dro_max_weight": 0.2667505741119385, "dro_present_clusters": 4.0, "dro_entropy": 1.3842074871063232,
         "task_loss": 4.463830471038818, "r1": 0.0969771146774292, "r2": 1.1166445016860962,
         "unit_accuracy": 0.5714285969734192, "local_domain_acc_queries": 0.5, "local_domain_acc_docs": 0.5,
         "classifier_loss": 0.7179538309574127, "adversarial_loss": 2.781226634979248, "adversarial_lambda": 1.0},
        {"loss": 3.6177449226379395, "grad_norm": 8.11817740855675, "accuracy": 0.25,
         "dro_max_weight": 0.25914266705513, "dro_present_clusters": 4.0, "dro_entropy": 1.3857096433639526,
         "task_loss": 1.2738348245620728, "r1": 0.07267017662525177, "r2": 1.2982298135757446,
         "unit_accuracy": 0.1428571492433548, "local_domain_acc_queries": 0.5, "local_domain_acc_docs": 0.5,
         "classifier_loss": 0.6898393332958221, "adversarial_loss": 2.7873947620391846,
         "adversarial_lambda": 0.8408964152537145},
    ],
}


def combination(tiny, name: str) -> dict:
    s = sections(tiny)
    return {
        "berm": lambda: task_spec(tiny, berm=s["berm"]),
        "berm_contrastive": lambda: task_spec(tiny, loss="contrastive", berm=s["berm"]),
        "modir": lambda: task_spec(tiny, modir=s["modir"]),
        "idro": lambda: task_spec(tiny, dro=s["dro"]),
        "groupdro": lambda: task_spec(tiny, dro=s["groupdro"]),
        "berm_modir_idro": lambda: task_spec(tiny, negatives=2, dropout=0.1, berm=s["berm"], modir=s["modir"],
                                             dro=s["dro"]),
    }[name]()


@pytest.mark.parametrize("name", ["berm", "berm_contrastive", "modir", "idro", "groupdro", "berm_modir_idro"])
def test_built_in_terms_give_the_pinned_losses(tiny, name):
    got = two_steps(combination(tiny, name))
    pinned = PINNED[name]
    assert [sorted(r) for r in got] == [sorted(r) for r in pinned]
    for g, p in zip(got, pinned):
        for key, value in p.items():
            assert g[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (name, key)
