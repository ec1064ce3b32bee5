"""One job object per rule (zsdr.plan.jobs): every planned job's params are the fields of the job object the plan
builds for its rule and wildcards, and no rule reads the config itself."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pytest

from zsdr.plan.core import load_plan
from zsdr.plan.jobs import BUILDERS, job_fields, load_builders

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
CONFIGS = {"mini": (), "small": (ROOT / "configs" / "small.yaml",), "paper": (ROOT / "configs" / "paper.yaml",)}


def _plain(value):
    """As tests/plan_golden.py writes a params value (dict subclasses as dicts, other objects by type name)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Path):
        return str(value)
    return f"<{type(value).__name__}>"


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
            assert not re.search(r"(?<![/\w.])config\s*[\[.]", line), f"{path.name}:{n}: reads the config: {line.strip()}"


def test_a_job_is_built_once_and_frozen():
    mini = plan("mini")
    wc = SimpleNamespace(dataset="mini-alpha", system="bm25-flat")
    job = mini.job("bm25", wc)
    assert mini.job("bm25", {"system": "bm25-flat", "dataset": "mini-alpha"}) is job
    with pytest.raises(AttributeError):
        job.depth = 1
    with pytest.raises(ValueError, match="rule no_such_rule has no job builder"):
        mini.job("no_such_rule", wc)
