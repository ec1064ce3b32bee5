"""One job object per rule (zsdr.plan.jobs): every planned job's params are the fields of the job object the plan
builds for its rule and wildcards, and no rule reads the config itself."""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_golden import _plain  # noqa: E402
from zsdr.plan.core import load_plan  # noqa: E402
from zsdr.plan.jobs import BUILDERS, job_fields, load_builders  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
CONFIGS = {"mini": (), "small": (ROOT / "configs" / "small.yaml",), "paper": (ROOT / "configs" / "paper.yaml",)}


def _golden_jobs() -> dict[str, dict[str, list[dict]]]:
    """rule -> scale -> its planned jobs (wildcards and params) in the golden plans."""
    jobs: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for scale in CONFIGS:
        with gzip.open(GOLDEN / f"plan-{scale}.jsonl.gz", "rt", encoding="utf-8") as f:
            for line in f:
                job = json.loads(line)
                jobs[job["rule"]][scale].append(job)
    return jobs


GOLDEN_JOBS = _golden_jobs()


@cache
def plan(scale: str):
    return load_plan(ROOT, *CONFIGS[scale])


def _rule_bodies() -> dict[str, str]:
    """rule name -> its text in rules/*.smk (a `use rule ... as NAME with:` block included)."""
    bodies = {}
    for path in sorted((ROOT / "rules").glob("*.smk")):
        text = path.read_text(encoding="utf-8")
        starts = list(re.finditer(r"^\s*(?:rule (\w+):|use rule \w+ as (\w+) with:)", text, re.M))
        for i, m in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
            bodies[m.group(1) or m.group(2)] = text[m.start():end]
    return bodies


@pytest.mark.parametrize("rule", sorted(GOLDEN_JOBS))
def test_every_planned_job_has_its_rules_job_object_as_params(rule):
    """The golden plans' params of every job of ``rule``, at every scale, are its job object's fields."""
    with_params = {s: jobs for s, jobs in GOLDEN_JOBS[rule].items() if any(j["params"] for j in jobs)}
    if not with_params:
        assert rule not in BUILDERS, f"rule {rule} has no params but a job builder"
        return
    load_builders()
    assert rule in BUILDERS, f"rule {rule} has params but no job builder (zsdr.plan.jobs.builds)"
    for scale, jobs in with_params.items():
        for golden in jobs:
            job = plan(scale).job(rule, SimpleNamespace(**golden["wildcards"]))
            assert _plain(job_fields(job)) == golden["params"], (scale, golden["wildcards"])


def test_every_rule_reads_its_params_from_the_plan():
    bodies = _rule_bodies()
    for rule, body in bodies.items():
        params = re.search(r"^    params:\n((?:        .*\n)+)", body, re.M)
        if params:
            assert params.group(1).strip() == f'**PLAN.params("{rule}"),', f"rule {rule}: params not its job's"


