"""Each stage of the plan (zsdr.plan.*) built alone from small hand-written inputs: a stage reads only the
config sections and the stages its build function is given, so none of these tests loads a config file or
builds the whole plan."""

from __future__ import annotations

import copy
from dataclasses import replace
from types import SimpleNamespace

import pytest

from zsdr.plan.berm import build_berm
from zsdr.plan.cocodr import build_cocodr
from zsdr.plan.code import build_code
from zsdr.plan.datasets import Paths, build_datasets
from zsdr.plan.ddr import build_ddr
from zsdr.plan.evaluation import build_evaluation
from zsdr.plan.figures import build_figures
from zsdr.plan.modir import build_modir
from zsdr.plan.recipes import build_recipes
from zsdr.plan.references import build_model_refs
from zsdr.plan.resources import build_resources
from zsdr.plan.rmsc import build_rmsc
from zsdr.plan.summary import Note, build_summaries
from zsdr.plan.systems import build_systems
from zsdr.plan.tables import build_tables
from zsdr.plan.site import Site
from zsdr.plan.trainings import build_trainings, episode_lr_factor
from zsdr.plan.work import build_work

PATHS = {k: k for k in ("downloads", "data", "models", "indexes", "embeddings", "runs", "metrics", "stats",
                        "results", "byo")}
TRAIN = {"epochs": 1, "batch_size": 4, "lr": 1e-5, "grad_accum": 1, "optimizer": "adamw", "schedule": "linear",
         "warmup_steps": 0}


def recipe(**over):
    """A recipe with every key the planner reads (the schema's defaults, as small as they come)."""
    r = {"episodes": 1, "negatives": "bm25", "init": "tiny", "loss": "contrastive", "train": dict(TRAIN),
         "encoder": {"query_max_length": 16, "doc_max_length": 32}, "system": {}, "scale": 1.0,
         "negatives_per_query": 1, "provenance": "[X] test", "mine": {}, "base_system": None}
    r.update(over)
    return r


def config(**recipes):
    """A config with one source, two targets and the sections every stage reads; table 1 shows BM25 and the
    first recipe."""
    recipes = recipes or {"dpr": recipe()}
    return {
        "paths": dict(PATHS),
        "datasets": {"source": "src", "targets": ["t1", "t2"], "extra": [], "shared_corpus": {}, "eval_splits": {"src": "dev"}},
        "mini": {"domains": [{"name": "src", "role": "source"}, {"name": "t1", "role": "target"},
                             {"name": "t2", "role": "target"}]},
        "backbones": {"tiny": {"build": {"layers": 1}}},
        "dense": {"dataset_shards": {"t2": 2}, "shards": 1, "gpus": 0, "precision": "fp32"},
        "recipes": recipes,
        "training": {"seed": 7, "precision": "fp32", "save_every": 100, "log_every": 10, "dropout": None,
                     "processes": 1, "nodes": 1, "launcher": "torchrun", "loader_workers": 0, "compile": False,
                     "gpus": 1, "threads": 2, "runtime": 600, "sources": {}, "mine": {"depth": 10, "sample": 2},
                     "memory": {"mb": None, "process_mb": 1000, "dataset_mb": {}, "default_dataset_mb": 100,
                                "teacher_mb": 50, "conversion_factor": 2.0, "example_bytes": 100}},
        "cross_encoders": {}, "readers": {},
        "cocodr": {"pretrained": {}, "analysis": {}, "spans": {"tokenizer": "tiny"},
                   "figure4": {"variants": {}, "datasets": None},
                   "sweeps": {"reference": None}},
        "modir": {"eval_step": None, "source_target": None,
                  "curves": {"recipes": [], "datasets": None, "max_steps": None, "snapshot_every": 5},
                  "table3": {"dataset": None}, "figure4": {"dataset": None}, "figure5": {"recipe": None, "datasets": None},
                  "table4": {"dataset": None, "before": None, "after": None}},
        "rmsc": {"weak": {"method": "ict", "methods": {}, "tokenizer": None, "max_pairs": None, "pairs_per_document": 1},
                 "qgen": {"generators": {}}, "source_target": None,
                 "curves": {"snapshot_every": 5, "figure2": [], "figure3": [], "datasets": None},
                 "source_context": ["target", "human"]},
        "ddr": {"dam": {"source": {"train": {}}, "target": {"train": {"max_steps": 10}}, "datasets": {},
                        "mlm_probability": 0.15, "tie_embeddings": True},
                "figure4": {"system": "dpr", "baseline": "bm25-flat", "datasets": None, "snapshot_every": 5}},
        "berm": {"labels": {"reader": None, "shards": 2}, "analysis": {"pairs": 100}},
        "systems": {"bm25-flat": {"kind": "bm25", "fields": "flat", "rm3": False}},
        "table1": {"systems": ["bm25-flat", next(iter(recipes))], "baselines": ["bm25-flat"], "metric": "ndcg@10"},
        "evaluation": {"metrics": ["ndcg@10", "recall@100"]},
        "cluster": {"account": None, "partition": None, "gpu_partition": None, "gpu_model": None,
                    "cpus_per_gpu": None, "max_runtime": None, "scatter_search": False, "group_datasets": False},
        "offline": False,
    }


