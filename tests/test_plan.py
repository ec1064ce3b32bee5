"""zsdr.plan without Snakemake: the plan of a config, read as the Snakefile reads it."""

import copy
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from zsdr.plan.code import STAMPS, stamp_files
from zsdr.plan.core import load_plan, with_schema_defaults
from zsdr.workflow import expand_recipes, read_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of the workflow's code and config (planning writes its code stamps there)."""
    work = tmp_path_factory.mktemp("plan")
    for name in ("config.yaml", "configs", "schemas", "src", "workflow_scripts"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    return work


@pytest.fixture(scope="module")
def mini(tree):
    return load_plan(tree)


@pytest.fixture(scope="module")
def paper(tree):
    return load_plan(tree, tree / "configs" / "paper.yaml")


def test_schema_defaults_equal_snakemakes_validate(tree):
    from snakemake.utils import validate

    config = read_config(tree, tree / "configs" / "paper.yaml")
    expand_recipes(config)
    ours, theirs = copy.deepcopy(config), copy.deepcopy(config)
    with_schema_defaults(ours, tree / "schemas" / "config.schema.yaml")
    validate(theirs, str(tree / "schemas" / "config.schema.yaml"))
    assert ours == theirs


def test_recipes_resolve_into_runs_and_episodes(mini, paper):
    # an ANCE recipe with E episodes trains runs <name>-ep1..E; its system is the last one
    assert mini.recipes.runs["ance-ep1"] == ("ance", 1) and mini.recipes.runs["ance-ep2"] == ("ance", 2)
    assert mini.recipes.recipe_run("ance") == "ance-ep2" and mini.recipes.trained_model("ance").endswith("/trained/ance-ep2")
    assert paper.recipes.recipe_run("ance") == "ance-ep3"
    # episode k starts from episode k-1 and mines with it
    spec = mini.trainings.train_spec("ance-ep2")
    assert spec["init"] == f"{mini.paths.models}/trained/ance-ep1"
    assert mini.systems.previous_system("ance-ep2") == "ance-ep1"
    # MoDIR trains once per target; per-target runs are <recipe>@<dataset>
    modir_runs = [r for r, (n, _) in mini.recipes.runs.items() if n == "dpr-modir"]
    assert sorted(modir_runs) == [f"dpr-modir@{d}" for d in sorted(mini.recipes.per_target_datasets)]


def test_training_specs_carry_the_recipe_settings(mini, paper):
    kd = paper.trainings.train_spec("kd")
    assert kd["loss"] == "margin_mse" and kd["teacher"] and kd["negatives_per_query"] == 1
    dpr = paper.trainings.train_spec("dpr")
    assert dpr["train"]["batch_size"] == 32 and dpr["train"]["max_steps"] == 60000 and dpr["examples"] == "triples"
    assert dpr["head"] == "new"
    # the spec's inputs: its dataset, negatives and starting model
    files = paper.trainings.spec_inputs(paper.trainings.train_spec("ance-ep2"))
    assert f"{paper.paths.models}/trained/ance-ep1/config.json" in files
    # the dry-run line names the loss, the batch shape and the steps
    summary = paper.summaries.spec_summary(dpr, paper.recipes.launch_settings(paper.recipes.by_name["dpr"]))
    assert "pairwise_nll with 1 negative" in summary and "60,000 steps (max_steps; linear decay to 0 at 2,187,500" in summary
    # the settings a recipe's system encodes with beyond its training ones reach the saved model
    assert paper.trainings.train_spec("ddr-dr-contrast")["retrieval"] == {"query_max_length": 512, "doc_max_length": 512}
    assert {k: paper.systems.encoder_options("ddr-dr-contrast")[k] for k in ("query_max_length", "doc_max_length")} == \
        paper.trainings.train_spec("ddr-dr-contrast")["retrieval"]
    assert "retrieval" not in mini.trainings.train_spec("dpr")  # no recipe `system:` at mini scale



def test_model_cards_cover_the_trained_table1_models(mini):
    cards = mini.tables.model_cards
    ddr = cards[f"{mini.paths.models}/trained/ddr-contrast"]  # one card for the REM, scored on every dataset
    assert ddr["paper"] == "ddr" and list(ddr["metrics"]["ddr-contrast"]) == mini.datasets.evaluated
    # per-target models: each folder scored where its system uses it
    for target in mini.datasets.targets:
        entry = cards[mini.systems.dense_model("rmsc-cd", target)]
        assert target in entry["metrics"]["rmsc-cd"] and entry["paper"] == "rmsc"
    assert not any("backbones" in f for f in cards)  # untrained systems get no card
    assert f"{mini.paths.metrics}/{mini.datasets.source}/dpr.json" in mini.tables.model_card_inputs()
    # a card's own scores: the folder as it loads with no arguments. DDR's system plugs the REM into each
    # target's own DAM, so there the folder itself is evaluated (system ddr-contrast.own); on the source
    # the system loads the folder as it is
    metrics, source, systems = mini.paths.metrics, mini.datasets.source, mini.systems
    assert ddr["own"] == {d: f"{metrics}/{d}/" + ("ddr-contrast.json" if d == source else "ddr-contrast.own.json")
                          for d in mini.datasets.evaluated}
    assert ddr["why"] == {"ddr-contrast": "the REM on each dataset's own DAM"}  # said once for every target
    assert systems.own[f"{mini.paths.models}/trained/ddr-contrast"] == "ddr-contrast.own"
    assert systems.by_name["ddr-contrast.own"]["model"] == f"{mini.paths.models}/trained/ddr-contrast"
    assert systems.encoder_options("ddr-contrast.own", mini.datasets.targets[0]) == {}
    assert "ddr-contrast.own" in systems.dense and "ddr-contrast.own" in mini.evaluation.extra_eval_systems
    # RMSC encodes the source dataset in rmsc.source_context, at mini the folder's own inference context: the
    # folder as it loads; another context would be named
    folder = systems.dense_model("rmsc-cd", source)
    rmsc = cards[folder]
    assert rmsc["own"] == rmsc["metrics"]["rmsc-cd"] and rmsc["why"] == {}
    assert systems.encodes_otherwise("rmsc-cd", source, folder, {}) == (
        f"{source} in the soft-token context {systems.rmsc.source_context}")
    assert systems.encodes_otherwise("rmsc-cd", source, folder, systems.saved_settings(rmsc["recipe"])) is None
    # a plain model's own scores are its system's
    dpr = cards[f"{mini.paths.models}/trained/dpr"]
    assert dpr["own"] == dpr["metrics"]["dpr"] and dpr["why"] == {}
    assert set(mini.tables.model_card_inputs()) >= {f for e in cards.values() for f in e["own"].values()}


def test_systems_route_to_their_model_per_dataset(mini):
    dataset = mini.datasets.targets[0]
    assert mini.systems.dense_model("dpr", dataset) == f"{mini.paths.models}/trained/dpr"
    assert mini.systems.dense_model_input(SimpleNamespace(system="dpr", dataset=dataset)) == [
        f"{mini.paths.models}/trained/dpr/config.json"
    ]
    # a MoDIR system is its run on each target
    assert mini.systems.dense_model("dpr-modir", dataset).startswith(f"{mini.paths.models}/trained/dpr-modir@{dataset}")
    assert set(mini.systems.bm25) <= set(mini.systems.by_name) and "dpr" in mini.systems.dense


def test_resources_follow_the_site_config(tree):
    cfg = tree / "site.yaml"
    cfg.write_text(yaml.safe_dump({"site": {"account": "lab", "gpu_partition": "gpu", "partition": "cpu"}}))
    plan = load_plan(tree, cfg)
    res = plan.cluster_resources(gpus=2)
    assert res["gpu"] == 2 and res["slurm_account"] == "lab" and res["cpus_per_gpu"] == 8
    assert res["slurm_partition"](None) == "gpu"
    assert plan.cluster_resources()["slurm_partition"](None) == "cpu"
    # a job on one node names no nodes (a group job would add them up); `nodes` only where a job spans several
    assert "nodes" not in res and "mpi" not in res


def test_older_cluster_keys_still_say_where_jobs_run(tree):
    """Configs from before `site:` gave account, partitions, GPU model, CPUs per GPU and the time limit under
    `cluster:`; they still apply, and the same key set differently in both places is an error naming both."""
    cfg = tree / "cluster.yaml"
    cfg.write_text(yaml.safe_dump({"cluster": {"account": "lab", "gpu_partition": "gpu", "cpus_per_gpu": 4,
                                               "max_runtime": 600}}))
    plan = load_plan(tree, cfg)
    res = plan.cluster_resources(gpus=2)
    assert res["slurm_account"] == "lab" and res["slurm_partition"](None) == "gpu" and res["cpus_per_gpu"] == 4
    assert plan.runtime(4320) == 600
    cfg.write_text(yaml.safe_dump({"cluster": {"max_runtime": 600}, "site": {"max_runtime": 1440}}))
    with pytest.raises(ValueError, match=r"cluster\.max_runtime \(600\) and site\.max_runtime \(1440\) disagree: "
                                         r"set site\.max_runtime only"):
        load_plan(tree, cfg)


def test_config_mistakes_name_the_key(tree):
    cfg = tree / "bad.yaml"
    cfg.write_text(yaml.safe_dump({"recipes": {"dpr": {"episodes": 2}}}))
    with pytest.raises(ValueError, match=r"recipes\.dpr\.episodes: 2 episodes need `negatives: ance`"):
        load_plan(tree, cfg)


def test_code_inputs_follow_a_recipes_terms(mini, tree):
    def files(run):
        return stamp_files(tree / mini.trainings.recipe_code(run))

    assert "src/zsdr/losses/margin_mse.py" in files("kd")
    assert "src/zsdr/losses/margin_mse.py" not in files("dpr")
    assert "src/zsdr/losses/semantic_units.py" in files("kd-berm") and "src/zsdr/losses/semantic_units.py" not in files("kd")
    assert mini.trainings.recipe_code("kd").startswith(f"{STAMPS}/train-")


def test_a_new_loss_terms_section_reaches_its_spec_and_code(tree, monkeypatch):
    """A new term is its module, one registry line and its recipe section: the planner passes the section
    into the training spec and lists the module among the training's code."""
    from zsdr.training import term_registry

    # any readable term class will do: the schema reads its section from the class's dataclass
    monkeypatch.setitem(term_registry.TERMS, "toy", "zsdr.training.idro:DroTerm")
    plan = load_plan(tree)
    plan.recipes.by_name["dpr"]["toy"] = {"weight": 0.5}
    try:
        assert plan.trainings.train_spec("dpr")["toy"] == {"weight": 0.5}
        assert "toy" not in plan.trainings.train_spec("kd")
        assert "src/zsdr/training/idro.py" in stamp_files(tree / plan.trainings.recipe_code("dpr"))
    finally:
        del plan.recipes.by_name["dpr"]["toy"]


def test_job_shapes_of_the_paper_trainings(paper, tree):
    """COCO-DR trains on 8 GPUs, DDR's REMs and DAMs on 4, the rest on 1; on the paper config's nodes of 4 GPUs
    the 8-GPU trainings run as 2 nodes x 4 processes (the same 8 processes), on nodes of 8 on one; GPU jobs ask
    for 8 CPUs per GPU; runtimes are capped at the site's maximum where configured."""
    def gpus(plan, recipe):
        return plan.train_job(plan.recipes.recipe_run(recipe)).gpus

    assert gpus(paper, "cocodr-base") == 8 and gpus(paper, "ddr-contrast") == 4 and gpus(paper, "dpr") == 1
    assert gpus(paper, "ance") == 1
    wc = SimpleNamespace(run="cocodr-base-ep1")
    job = lambda w: paper.train_job(w.run)    # noqa: E731
    assert paper.resources.site.gpus_per_node == 4
    assert {k: job(wc).launch[k] for k in ("processes", "nodes")} == {"processes": 4, "nodes": 2}
    res = paper.training_resources(job)
    assert res["gpu"](wc) == 8 and res["nodes"](wc) == 2 and res["cpus_per_gpu"] == 8
    # the SLURM executor starts no one-task step around it (`mpi`), and it asks one task a node
    assert res["mpi"](wc) == "srun" and res["tasks"](wc) == 2 and res["tasks_per_gpu"](wc) == 0
    one = SimpleNamespace(run="dpr")
    assert res["nodes"](one) is None and res["mpi"](one) is None and res["tasks"](one) is None
    # a CPU per process: a 2-process training on the CPU asks for two cores (4 processes a node here)
    assert job(wc).threads == 4
    assert paper.resources.training_threads(lambda w: {"processes": 2})(wc) == 2 * paper.recipes.training["threads"]
    cfg = tree / "eight.yaml"
    cfg.write_text(yaml.safe_dump({"site": {"gpus_per_node": 8, "cores_per_node": 96}}))
    eight = load_plan(tree, tree / "configs" / "paper.yaml", cfg)
    assert {k: eight.train_job(wc.run).launch[k] for k in ("processes", "nodes")} == {"processes": 8, "nodes": 1}
    assert eight.training_resources(lambda w: eight.train_job(w.run))["nodes"](wc) is None
    # 3 days of training at the paper config's 24-h cap: three attempts, two on top of the profile's retries
    assert paper.recipes.training["runtime"] == 4320 and paper.runtime(paper.recipes.training["runtime"]) == 1440
    profile = SimpleNamespace(execution_settings=SimpleNamespace(retries=2))
    assert paper.resources.training_retries(profile) == 4 and paper.runtime(600) == 600
    cfg = tree / "capped.yaml"
    cfg.write_text(yaml.safe_dump({"site": {"max_runtime": 4320}}))
    roomy = load_plan(tree, tree / "configs" / "paper.yaml", cfg)
    assert roomy.runtime(roomy.recipes.training["runtime"]) == 4320 and roomy.resources.training_retries(profile) is None
    cfg.write_text(yaml.safe_dump({"site": {"max_runtime": None}}))
    assert load_plan(tree, tree / "configs" / "paper.yaml", cfg).runtime(4320) == 4320    # no cap: as asked


def test_training_memory_follows_processes_data_and_teacher(paper, tree):
    """mem_mb of a bi-encoder training: the larger of its processes beside the mapped dataset and the
    one-process arrays conversion (with a distillation's unpickled teacher scores); shown in the dry run."""
    m = paper.recipes.training["memory"]

    def memory(run):
        spec = paper.trainings.train_spec(run)
        return paper.resources.training_memory(spec, paper.train_job(run).launch)

    data = m["dataset_mb"]["msmarco-triples"]
    assert memory("dpr")[0] == m["process_mb"] + data
    # per node: 4 of its 8 processes on each of its 2 nodes, each node mapping the data
    assert memory("cocodr-base-ep1")[0] == 4 * m["process_mb"] + m["dataset_mb"]["msmarco"]
    kd, why = memory("kd")
    assert kd == max(m["process_mb"] + m["dataset_mb"]["msmarco"], m["dataset_mb"]["msmarco"] + m["teacher_mb"])
    assert "incl. teacher" in why and f"{kd} MB" in why
    assert why in paper.summaries.spec_summary(paper.trainings.train_spec("kd"), paper.recipes.launch_settings(paper.recipes.by_name["kd"]))
    cfg = tree / "fixed-memory.yaml"
    cfg.write_text(yaml.safe_dump({"training": {"memory": {"mb": 64000}}}))
    fixed = load_plan(tree, tree / "configs" / "paper.yaml", cfg)
    spec = fixed.trainings.train_spec("kd")
    assert fixed.resources.training_memory(spec, fixed.recipes.launch_settings(fixed.recipes.by_name["kd"]))[0] == 64000


def test_pretraining_memory_follows_processes_and_the_corpora_it_maps(paper, tree):
    """COCO pretraining's mem_mb: its processes beside the span files of its corpora, each sized by the
    config's dataset_mb, else its published statistics (documents x words x bytes per word), else the
    default; shown in the dry run, overridden by training.memory.mb."""
    from zsdr.data.sizes import TEXT_BYTES_PER_WORD, published_sizes

    m = paper.recipes.training["memory"]
    spec = paper.trainings.coco_spec("coco")
    launch = paper.coco_job("coco").launch
    corpora = paper.cocodr.pretrained_corpora("coco")
    assert len(corpora) == 30 and (launch["processes"], launch["nodes"]) == (4, 2)     # per node: 8 in all
    bioasq = published_sizes()["bioasq"]
    assert paper.resources.corpus_mb("bioasq") == (-(-int(14914602 * 202.61 * TEXT_BYTES_PER_WORD) // 10**6), "published size")
    assert bioasq["docs"] == 14914602 and paper.resources.corpus_mb("msmarco") == (m["dataset_mb"]["msmarco"], "configured")
    assert paper.resources.corpus_mb("no-such-corpus") == (m["default_dataset_mb"], "default")
    mb, why = paper.resources.training_memory(spec, launch)
    assert mb == 4 * m["process_mb"] + sum(paper.resources.corpus_mb(c)[0] for c in corpora)
    assert why.startswith(f"{mb} MB = 4 process(es) x {m['process_mb']} + span files of 30 corpora ")
    assert why in paper.summaries.spec_summary(spec, launch)
    cfg = tree / "fixed-pretraining-memory.yaml"
    cfg.write_text(yaml.safe_dump({"training": {"memory": {"mb": 64000}}}))
    fixed = load_plan(tree, tree / "configs" / "paper.yaml", cfg)
    assert fixed.resources.training_memory(fixed.trainings.coco_spec("coco"), launch)[0] == 64000


def test_mixture_memory_follows_processes_stores_and_weak_tables(paper):
    """An RMSC mixture's mem_mb: its processes beside the stores of its datasets and its weak-pair tables
    (mapped: rmsc.weak.max_pairs pairs of at most three documents' text each); in the dry run."""
    from zsdr.data.sizes import published_sizes

    m = paper.recipes.training["memory"]
    run = "rmsc-cd@lotte-writing-test"
    spec = paper.trainings.train_spec(run)
    launch = paper.recipes.launch_settings(paper.recipes.by_name["rmsc-cd"])
    assert spec["kind"] == "mixture" and [e["relevance"] for e in spec["sets"]] == ["human", "weak", "weak"]
    cap = paper.config["rmsc"]["weak"]["max_pairs"]
    source, target = paper.resources.corpus_mb("msmarco")[0], paper.resources.corpus_mb("lotte-writing-test")[0]
    weak = sum(-(-int(mb * 3 * cap / published_sizes()[name]["docs"] * 1000) // 1000)
               for name, mb in (("msmarco", source), ("lotte-writing-test", target)))
    mb, why = paper.resources.training_memory(spec, launch)
    assert mb == launch["processes"] * m["process_mb"] + source + target + weak
    assert why == (f"{mb} MB = {launch['processes']} process(es) x {m['process_mb']} + stores of 2 dataset(s) "
                   f"{source + target} + weak-pair tables {weak}")
    assert why in paper.summaries.spec_summary(spec, launch)


def test_every_trainings_code_stamp_is_written_by_the_workflows_call_not_by_the_plan(tmp_path):
    """Snakemake lists the stamp folder once while it builds the DAG: the workflow writes every training's
    stamp while the Snakefile is read (Plan.write_training_stamps, rules/common.smk), not when an input function
    first asks for it; making a plan writes nothing."""
    for name in ("config.yaml", "configs", "schemas", "src", "workflow_scripts"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    plan = load_plan(tmp_path)
    assert not (tmp_path / STAMPS).exists()    # making a plan writes nothing
    plan.write_training_stamps()
    stamps = {plan.trainings.stamps[run] for run in plan.recipes.runs}
    assert stamps and all((tmp_path / s).is_file() for s in stamps)
    assert plan.trainings.recipe_code("kd") == plan.trainings.stamps["kd"]


def test_every_evaluated_datasets_qrels_stamp_is_written_by_the_workflows_call(tmp_path):
    """The evaluate jobs take a stamp of their qrels (Plan.eval_qrels): written while the Snakefile is read
    (Plan.write_qrels_stamps, rules/common.smk), where an input function writing it first could be missed by
    Snakemake's one listing of the folder (MissingInputException); a scale with its own data folder has its
    own stamps, so switching scales rewrites none of the other's."""
    for name in ("config.yaml", "configs", "schemas", "src", "workflow_scripts"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    mini, small = load_plan(tmp_path), load_plan(tmp_path, tmp_path / "configs" / "small.yaml")
    assert not (tmp_path / STAMPS).exists()    # making a plan writes nothing
    mini.write_qrels_stamps()
    small.write_qrels_stamps()
    for plan, data in ((mini, "data"), (small, "small/data")):
        for name in plan.datasets.evaluated:
            stamp = tmp_path / plan.eval_qrels(name)
            split = plan.datasets.eval_split(name)
            assert stamp.is_file() and stamp.read_text().endswith(f"  {data}/{name}/qrels/{split}.tsv\n")
    assert mini.eval_qrels(mini.datasets.source) == f"{STAMPS}/qrels-data_mini-source-dev.sha256"
    assert small.eval_qrels("scifact") == f"{STAMPS}/qrels-small_data_scifact-test.sha256"


def test_dam_reader_and_generator_memory_follow_processes_examples_and_the_store(paper, mini):
    """mem_mb of the trainings that once asked for a flat 32 GB: a DAM's processes beside its corpus's
    mapped store; a reader's or generator's processes, each holding its pairs as Python objects
    (published training pairs, or max_examples, x example_bytes), beside the store; in the dry run."""
    m = paper.recipes.training["memory"]
    spec = paper.trainings.dam_spec("bert-base--msmarco")
    launch = paper.dam_job("bert-base--msmarco").launch
    mb, why = paper.resources.training_memory(spec, launch)
    assert launch["processes"] == 4 and f"{spec['dataset']}/store/store.json" in paper.trainings.spec_inputs(spec)
    assert mb == 4 * m["process_mb"] + m["dataset_mb"]["msmarco"]
    assert why == f"{mb} MB = 4 process(es) x {m['process_mb']} + msmarco store {m['dataset_mb']['msmarco']} (configured)"
    assert why in paper.summaries.spec_summary(spec, launch)
    bioasq = paper.trainings.dam_spec("bert-base--msmarco--bioasq")   # 14.9M documents: ~22.7 GB of text, mapped once
    assert paper.resources.corpus_mb("bioasq")[0] > 20000
    assert paper.resources.training_memory(bioasq, launch)[0] == 4 * m["process_mb"] + paper.resources.corpus_mb("bioasq")[0]

    assert paper.resources.train_pairs("msmarco", None) == (532761, "published")
    assert paper.resources.train_pairs("msmarco", 1000) == (1000, "max_examples")
    assert paper.resources.train_pairs("msmarco", 10**9) == (532761, "published")
    assert paper.resources.train_pairs("no-such-set", None) == (None, "unknown")
    one = {"processes": 1, "nodes": 1}
    for kind in ("reader", "generator"):
        mb, why = paper.resources.training_memory({"kind": kind, "dataset": "data/msmarco"}, one)
        examples = -(-532761 * m["example_bytes"] // 10**6)
        assert mb == m["process_mb"] + examples + m["dataset_mb"]["msmarco"]
        assert f"examples {examples}: 532761 pairs (published)" in why
        two = paper.resources.training_memory({"kind": kind, "dataset": "data/msmarco", "max_examples": 1000},
                                    {"processes": 2, "nodes": 1})[0]
        assert two == 2 * (m["process_mb"] + -(-1000 * m["example_bytes"] // 10**6)) + m["dataset_mb"]["msmarco"]
    for name in mini.recipes.trained_readers:
        spec, launch = mini.trainings.reader_spec(name), mini.recipes.launch_settings(mini.recipes.readers[name])
        assert mini.resources.training_memory(spec, launch)[1] in mini.summaries.spec_summary(spec, launch)
    with pytest.raises(ValueError, match="training.memory.mb"):
        paper.resources.training_memory({"kind": "unknown", "dataset": "data/msmarco"}, one)


def test_teacher_scores_cover_what_the_distilling_recipes_read(mini, tree):
    """A cross-encoder scores the queries of the first max_examples examples when every recipe distilling from
    its scores reads only those (the largest of their max_examples), every query otherwise."""
    assert mini.trainings.teacher_max_examples("tiny-cross-encoder", mini.datasets.source) is None      # kd reads every example
    users = [n for n, r in mini.recipes.by_name.items() if r.get("teacher") == "tiny-cross-encoder"]
    assert {"kd", "ddr-dr-distill"} <= set(users)

    def plan_with(**recipes):
        cfg = tree / "teacher-overlay.yaml"
        cfg.write_text(yaml.safe_dump({"recipes": recipes}))
        return load_plan(tree, cfg)

    capped = plan_with(**{u: {"max_examples": 5 + i} for i, u in enumerate(users)})
    assert capped.trainings.teacher_max_examples("tiny-cross-encoder", capped.datasets.source) == 5 + len(users) - 1
    one_reads_all = plan_with(**{u: {"max_examples": 5} for u in users[1:]})
    assert one_reads_all.trainings.teacher_max_examples("tiny-cross-encoder", one_reads_all.datasets.source) is None
    other_file = plan_with(**{u: {"max_examples": 5, **({"negatives": "bm25"} if u == users[0] else {})}
                              for u in users})
    assert other_file.trainings.teacher_max_examples("tiny-cross-encoder", other_file.datasets.source) is None


def test_large_corpora_are_cut_into_span_shards(paper, mini):
    """COCO's span files of a corpus in several shards (as its encoding: BioASQ 6, MS MARCO 4) are merged
    from one job per shard; small corpora, the mini ones and a max_docs prefix are one pass."""
    assert paper.cocodr.section["spans"].get("max_docs") is None
    assert paper.cocodr.span_parts("bioasq") == [f"{paper.paths.data}/bioasq/coco/spans.{i}-of-6.arrow" for i in range(6)]
    assert len(paper.cocodr.span_parts("msmarco")) == 4 and paper.cocodr.span_parts("scifact") == []
    assert "bioasq" in paper.cocodr.span_corpora and all(mini.cocodr.span_parts(c) == [] for c in mini.cocodr.span_corpora)


def test_climate_fever_takes_fevers_embeddings_where_a_system_encodes_both_alike(paper, mini, tree):
    """datasets.shared_corpus: Climate-FEVER's encode jobs read FEVER's shards and the overlap map for every
    system with one model and setting for both; per-target systems (DDR's DAMs, MoDIR, RMSC) encode their own."""
    from types import SimpleNamespace

    assert paper.datasets.shared_corpus == {"climate-fever": "fever"} and mini.datasets.shared_corpus == {}
    assert paper.evaluation.embedding_donor("tas-b", "climate-fever") == "fever"
    assert paper.evaluation.embedding_donor("tas-b", "fever") is None
    for own in ("ddr-contrast", "dpr-modir", "rmsc-cd"):
        assert paper.evaluation.embedding_donor(own, "climate-fever") is None
        assert paper.systems.dense_model(own, "climate-fever") != paper.systems.dense_model(own, "fever")
    inputs = paper.evaluation.donor_inputs(SimpleNamespace(system="tas-b", dataset="climate-fever"))
    assert inputs == [f"{paper.paths.embeddings}/fever/tas-b/{s}" for s in paper.datasets.shards("fever")] + [
        f"{paper.paths.data}/climate-fever/overlap/fever.npy"]
    cfg = tree / "shared-bad.yaml"
    for bad, match in (({"fever": "fever"}, "must be another dataset"),
                       ({"climate-fever": "fever", "fever": "nq"}, "takes no donor itself"),
                       ({"climate-fever": "no-such-set"}, "neither a mini domain nor a registry dataset")):
        cfg.write_text(yaml.safe_dump({"datasets": {"shared_corpus": bad}}))
        with pytest.raises(ValueError, match=match):
            load_plan(tree, tree / "configs" / "paper.yaml", cfg)
