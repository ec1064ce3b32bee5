"""The GPU paths, on a CUDA machine (every test here skips without one): bf16 training in this process and
through torchrun (NCCL), a stop signal's checkpoint and resume on the GPU, the methods' training terms (iDRO,
GroupDRO, MoDIR) and COCO pretraining in bf16, bf16 / fp32 encoding and sharded corpus encoding (prefetching
tokenizer) against the CPU, faiss on the GPU against the CPU, and device claims from nvidia-smi's list."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import mini_with_backbones
from tests.test_coco import coco_spec
from tests.test_idro import _spec as idro_spec
from tests.test_idro import write_query_clusters
from tests.test_modir import MINI as TWO_DOMAINS
from tests.test_modir import SIZE as ONE_LAYER
from tests.test_modir import _spec as modir_spec
from tests.test_training import MINI, losses, spec, train_cli, wait_until_logged

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

ROOT = Path(__file__).resolve().parents[1]
SIZE = {"hidden": 64, "layers": 2, "heads": 2, "intermediate": 128, "max_length": 64, "dropout": 0.0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return mini_with_backbones(tmp_path_factory.mktemp("gpu"), MINI, SIZE, kinds=("bert",))


def write_spec(tiny, name, **train):
    """test_training's spec, in bf16 (on the GPU; the CPU would run fp32), 40 steps of 16 by default."""
    return spec(tiny, name, train={"batch_size": 16, "max_steps": 40, "save_every": 1000, "precision": "bf16",
                                   **train})


def loss_curve(out):
    return [r["loss"] for r in losses(out)]


def env(**extra):
    e = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), e.get("PYTHONPATH")) if p)
    e.update(extra)
    return e


@pytest.fixture(scope="module")
def in_process(tiny):
    """bf16 training in this process on the GPU (launch with one process runs here)."""
    from zsdr.training.launch import launch

    s, _ = write_spec(tiny, "bf16")
    torch.cuda.reset_peak_memory_stats()
    launch(s, processes=1)
    return s, torch.cuda.max_memory_allocated()


def test_bf16_training_runs_on_the_gpu_and_learns(in_process):
    s, peak = in_process
    assert peak > 0, "nothing was allocated on the GPU"
    info = json.loads((Path(s["out"]) / "training.json").read_text())
    assert info["train"]["precision"] == "bf16" and info["processes"] == 1
    log = loss_curve(s["out"])
    assert len(log) == 40 and all(np.isfinite(log))
    assert sum(log[-5:]) / 5 < 0.9 * sum(log[:5]) / 5, log