def stages(cfg, upto="summaries", tmp_path=None):
    """The stages of ``cfg`` in the plan's order, up to ``upto`` (a dict by name)."""
    out = {"datasets": build_datasets(cfg)}
    out["recipes"] = build_recipes(cfg, out["datasets"])
    out["refs"] = build_model_refs(cfg, out["recipes"])
    out["modir"] = build_modir(cfg, out["recipes"])
    out["rmsc"] = build_rmsc(cfg, out["recipes"], out["refs"])
    # DDR Figure 4 needs a REM recipe: these stages draw it on no dataset
    out["ddr"] = replace(build_ddr(cfg, out["recipes"]), figure4_datasets=[])
    out["cocodr"] = build_cocodr(cfg, out["recipes"])
    out["berm"] = build_berm(cfg, out["datasets"], out["refs"], {})
    if upto == "methods":
        return out
    out["systems"] = build_systems(cfg, out["recipes"], out["refs"], out["modir"], out["rmsc"], out["ddr"])
    out["code"] = build_code(tmp_path or "/nonexistent")
    out["resources"] = build_resources(cfg)
    out["tables"] = build_tables(cfg, out["systems"], out["code"])
    out["figures"] = build_figures(out["systems"], out["ddr"], out["cocodr"], out["berm"], {})
    out["evaluation"] = build_evaluation(cfg, out["systems"], out["tables"], out["figures"])
    out["trainings"] = build_trainings(out["recipes"], out["refs"], out["systems"], out["cocodr"], out["ddr"],
                                       out["berm"], out["code"])
    out["summaries"] = build_summaries(cfg, out["recipes"], out["systems"], out["resources"], out["berm"])
    return out


# ----------------------------------------------------------------------------------------------- datasets
def test_datasets_stage_reads_paths_datasets_and_shards():
    d = build_datasets(config())
    assert d.paths == Paths(**PATHS, logs="logs")
    assert d.evaluated == ["src", "t1", "t2"] and d.fetched == [] and d.built_backbones == ["tiny"]
    assert d.mini_sources == ["src"] and d.backbone_corpus == {"tiny": ["src", "t1", "t2"]}
    assert d.shards("t2") == ["shard0-of-2", "shard1-of-2"] and d.shards("t1") == ["shard0-of-1"]
    assert d.dataset_marker("t1") == "data/t1/dataset.json" and d.eval_split("t1") == "test"
    assert d.shard_corpus(SimpleNamespace(dataset="t2", shards="2")) == ["data/t2/dataset.json", "data/t2/store/store.json"]


@pytest.mark.parametrize("change, key", [
    (lambda c: c["datasets"]["targets"].append("nope"), "config key datasets: 'nope'"),
    (lambda c: c["dense"]["dataset_shards"].update(other=2), "config key dense.dataset_shards.other"),
    (lambda c: c["datasets"]["shared_corpus"].update(t1="t1"), "config key datasets.shared_corpus.t1"),
])
def test_datasets_stage_names_the_key_of_a_mistake(change, key):
    cfg = config()
    change(cfg)
    with pytest.raises(ValueError, match=key):
        build_datasets(cfg)


