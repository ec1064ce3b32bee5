"""The site check: every paper-scale submission, as snakemake-executor-plugin-slurm writes its sbatch line, fits
nodes of 4 x A100 / 64 cores / 512 GB and of 8 x H100 / 96 cores / 1 TB / 48 h (benchmarks/slurm_site.py, one
plan of `paper/results/all` for both), and the pure functions of zsdr.plan.site that shape the jobs.
"""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import slurm_site  # noqa: E402

from zsdr.plan.site import Site, site_from_config  # noqa: E402

# What main asked before the site section (benchmarks/slurm_site.py on the plan before it): encode and search
# jobs' GPU-hours (encode_corpus, encode_queries, search_shard, dense_search, dense_search_group).
DENSE_RULES = ("encode_corpus", "encode_queries", "search_shard", "dense_search", "dense_search_group")
DENSE_GPU_HOURS_BEFORE = 35_757


@pytest.fixture(scope="module")
def submissions():
    profile = slurm_site.read_profile()
    workflow = slurm_site.plan(["configs/paper.yaml"], profile=profile)
    return slurm_site.submissions(workflow, profile)


@pytest.mark.parametrize("name", list(slurm_site.SITES))
def test_every_paper_submission_fits_the_site(submissions, name, capsys):
    bad = slurm_site.violations(slurm_site.SITES[name], submissions)
    assert not bad, "\n".join(bad[:20])
    t = slurm_site.totals(submissions)
    with capsys.disabled():
        print(f"\n{name}: {t['jobs']:,} jobs, {t['submissions']:,} submissions, {t['gpu_jobs']:,} GPU jobs, "
              f"{t['gpu_hours']:,.0f} GPU-hours requested")


def test_paper_submissions_are_few_and_ask_for_what_their_work_needs(submissions):
    """Groups stay on one node; the small jobs share submissions (groups, arrays); encode and search jobs ask
    for runtimes from their work: at least 5x fewer GPU-hours than the constant limits did."""
    t = slurm_site.totals(submissions)
    assert all(s.asks["nodes"] == 1 for s in submissions if s.kind != "job")
    multi = [s for s in submissions if s.asks["nodes"] > 1]
    assert multi and all(s.jobs[0].rule.name in slurm_site.TRAINING_RULES for s in multi)
    assert {s.kind for s in submissions} == {"job", "group", "array"}
    assert t["submissions"] < t["jobs"] / 2
    rows = slurm_site.by_rule(submissions)
    dense = sum(rows[r]["gpu_hours"] for r in DENSE_RULES if r in rows)
    assert dense * 5 <= DENSE_GPU_HOURS_BEFORE, {r: rows[r] for r in DENSE_RULES if r in rows}
    # every dense system's jobs on one-shard corpora in one group job, one GPU at a time
    groups = [s for s in submissions if s.kind == "group" and s.name.startswith("dense-")]
    assert groups and all(s.asks["gpus"] == 1 for s in groups)
    assert len({s.name for s in groups}) == len(groups)
    assert any(sum(s.rules.values()) > 10 for s in groups)


# ------------------------------------------------------------------------------------------ zsdr.plan.site
def test_trainings_spread_over_nodes_with_the_same_processes_on_each():
    four = Site(gpus_per_node=4)
    assert four.layout(1, 8, 1) == (4, 2) and four.layout(1, 4, 1) == (4, 1) and four.layout(1, 1, 1) == (1, 1)
    assert four.layout(1, 6, 1) == (3, 2) and four.layout(2, 4, 1) == (2, 2) and four.layout(1, 8, 2) == (4, 4)
    assert Site(gpus_per_node=8).layout(1, 8, 1) == (8, 1) and Site().layout(1, 8, 1) == (8, 1)
    assert four.layout(0, 8, 1) == (8, 1)                          # CPU processes: no GPUs to fit
    with pytest.raises(ValueError, match="3 process\\(es\\) with 5 GPU\\(s\\) each does not fit nodes of "
                                         "site.gpus_per_node 4"):
        four.layout(5, 3, 1)
    # a node's GPUs never ask more CPUs than it has
    assert Site(cpus_per_gpu=8, gpus_per_node=8, cores_per_node=48).gpu_cpus() == 6
    assert Site(cpus_per_gpu=8, gpus_per_node=4, cores_per_node=64).gpu_cpus() == 8 and Site().gpu_cpus() == 8