def test_torchrun_with_nccl_matches_the_in_process_run(tiny, in_process, monkeypatch):
    """One torchrun worker on the GPU (process group over NCCL, the gather of a world of one) trains what the
    in-process run trains."""
    from zsdr.training.launch import launch

    ref, _ = in_process
    s, path = write_spec(tiny, "torchrun")
    log_file = tiny / "torchrun.log"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]
    monkeypatch.setenv("PYTHONPATH", env()["PYTHONPATH"])
    launch(s, launcher=launcher, spec_path=path, log_file=log_file)
    assert loss_curve(s["out"]) == pytest.approx(loss_curve(ref["out"]), rel=1e-3, abs=1e-4)
    a, b = load_file(str(Path(ref["out"]) / "model.safetensors")), load_file(str(Path(s["out"]) / "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-3) for k in a)


def test_sigusr1_on_the_gpu_checkpoints_and_the_rerun_resumes(tiny):
    steps = {"max_steps": 400}                           # long enough to be signalled half-way on a fast GPU
    ref, ref_path = write_spec(tiny, "signal-ref", **steps)
    assert train_cli(ref_path, cpu=False).wait(timeout=600) == 0
    s, path = write_spec(tiny, "signal", **steps)
    proc = train_cli(path, cpu=False)
    assert wait_until_logged(proc, Path(s["checkpoint_dir"]) / "train_log.jsonl", steps=2, timeout=180), \
        "training ended before it could be signalled: " + proc.stderr.read()
    proc.send_signal(signal.SIGUSR1)
    err = proc.communicate(timeout=180)[1]
    assert proc.returncode == 128 + signal.SIGUSR1, err
    m = re.search(r"stopped by SIGUSR1 at step (\d+): checkpoint written", err)
    assert m and 2 <= int(m.group(1)) < 400, err
    assert not Path(s["out"]).exists()
    rerun = train_cli(path, cpu=False)
    assert rerun.wait(timeout=600) == 0, rerun.stderr.read()
    assert len(loss_curve(s["out"])) == 400
    assert loss_curve(s["out"]) == pytest.approx(loss_curve(ref["out"]), rel=1e-3, abs=1e-4)


def test_encoding_on_the_gpu_matches_the_cpu(tiny):
    from zsdr.data.formats import read_corpus
    from zsdr.models.encoder import Encoder

    enc = Encoder.from_pretrained(tiny / "bert", pooling="mean", similarity="cosine", max_length=64)
    docs = list(read_corpus(tiny / "data" / "src").values())[:200]
    cpu = enc.encode_docs(docs, batch_size=32, device="cpu")
    fp32 = enc.encode_docs(docs, batch_size=32, device="cuda", precision="fp32")
    bf16 = enc.encode_docs(docs, batch_size=32, device="cuda", precision="bf16")
    assert enc.device.type == "cuda"
    np.testing.assert_allclose(fp32, cpu, atol=1e-4)
    cos = np.sum(bf16 * cpu, axis=1)                    # unit vectors
    assert cos.min() > 0.99, cos.min()
    assert not np.array_equal(bf16, fp32)                # the bf16 weight copy did run


def test_faiss_search_on_the_gpu_equals_the_cpu(tmp_path):
    faiss = pytest.importorskip("faiss")
    if not (hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus()):
        pytest.skip("this faiss build has no GPU support (`make install-gpu`)")
    from zsdr.retrieval.encode import NpyAppender
    from zsdr.retrieval.search import search_shards

    rng = np.random.default_rng(0)
    docs = rng.standard_normal((20_000, 64)).astype(np.float32)
    docs[5] = docs[9]                                    # a tie: the smaller key first on both paths
    queries = rng.standard_normal((50, 64)).astype(np.float32)
    shard = tmp_path / "shard"
    shard.mkdir()
    with NpyAppender(shard / "embeddings.npy", 64, "float32") as w:
        w.append(docs)
    (shard / "ids.txt").write_text("".join(f"d{i}\n" for i in range(len(docs))))
    (shard / "meta.json").write_text(json.dumps({"count": len(docs), "dim": 64, "dtype": "float32", "shard": 0,
                                                 "num_shards": 1, "assignment": "modulo"}))
    ids = [f"q{i}" for i in range(len(queries))]
    gpu = search_shards(queries, ids, [shard], k=100, gpu=True)
    cpu = search_shards(queries, ids, [shard], k=100, gpu=False)
    for q in ids:
        assert list(gpu[q]) == list(cpu[q]), q
        assert [gpu[q][d] for d in gpu[q]] == pytest.approx([cpu[q][d] for d in cpu[q]], abs=1e-3)


def test_sharded_corpus_encoding_on_the_gpu_matches_the_cpu(tiny, tmp_path):
    """The encode jobs' path: on CUDA the next chunk is tokenized while the GPU encodes (a prefetch thread)."""
    from zsdr.retrieval.encode import encode_corpus_shard, load_embeddings

    for device in ("cpu", "cuda"):
        for shard in range(2):
            encode_corpus_shard(tiny / "bert", tiny / "data" / "src", tmp_path / device / f"shard{shard}", shard=shard,
                                num_shards=2, batch_size=16, device=device, chunk_size=50, show_progress=False,
                                pooling="mean", similarity="cosine", max_length=64)
    for shard in range(2):
        cpu, cpu_ids, _ = load_embeddings(tmp_path / "cpu" / f"shard{shard}")
        gpu, gpu_ids, meta = load_embeddings(tmp_path / "cuda" / f"shard{shard}")
        assert gpu_ids == cpu_ids and len(gpu_ids) == 160
        cos = np.sum(np.asarray(gpu, np.float32) * np.asarray(cpu, np.float32), axis=1)
        assert cos.min() > 0.99, cos.min()


@pytest.fixture(scope="module")
def methods(tmp_path_factory):
    """A source and a target domain, a one-layer backbone, COCO spans, MoDIR's target triples, iDRO's clusters."""
    from transformers import AutoTokenizer

    from zsdr.pretrain.spans import write_spans
    from zsdr.training.modir import build_target_triples

    root = mini_with_backbones(tmp_path_factory.mktemp("methods"), TWO_DOMAINS, ONE_LAYER, kinds=("bert",))
    write_spans(root / "data" / "src", root / "spans-bert.arrow", AutoTokenizer.from_pretrained(root / "bert"), 30,
                0.1, seed=0)
    build_target_triples(root / "data" / "tgt", "test", root / "triples.tsv")
    write_query_clusters(root)
    return root


def train_log(out, steps):
    log = losses(out)
    assert [r["step"] for r in log] == list(range(1, steps + 1))
    assert all(math.isfinite(r["loss"]) for r in log), log
    return log


@pytest.mark.parametrize("method", ["idro", "groupdro", "modir"])
def test_method_terms_train_in_bf16_on_the_gpu(methods, method):
    """iDRO's per-cluster gradients, GroupDRO's weights and MoDIR's classifier and queue on CUDA tensors."""
    from zsdr.training.launch import run_spec

    train = {"precision": "bf16", "max_steps": 12}
    if method == "modir":
        s = modir_spec(methods, "gpu-modir", **train)
    else:
        s = idro_spec(methods, f"gpu-{method}", **train)
        if method == "groupdro":
            s["dro"] = {**s["dro"], "kind": "groupdro", "clusters": 4, "fraction": 0.5,
                        "clusters_file": str(methods / "clusters.jsonl")}
    torch.cuda.reset_peak_memory_stats()
    run_spec(s, progress=False)
    assert torch.cuda.max_memory_allocated() > 0
    log = train_log(s["out"], 12)
    if method == "modir":
        assert all(0.0 <= r["local_domain_acc_docs"] <= 1.0 for r in log)
    else:                                               # the cluster weights moved, and stay in range
        assert all(math.isfinite(r["dro_entropy"]) and r["dro_present_clusters"] >= 1 for r in log), log
        if method == "groupdro":                        # the worst half of the clusters at 1 / fraction
            assert all(r["dro_max_weight"] == pytest.approx(2.0) for r in log), log
        else:
            assert len({round(r["dro_max_weight"], 6) for r in log}) > 1, log


def test_coco_pretraining_in_bf16_on_the_gpu(methods, tmp_path):
    """Span contrast over the batch, the Condenser head and both MLM losses under bf16 autocast."""
    from zsdr.pretrain.coco import HEAD_WEIGHTS, build_coco_task
    from zsdr.training.config import TrainConfig
    from zsdr.training.trainer import Trainer

    task = build_coco_task(coco_spec(methods))
    cfg = TrainConfig(batch_size=8, max_steps=30, lr=3e-3, warmup_steps=0, seed=7, save_every=100, log_every=1,
                      precision="bf16")
    out = Trainer(task, cfg, tmp_path / "coco", progress=False).train()
    log = train_log(out, 30)
    mean = lambda rows, k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    assert mean(log[-5:], "loss") < mean(log[:5], "loss") - 0.5, (log[0], log[-1])
    assert {"mlm_head", "mlm_backbone", "contrastive"} <= set(log[-1])
    assert (out / HEAD_WEIGHTS).is_file()


HOLDER = """
import os, sys, torch
from zsdr.devices import claim_gpus
ids = claim_gpus(1, lock_dir=sys.argv[1], poll=0.05)
print(",".join(ids), os.environ["CUDA_VISIBLE_DEVICES"], torch.cuda.device_count(), flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs nvidia-smi")
def test_claims_come_from_nvidia_smi_and_wait_for_a_busy_device(tmp_path):
    from zsdr.devices import gpu_pool

    clean = {k: v for k, v in env().items() if k not in ("CUDA_VISIBLE_DEVICES", "ZSDR_GPUS", "SLURM_JOB_ID")}
    listed = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                            text=True, check=True).stdout.split()
    saved = {k: os.environ.pop(k) for k in ("CUDA_VISIBLE_DEVICES", "ZSDR_GPUS") if k in os.environ}
    try:
        assert gpu_pool() == listed
    finally:
        os.environ.update(saved)
    holders, claimed = [], []
    try:
        for _ in range(len(listed)):                     # every device held
            p = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], env=clean, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            holders.append(p)
            got = p.stdout.readline().split()
            assert len(got) == 3, p.stderr.read()
            assert got[0] == got[1] and got[2] == "1", got  # the job sees its one device, as cuda:0
            claimed.append(got[0])
        assert sorted(claimed) == sorted(listed)
        waiting = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], env=clean, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        holders.append(waiting)
        time.sleep(3)
        assert waiting.poll() is None                    # no device free: it waits
        holders[0].stdin.close()                         # the first holder exits: its device comes free
        got = waiting.stdout.readline().split()
        assert got and got[0] == claimed[0], waiting.stderr.read()
    finally:
        for p in holders:
            if p.stdin and not p.stdin.closed:
                p.stdin.close()
            p.wait(timeout=30)