# ------------------------------------------------------------------------------------------------ recipes
def test_recipes_stage_owns_every_run():
    cfg = config(
        warm=recipe(),
        ance=recipe(negatives="ance", episodes=3, init="warm", encoder={"doc_max_length": 64}),
        adapt=recipe(init="warm", modir={"loss": "gan"}, train={**TRAIN, "max_steps": 10}),
    )
    r = build_recipes(cfg, build_datasets(cfg))
    assert list(r.runs) == ["warm", "ance-ep1", "ance-ep2", "ance-ep3", "adapt@t1", "adapt@t2"]
    assert r.per_target == {"adapt@t1": "t1", "adapt@t2": "t2"} and r.modir_recipes == ["adapt"]
    assert r.recipe_run("ance") == "ance-ep3" and r.trained_model("ance") == "models/trained/ance-ep3"
    # lengths and pooling follow the init chain where the recipe does not say them
    assert r.recipe_lengths("ance") == {"doc_max_length": 64, "query_max_length": 16}
    assert r.train_settings(cfg["recipes"]["warm"])["seed"] == 7
    assert r.launch_settings({"processes": 4})["processes"] == 4


def test_recipes_stage_refuses_episodes_without_mining():
    cfg = config(bad=recipe(episodes=2))
    with pytest.raises(ValueError, match=r"recipes\.bad\.episodes: 2 episodes need `negatives: ance`"):
        build_recipes(cfg, build_datasets(cfg))


# ------------------------------------------------------------------------------------------ method stages
def test_method_stages_build_from_recipes_alone():
    cfg = config(dpr=recipe(), adapt=recipe(init="dpr", modir={"loss": "gan"}, train={**TRAIN, "max_steps": 20}))
    cfg["modir"]["curves"].update(recipes=["adapt"], datasets=["t1"])
    s = stages(cfg, upto="methods")
    modir = s["modir"]
    assert modir.modir_steps("adapt", "t1") == [0, 5, 10, 15, 20] and modir.modir_base("adapt") == "dpr"
    assert modir.modir_model("adapt", "t1", 10) == "models/trained/adapt@t1/snapshots/step-000000010"
    assert modir.modir_model("adapt", None) == "models/trained/adapt@t1"   # the source: the first target's
    with pytest.raises(ValueError, match=r"config key modir: the model of adapt on t1 after 7 steps is not saved"):
        modir.modir_model("adapt", "t1", 7)
    assert s["ddr"].dam_settings("src")["role"] == "source" and s["ddr"].dam_settings("t1")["role"] == "target"
    assert s["berm"].label_shards("src", "train") == ["data/src/berm/train/labels.0-of-2.jsonl",
                                                      "data/src/berm/train/labels.1-of-2.jsonl"]
    assert s["berm"].berm_reader() is None and s["cocodr"].span_corpora == [] and s["cocodr"].figures == []
    assert s["rmsc"].weak_file("t1", "ict") == "data/t1/weak/ict.jsonl"
    assert s["refs"].model_ref("tiny") == "models/backbones/tiny" and s["refs"].model_ref("dpr") == "models/trained/dpr"


def test_berm_stage_refuses_an_undefined_reader():
    cfg = config()
    cfg["berm"]["labels"]["reader"] = "nope"
    d = build_datasets(cfg)
    refs = build_model_refs(cfg, build_recipes(cfg, d))
    with pytest.raises(ValueError, match=r"config key berm\.labels\.reader: 'nope' is not a key of `readers`"):
        build_berm(cfg, d, refs, {})


