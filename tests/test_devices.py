"""GPU assignment through per-device lock files (no GPU needed: the pools are made up)."""

import json
import logging
import os
import select
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from zsdr import devices
from zsdr.devices import claim_for_job, claim_gpus, gpu_pool, node_share, release_gpus

ROOT = Path(__file__).resolve().parents[1]
ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "ZSDR_GPUS", "ZSDR_GPU_LOCKS", "SLURM_JOB_ID")

# Claims, prints "<ids> <CUDA_VISIBLE_DEVICES>" and holds the devices until stdin closes.
HOLDER = """
import logging, os, sys
from zsdr.devices import claim_gpus
logging.basicConfig(level=logging.INFO)
ids = claim_gpus(int(sys.argv[1]), pool=sys.argv[2].split(","), lock_dir=sys.argv[3], poll=0.05)
print(",".join(ids), os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
sys.stdin.read()
"""


@pytest.fixture
def clean_env(monkeypatch):
    for key in ENV_KEYS:
        monkeypatch.setenv(key, "x")  # recorded, so the original value comes back afterwards
        monkeypatch.delenv(key)
    yield monkeypatch
    release_gpus()


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS and k != "SNAKEMAKE_PROFILE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _holder(count, pool, lock_dir):
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(count), ",".join(pool), str(lock_dir)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env())


def _line(proc, timeout):
    """The holder's claim (ids list), or None when it has not claimed within ``timeout`` s."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    ids, visible = line.split()
    assert ids == visible
    return ids.split(",")


def _stop(*procs):
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()


def test_concurrent_claims_get_disjoint_devices(tmp_path):
    a = _holder(2, ["0", "1", "2"], tmp_path)
    try:
        got_a = _line(a, 20)
        b = _holder(1, ["0", "1", "2"], tmp_path)
        try:
            got_b = _line(b, 20)
            assert len(got_a) == 2 and len(got_b) == 1
            assert sorted(got_a + got_b) == ["0", "1", "2"]
        finally:
            _stop(b)
    finally:
        _stop(a)


def test_claim_waits_until_a_holder_exits(tmp_path):
    pool = ["0", "1", "2"]
    a, b = _holder(2, pool, tmp_path), None
    waiting = []
    try:
        got_a = _line(a, 20)
        b = _holder(1, pool, tmp_path)
        got_b = _line(b, 20)
        # The pool is fully held: a new claim of one device waits ...
        c = _holder(1, pool, tmp_path)
        waiting.append(c)
        assert _line(c, 1.0) is None
        # ... until the kernel drops the lock of a killed holder.
        b.send_signal(signal.SIGKILL)
        assert _line(c, 20) == got_b
        # A two-device claim waits for both at once and gets them when their holder exits normally.
        d = _holder(2, pool, tmp_path)
        waiting.append(d)
        assert _line(d, 1.0) is None
        a.stdin.close()
        assert sorted(_line(d, 20)) == sorted(got_a)
        c.stdin.close()
        c.wait(10)
        assert "0,1,2 busy" in c.stderr.read()
    finally:
        _stop(a, *([b] if b else []), *waiting)


def test_racing_multi_device_claims_do_not_deadlock(tmp_path):
    procs = [_holder(2, ["0", "1"], tmp_path) for _ in range(2)]
    try:
        ready, _, _ = select.select([p.stdout for p in procs], [], [], 20)
        first = next(p for p in procs if p.stdout in ready)
        other = procs[1 - procs.index(first)]
        assert sorted(_line(first, 1)) == ["0", "1"]
        assert _line(other, 0.5) is None
        first.stdin.close()
        assert sorted(_line(other, 20)) == ["0", "1"]
    finally:
        _stop(*procs)


def test_no_op_for_zero_gpus_and_under_slurm(clean_env, tmp_path):
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert claim_gpus(0, pool=["0", "1"], lock_dir=tmp_path) == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    clean_env.setenv("SLURM_JOB_ID", "123")
    assert claim_gpus(1, pool=["0", "1"], lock_dir=tmp_path) == []
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"
    assert not list(tmp_path.iterdir())


def test_more_gpus_than_the_pool_is_an_error(clean_env, tmp_path):
    with pytest.raises(ValueError, match=r"asks for 3 GPU.*\(0,1\).*lower the rule's GPU count"):
        claim_gpus(3, pool=["0", "1"], lock_dir=tmp_path)


def test_empty_pool_warns_and_runs_anyway(clean_env, tmp_path, caplog):
    clean_env.setenv("PATH", str(tmp_path))  # no nvidia-smi
    with caplog.at_level(logging.WARNING, logger="zsdr.devices"):
        assert claim_gpus(2, lock_dir=tmp_path) == []
        assert claim_gpus(1, pool=[], lock_dir=tmp_path) == []
    assert "asked for 2 GPU(s) but none is visible" in caplog.text
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_pool_sources(clean_env, tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0\\n1\\n2\\n'\n")
    smi.chmod(0o755)
    clean_env.setenv("PATH", str(tmp_path))
    assert gpu_pool() == ["0", "1", "2"]
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    assert gpu_pool() == ["1", "2"]
    clean_env.setenv("ZSDR_GPUS", " 2, 3 ")
    assert gpu_pool() == ["2", "3"]
    assert gpu_pool([4, 5]) == ["4", "5"]
    clean_env.setenv("ZSDR_GPUS", "")
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_pool() == ["0", "1", "2"]


def test_claim_for_job(clean_env, tmp_path, caplog):
    clean_env.setenv("ZSDR_GPUS", "3,4")
    clean_env.setenv("ZSDR_GPU_LOCKS", str(tmp_path / "locks"))
    assert claim_for_job(SimpleNamespace(resources=SimpleNamespace())) == []
    assert claim_for_job(SimpleNamespace(resources=SimpleNamespace(gpu=0))) == []
    with caplog.at_level(logging.INFO, logger="zsdr.devices"):
        assert claim_for_job(SimpleNamespace(resources=SimpleNamespace(gpu=2))) == ["3", "4"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3,4"
    assert "job gets GPU(s) 3,4" in caplog.text
    assert (tmp_path / "locks" / "gpu3.lock").read_text() == f"{os.getpid()}\n"
    release_gpus()
    assert not devices._HELD


SNAKEFILE = """
rule all:
    input: expand("out/{i}.json", i=range(4))