def test_runtimes_from_work_with_a_floor_a_safety_factor_and_retries():
    site = Site(floor=5, safety=3, startup_s=60, max_runtime=600, throughput={"encode": 1000, "index": 100})
    assert site.minutes(0) == 5 and site.minutes(60) == 6          # 3 x (60 + 60) s
    assert site.minutes(60, attempt=2) == 12 and site.minutes(9000, attempt=3) == 600   # retries: more, capped
    assert site.minutes(site.seconds("encode", 600_000)) == 33      # 600 s of work
    with pytest.raises(ValueError, match="indexing x needs about 603 min .* more than site.max_runtime 600: split"):
        site.minutes(12_000, what="indexing x")
    with pytest.raises(ValueError, match="config key site.throughput.label: not set"):
        site.seconds("label", 1)
    # Lucene: a thread per hour of one thread's work, within index_threads and the node
    assert site.lucene_threads(100 * 3600 * 4.5) == 5 and site.lucene_threads(1) == 1
    assert Site(throughput={"index": 1}, cores_per_node=8).lucene_threads(10**9) == 8


def test_site_problems_name_each_way_a_request_breaks_a_node():
    site = slurm_site.SITES["8 x H100, 96 cores, 1 TB, 48 h"]
    assert site.problems("j", gpus=8, cpus=64, mem_mb=900_000, runtime=2880) == []
    assert site.problems("t", nodes=2, gpus=16, cpus=192, mem_mb=10, runtime=60, multi_node=True) == []
    assert site.problems("g", nodes=40, cpus=40, mem_mb=160_000, runtime=30) == ["g asks 40 nodes"]
    assert site.problems("j", gpus=16, cpus=97, mem_mb=1_000_001, runtime=2881, cpus_given=False) == [
        "j asks 16 GPUs, 1 node(s) have 8", "j asks 97 CPUs, 1 node(s) have 96",
        "j asks 1000001 MB a node, a node has 1000000", "j asks 2881 min, the limit is 2880",
        "j is a GPU job without a CPU or memory request"]
    assert Site().problems("j", nodes=1, gpus=99, cpus=999, mem_mb=10**9, runtime=10**6) == []   # nothing known


def test_the_site_section_and_the_older_cluster_keys():
    assert site_from_config({}) == Site()
    site = site_from_config({"cluster": {"account": "lab", "max_runtime": 600, "cpus_per_gpu": None},
                             "site": {"gpus_per_node": 4, "runtime": {"floor": 2, "safety": 1.5},
                                      "throughput": {"encode": 10}}})
    assert (site.account, site.max_runtime, site.cpus_per_gpu, site.gpus_per_node) == ("lab", 600, 8, 4)
    assert (site.floor, site.safety, site.throughput) == (2, 1.5, {"encode": 10.0})
    with pytest.raises(ValueError, match=r"cluster.account \('a'\) and site.account \('b'\) disagree"):
        site_from_config({"cluster": {"account": "a"}, "site": {"account": "b"}})
    with pytest.raises(ValueError, match="site.throughput.decode: no job kind of that name"):
        site_from_config({"site": {"throughput": {"decode": 1}}})


def test_the_paper_configs_site_and_the_profiles_groups_fit_both_site_descriptions():
    """configs/paper.yaml's nodes are no larger than either description (a plan for them fits both); the
    profile's group sizes x the largest member of each group fit a node of each."""
    paper = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())["site"]
    profile = slurm_site.read_profile()
    members = {"evaluate": (4000, 1), "statistics": (16000, 1)}     # the rules' mem_mb and threads (largest)
    for site in slurm_site.SITES.values():
        assert paper["gpus_per_node"] <= site.gpus_per_node and paper["cores_per_node"] <= site.cores_per_node
        assert paper["mem_mb_per_node"] <= site.mem_mb_per_node
        for group, (mem, threads) in members.items():
            assert profile["group-components"][group] <= site.group_size(mem, threads)