# ------------------------------------------------------------------------------------------------ systems
def test_systems_stage_adds_trained_and_mining_systems():
    cfg = config(
        warm=recipe(),
        ance=recipe(negatives="ance", episodes=2, init="warm", encoder={"doc_max_length": 64},
                    system={"dataset_lengths": {"t1": {"query_max_length": 128}}}),
    )
    s = stages(cfg)["systems"]
    # one system per run, the recipe's name for its last episode, configured systems first
    assert list(s.by_name)[:5] == ["bm25-flat", "warm", "ance-ep1", "ance-ep2", "ance"]
    assert s.bm25 == ["bm25-flat"] and "ance" in s.dense
    # ANCE episode 1 mines with warm, at the episode's document length: a mining system of its own
    assert s.mined == {"ance-ep1": ("ance", 1), "ance-ep2": ("ance", 2)}
    assert s.previous_system("ance-ep1") == "warm" and s.mining_system("ance-ep1") == "warm.mine-d64"
    assert s.by_name["warm.mine-d64"]["doc_max_length"] == 64 and s.mining_system("ance-ep2") == "ance-ep1"
    # inference lengths per dataset reach the encoder options of that dataset only
    assert s.encoder_options("ance", "t1")["query_max_length"] == 128
    assert "query_max_length" not in s.encoder_options("ance", "t2")
    assert s.dataset_lengths_text("ance") == "t1 q128"
    assert s.dense_model("ance", "t1") == "models/trained/ance-ep2"


# --------------------------------------------------------------------------------------- resources, code
def test_resources_stage_reads_training_and_cluster():
    cfg = config()
    cfg["cluster"].update(account="lab", gpu_partition="gpu", partition="cpu", max_runtime=240)
    r = build_resources(cfg)
    assert r.dense_env == "../envs/cpu.yaml" and r.runtime(600) == 240 and r.runtime(100) == 100
    res = r.cluster_resources(gpus=2)
    assert res["slurm_account"] == "lab" and res["slurm_partition"](None) == "gpu"
    assert r.training_threads(lambda wc: {"processes": 3})(None) == 6
    # a 600-minute training at a 240-minute cap runs as three attempts
    assert r.training_retries(SimpleNamespace(execution_settings=SimpleNamespace(retries=1))) == 3
    # `cluster`'s older keys are the site's; a job on one node names no nodes, a training over two does
    assert r.site.account == "lab" and "nodes" not in res
    cfg["site"] = {"gpus_per_node": 2}
    r = build_resources(cfg)
    assert r.site_layout({"processes": 4, "nodes": 1}) == {"processes": 2, "nodes": 2}
    spans = r.cluster_resources(gpus=4, nodes=lambda wc: 2)
    assert spans["nodes"](None) == 2 and spans["mpi"](None) == "srun" and spans["tasks"](None) == 2


def test_work_stage_sizes_jobs_by_their_corpus(monkeypatch):
    """Runtimes from the corpora's published sizes at the site's throughput; a shard job asks as the largest
    shard; a corpus without statistics is sized as the largest shard; dense groups only for one-shard corpora."""
    import zsdr.data.sizes

    sizes = {"src": {"docs": 1e6, "words": 50.0, "queries": 1000.0}, "t2": {"docs": 4e6, "words": 100.0, "queries": 10.0}}
    monkeypatch.setattr(zsdr.data.sizes, "published_sizes", lambda: sizes)
    cfg = config()
    cfg["dense"]["dtype"] = "float16"
    cfg["bm25"] = {"threads": 1}
    s = stages(cfg)
    site = Site(floor=1, safety=1, startup_s=0, max_runtime=600,
                throughput={"encode": 1e6, "search": 1e9, "index": 1e5, "label": 10.0})
    w = build_work(cfg, s["datasets"], s["evaluation"], s["berm"], site)
    wc = SimpleNamespace
    assert w.corpus_size("t1") == w.largest_shard == (2e6, 100.0)        # t2's shard: 2M of its 4M documents
    assert w.encode_runtime(wc(dataset="src", shards="1")) == 1 and w.encode_seconds("src") == 50.0
    assert w.encode_runtime(wc(dataset="t2", shard="0", shards="2")) == 4       # 200 s for 2M x 100 words
    assert w.search_runtime(wc(dataset="src", system="dpr")) == 1               # 1000 x 1M scores: 1 s
    assert w.index_threads(wc(dataset="t2")) == 2 and w.index_runtime(wc(dataset="t2")) == 34   # 4,000 s / 2
    assert w.encode_runtime(wc(dataset="t2", shard="0", shards="2"), attempt=2) == 8
    assert w.dense_group(wc(system="dpr", dataset="src")) == "dense-dpr"
    assert w.dense_group(wc(system="dpr", dataset="t2")) is None
    assert w.embeddings_mb(wc(dataset="t2", shards="2")) == round(2e6 * (768 * 2 + 10) / 1e6)
    # labelling: the most pairs of a split (the training pairs unknown: the most queries) over the shards
    assert w.shard_work["label"] == 1000 / 10 / 2 and w.label_runtime(wc()) == 1
    # work that cannot fit the site's limit stops the plan, naming the job
    with pytest.raises(ValueError, match="encoding t2 needs about 7 min .* more than site.max_runtime 3: split"):
        replace(w, site=replace(site, max_runtime=3)).encode_runtime(wc(dataset="t2", shards="1"))


