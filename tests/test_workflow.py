"""The Snakemake workflow: lint, formatting, config validation, dry runs, and a real mini run."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests import warm_jobs
from tests.warm_jobs import job_env
from zsdr.data import registry
from zsdr.workflow import read_config

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")


# What a Snakemake process of the tests loads before it reads the workflow: the tests' Snakemake runs (dry runs
# mostly, ~3.5 CPU-s each as a new interpreter, half of it imports) fork from a server that has it loaded
# (not zsdr: each workflow copy plans with its own src/, which the Snakefile makes sure of).
SNAKEMAKE_PRELOAD = (
    "snakemake.cli", "snakemake.api", "snakemake.report", "snakemake.profiles", "snakemake.executors.dryrun",
    "snakemake.executors.local", "snakemake_executor_plugin_slurm", "jsonschema", "yte", "smart_open", "requests",
    "docutils.core", "jinja2", "pandas", "yaml",
)


def snakemake(*args, cwd=ROOT, timeout=600, check=True, env=None, **kwargs):
    """`snakemake ARGS` in ``cwd`` (the checkout's own by default), run as `python -m snakemake` forked from
    the tests' warm server (tests/warm_jobs.py: the same command line, environment, umask and streams);
    ``env``: variables added to this process's environment."""
    env = job_env({"NUMBA_CACHE_DIR": str(ROOT / ".cache" / "numba"), "HF_HUB_OFFLINE": "1", **(env or {})})
    proc = warm_jobs.run([sys.executable, "-m", "snakemake", *args], env=env, preload=SNAKEMAKE_PRELOAD,
                         cwd=cwd, timeout=timeout, **kwargs)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def smaller_domains(domains: list[dict], share: int) -> list[dict]:
    """The mini domains (config `mini.domains`) at 1/``share`` of their texts: passages and queries of every
    split (the slow real-run tests encode, index, search and score fewer texts)."""
    sized = ("docs", "train_queries", "dev_queries", "test_queries")
    return [{k: v // share if k in sized else v for k, v in domain.items()} for domain in domains]


def planned_jobs(output: str) -> dict[str, int]:
    """Job counts per rule from the table Snakemake prints for a dry run."""
    table = output.split("Job stats:")[-1]
    counts = {}
    for line in table.splitlines():
        m = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if m and m.group(1) != "total":
            counts[m.group(1)] = int(m.group(2))
    return counts


# e.g. "train cocodr-base-ep1 (8 GPU(s), 1 node(s), 64 CPUs (8 per GPU), 52500 MB, 1440 min): init ..."
TRAINING_JOB = re.compile(r"(pretrain|train(?: DAM| generator| cross-encoder| reader)?) ([\w.@-]+) "
                          r"\((\d+) GPU\(s\), \d+ node\(s\), [^:]*? \d+ MB, \d+ min\): (init .*)")


def training_plan(output: str, kind: str = "train", gpus_per_process: int | None = None) -> dict[str, str]:
    """{run: summary} of the dry run's training jobs of one kind ("train", "train DAM", "pretrain").

    With ``gpus_per_process``, every training job's GPU request (its ``resources.gpu``, shown in the job's
    message) must be that many GPUs for each of its processes: one SLURM job holds all of a run's GPUs.
    """
    plan = {}
    for m in TRAINING_JOB.finditer(output):
        if gpus_per_process is not None:
            processes = re.search(r"x (\d+) process\(es\)", m.group(4))
            assert processes, m.group(0)
            assert int(m.group(3)) == gpus_per_process * int(processes.group(1)), m.group(0)[:200]
        if m.group(1) == kind:
            plan[m.group(2)] = m.group(4)
    return plan


NOISE = re.compile(r"^.*(?:Exception|Traceback|Warning\b).*$", re.M)


def assert_quiet(proc):
    """A successful plan prints no exception, traceback or warning (an input function that raised and
    was skipped, a never-awaited coroutine): they hide the messages that matter."""
    noise = NOISE.findall(proc.stdout + proc.stderr)
    assert not noise, "\n".join(noise[:10])


def test_lint_is_clean():
    proc = snakemake("--lint", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Lints for" not in text, text[-4000:]


def test_snakefmt_check():
    proc = subprocess.run([str(BIN / "snakefmt"), "--check", "Snakefile", "rules/"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_rule_has_log_and_resources():
    for smk in (ROOT / "rules").glob("*.smk"):
        for block in re.split(r"\n(?=rule )", smk.read_text())[1:]:
            name = block.split(":")[0]
            if "input:" in block and ("output:" in block):
                assert "log:" in block and "resources:" in block, f"{smk.name}: {name}"


def test_dry_run_default_config():
    proc = snakemake("-n", "results/table1.csv")
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert jobs.get("mini_benchmark") in (None, 1)
    assert "table1" in jobs or "Nothing to be done" in proc.stdout + proc.stderr


PAPER_TARGETS = ("berm", "ddr", "modir", "cocodr", "rmsc")

PLAN_MISSING = ("--config", 'datasets={"missing": "plan"}')
"""Plan the bring-your-own sets' jobs although they are not here (config datasets.missing)."""


@pytest.fixture(scope="module")
def paper_plan():
    """The paper-scale plan as a cluster user makes it: the SLURM profile and `paper/results/all` (every table
    and figure with its checksum). Planned once for the tests of this module that read paper-scale job lines
    (~30 CPU-s a plan): each paper's own target (`snakemake cocodr`) plans a subset of these jobs, the same
    lines and, for every rule those tests count, the same number of jobs."""
    proc = snakemake("-n", "--forceall", "--profile", "profiles/slurm", "paper/results/all",
                     "--configfile", "configs/paper.yaml", *PLAN_MISSING)
    assert_quiet(proc)   # (the profile's default resources once made Snakemake warn of a coroutine)
    return proc


@pytest.mark.parametrize("configfile", [None, "configs/small.yaml", "configs/paper.yaml"])
def test_dry_run_every_paper_table(configfile, request):
    """Every paper table is a target at every scale (cells the scale cannot fill say why), and each paper's
    own target (mini scale: they are the same rules at every scale)."""
    # --forceall: the count must not depend on outputs already present in the checkout
    if configfile == "configs/paper.yaml":
        proc = request.getfixturevalue("paper_plan")   # `tables` and more: its job counts are the same
    else:
        targets = ["tables", *(PAPER_TARGETS if configfile is None else ())]
        proc = snakemake("-n", "--forceall", *targets, *(["--configfile", configfile] if configfile else []))
    assert_quiet(proc)
    jobs = planned_jobs(proc.stdout + proc.stderr)
    from zsdr.tables.figures import FIGURES
    from zsdr.tables.spec import list_specs

    # MoDIR Tables 3 and 4 and COCO-DR Table 4 come from their stages' own rules (training curves, case studies)
    assert jobs.get("paper_table") == len(list_specs()) - 3 == 25
    assert jobs.get("modir_curves") == jobs.get("modir_table4") == jobs.get("modir_figure4") == 1
    assert jobs.get("cocodr_clusters") == jobs.get("cocodr_figure3") == 1
    assert jobs.get("cocodr_figure4") == jobs.get("cocodr_figure5") == 1
    assert jobs.get("paper_figure") == len(FIGURES) >= 1
    assert jobs.get("table1") == 1
    assert jobs.get("berm_figure4") == jobs.get("berm_figure5") == 1   # figures drawn from BERM's runs



def rule_resources(output: str) -> dict[str, set[str]]:
    """{rule: the distinct `resources:` lines of its jobs} from a dry run's job blocks (a group job's members
    indented under it)."""
    found: dict[str, set[str]] = {}
    rule = None
    for line in output.splitlines():
        if m := re.match(r"\s*(?:local)?rule (\w+):", line):
            rule = m.group(1)
        elif (m := re.match(r"\s*resources: (.*)", line)) and rule:
            found.setdefault(rule, set()).add(m.group(1))
            rule = None
    return found


def test_paper_plan_with_the_slurm_profile_lists_every_table_and_the_spec_hardware(paper_plan):
    """The paper-scale plan as a cluster user makes it (`paper_plan`). GPUs: a training job holds one per
    process — COCO-DR 8, DDR's DAMs 4, the DR baselines and MoDIR 1 (docs/methods/) — every encode/search job
    one, BM25 and the tables none. (Its wall time is a benchmark: benchmarks/plan_paper.py.)"""
    out = paper_plan.stdout + paper_plan.stderr
    jobs = planned_jobs(out)
    assert jobs["all_results"] == jobs["table1"] == 1 and jobs["paper_table"] == 25, jobs
    plan = training_plan(out, gpus_per_process=1)            # every training: GPUs = processes
    dams = training_plan(out, "train DAM", gpus_per_process=1)
    coco = training_plan(out, "pretrain", gpus_per_process=1)
    assert "x 8 process(es)" in plan["cocodr-base-ep1"] and "x 8 process(es)" in coco["coco"]
    assert "x 4 process(es)" in dams["bert-base--msmarco"]
    assert "x 1 process(es)" in plan["dpr-berm"] and "x 1 process(es)" in plan["ance-modir@scifact"]
    resources = rule_resources(out)
    for rule in ("encode_corpus", "search_shard", "encode_queries", "mine_negatives", "dense_search_group"):
        assert all(re.search(r"\bgpu=1\b", r) for r in resources[rule]), (rule, resources[rule])
    # a one-shard corpus is searched on a GPU; a sharded one's per-shard top-k are merged on a CPU
    assert {re.search(r"\bgpu=(\d+)", r).group(1) for r in resources["dense_search"]} == {"0", "1"}
    for rule in ("bm25", "lucene_index", "paper_table", "table1"):   # (the evaluations are grouped jobs)
        assert all(re.search(r"\bgpu=0\b", r) for r in resources[rule]), (rule, resources[rule])
    # MS MARCO's 4 shards: 4 encode jobs per dense system, searched one shard per job and merged
    assert jobs["search_shard"] >= 4 and jobs["encode_queries"] >= 1
    assert "runs/msmarco/.shards/" in out
    # the profile's resources reach the run (profiles/default, read with any --profile, sets none): its
    # dense_slot groups each dense system's jobs on one-shard corpora
    assert "Group job dense-tas-b " in out and "Group job dense-ance-modir " in out


def test_dry_run_paper_config_plans_every_dataset():
    # the four bring-your-own sets are not in this checkout: the dry run stops at the first one it needs, in the
    # words its conversion would fail with, and names the setting that plans it anyway
    proc = snakemake("-n", "data", "--configfile", "configs/paper.yaml", check=False)
    assert proc.returncode != 0
    byo = [d.name for d in registry.DATASETS if not d.public]
    said = re.search(r"MissingDataset: dataset ([\w-]+) is not here: byo/\1/corpus.jsonl: .*not public and was not "
                     r"provided .*datasets.missing: plan", proc.stdout + proc.stderr)
    assert said and said.group(1) in byo, (proc.stdout + proc.stderr)[-3000:]
    proc = snakemake("-n", "data", "--configfile", "configs/paper.yaml", *PLAN_MISSING, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in byo:  # each said once, in the same words
        assert (proc.stdout + proc.stderr).count(f"dataset {name} is not here yet, its convert job will fail: "
                                                 f"byo/{name}/") == 1
    jobs = planned_jobs(proc.stdout + proc.stderr)
    public = [d for d in registry.DATASETS if d.public]
    files = {f.local_path for d in registry.DATASETS for f in (*d.files, *d.extras)}
    assert jobs["convert"] == len(registry.DATASETS)  # public ones and bring-your-own ones
    assert jobs["download"] == len(files)
    # and the planned outputs name every public dataset's folder and every archive
    detail = proc.stdout
    for d in public:
        assert f"data/{d.name}/dataset.json" in detail
        for f in d.files:
            assert f"downloads/{f.local_path}" in detail


def test_paper_config_plans_the_baseline_trainings_with_the_spec_values():
    proc = snakemake("-n", "--forceall", "paper/results/table1.csv", "--configfile", "configs/paper.yaml",
                     *PLAN_MISSING)
    jobs = planned_jobs(proc.stdout)
    # dpr, dpr-inbatch, 3 ANCE episodes, kd, DDR's two DR baselines, DPR+BERM, KD+BERM, 3 ANCE+BERM
    # episodes, DDR's two REMs (on one MS MARCO DAM: table 1 evaluates on BEIR, whose DAMs continue
    # it); the published teacher scores replace the cross-encoder, the triples archive becomes one
    # training set, the hub reader needs no training. DPR+MoDIR and ANCE+MoDIR train one model per table-1
    # target (25: BioASQ is not one) and ANCE+MoDIR's negatives are mined once, by ANCE FirstP; COCO-DR is
    # its warmup and 3 iDRO episodes (each mined and clustered by the model before it) after COCO pretraining
    assert jobs["train"] == 15 + 2 * 25 + 4 and jobs["mine_negatives"] == 7 + 3 and jobs["triples_dataset"] == 1, jobs
    assert jobs["cluster_queries"] == 3 and jobs["pretrain_coco"] == 1, jobs
    assert jobs["train_dam"] == 1 + len(yaml.safe_load((ROOT / "configs/paper.yaml").read_text())["datasets"]["targets"])
    assert "train_cross_encoder" not in jobs and "teacher_scores" not in jobs and "train_reader" not in jobs
    # BERM labels of the two training sets (triples for DPR, MS MARCO for KD / ANCE), 16 shards each
    assert jobs["label_units_shard"] == 32 and jobs["label_units"] == 2, jobs
    plan = {run: s for run, s in training_plan(proc.stdout, gpus_per_process=1).items() if "@" not in run}
    assert set(plan) == {"dpr", "dpr-inbatch", "ance-ep1", "ance-ep2", "ance-ep3", "kd", "ddr-dr-contrast",
                         "ddr-dr-distill", "dpr-berm", "kd-berm", "ance-berm-ep1", "ance-berm-ep2", "ance-berm-ep3",
                         "ddr-contrast", "ddr-distill", "cocodr-warmup", "cocodr-base-ep1", "cocodr-base-ep2",
                         "cocodr-base-ep3"}
    expected = {
        "dpr": ["init roberta-base", "pairwise_nll with 1 negative", "batch 32 x 1 process(es) x grad-acc 1",
                "lamb lr 0.0002, linear, warmup 1000",
                "60,000 steps (max_steps; linear decay to 0 at 2,187,500: lr at the end 0.973 x peak)", "q128/d128",
                "fp16", "ANCE head: new (seed 0)", "; dropout as the checkpoint", "; inference fp16"],
        # ANCE: each episode mines at its own q64/d256 (episode 1: DPR re-encodes the corpus at 256
        # tokens), one warmup + linear decay towards the official 1M steps over the 3 x 45k; fp32 as the
        # official ANCE commands; everything encodes in fp16
        "ance-ep1": ["(mined: top-200 of dpr.mine-d256 at q64/d256, 20 sampled per query)",
                     "45,000 steps (max_steps; linear decay to 0 at 1,000,000: lr at the end 0.96 x peak);",
                     "; inference fp16", "ANCE head: from checkpoint paper/models/trained/dpr", "; fp32;"],
        "ance-ep2": ["init paper/models/trained/ance-ep1", "from ance-ep2.jsonl", "grad-acc 2", "lamb lr 5e-06",
                     "warmup 5000", "q64/d256", "(mined: top-200 of ance-ep1 at q64/d256",
                     "45,000 steps (max_steps; linear decay to 0 at 1,000,000 (+45,000): lr at the end 0.915 x peak)",
                     "ANCE head: from checkpoint paper/models/trained/ance-ep1"],
        "ance-ep3": ["linear decay to 0 at 1,000,000 (+90,000): lr at the end 0.869 x peak"],
        "kd": ["margin_mse with 1 negative(s) from msmarco-hard-negatives.jsonl.gz", "ANCE head: new (seed 0)"],
        "ddr-dr-contrast": ["init bert-base-uncased", "contrastive with 3 negative(s)", "batch 32 x 4 process(es)",
                            "adamw lr 1e-05, constant, warmup 0", "~ 19,645 steps (5 epochs x ~ 502,939 queries // 128)",
                            "q24/d128"],
        "ddr-dr-distill": ["margin_mse with 3 negative(s)", "(20 epochs x <= 502,939 queries // 128)"],
        # BERM (docs/methods/berm.md#training-recipes): RoBERTa-base, BERM's DPR lr 2e-5, 128 tokens, 32/GPU, ~300k steps,
        # R1 x 1.0 + R2 x 0.1 in the official code's form (its weights), labels BM25 + 0.1 x reader
        "dpr-berm": ["init roberta-base", "pairwise_nll with 1 negative", "batch 32 x 1 process(es) x grad-acc 1",
                     "lamb lr 2e-05, linear, warmup 1000", "300,000 steps (max_steps; linear decay to 0 at 2,187,500",
                     "q128/d128", "fp16",
                     "+ BERM R1 x1 (KL / units, official code) + R2 x0.1 (double softmax, official code)", "lucene BM25 + 0.1 x reader roberta-squad2"],
        "ance-berm-ep1": ["init paper/models/trained/dpr-berm", "grad-acc 2", "lamb lr 5e-06", "q64/d256",
                          "(mined: top-200 of dpr-berm.mine-d256 at q64/d256", "+ BERM R1 x1 (KL / units, official code) + R2 x0.1 (double softmax, official code)"],
        "kd-berm": ["margin_mse with 1 negative(s)", "+ BERM R1 x1 (KL / units, official code) + R2 x0.1 (double softmax, official code)"],
    }
    for run, parts in expected.items():
        for part in parts:
            assert part in plan[run], (run, part, plan[run])


def test_paper_config_plans_ddr_with_the_spec_values(paper_plan):
    """DDR at paper scale (docs/methods/ddr.md#hyperparameters): DAMs of batch 1,024 / 512 and length 100 / 190, 100k source
    steps, 50k (LoTTE) / 20k target steps; REMs with 128 queries + 3 x 128 negatives for 5 / 20 epochs."""
    proc = paper_plan   # `snakemake ddr` plans a subset of it: the same lines and counts
    plan = {**training_plan(proc.stdout, gpus_per_process=1), **training_plan(proc.stdout, "train DAM")}
    jobs = planned_jobs(proc.stdout)
    english = ["trec-covid-beir"] + [f"lotte-{t}-test" for t in ("writing", "recreation", "technology",
                                                                  "lifestyle", "science")]
    expected = {
        "bert-base--msmarco": ["init bert-base-uncased", "MLM 15% (80/10/10) on the paper/data/msmarco corpus",
                               "batch 64 x 4 process(es) x grad-acc 4", "adamw lr 5e-05, constant, warmup 1000",
                               "100,000 steps (max_steps)", "max length 100", "fp16"],
        "bert-base--msmarco--lotte-writing-test": ["init paper/models/dams/bert-base--msmarco", "batch 128 x 4 process(es)",
                                                   "lr 2e-05", "50,000 steps (max_steps), a snapshot every 5000",
                                                   "max length 190"],
        "bert-base--msmarco--trec-covid-beir": ["batch 128 x 4 process(es)", "20,000 steps", "max length 190"],
        "bert-base-chinese--dureader--cpr-ecom": ["init paper/models/dams/bert-base-chinese--dureader",
                                                  "batch 256 x 4 process(es)", "20,000 steps", "max length 100"],
        "bert-base--lotte-science-test": ["init bert-base-uncased", "lr 2e-05", "50,000 steps"],   # DDR\\SI, DDR\\DF
        "ddr-contrast": ["init paper/models/dams/bert-base--msmarco", "contrastive with 3 negative(s)",
                         "REM only, DAM frozen: LoRA r 192 alpha 192 on query+value + parallel adapter 192 x4",
                         "batch 32 x 4 process(es) x grad-acc 1", "adamw lr 2e-05, constant, warmup 0", "(5 epochs x",
                         "q24/d128", "fp16"],
        "ddr-distill": ["margin_mse with 3 negative(s)", "LoRA r 192", "(20 epochs x", "lr 2e-05"],
        "ddr-rem-lora96": ["LoRA r 96 alpha 96 on query+value; batch"],
        "ddr-rem-pa192": ["REM only, DAM frozen: parallel adapter 192 x4;"],
        "ddr-nodf-contrast": ["init bert-base-uncased", "LoRA r 192"],
        "ddr-nod-contrast@lotte-writing-test": ["init paper/models/dams/bert-base--msmarco--lotte-writing-test",
                                                "lr 1e-05", "(5 epochs x"],
        # Chinese: DuReader source DAM (length 256, 6k steps [C-RM]), in-batch negatives only, 1 epoch
        "bert-base-chinese--dureader": ["init bert-base-chinese", "6,000 steps", "max length 256"],
        "ddr-contrast-zh": ["init paper/models/dams/bert-base-chinese--dureader", "contrastive with 0 negative(s)",
                            "LoRA r 192", "1 epoch(s) of the training set", "q24/d384"],
        "ddr-distill-zh": ["margin_mse with 3 negative(s)", "1 epoch(s) of the training set"],
    }
    for run, parts in expected.items():
        for part in parts:
            assert part in plan[run], (run, part, plan[run])
    # one REM per variant, DDR\\D once per target and regime; Figure 4 evaluates snapshots of the
    # English targets' DAMs (50k / 5k = 9 intermediate snapshots on LoTTE, 3 on TREC-Covid)
    assert {r for r in plan if r.startswith("ddr-nod-contrast@")} >= {f"ddr-nod-contrast@{d}" for d in english}
    assert not [r for r in plan if r.startswith("bert-base--") and "cpr-" in r]   # no English DAM of a Chinese set
    assert jobs["ddr_figure4"] == 1 and jobs["train_cross_encoder"] == 1      # the DuReader teacher
    # the Chinese sets' cells of the DDR systems come from the DuReader-trained models (`by_language`)
    block = proc.stdout.split("output: paper/runs/cpr-ecom/ddr-contrast.trec")[0].rsplit("rule dense_search:", 1)[1]
    assert "paper/models/dams/bert-base-chinese--dureader--cpr-ecom/config.json" in block
    assert "paper/models/trained/ddr-contrast-zh/config.json" in block
    assert "ddr-contrast.dam-step45000" in proc.stdout and "ddr-contrast.dam-step50000" not in proc.stdout


MODIR_TARGETS = ["trec-covid", "webis-touche2020", "dbpedia-entity", "nfcorpus", "quora", "bioasq", "hotpotqa", "fever",
                 "fiqa", "arguana", "nq", "scifact", "scidocs", "climate-fever"] + [
    f"cqadupstack-{f}" for f in ("android", "english", "gaming", "gis", "mathematica", "physics", "programmers",
                                 "stats", "tex", "unix", "webmasters", "wordpress")]


def test_paper_config_plans_modir_with_the_spec_values(paper_plan):
    """MoDIR at paper scale (docs/methods/modir.md#hyperparameters): one DPR+MoDIR and one ANCE+MoDIR model per BEIR target with
    the scripts' values (modir_ance.sh: Table 5's but 32 a step; modir_dpr.sh: its own lr, classifier lr, λ0, no warmup
    and horizon), the ablations on TREC-COVID and Touché, 60k-step curve runs with a snapshot every 2,500."""
    proc = paper_plan   # `snakemake modir` plans a subset of it: the same lines and counts
    plan = training_plan(proc.stdout, gpus_per_process=1)
    jobs = planned_jobs(proc.stdout)
    for recipe in ("ance-modir", "dpr-modir"):
        assert {r.split("@")[1] for r in plan if r.startswith(f"{recipe}@")} == set(MODIR_TARGETS), recipe
    common = ["q64/d512", "in chunks of 50", "halving every 10000 steps", "(logits clipped at 5)", "; dropout 0;",
              "; inference fp16, at other lengths on arguana q512"]
    own = {"ance-modir": ["batch 4 x 1 process(es) x grad-acc 8", "lamb lr 1e-06, linear, warmup 5000",
                          "lambda0 1 halving", "classifier lr 5e-06 (", "linear decay to 0 at 1,000,000"],
           "dpr-modir": ["batch 8 x 1 process(es) x grad-acc 4", "lamb lr 5e-06, linear, warmup 0;",
                         "lambda0 0.5 halving", "classifier lr 3e-05 (", "linear decay to 0 at 2,187,500"]}
    expected = {
        "ance-modir@nfcorpus": ["init castorini/ance-msmarco-passage", "pairwise_nll with 1 negative(s) from "
                                "ance-modir.jsonl (mined: top-200 of ance-msmarco at q64/d512,",
                                "MoDIR confusion loss vs nfcorpus, momentum n 1000", "; 10,000 steps",
                                "ANCE head: from checkpoint castorini/ance-msmarco-passage"],
        # DPR+MoDIR starts from ANCE's released warmup checkpoint (its zip, converted), as the paper does
        "dpr-modir@scifact": ["init paper/models/released/ance-warmup", "from negatives.jsonl", "momentum n 1000",
                              "; 10,000 steps", "ANCE head: from checkpoint paper/models/released/ance-warmup"],
        "ance-modir@trec-covid": ["60,000 steps (max_steps; linear decay to 0 at 1,000,000: lr at the end 0.945 x "
                                  "peak), a snapshot every 2500 steps"],
        "ance-modir-single@trec-covid": ["single (n 1)", "60,000 steps"],
        "ance-modir-repeat@webis-touche2020": ["repeat x1000 in chunks of 50", "; 10,000 steps"],
        "dpr-modir@arguana": ["max length q64/d512, target q512"],                 # --max_query_length_tgd
        "ance-modir-n100@trec-covid": ["momentum n 100 in chunks of 50"],
        "ance-modir-minimax@trec-covid": ["MoDIR minimax loss"],
        "ance-modir-gan@webis-touche2020": ["MoDIR gan loss"],
    }
    for run, parts in expected.items():
        for part in parts + common + own["dpr-modir" if run.startswith("dpr-modir") else "ance-modir"]:
            assert part in plan[run], (run, part, plan[run])
    # the ablations train on the two targets of Table 2 only; the control is not planned at paper scale
    assert {r for r in plan if r.startswith("ance-modir-gan@")} == {"ance-modir-gan@trec-covid",
                                                                    "ance-modir-gan@webis-touche2020"}
    assert not [r for r in plan if r.startswith("dpr-modir-off")]
    # Table 1 evaluates the 10k-step snapshot of the long runs; ANCE's negatives are mined by ANCE FirstP
    assert "paper/models/trained/ance-modir@trec-covid/snapshots/step-000010000/config.json" not in proc.stdout
    assert "ance-modir.step57500" in proc.stdout and "ance-modir.step60000" in proc.stdout
    assert "ance-modir.step10000" not in proc.stdout   # the evaluated step is the recipe's own system
    assert jobs["modir_triples"] == len(MODIR_TARGETS)
    assert jobs["modir_domain"] == 2 * 2 * 24 + 2   # 2 recipes x 2 targets x 24 steps + the base model on each
    assert jobs["modir_curves"] == jobs["modir_figure4"] == jobs["modir_table4"] == 1


def test_paper_config_plans_cocodr_with_the_spec_values(paper_plan):
    """COCO-DR at paper scale (docs/methods/cocodr.md#coco-pretraining to #fine-tuning-schedule): COCO from Condenser on the 18 BEIR corpora and MS MARCO
    (8 epochs, 200 documents per GPU x 8, length 128, lr 1e-4), a BM25 warmup, then 3 ANCE episodes of 45k
    steps with iDRO (K 50) over queries re-clustered every episode, 30 sampled negatives."""
    proc = paper_plan   # `snakemake cocodr` plans a subset of it: the same lines and counts
    out = proc.stdout
    jobs = planned_jobs(out)
    coco = training_plan(out, "pretrain", gpus_per_process=1)["coco"]
    # COCO from the released Condenser with its head (condenser.tar.gz, converted: the hub copy has none)
    for part in ["init paper/models/released/condenser", "span contrastive x1 (global batch, no temperature)",
                 "Condenser head MLM (2 layers from layer 6; head from checkpoint paper/models/released/condenser), "
                 "backbone MLM 15% whole-word",
                 "batch 200 x 8 process(es) x grad-acc 1", "adamw lr 0.0001, linear, warmup ratio 0.1 of the steps",
                 "~ 263,816 steps (8 epochs x ~ 52,764,545 documents // 1,600;",
                 "max length 128", "on 30 corpora: msmarco, trec-covid"]:
        assert part in coco, (part, coco)
    plan = training_plan(out)
    assert plan["cocodr-warmup"].startswith("init paper/models/pretrained/coco;")
    for k in (1, 2, 3):
        run = plan[f"cocodr-base-ep{k}"]
        for part in ["iDRO over K 50 query clusters (beta 0.25, rho 0.05, gamma 0.1, eps 0.01, gradients of the "
                     "last 3 layers)", "30 sampled per query",
                     "batch 64 x 8 process(es)", "45,000 steps (max_steps; linear decay to 0 at 60,000: lr at the "
                     "end 0.263 x peak)", "lamb lr", "at other lengths on arguana q128; trec-news d256"]:
            assert part in run, (k, part, run)
    # every episode mines at its own q64/d256 (the previous models are evaluated at 128 tokens)
    assert "top-200 of cocodr-warmup.mine-d256 at q64/d256" in plan["cocodr-base-ep1"]
    assert "top-200 of cocodr-base-ep1.mine-d256 at q64/d256" in plan["cocodr-base-ep2"]
    assert "lr 5e-06" in plan["cocodr-base-ep1"] and "gradients of the last 2 layers" in plan["cocodr-large-ep1"]
    # the official episode rule: max(0.2, 1 - g / 300,000) x 5e-6 at global step g = 0, 45k, 90k
    assert "lamb lr 4.25e-06" in plan["cocodr-base-ep2"] and "lamb lr 3.5e-06" in plan["cocodr-base-ep3"]
    assert "51,267 steps (3 epochs x 35,000,000 triples // 2,048;" in plan["cocodr-warmup"]
    assert "lamb lr 0.0001, linear, warmup 1000" in plan["cocodr-warmup"]   # run_bm25_warmup.sh's lr (README: 2e-4)
    assert "GroupDRO over K 50" in plan["cocodr-base-groupdro-ep1"]
    assert "iDRO" not in plan["cocodr-base-noidro-ep2"]
    assert plan["condenser-warmup"].startswith("init paper/models/released/condenser;")
    # one clustering per iDRO/GroupDRO episode: Base, -COCO, GroupDRO, Large, Large -COCO and the 6 sweep points
    # COCO Base and Large, and Condenser continued on Table 3's targets
    assert jobs["cluster_queries"] == 3 * (5 + 6) and jobs["pretrain_coco"] == 3
    assert "contrastive" not in training_plan(out, "pretrain")["condenser-target"]



def test_paper_config_plans_rmsc_with_the_spec_values(paper_plan):
    """RMSC at paper scale (docs/methods/rmsc.md): one model per target of its tables from Condenser and from the COCO
    model, trained on MS MARCO's labelled pairs + MS MARCO weak pairs + the target's weak pairs (ICT on
    LoTTE, SCL on BEIR) with soft tokens k 1, AdamW lr 1e-5, batch 512, one random negative, group-restricted
    in-batch negatives; the baselines without soft tokens or weak data; every open choice shown."""
    proc = paper_plan   # `snakemake rmsc` plans a subset of it: the same lines and counts
    out = proc.stdout
    jobs = planned_jobs(out)
    plan = training_plan(out)
    targets = ["lotte-writing-test", "lotte-recreation-test", "lotte-science-test", "lotte-technology-test",
               "lotte-lifestyle-test", "trec-covid", "hotpotqa", "fiqa", "webis-touche2020", "nfcorpus", "nq",
               "dbpedia-entity", "scifact", "scidocs", "quora", "fever", "climate-fever", "arguana"]
    for init, name in (("paper/models/released/condenser", "rmsc-cd"), ("OpenMatch/cocodr-base", "rmsc-co")):
        for d in targets:
            run = plan[f"{name}@{d}"]
            method = "ict" if d.startswith("lotte") else "scl"
            for part in [f"init {init};", "1 random negative + in-batch negatives of the same (domain, relevance) group",
                         "(weak negatives drawn with each pair by its positive's rule)", "source-human (qrels)",
                         f"source-weak ({method}.jsonl, size supervised)", f"target-weak ({method}.jsonl, size supervised)",
                         "soft tokens k 1 ([S]/[T] x [H]/[W], inference [T] x [H]; on msmarco [T] x [H] [X] "
                         "rmsc.source_context)", "batch 64 x 8 process(es)",
                         "adamw lr 1e-05", "warmup 1000; 10,000 steps (max_steps", "max length q64/d256", "fp16",
                         "open choices [X]: weak-set sizes (source-weak supervised, target-weak supervised), weak negatives drawn "
                         "with each pair by its positive's rule, temperature 1, 10000 steps, warmup 1000, lengths q64/d256, fp16"]:
                assert part in run, (name, d, part, run)
    for name in ("condenser-rn", "cocodr-rn"):
        assert "no soft tokens" in plan[name] and "source-weak" not in plan[name] and "batch 64 x 8" in plan[name]
    assert plan["qgen-ft@scifact"].startswith("init paper/models/trained/condenser-rn;")
    assert "target-qgen (qgen.jsonl)" in plan["qgen-ft@scifact"]
    # weak pairs: ICT on the five LoTTE topics and MS MARCO, SCL on the 13 BEIR sets and MS MARCO, QGen on the
    # five curve datasets (the released T5 generator: nothing to train)
    assert jobs["weak_pairs"] == 5 + 13 + 2 + 5 and "train_generator" not in jobs
    rmsc_runs = [r for r in plan if r.split("@")[0] in ("rmsc-cd", "rmsc-co", "qgen-ft", "condenser-rn", "cocodr-rn")]
    assert len(rmsc_runs) == 2 * 18 + 5 + 2
    lines = re.findall(r"weak pairs of [\w-]+: (.*)", out)
    assert any(x.startswith("ICT: a sentence vs the rest of its document, kept in its context with p 0.1 [X]; "
                            "502939 pairs (the labelled set's size [P: comparable]), one per document a pass over a seeded order, "
                            "as many passes as that needs [X], no pair twice") for x in lines), lines
    assert all(x.endswith("each with a negative of another document by the positive's rule [X]")
               for x in lines if not x.startswith("QGen")), lines
    assert any(x.startswith("SCL: two random spans of <= 30 bert-base word pieces (new span p 0.1) [X: COCO-DR's "
                            "spans]") for x in lines), lines
    assert any(x.startswith("QGen: 5 queries per document by BeIR/query-gen-msmarco-t5-base-v1 [X: the generator], "
                            "top-k 25 top-p 0.95") for x in lines), lines
    assert ("RMSC figure 3: rmsc-cd, rmsc-co evaluated every 1000 steps [X] on msmarco (in-domain) and trec-covid, "
            "nfcorpus, fiqa, arguana, scifact [X]; a per-target model stands on msmarco for rmsc.source_target "
            "lotte-writing-test [X], in the soft-token context [T] x [H] [X] rmsc.source_context") in out


def test_bm25_negatives_and_config_errors_of_recipes(tmp_path):
    cfg = read_config(ROOT)
    cfg["recipes"]["dpr"]["negatives"] = "bm25"          # a source without triples: mine with the sparse stage
    path = tmp_path / "bm25.yaml"
    path.write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(snakemake("-n", "--forceall", "models/trained/dpr/config.json", "--configfile", str(path)).stdout)
    assert jobs.get("bm25_negatives") == 1 and jobs.get("lucene_index") == 1 and "triples_dataset" not in jobs, jobs
    cfg["recipes"]["dpr"]["negatives"] = "triples"
    cfg["recipes"]["kd"]["teacher"] = "no-such-teacher"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "results/table1.csv", "--configfile", str(path), check=False)
    assert proc.returncode != 0 and "recipes.kd.teacher: 'no-such-teacher'" in proc.stdout + proc.stderr
    cfg["recipes"]["kd"]["teacher"] = "tiny-cross-encoder"
    cfg["recipes"]["ance"]["init"] = "tiny-roberta"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "results/table1.csv", "--configfile", str(path), check=False)
    assert proc.returncode != 0 and "recipes.ance.init" in proc.stdout + proc.stderr


def test_paper_config_lists_every_registry_dataset():
    cfg = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
    named = {cfg["datasets"]["source"], *cfg["datasets"]["targets"], *cfg["datasets"]["extra"]}
    assert named == set(registry.REGISTRY)


@pytest.mark.parametrize("bad,words", [
    ({"unknown_key": 1}, "unknown_key"),
    ({"seed": "thirteen"}, "thirteen"),
    ({"bm25": {"k1": -1}}, "k1"),
    ({"recipes": {"rmsc-bad": {"extends": "rmsc-cd", "mixture": {"sets": [{"domain": "source", "relevance": "human",
                                                                            "size": "all"}]}}}},
     "'all' is not valid"),
    # ANCE's run-wide schedule needs episodes of a fixed number of steps (mini's ANCE runs epochs)
    ({"recipes": {"ance-cont": {"extends": "ance", "episode_schedule": "continuous"}}},
     "recipes.ance-cont.episode_schedule: continuous needs train.max_steps"),
    ({"recipes": {"dpr-berm-bad": {"extends": "dpr-berm", "berm": {"r1_reduction": "batchmean"}}}}, "batchmean"),
    ({"rmsc": {"source_context": ["human", "target"]}}, "rmsc.source_context: ['human', 'target'] must be"),
])
def test_invalid_config_is_rejected(tmp_path, bad, words):
    cfg = read_config(ROOT)
    for k, v in bad.items():
        cfg[k] = {**cfg[k], **v} if isinstance(v, dict) and isinstance(cfg.get(k), dict) else v
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "results/table1.csv", "--configfile", str(path), check=False)
    assert proc.returncode != 0
    assert words in proc.stdout + proc.stderr


def test_unknown_dataset_in_config_is_named(tmp_path):
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["datasets"]["targets"] = ["mini-alpha", "no-such-set"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "results/table1.csv", "--configfile", str(path), check=False)
    assert proc.returncode != 0 and "'no-such-set' is neither" in proc.stdout + proc.stderr


def test_dataset_shards_plan_one_encode_job_per_shard_and_name_unknown_datasets(tmp_path):
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["dense"]["dataset_shards"] = {"mini-alpha": 3}
    path = tmp_path / "shards.yaml"
    path.write_text(yaml.safe_dump(cfg))
    plan = snakemake("-n", "--forceall", "results/table1.csv", "--configfile", str(path))
    out = plan.stdout + plan.stderr
    alpha = set(re.findall(r"embeddings/mini-alpha/[^/\s]+/(shard\d+-of-\d+)", out))
    beta = set(re.findall(r"embeddings/mini-beta/[^/\s]+/(shard\d+-of-\d+)", out))
    n = cfg["dense"]["shards"]
    assert alpha == {f"shard{i}-of-3" for i in range(3)} and beta == {f"shard{i}-of-{n}" for i in range(n)}
    cfg["dense"]["dataset_shards"] = {"mini-gamma": 2}
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "results/table1.csv", "--configfile", str(path), check=False)
    assert proc.returncode != 0 and "dense.dataset_shards.mini-gamma" in proc.stdout + proc.stderr