def test_no_rule_reads_the_config():
    for path in sorted((ROOT / "rules").glob("*.smk")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            # config[...] or config.get(...) / config.items() (not a file name such as "{model}/config.json")
            assert not re.search(r"(?<![\w./{'\"-])config\s*(\[|\.\w+\()|\bPLAN\.config\b", line), \
                f"{path.name}:{n}: reads the config: {line.strip()}"


def test_a_job_is_built_once_and_frozen():
    mini = plan("mini")
    wc = SimpleNamespace(dataset="mini-alpha", system="bm25-flat")
    job = mini.job("bm25", wc)
    assert mini.job("bm25", {"system": "bm25-flat", "dataset": "mini-alpha"}) is job
    with pytest.raises(AttributeError):
        job.depth = 1
    with pytest.raises(ValueError, match="rule no_such_rule has no job builder"):
        mini.job("no_such_rule", wc)


@pytest.mark.parametrize("scale", sorted(CONFIGS))
def test_a_training_jobs_shape_is_what_its_rule_asks_the_scheduler_for(scale):
    """A job's `shape` (its message's resources, not compared for reruns) is built from the plan: the same
    line as Resources.job_shape of the resources and threads Snakemake planned for it. A training rule's job is
    made of the plan's bundle of that training (zsdr.plan.jobs.training.BUNDLES): its spec is the bundle's."""
    from zsdr.plan.jobs.training import BUNDLES
    from zsdr.plan.resources import Resources

    load_builders()
    checked, trainings = 0, set()
    for rule, scales in GOLDEN_JOBS.items():
        if rule not in BUILDERS or "shape" not in BUILDERS[rule][0].field_names():
            continue
        for golden in scales.get(scale, []):
            wc = SimpleNamespace(**golden["wildcards"])
            job = plan(scale).job(rule, wc)
            assert str(job.shape) == Resources.job_shape(golden["resources"], golden["threads"]), (rule, golden)
            if rule in BUNDLES:
                assert job.spec is BUNDLES[rule](plan(scale), wc).spec, (rule, golden["wildcards"])
                trainings.add(rule)
            checked += 1
    assert checked, "no job with a shape"
    assert "train" in trainings


def test_the_paper_shape_names_the_nodes_and_cpus_per_gpu():
    """An 8-GPU training on the paper config's nodes of 4 GPUs: 2 nodes, 8 CPUs per GPU."""
    p = plan("paper")
    run = p.recipes.recipe_run("cocodr-base")
    assert str(p.job("train", {"run": run}).shape) == (
        f"8 GPU(s), 2 node(s), 64 CPUs (8 per GPU), {p.train_job(run).memory} MB, {p.training_runtime} min")


REGRESSIONS_TARGET = "regressions/results/regressions.csv"
REGRESSIONS_CONFIGS = (ROOT / "configs" / "paper.yaml", ROOT / "configs" / "regressions.yaml")


def test_the_regressions_targets_jobs_are_their_rules_job_objects():
    """The regressions target (configs/regressions.yaml over the paper scale) is not in the golden plans, which
    plan results/all: its dry run's params of every job are the job objects of a plan built apart from the
    workflow (its own rules, evaluate_regression with nothing inherited from `evaluate`, and the rules it shares
    with results/all at this config), and the regression jobs hold what the published rows ask for."""
    from plan_golden import _dag, _named
    from zsdr.regressions.published import read_all

    saved = dict(os.environ)   # the Snakefile sets variables for its jobs in this process's environment
    try:
        with _dag("paper", ROOT / "Snakefile", ROOT, REGRESSIONS_TARGET, REGRESSIONS_CONFIGS[1:]) as workflow:
            planned = [{"rule": job.rule.name, "wildcards": dict(job.wildcards_dict), "params": _named(job.params),
                        "input": [str(f) for f in job.input], "output": [str(f) for f in job.output]}
                       for job in workflow.dag.jobs]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    fresh = load_plan(ROOT, *REGRESSIONS_CONFIGS)
    load_builders()
    by_rule = defaultdict(list)
    for job in planned:
        by_rule[job["rule"]].append(job)
        if not job["params"]:
            continue
        if job["rule"] not in BUILDERS:   # a rule of results/all still without a job: its golden test says so
            assert job["rule"] in GOLDEN_JOBS, f"rule {job['rule']} has params but no job builder"
            continue
        built = fresh.job(job["rule"], SimpleNamespace(**job["wildcards"]))
        assert _plain(job_fields(built)) == job["params"], (job["rule"], job["wildcards"])
    evaluations = {(j["wildcards"]["dataset"], j["wildcards"]["system"]): j["params"]
                   for j in by_rule["evaluate_regression"]}
    [report] = by_rule["regressions"]
    rows = report["params"]["rows"]
    # every published row, each measured by the evaluation of its (dataset, system) or not run with its reason
    assert len(rows) == len(read_all([], builtin=True)) and evaluations
    measured = {(r["dataset"], r["system"]) for r in rows if "metrics" in r}
    assert measured == set(evaluations) and all(r.get("reason") for r in rows if "metrics" not in r)
    # the report reads the metrics of every evaluation (and its code stamp)
    assert ({f for f in report["input"] if not f.startswith(".code/")}
            == {j["output"][0] for j in by_rule["evaluate_regression"]})
    metrics, splits = fresh.config["evaluation"]["metrics"], fresh.config["datasets"]["eval_splits"]
    for (dataset, system), params in evaluations.items():
        assert params["dataset"] == f"regressions/data/{dataset}", (dataset, system)
        assert params["split"] == splits.get(dataset, "test"), (dataset, system)
        assert params["ignore_identical_ids"] == (dataset in ("arguana", "quora")), (dataset, system)
        assert params["metrics"][:len(metrics)] == metrics
        assert {r["metric"] for r in rows if (r["dataset"], r["system"]) == (dataset, system)} <= set(params["metrics"])