def test_code_stage_writes_nothing_until_asked(tmp_path):
    code = build_code(tmp_path, tmp_path / "elsewhere")
    assert code.runs_elsewhere and code.source_file("a/b.txt") == str(tmp_path.resolve() / "a/b.txt")
    assert not build_code(tmp_path).runs_elsewhere and build_code(tmp_path).source_file("a") == "a"
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- tables, figures, evaluation
def test_tables_figures_and_evaluation_stages():
    s = stages(config())
    tables, evaluation = s["tables"], s["evaluation"]
    assert tables.table1_systems == ["bm25-flat", "dpr"] and tables.datasets_override == ["t1", "t2"]
    assert list(tables.model_cards) == ["models/trained/dpr"]
    card = tables.model_cards["models/trained/dpr"]
    assert card["run"] == "dpr" and card["metrics"]["dpr"] == {d: f"metrics/{d}/dpr.json" for d in ("src", "t1", "t2")}
    assert evaluation.eval_systems == ["bm25-flat", "dpr"] and evaluation.group_datasets == []
    assert evaluation.dense_search_inputs(SimpleNamespace(dataset="t2", system="dpr")) == [
        "embeddings/t2/dpr/shard0-of-2", "embeddings/t2/dpr/shard1-of-2"]
    assert s["figures"].cocodr_eval_systems == frozenset()


def test_evaluation_stage_groups_one_shard_datasets():
    cfg = config()
    cfg["cluster"].update(group_datasets=True, scatter_search=True)
    e = stages(cfg)["evaluation"]
    assert e.group_datasets == ["src", "t1"] and e.group_systems == ["dpr"]    # t2 has two shards: its own jobs
    assert e.scattered("t2") and not e.scattered("t1")
    assert [j["dataset"] for j in e.group_jobs("dpr")] == ["data/src", "data/t1"]


@pytest.mark.parametrize("change, key", [
    (lambda c: c["evaluation"].update(metrics=["ndgc@10"]), r"config key evaluation\.metrics: unknown metric 'ndgc@10'"),
    (lambda c: c["table1"].update(metric="mrr@10"), r"config key table1\.metric: 'mrr@10' is not computed"),
    (lambda c: c["datasets"]["eval_splits"].update(t1="dev"), r"config key datasets\.eval_splits\.t1: t1 has no split"),
])
def test_evaluation_stage_refuses_what_an_evaluation_job_would_fail_on(change, key):
    cfg = config()
    change(cfg)
    with pytest.raises(ValueError, match=key):
        stages(cfg)


def test_tables_stage_refuses_an_undefined_table1_system():
    cfg = config()
    cfg["table1"]["systems"] = ["nope"]
    s = stages(cfg, upto="methods")
    systems = build_systems(cfg, s["recipes"], s["refs"], s["modir"], s["rmsc"], s["ddr"])
    with pytest.raises(ValueError, match=r"config key table1\.systems: system 'nope' is not defined"):
        build_tables(cfg, systems, build_code("/nonexistent"))