rule job:
    output: "out/{i}.json"
    resources: gpu=1
    script: "job.py"
"""

JOB = """
import json, os, time
from zsdr.devices import claim_for_job
ids = claim_for_job(snakemake)
start = time.time()
time.sleep(1)
with open(snakemake.output[0], "w") as fh:
    json.dump({"ids": ids, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start,
               "end": time.time()}, fh)
"""


@pytest.mark.parametrize("limit", [2, 4])  # 4 > the 2 devices: jobs also wait on the locks
def test_snakemake_jobs_get_disjoint_devices(tmp_path, limit):
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "job.py").write_text(JOB)
    snakemake = Path(sys.executable).parent / "snakemake"
    res = subprocess.run([str(snakemake), "--cores", "4", "--resources", f"gpu={limit}", "--quiet"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=_env(ZSDR_GPUS="0,1", ZSDR_GPU_LOCKS=str(tmp_path / "locks")))
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = [json.loads((tmp_path / "out" / f"{i}.json").read_text()) for i in range(4)]
    for job in jobs:
        assert len(job["ids"]) == 1 and job["visible"] == job["ids"][0] in ("0", "1")
    for i, a in enumerate(jobs):
        for b in jobs[i + 1:]:
            if a["start"] < b["end"] and b["start"] < a["end"]:
                assert a["visible"] != b["visible"], (a, b)


def test_node_share_of_a_training_job():
    """A training job's GPUs and CPUs on each of its nodes (workflow_scripts/train.py): 8 GPUs on 2 nodes with 8
    CPUs per GPU are 4 GPUs and 32 CPUs a node; a CPU job computes on its threads."""
    job = SimpleNamespace(resources={"gpu": 8, "cpus_per_gpu": 8}, threads=2)
    assert node_share(job, 2) == (2, 4, 32)
    assert node_share(job, 0) == (1, 8, 64)                                       # no nodes named: one
    assert node_share(SimpleNamespace(resources={"gpu": 0}, threads=3), 1) == (1, 0, 3)
    assert node_share(SimpleNamespace(resources={"gpu": 1}, threads=3), 1) == (1, 1, 3)   # no cpus_per_gpu: threads