def test_work_of_a_job_follows_its_corpus():
    """Encode and index runtimes grow with the corpus's published size; a corpus without published statistics
    is sized as the config's largest shard."""
    from zsdr.plan.core import load_plan

    plan = load_plan(ROOT, ROOT / "configs" / "paper.yaml")
    work, site, wc = plan.work, plan.resources.site, SimpleNamespace
    small, large = work.encode_runtime(wc(dataset="scifact", shards="1")), work.encode_runtime(wc(dataset="nq", shards="1"))
    assert small == site.floor < large
    assert work.encode_runtime(wc(dataset="msmarco", shards="4")) == work.encode_runtime(wc(dataset="bioasq", shards="6"))
    assert work.corpus_size("oagqa") == work.largest_shard
    # BioASQ's 3.02B words: more than one thread, and an index job that fits the day
    threads = work.index_threads(wc(dataset="bioasq"))
    assert threads > 1 and work.index_runtime(wc(dataset="bioasq")) < site.max_runtime
    assert work.index_threads(wc(dataset="scifact")) == 1


def test_a_cluster_run_checks_its_jobs_and_groups_against_the_site_before_submitting():
    """zsdr.workflow.site_problems (the Snakefile's onstart on a cluster): what each job or group job would ask,
    as the SLURM executor turns its resources into options, against config `site`."""
    from zsdr.workflow import site_problems

    class Sub(SimpleNamespace):
        def is_group(self):
            return hasattr(self, "groupid")

        def __str__(self):
            return self.name

    train = Sub(name="train dpr", resources={"gpu": 8, "nodes": 2, "mpi": "srun", "cpus_per_gpu": 8,
                                             "mem_mb": 70000, "runtime": 1440}, threads=4)
    group = Sub(groupid="evaluate", jobs=[1] * 80, resources={"mem_mb": 320000, "runtime": 30}, threads=80)
    done = Sub(name="done", resources={"gpu": 16, "mem_mb": 1, "runtime": 1}, threads=1)
    dag = SimpleNamespace(get_jobs_or_groups=lambda: [train, group, done], needrun=lambda job: job is not done)
    site = Site(gpus_per_node=4, cores_per_node=64, mem_mb_per_node=512000, max_runtime=1440)
    assert site_problems(dag, site) == ["group job evaluate (80 jobs) asks 80 CPUs, 1 node(s) have 64"]
    assert site_problems(dag, Site()) == []


def test_the_disk_benchmark_holds_temporary_outputs_until_their_readers_end():
    """benchmarks/disk_paper.py's peak held at once: one job at a time, two corpora encoded then searched; with
    the searches first (their priority) one corpus's embeddings are held at a time, without them both; a
    training holds its checkpoint while it trains and keeps its snapshots."""
    import disk_paper

    def job(rule, output, inputs=(), priority=0, embeddings=0, runtime=60):
        return {"rule": rule, "wildcards": {}, "output": [output], "input": list(inputs), "params": {},
                "resources": {"runtime": runtime, "embeddings_mb": embeddings}, "priority": priority}

    jobs = [job("encode_corpus", f"e/{c}", embeddings=10) for c in "abc"]
    jobs += [job("search_shard", f"r/{c}", [f"e/{c}"], priority=1, runtime=30) for c in "abc"]
    items = [[("embeddings", 10.0, True, f"e/{c}")] for c in "abc"] + [[("runs", 1.0, False, None)]] * 3
    assert disk_paper.peak_held(jobs, items, 1, {})["temporary"] == 10.0
    assert disk_paper.peak_held(jobs, items, 1, {}, priorities=False)["temporary"] == 30.0
    # three at a time: all three encodes at once, unless those running at once may write 10 MB only
    assert disk_paper.peak_held(jobs, items, 3, {})["temporary"] == 30.0
    assert disk_paper.peak_held(jobs, items, 3, {"embeddings_mb": 10})["temporary"] == 20.0
    assert disk_paper.snapshots({"train": {"snapshot_every": 1000, "max_steps": 10000}}) == 9
    cost = {"bert-base": 4.0, "bert-large": 12.0}
    trained = {"rule": "train", "wildcards": {"run": "x"}, "output": ["m"], "input": [],
               "params": {"spec": {"init": "b", "train": {"snapshot_every": 5, "max_steps": 20}}}}
    assert disk_paper.job_items(trained, {}, cost, False, set()) == [
        ("models", 4.0, False, None), *[("models", 4.0, False, None)] * 3, ("checkpoint", 12.0, True, None)]
