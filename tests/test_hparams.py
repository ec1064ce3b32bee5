"""The hyperparameter card (zsdr.plan.card, `zsdr hparams`): the effective numbers of every training, pinned
against the official values of docs/methods/reference.yaml, and the trainer functions the card shares."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from zsdr.plan.card import inference_rows, training_rows
from zsdr.plan.card_page import Reference, compare
from zsdr.plan.core import load_plan
from zsdr.data.training_set import TrainingSet
from zsdr.training.data import epoch_order
from zsdr.training.config import TrainConfig, lr_factor, training_steps

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "methods" / "reference.yaml"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of the workflow's code and config (planning writes its code stamps there)."""
    work = tmp_path_factory.mktemp("hparams")
    for name in ("config.yaml", "configs", "schemas", "src", "workflow_scripts", "docs"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    return work


@pytest.fixture(scope="module")
def paper(tree):
    return load_plan(tree, tree / "configs" / "paper.yaml")


@pytest.fixture(scope="module")
def paper_rows(paper):
    return {r.job: r for r in training_rows(paper)}


def overlay(tree, name: str, content: dict) -> Path:
    path = tree / f"{name}.yaml"
    path.write_text(yaml.safe_dump(content), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------ the card itself
def test_generated_cards_are_current():
    """docs/methods/hparams-{paper,small}.md are what `python -m zsdr.docs` writes (the paper's with the reference)."""
    proc = subprocess.run([sys.executable, "-m", "zsdr.docs", "--check"], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_the_paper_card_equals_the_official_reference(paper_rows):
    problems = compare(list(paper_rows.values()), Reference.load(REFERENCE))
    assert not problems, "\n".join(problems[:40])


def test_a_drifted_value_or_an_unreferenced_recipe_fails_naming_the_entry(tree):
    reference = Reference.load(REFERENCE)
    drifted = overlay(tree, "drift", {"recipes": {"cocodr-warmup": {"train": {"epochs": 2}},
                                                  "dpr-copy": {"extends": "dpr", "description": "a new recipe"}}})
    rows = training_rows(load_plan(tree, tree / "configs" / "paper.yaml", drifted))
    problems = compare(rows, reference)
    steps = [p for p in problems if p.startswith("train cocodr-warmup: steps")]
    assert steps and "34,178" in steps[0] and "'train cocodr-warmup'" in steps[0] and "51,267" in steps[0], problems
    assert any(p.startswith("train cocodr-warmup: epochs = 2") for p in problems)
    assert any(p.startswith("train dpr-copy: lr = 0.0002 has no reference entry") for p in problems), problems


def test_official_budgets_of_the_issue(paper_rows, paper):
    """The rows a review of the official code found wrong, as the card now states them."""
    warm = paper_rows["train cocodr-warmup"].values
    assert (warm["example"].startswith("triple") and warm["epochs"] == 3 and warm["steps"] == 51_267
            and warm["horizon"] == 51_267 and warm["global_batch"] == 2048)        # 35M // 2,048 x 3
    for k, factor in ((1, 1.0), (2, 0.85), (3, 0.70)):                             # max(0.2, 1 - g / 300,000)
        row = paper_rows[f"train cocodr-base-ep{k}"].values
        assert row["lr"] == pytest.approx(5e-6 * factor) and row["steps"] == 45_000
        assert row["horizon"] == 60_000 and row["lr_at_end"] == pytest.approx(0.263, abs=1e-3)
    assert paper_rows["train dpr"].values["horizon"] == 2_187_500                  # 35M // 32 x 2
    assert paper_rows["train berm-dpr"].values["steps"] == 300_000
    assert paper_rows["train ance-ep1"].values["horizon"] == 1_000_000            # run_ann.py max_steps
    assert paper_rows["train ance-ep3"].values["horizon"] == "1,000,000 (+90,000)"
    assert paper_rows["train berm-ance-ep1"].values["init"].endswith("/trained/berm-dpr")
    assert paper_rows["pretrain coco"].values["init"].endswith("/released/condenser")
    assert paper_rows["train ance-modir@arguana"].values["lengths"] == "q64/d512, target q512"   # --max_query_length_tgd
    assert paper_rows["train ance-ep1"].values["precision"] == "fp32"                          # no --fp16 [C-RM]
    lengths = {(tuple(r["systems"]), d): l for r in inference_rows(paper) for d, l in r["datasets"]}
    cocodr = next(k for k in lengths if "cocodr-base" in k[0])[0]
    assert lengths[(cocodr, "arguana")] == (128, 128) and lengths[(cocodr, "scifact")] == (64, 256)
    assert lengths[(cocodr, "robust04")] == (64, 256) and lengths[(cocodr, "trec-news")] == (64, 256)
    modir = next(k for k in lengths if "ance-modir" in k[0])[0]
    assert lengths[(modir, "arguana")] == (512, 512)


def test_lengths_per_dataset_reach_the_encode_jobs(paper):
    assert paper.systems.encoder_options("cocodr-base", "arguana")["query_max_length"] == 128
    assert paper.systems.encoder_options("cocodr-base", "scifact")["doc_max_length"] == 256
    assert paper.systems.encoder_options("cocodr-base", "nq") == {"doc_max_length": 128}
    assert paper.systems.encoder_options("cocodr-base-msmarco", "robust04")["doc_max_length"] == 256
    assert paper.systems.encoder_options("ance-modir", "arguana")["query_max_length"] == 512
    assert "dataset_lengths" not in paper.systems.encoder_options("ance-modir", "nq")


def test_hparams_command_prints_the_card_and_names_a_missing_file(tree):
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    zsdr = [sys.executable, "-m", "zsdr"]
    proc = subprocess.run([*zsdr, "hparams", "--json", "--configfile", str(ROOT / "configs" / "small.yaml")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    card = json.loads(proc.stdout)
    assert card["scale"] == "small" and any(t["job"] == "train cocodr-warmup" for t in card["trainings"])
    proc = subprocess.run([*zsdr, "hparams", "--configfile", "no-such.yaml"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 1 and proc.stderr.strip() == (
        "zsdr hparams: error: no-such.yaml: config file not found (fix: check the path)")


# ------------------------------------------------------------------------------- settings and their checks
def test_official_episode_rule_and_example_unit_are_checked_at_plan_time(tree):
    bad = overlay(tree, "bad-decay", {"recipes": {"cocodr-base-noidro": {"train": {"max_steps": None, "epochs": 1}}}})
    with pytest.raises(ValueError, match=r"recipes\.cocodr-base-noidro\.episode_lr_decay: .*train\.max_steps"):
        load_plan(tree, tree / "configs" / "paper.yaml", bad)
    bad = overlay(tree, "bad-unit", {"recipes": {"kd": {"examples": "triples"}}})
    with pytest.raises(ValueError, match=r"recipes\.kd\.examples: triples .* negatives: hard"):
        load_plan(tree, tree / "configs" / "paper.yaml", bad)


def test_a_headless_hub_checkpoint_is_refused_before_any_job(tree):
    """Hub ids known to lack the head a training keeps (zsdr.models.released.KNOWN_CHECKPOINTS) stop the plan."""
    headless = overlay(tree, "headless", {"cocodr": {"pretrained": {"coco": {"init": "Luyu/condenser"}}}})
    with pytest.raises(ValueError, match=r"cocodr\.pretrained\.coco\.init: Luyu/condenser carries no Condenser head"):
        load_plan(tree, tree / "configs" / "paper.yaml", headless)
    headless = overlay(tree, "headless-ance", {"recipes": {"kd": {"head": "checkpoint"}}})
    with pytest.raises(ValueError, match=r"recipes\.kd\.head: roberta-base carries no ANCE head"):
        load_plan(tree, tree / "configs" / "paper.yaml", headless)


def test_planning_every_training_imports_no_torch(tree):
    """The plan's training lines and card (steps, schedule, learning rate at the end) come from
    zsdr.training.config without torch: every Snakemake start plans them, and torch's import (~2.5 CPU-s)
    was in each one."""
    code = ("import sys\n"
            "from zsdr.plan.core import load_plan\n"
            "from zsdr.plan.card import training_rows\n"
            "plan = load_plan(sys.argv[1], sys.argv[2])\n"
            "assert training_rows(plan)\n"
            "for run in plan.recipes.runs:\n"
            "    plan.train_job(run)\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tree), str(tree / "configs" / "paper.yaml")],
                          capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(tree / "src"),
                                                                            "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "[]", proc.stdout[-2000:]


def test_a_step_limit_reaches_every_training_and_its_card_and_is_absent_otherwise(tree, paper_rows):
    """training.step_limit (a smoke run) is part of every training's settings, so every training reruns when it
    changes; unset, no training's settings carry it (adding the key changed no run). The card shows the steps
    the run takes under a schedule whose horizon stays the whole run's."""
    smoke = load_plan(tree, tree / "configs" / "paper.yaml", overlay(tree, "smoke", {"training": {"step_limit": 7}}))
    rows = {r.job: r for r in training_rows(smoke)}
    assert rows.keys() == paper_rows.keys() and len(rows) > 20
    for job, row in rows.items():
        whole = paper_rows[job].values
        counted = isinstance(whole["steps"], int)   # else "from the data": counted when the job runs
        assert row.values["steps"] == (min(7, whole["steps"]) if counted else whole["steps"]), job
        assert row.values["horizon"] == whole["horizon"] and row.values["warmup"] == whole["warmup"], job
    warmup = rows["train cocodr-warmup"].values
    assert warmup["steps"] == 7 and warmup["horizon"] == 51_267 and warmup["lr_at_end"] < 1
    plain = load_plan(tree, tree / "configs" / "paper.yaml")
    for plan, limited in ((plain, False), (smoke, True)):
        for item in plan.recipes.by_name.values():
            if "train" in item:
                assert ("step_limit" in plan.recipes.train_settings(item)) == limited


# ------------------------------------------------------------------------ the trainer functions it shares
def test_training_steps_and_lr_factor_are_the_trainers(tmp_path):
    import torch

    from zsdr.training.config import build_schedule

    cfg = TrainConfig(batch_size=256, epochs=3, epoch_size=35_000_000, lr=2e-4, warmup_steps=1000)
    assert training_steps(cfg, 39_780_811, world=8) == 51_267
    cfg = TrainConfig(batch_size=32, epochs=2, lr=1e-3, grad_accum=2)
    assert training_steps(cfg, 1000, world=1) == 31                     # floor(2 x (1000 // 32) / 2)
    for cfg in (TrainConfig(batch_size=1, max_steps=50, lr=1.0, warmup_steps=7, schedule_steps=80),
                TrainConfig(batch_size=1, max_steps=50, lr=1.0, warmup_steps=7, schedule_offset=20, schedule_steps=90),
                TrainConfig(batch_size=1, max_steps=50, lr=1.0, warmup_steps=7, schedule="constant"),
                TrainConfig(batch_size=1, max_steps=50, lr=1.0, warmup_ratio=0.1),
                TrainConfig(batch_size=1, max_steps=50, lr=1.0, warmup_ratio=0.13, schedule_steps=80)):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr)
        sched = build_schedule(opt, cfg, 50)
        seen = []
        for _ in range(50):
            seen.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        assert seen == pytest.approx([lr_factor(cfg, s, 50) for s in range(50)])


def test_a_warmup_ratio_is_hugging_faces_ceil_of_the_horizon():
    """COCO's pretraining command runs --warmup_ratio 0.1: ceil(0.1 x the schedule's horizon) steps."""
    from zsdr.training.config import warmup_steps

    assert warmup_steps(TrainConfig(batch_size=1, max_steps=263_816, lr=1.0, warmup_ratio=0.1), 263_816) == 26_382
    assert warmup_steps(TrainConfig(batch_size=1, max_steps=50, lr=1.0, warmup_ratio=0.13, schedule_steps=80), 50) == 11
    assert warmup_steps(TrainConfig(batch_size=1, max_steps=50, lr=1.0, warmup_steps=7), 50) == 7
    cfg = TrainConfig(batch_size=1, max_steps=50, lr=1.0, warmup_ratio=0.1)
    assert lr_factor(cfg, 4, 50) == pytest.approx(0.8) and lr_factor(cfg, 5, 50) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="warmup_steps or warmup_ratio, not both"):
        TrainConfig(batch_size=1, max_steps=50, lr=1.0, warmup_steps=5, warmup_ratio=0.1)
    with pytest.raises(ValueError, match="warmup_ratio 1.5"):
        TrainConfig(batch_size=1, max_steps=50, lr=1.0, warmup_ratio=1.5)


def write_training_queries(folder, docs: int, queries: int) -> None:
    """A BEIR folder of ``docs`` documents d0.. and ``queries`` training queries q0.., query qN judging dN."""
    from zsdr.data.formats import BeirWriter

    with BeirWriter(folder) as w:
        for i in range(docs):
            w.add_doc(f"d{i}", "", f"document {i}")
        for q in range(queries):
            w.add_query(f"q{q}", f"query {q}")
            w.add_qrel("train", f"q{q}", f"d{q}", 1)


def test_a_triples_epoch_visits_every_query_negative_pair_once(tmp_path):
    write_training_queries(tmp_path / "d", docs=12, queries=3)
    pools = {"q0": ["d3", "d4"], "q1": ["d5"], "q2": ["d6", "d7", "d8"]}
    negatives = tmp_path / "negatives.jsonl"
    negatives.write_text("".join(json.dumps({"qid": q, "pos": [f"d{i}"], "neg": {"triples": n}}) + "\n"
                                 for i, (q, n) in enumerate(pools.items())))
    data = TrainingSet(tmp_path / "d", negatives, unit="triples")
    assert len(data) == 6
    seen = sorted((data.qid(i), data.sample(i, 0, 42, 1)[2][0]) for i in epoch_order(len(data), 42, 0).tolist())
    assert seen == sorted((q, d) for q, n in pools.items() for d in n)
    assert data.sample(4, 0, 42, 1)[1] == "d2" and data.relevant_ids(4) == {"d2"}
    with pytest.raises(ValueError, match="one negative, not 2"):
        data.draw(0, 0, 42, 2)
    assert len(TrainingSet(tmp_path / "d", negatives)) == 3


def test_query_triples_batches_hold_each_querys_triples_consecutively(tmp_path):
    """`examples: query_triples`: every (query, negative) pair once an epoch, a query's pairs one after another in
    its pool's order and the queries in a seeded order (the official ANCE-family loaders), through the order the
    trainer takes its batches from."""
    from types import SimpleNamespace

    from zsdr.training.data import epoch_order_of, grouped_epoch_order

    write_training_queries(tmp_path / "d", docs=40, queries=6)
    pools = {f"q{q}": [f"d{6 + 5 * q + j}" for j in range(q % 3 + 2)] for q in range(6)}   # 2-4 negatives each
    negatives = tmp_path / "negatives.jsonl"
    negatives.write_text("".join(json.dumps({"qid": q, "pos": [f"d{i}"], "neg": {"ance": n}}) + "\n"
                                 for i, (q, n) in enumerate(pools.items())))
    data = TrainingSet(tmp_path / "d", negatives, unit="query_triples")
    assert len(data) == sum(map(len, pools.values()))
    task = SimpleNamespace(data=data, num_examples=len(data))
    for epoch in (0, 1):
        order = epoch_order_of(task, 42, epoch).tolist()
        drawn = [(data.qid(i), data.sample(i, epoch, 42, 1)[2][0]) for i in order]
        assert sorted(drawn) == sorted((q, d) for q, n in pools.items() for d in n)   # each pair once
        queries = [q for q, _ in drawn]
        runs = [q for k, q in enumerate(queries) if k == 0 or queries[k - 1] != q]
        assert sorted(runs) == sorted(pools)                                  # one run of triples per query
        for q in runs:
            assert [d for x, d in drawn if x == q] == pools[q]                # in the pool's order
    assert epoch_order_of(task, 42, 0).tolist() != epoch_order_of(task, 42, 1).tolist()   # queries reshuffled
    # a batch of 4 consecutive triples from pools of >= 2 holds at most 3 queries (never 4 distinct ones)
    batches = [{data.qid(i) for i in order[k:k + 4]} for k in range(0, len(order) - 3, 4)]
    assert max(map(len, batches)) <= 3
    assert grouped_epoch_order(np.array([0, 0, 3]), 1, 0).tolist() == [0, 1, 2]   # an empty pool is skipped
    plain = SimpleNamespace(data=TrainingSet(tmp_path / "d", negatives), num_examples=6)
    assert epoch_order_of(plain, 42, 0).tolist() == epoch_order(6, 42, 0).tolist()


def test_paper_scale_trains_the_ance_family_on_consecutive_triples(paper, paper_rows):
    """COCO-DR's, BERM's and ANCE's episodes at paper scale take batches as the official loaders build them: the
    card says so with its source and the dry-run line shows it; the warmups and MoDIR keep theirs."""
    from zsdr.plan.card import BATCH_COMPOSITION

    for job, n in (("cocodr-base-ep1", 30), ("cocodr-large-ep2", 30), ("ance-ep1", 20), ("ance-berm-ep3", 20),
                   ("berm-ance-ep1", 20)):
        row = paper_rows[f"train {job}"]
        assert row.values["example"].startswith(f"triple (query, positive, one of its {n} mined negatives")
        assert row.values["examples_per_epoch"] == 502_939 * n and BATCH_COMPOSITION in row.notes
        assert "COCO-DR ANCE/utils/util.py StreamingDataset" in BATCH_COMPOSITION
        spec = paper.trainings.train_spec(job)
        assert spec["examples"] == "query_triples" and spec["negatives_per_query"] == 1
        assert "batches of consecutive (query, positive, negative) triples" in str(paper.train_job(job).summary)
    for job in ("cocodr-warmup", "ance-modir@scifact", "kd"):
        assert paper.trainings.train_spec(job).get("examples") != "query_triples"
        assert "consecutive" not in str(paper.train_job(job).summary)


def test_the_published_values_overlay_runs_the_papers_values(tree, paper, paper_rows):
    """configs/paper.yaml follows the released scripts where a paper and its scripts disagree (the card's ⚠ rows);
    configs/paper-published.yaml the papers' values: AdamW for every COCO-DR episode recipe (all extend
    cocodr-base-noidro), the README table's warmup lr, MoDIR's 16 per step and DPR+MoDIR's "same settings"."""
    shutil.copy(ROOT / "configs" / "paper-published.yaml", tree / "configs" / "paper-published.yaml")
    published = load_plan(tree, tree / "configs" / "paper.yaml", tree / "configs" / "paper-published.yaml")
    for run in ("cocodr-base-ep1", "cocodr-large-ep3", "cocodr-base-k10-ep2"):
        assert paper_rows[f"train {run}"].values["optimizer"] == "lamb"
        t = published.trainings.train_spec(run)["train"]
        assert t["optimizer"] == "adamw" and t["max_steps"] in (45_000, 30_000)
    assert published.trainings.train_spec("ance-ep1")["train"]["optimizer"] == "lamb"
    # COCO-DR's BM25 warmup: the script's lr 1e-4 at paper scale, the README table's 2e-4 in the overlay (Large: 5e-5 in both)
    for run in ("cocodr-warmup", "condenser-warmup", "cocondenser-warmup", "condenser-target-warmup"):
        assert paper_rows[f"train {run}"].values["lr"] == pytest.approx(1e-4)
        assert published.trainings.train_spec(run)["train"]["lr"] == pytest.approx(2e-4)
    assert published.trainings.train_spec("cocodr-large-warmup")["train"]["lr"] == pytest.approx(5e-5)
    # MoDIR: the scripts' 32 per step (modir_ance.sh, modir_dpr.sh) and modir_dpr.sh's lr / classifier lr / λ0 / no
    # warmup; the overlay the paper's 16 per step and DPR+MoDIR with "the same settings" as ANCE+MoDIR
    for run in ("ance-modir@scifact", "ance-modir-gan@trec-covid", "dpr-modir@nfcorpus", "dpr-modir@fiqa"):
        t = published.trainings.train_spec(run)["train"]
        assert paper_rows[f"train {run}"].values["global_batch"] == 32
        assert t["batch_size"] * t["grad_accum"] == 16 and t["lr"] == pytest.approx(1e-6) and t["warmup_steps"] == 5000
        assert t["schedule_steps"] == 1_000_000
        m = published.trainings.train_spec(run)["modir"]
        assert m["classifier_lr"] == pytest.approx(5e-6) and m["lambda0"] == 1.0
    script = paper.trainings.train_spec("dpr-modir@nfcorpus")
    assert script["train"]["lr"] == pytest.approx(5e-6) and script["train"]["warmup_steps"] == 0
    assert script["modir"]["classifier_lr"] == pytest.approx(3e-5) and script["modir"]["lambda0"] == 0.5
    assert paper_rows["train dpr-modir@nfcorpus"].values["horizon"] == 2_187_500
    # COCO pretraining: the README command's warmup ratio 0.1 of the run's steps (the paper states none; not overlaid)
    assert paper_rows["pretrain coco"].values["warmup"] == 26_382 == -(-paper_rows["pretrain coco"].values["horizon"] // 10)
    assert published.trainings.coco_spec("coco")["train"]["warmup_ratio"] == 0.1


def test_query_triples_needs_one_negative_per_query(tree):
    bad = overlay(tree, "bad-query-triples", {"recipes": {"ance": {"negatives_per_query": 2}}})
    with pytest.raises(ValueError, match=r"recipes\.ance\.examples: query_triples .* negatives_per_query: 1"):
        load_plan(tree, tree / "configs" / "paper.yaml", bad)


def test_epoch_order_is_the_permutation_it_always_was():
    for n in (1, 7, 1000):
        want = np.random.default_rng([5, 1_000_003, 2]).permutation(n)
        got = epoch_order(n, 5, 2)
        assert got.dtype == np.int32 and (got == want).all()



def test_a_small_reference_number_is_compared_at_its_own_magnitude():
    """Learning rates differ below any absolute tolerance: 1e-4 is not 2e-4, 1e-6 not 5e-6."""
    from zsdr.plan.card_page import same

    assert not same(1e-4, 2e-4) and not same(1e-6, 5e-6) and not same(0.0, 1e-6)
    assert same(1e-4, 1.0e-04) and same(0.9954, 0.995) and same(0.0, 0.0) and same(26_382, 26_382)