# --------------------------------------------------------------------------------- trainings, summaries
def test_trainings_stage_resolves_every_spec():
    cfg = config(warm=recipe(), ance=recipe(negatives="ance", episodes=2, init="warm",
                                            episode_lr_decay={"total_steps": 100, "floor": 0.5},
                                            train={**TRAIN, "max_steps": 30}))
    t = stages(cfg)["trainings"]
    spec = t.train_spec("ance-ep2")
    assert spec["init"] == "models/trained/ance-ep1" and spec["negatives"] == "data/src/negatives/ance-ep2.jsonl"
    assert spec["train"]["lr"] == pytest.approx(1e-5 * 0.7)   # resumed at step 30 of 100
    assert spec["info"]["mine"]["system"] == "ance-ep1" and spec["info"]["mine"]["depth"] == 10
    assert t.spec_inputs(spec) == ["data/src/dataset.json", "data/src/store/store.json",
                                   "data/src/negatives/ance-ep2.jsonl", "models/trained/ance-ep1/config.json"]
    assert t.mine_settings("ance-ep2") == {"mine": {"depth": 10, "sample": 2}, "seed": 9, "max_examples": None}
    assert t.stamps == {}     # building the stage wrote no code stamp


def test_trainings_stage_names_the_key_of_a_bad_spec():
    cfg = config(dpr=recipe(negatives="triples"))
    s = stages(cfg, upto="methods")
    systems = build_systems(cfg, s["recipes"], s["refs"], s["modir"], s["rmsc"], s["ddr"])
    with pytest.raises(ValueError, match=r"config key recipes\.dpr needs training\.sources\.src\.triples"):
        build_trainings(s["recipes"], s["refs"], systems, s["cocodr"], s["ddr"], s["berm"], build_code("/x"))


def test_episode_lr_factor_is_the_official_rule():
    r = recipe(episodes=4, episode_lr_decay={"total_steps": 100, "floor": 0.2}, train={**TRAIN, "max_steps": 40})
    assert [episode_lr_factor(r, k, "recipes.x") for k in (1, 2, 3, 4)] == [1, 0.6, pytest.approx(0.2), 0.2]
    assert episode_lr_factor({**r, "episode_lr_decay": True}, 3, "recipes.x") == 0.5


def test_summaries_stage_says_what_a_training_does():
    s = stages(config())
    spec = s["trainings"].train_spec("dpr")
    launch = s["recipes"].launch_settings(s["recipes"].by_name["dpr"])
    line = s["summaries"].spec_summary(spec, launch)
    assert line.startswith("init models/backbones/tiny; loss contrastive with 1 negative(s) from bm25.jsonl")
    assert "batch 4 x 1 process(es)" in line and "max length q16/d32" in line and "; memory " in line
    note = Note(line)
    assert str(note) == line and note == Note(line) and f"{note}" == line


def test_stages_are_frozen_and_take_what_they_read():
    s = stages(config())
    with pytest.raises(AttributeError):
        s["systems"].by_name = {}
    # a stage reads the config it was given when it was built, not the config afterwards
    cfg = config()
    d = build_datasets(cfg)
    before = copy.deepcopy(d)
    cfg["datasets"]["targets"].append("t3")
    assert d == before


def test_single_run_sections_refuse_episodes_and_rems():
    from zsdr.plan import checks

    for check, key in ((checks.check_per_target_init, "per_target_init"), (checks.check_modir_recipe, "modir"),
                       (checks.check_mixture_recipe, "mixture")):
        for recipe in ({"episodes": 2, "train": {"max_steps": 1}}, {"episodes": 1, "rem": {"r": 8}, "train": {"max_steps": 1}}):
            with pytest.raises(ValueError, match=rf"^config key recipes\.r\.{key}: "):
                check("r", recipe)
        check("r", {"episodes": 1, "train": {"max_steps": 5}})
    with pytest.raises(ValueError, match=r"recipes\.r\.train\.max_steps: MoDIR evaluates"):
        checks.check_modir_recipe("r", {"episodes": 1, "train": {}})
