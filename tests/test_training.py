"""zsdr.training: data files, sampling, exact resume after SIGKILL, checkpoint and exit on SIGTERM /
SIGUSR1 (one process and two), 2-process DDP equals 1 process."""

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import gzip
import pytest
import torch
from safetensors.torch import load_file

from zsdr.data.mini import generate
from zsdr.io import DataError
from zsdr.models.tiny import build_tiny_backbone
from zsdr.retrieval.mine import sample_negatives
from zsdr.data.training_set import (Example, TrainingSet, read_negatives, read_teacher_scores, with_teacher,
                                    write_teacher_scores)
from zsdr.training.launch import launch
from zsdr.training.signals import StopSignals
from tests import warm_jobs
from tests.warm_jobs import job_env

MINI = {
    "seed": 5, "topics": 3, "topic_words": 6, "attributes": 8, "values": 20, "docs_per_entity": 4,
    "sentences": [3, 5], "distractors": 1, "synonym_rate": 0.5, "negatives": 8, "triples_per_query": 1,
    "domains": [{"name": "src", "role": "source", "docs": 320, "train_queries": 200, "dev_queries": 20}],
}
SIZE = {"hidden": 32, "layers": 1, "heads": 2, "intermediate": 64, "max_length": 64, "dropout": 0.0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    generate(MINI, root / "data")
    build_tiny_backbone("bert", [root / "data" / "src"], root / "bert", SIZE, vocab_size=600, seed=0)
    return root


def spec(tiny, name, **over):
    s = {"kind": "bi_encoder", "init": str(tiny / "bert"), "dataset": str(tiny / "data" / "src"),
         "negatives": str(tiny / "data" / "src" / "negatives.jsonl"), "systems": None, "teacher": None,
         "out": str(tiny / "out" / name), "checkpoint_dir": str(tiny / "ckpt" / name),
         "encoder": {"pooling": "mean", "similarity": "dot", "query_max_length": 16, "doc_max_length": 48},
         "loss": "contrastive", "negatives_per_query": 1, "scale": 1.0, "dropout": 0.0,
         "train": {"batch_size": 8, "max_steps": 12, "lr": 1e-3, "optimizer": "adamw", "warmup_steps": 2,
                   "seed": 3, "save_every": 4, "log_every": 1}}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(s.get(k), dict):
            s[k] = {**s[k], **v}
        else:
            s[k] = v
    path = tiny / f"{name}.json"
    path.write_text(json.dumps(s))
    return s, path


def train_cli(path, cpu=True, warm=True, **kw):
    """`python -m zsdr train SPEC`, forked from the tests' warm server (tests/warm_jobs.py: the command as
    given, without the ~5.5 s of imports of a new interpreter); ``warm=False``: a new interpreter (a test
    that signals the job's whole process group, which a forked job is not in)."""
    env = job_env({"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    cmd = [sys.executable, "-m", "zsdr", "train", str(path), "--quiet"] + (["--cpu"] if cpu else [])
    start = warm_jobs.popen if warm else subprocess.Popen
    return start(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **kw)


def weights(out):
    return load_file(str(Path(out) / "model.safetensors"))


def losses(out):
    return [json.loads(line) for line in (Path(out) / "train_log.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------------ data
def test_negatives_union_of_systems_minus_positives(tmp_path):
    f = tmp_path / "neg.jsonl.gz"
    with gzip.open(f, "wt") as fh:
        fh.write(json.dumps({"qid": 1, "pos": [7], "neg": {"bm25": [3, 7, 9], "ce": [9, 4]}}) + "\n")
        fh.write(json.dumps({"qid": "2", "pos": ["8"], "neg": {"ce": ["5"]}}) + "\n")
    ex = read_negatives(f)
    assert ex[0] == Example("1", ("7",), ("3", "9", "4")) and ex[1].negatives == ("5",)
    assert read_negatives(f, systems=["ce"])[0].negatives == ("9", "4")


def test_bad_negatives_line_names_file_and_line(tmp_path):
    f = tmp_path / "neg.jsonl"
    f.write_text(json.dumps({"qid": "1", "pos": ["7"], "neg": {"x": ["2"]}}) + "\n" + '{"qid": "2"}\n')
    with pytest.raises(DataError, match=r"neg\.jsonl:2.*needs \"qid\" and \"pos\""):
        read_negatives(f)


def test_teacher_scores_pickle_and_jsonl_and_scored_subset(tmp_path):
    pkl = tmp_path / "ce.pkl.gz"
    with gzip.open(pkl, "wb") as fh:
        pickle.dump({1: {7: 3.5, 9: -1.0}, 2: {5: 0.0}}, fh)
    scores = read_teacher_scores(pkl)
    assert scores == {"1": {"7": 3.5, "9": -1.0}, "2": {"5": 0.0}}
    write_teacher_scores(tmp_path / "t.jsonl", scores)
    assert read_teacher_scores(tmp_path / "t.jsonl") == scores
    kept = with_teacher([Example("1", ("7",), ("3",)), Example("2", ("8",), ("5",))], scores)
    assert kept == [Example("1", ("7",), ("9",))]      # negatives: what the teacher scored; q2 has no scored positive


def test_sampling_is_a_pure_function_of_seed_epoch_index(tiny):
    data = TrainingSet(tiny / "data" / "src", tiny / "data" / "src" / "negatives.jsonl")
    a = [data.sample(i, 0, 1, 3) for i in range(5)]
    assert a == [data.sample(i, 0, 1, 3) for i in range(5)]
    assert a != [data.sample(i, 1, 1, 3) for i in range(5)]
    for ex, pos, negs in a:
        assert pos in ex.positives and len(negs) == 3 and not set(negs) & set(ex.positives)


def test_mined_negatives_drop_every_relevant_document():
    run = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.5}, "q2": {"x": 1.0}}
    qrels = {"q1": {"a": 1, "c": 2, "z": 0}, "q2": {"x": 1}}
    out = sample_negatives(run, qrels, sample=5, seed=0)
    assert out == [Example("q1", ("a", "c"), ("b", "d"))]            # q2 has no negative left
    assert sample_negatives(run, qrels, sample=1, seed=0) == sample_negatives(run, qrels, sample=1, seed=0)


# ------------------------------------------------------------------------------------ training
def test_training_learns_and_writes_an_encoder_folder(tiny):
    s, path = spec(tiny, "learn", train={"max_steps": 40})
    proc = train_cli(path)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    out = Path(s["out"])
    for f in ("config.json", "zsdr.json", "model.safetensors", "tokenizer.json", "training.json", "loss.png"):
        assert (out / f).is_file(), f
    assert json.loads((out / "zsdr.json").read_text())["pooling"] == "mean"
    log = losses(out)
    assert [r["step"] for r in log] == list(range(1, 41))
    first, last = sum(r["loss"] for r in log[:5]) / 5, sum(r["loss"] for r in log[-5:]) / 5
    assert last < first * 0.9, (first, last)          # chance level is log(16) = 2.77
    assert not Path(s["checkpoint_dir"]).exists()          # removed once the model is written


def test_a_triples_epoch_counts_every_query_negative_pair_and_epoch_size_sets_the_length(tiny):
    """`examples: triples` (the official warmups' epoch: one line of the triples file an example) trains through
    the one trainer; `epoch_size` (ANCE's expected_train_size) sets the length as the official t_total does."""
    from zsdr.data.training_set import TrainingSet

    negatives = tiny / "data" / "src" / "negatives.jsonl"
    pairs = len(TrainingSet(tiny / "data" / "src", negatives, unit="triples"))
    queries = len(TrainingSet(tiny / "data" / "src", negatives))
    assert pairs > queries
    s, path = spec(tiny, "triples", examples="triples", loss="pairwise_nll",
                   train={"max_steps": None, "epochs": 2, "epoch_size": 100, "batch_size": 8})
    proc = train_cli(path)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    info = json.loads((Path(s["out"]) / "training.json").read_text())
    assert info["examples"] == pairs
    assert [r["step"] for r in losses(s["out"])][-1] == 2 * (100 // 8)   # epochs x (epoch_size // global batch)


def test_sigkill_then_rerun_gives_bit_identical_weights(tiny):
    steps = {"max_steps": 60, "save_every": 10, "batch_size": 16}
    ref, ref_path = spec(tiny, "straight", train=steps)
    assert train_cli(ref_path).wait(timeout=300) == 0
    s, path = spec(tiny, "killed", train=steps)
    proc = train_cli(path)
    ckpt = Path(s["checkpoint_dir"]) / "step-000000030"
    deadline = time.time() + 300
    while not ckpt.is_dir() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "training ended before it could be killed half-way"
    assert not Path(s["out"]).exists()
    rerun = train_cli(path)
    assert rerun.wait(timeout=300) == 0, rerun.stderr.read()
    a, b = weights(ref["out"]), weights(s["out"])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["step"] for r in losses(s["out"])] == list(range(1, 61))
    assert [r["loss"] for r in losses(s["out"])] == [r["loss"] for r in losses(ref["out"])]


def test_a_step_limit_trains_the_first_steps_of_the_full_runs_schedule(tiny):
    """training.step_limit (a smoke run): the run stops after the limit, its warmup and decay those of the whole
    run, so its losses and learning rates are the whole run's first steps."""
    whole, whole_path = spec(tiny, "whole", train={"max_steps": 12})
    cut, cut_path = spec(tiny, "cut", train={"max_steps": 12, "step_limit": 5})
    for path in (whole_path, cut_path):
        proc = train_cli(path)
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    a, b = losses(whole["out"]), losses(cut["out"])
    assert [r["step"] for r in b] == [1, 2, 3, 4, 5]
    assert [(r["loss"], r["lr"]) for r in b] == [(r["loss"], r["lr"]) for r in a[:5]]
    assert b[-1]["lr"] > 0 and a[-1]["lr"] == 0          # the cut run stops mid-decay
    info = json.loads((Path(cut["out"]) / "training.json").read_text())
    assert info["steps"] == 5 and info["train"]["step_limit"] == 5


def test_changed_settings_do_not_resume_a_stale_checkpoint(tiny):
    s, path = spec(tiny, "stale", train={"max_steps": 8})
    proc = train_cli(path)
    assert proc.wait(timeout=300) == 0
    ckpt = Path(s["checkpoint_dir"])
    ckpt.mkdir(parents=True)
    (ckpt / "step-000000004").mkdir()
    (ckpt / "step-000000004" / "trainer_state.json").write_text('{"step": 4, "fingerprint": "other", "world": 1}')
    s2, path2 = spec(tiny, "stale", train={"max_steps": 8})
    assert train_cli(path2).wait(timeout=300) == 0
    assert [r["step"] for r in losses(s2["out"])] == list(range(1, 9))


@pytest.fixture(scope="module")
def two_processes(tiny):
    """A training in two gloo processes of 4 examples a step each, launched as a training job launches it, alone
    (its log: two.log)."""
    two, _ = spec(tiny, "two", train={"batch_size": 4})
    launch(two, processes=2, spec_path=tiny / "two-launch.json", log_file=tiny / "two.log")
    return two


def test_two_gloo_processes_match_one_process(tiny, two_processes):
    """Same global batch (1 x 8 vs 2 x 4): the cross-device gather and the loss reduction are exact."""
    one, one_path = spec(tiny, "one", train={"batch_size": 8})
    assert train_cli(one_path).wait(timeout=300) == 0
    two = two_processes
    a, b = losses(one["out"]), losses(two["out"])
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 13))
    for ra, rb in zip(a, b):
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-5, abs=1e-6)
    assert json.loads((Path(two["out"]) / "training.json").read_text())["processes"] == 2
    # the progress lines of the training processes land in the job's log, once (the main process's)
    progress = [line for line in (tiny / "two.log").read_text().splitlines() if "train two: step" in line]
    assert len(progress) == 12 and "step 12/12 (100%)" in progress[-1], progress
    wa, wb = weights(one["out"]), weights(two["out"])
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)


def test_gradient_accumulation_equals_the_larger_batch(tiny):
    """Pairwise NLL over own negatives: 2 micro-batches of 4 make the same update as one batch of 8."""
    one, one_path = spec(tiny, "acc1", loss="pairwise_nll", train={"batch_size": 8, "max_steps": 6})
    two, two_path = spec(tiny, "acc2", loss="pairwise_nll", train={"batch_size": 4, "grad_accum": 2, "max_steps": 6})
    for path in (one_path, two_path):
        proc = train_cli(path)
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    for ra, rb in zip(losses(one["out"]), losses(two["out"])):
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-5, abs=1e-6)
    wa, wb = weights(one["out"]), weights(two["out"])
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)


# ---------------------------------------------------------------------------- stopping on a signal
SIGNAL_STEPS = {"max_steps": 40, "save_every": 1000, "log_every": 1}  # no periodic checkpoint in 40 steps


def wait_until_logged(proc, log_file, steps=1, timeout=120):
    """Wait until the run has logged ``steps`` steps (it is past them); False when it ended first."""
    log_file, deadline = Path(log_file), time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        if log_file.is_file() and len(log_file.read_text().splitlines()) >= steps:
            return True
        time.sleep(0.005)
    return False


def checkpoint_steps(ckpt_dir):
    return sorted(int(p.name.split("-")[1]) for p in Path(ckpt_dir).glob("step-*") if p.is_dir())


def same_model(a, b):
    return (Path(a) / "model.safetensors").read_bytes() == (Path(b) / "model.safetensors").read_bytes()


@pytest.fixture(scope="module")
def uninterrupted(tiny):
    ref, path = spec(tiny, "signal-ref", train={**SIGNAL_STEPS, "snapshot_every": 5})
    proc = train_cli(path)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()
    return ref


def test_stop_signals_are_recorded_then_the_previous_handlers_restored():
    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        signals = StopSignals()
        signals.install()
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGTERM)          # recorded, not fatal
        assert signals.received == signal.SIGTERM and seen == []
        signals.restore()
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1], ids=lambda s: s.name)
def test_signal_checkpoints_the_step_exits_128_plus_signal_and_the_rerun_resumes_exactly(tiny, uninterrupted, sig):
    s, path = spec(tiny, f"signal-{sig.name}", train={**SIGNAL_STEPS, "snapshot_every": 5})
    proc = train_cli(path)
    ckpt = Path(s["checkpoint_dir"])
    assert wait_until_logged(proc, ckpt / "train_log.jsonl", steps=6), "training ended before step 6"
    proc.send_signal(sig)
    code, err = proc.wait(timeout=120), proc.stderr.read()
    assert code == 128 + sig, err                     # 143 for SIGTERM, 138 for SIGUSR1
    [step] = checkpoint_steps(ckpt)                   # written because of the signal: save_every is 1000
    assert 6 <= step < 40, step
    assert f"stopped by {sig.name} at step {step}: checkpoint written, the next run resumes from it" in err, err
    assert not Path(s["out"]).exists()
    staged = json.loads((ckpt / "snapshots" / "snapshots.json").read_text())
    assert [e["step"] for e in staged] == list(range(5, step + 1, 5))   # the checkpoint implies its snapshots
    rerun = train_cli(path)
    assert rerun.wait(timeout=300) == 0, rerun.stderr.read()
    assert same_model(s["out"], uninterrupted["out"])
    snaps = json.loads((Path(s["out"]) / "snapshots" / "snapshots.json").read_text())
    assert [e["step"] for e in snaps] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert all(same_model(Path(s["out"]) / e["path"], Path(uninterrupted["out"]) / e["path"]) for e in snaps)
    assert [r["step"] for r in losses(s["out"])] == list(range(1, 41))
    assert [r["loss"] for r in losses(s["out"])] == [r["loss"] for r in losses(uninterrupted["out"])]


def test_signal_without_a_checkpoint_dir_exits_without_a_model(tiny):
    s, path = spec(tiny, "signal-nockpt", checkpoint_dir=None, train=SIGNAL_STEPS)
    proc = train_cli(path)
    beside = Path(s["out"]).parent / f".{Path(s['out']).name}.train_log.jsonl"  # the log waits beside the output
    assert wait_until_logged(proc, beside), "training ended before step 1"
    proc.send_signal(signal.SIGTERM)
    code, err = proc.wait(timeout=120), proc.stderr.read()
    assert code == 143, err
    assert re.search(r"stopped by SIGTERM at step \d+: no checkpoint directory, the next run starts over", err), err
    assert not Path(s["out"]).exists()


def torchrun_cli(path, stderr):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "zsdr", "train", str(path), "--quiet", "--cpu"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=stderr)


def workers_by_rank(parent: int) -> dict[int, int]:
    """The pids of a torchrun's worker processes, by their RANK."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            env = dict(kv.split("=", 1) for kv in (d / "environ").read_bytes().decode(errors="replace").split("\0")
                       if "=" in kv)
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if "RANK" in env:
            found[int(env["RANK"])] = int(d.name)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds torchrun's workers through /proc")
def test_sigterm_to_one_of_two_gloo_processes_stops_both_at_the_same_step(tiny):
    s, path = spec(tiny, "signal-two", train={**SIGNAL_STEPS, "batch_size": 4})
    err_file = tiny / "signal-two.err"
    with open(err_file, "w") as fh:
        proc = torchrun_cli(path, fh)
        assert wait_until_logged(proc, Path(s["checkpoint_dir"]) / "train_log.jsonl"), "training ended before step 1"
        workers = workers_by_rank(proc.pid)
        assert sorted(workers) == [0, 1], workers
        os.kill(workers[1], signal.SIGTERM)            # rank 1 only; rank 0 learns it at the step boundary
        code = proc.wait(timeout=120)
    err = err_file.read_text()
    assert code != 0, err
    [step] = checkpoint_steps(s["checkpoint_dir"])
    assert 1 <= step < 40, step
    stopped = re.findall(r"stopped by SIGTERM at step (\d+): checkpoint written, the next run resumes from it "
                         r"\[process (\d) of 2\]", err)
    assert sorted(stopped) == [(str(step), "0"), (str(step), "1")], err
    assert not Path(s["out"]).exists()
    ref, ref_path = spec(tiny, "signal-two-ref", train={**SIGNAL_STEPS, "batch_size": 4})
    for run in (path, ref_path):                        # the rerun resumes; the reference runs straight
        with open(err_file, "w") as fh:
            rerun = torchrun_cli(run, fh)
            assert rerun.wait(timeout=300) == 0, err_file.read_text()
    assert same_model(s["out"], ref["out"])
    assert [r["step"] for r in losses(s["out"])] == list(range(1, 41))


def test_launch_outlives_a_signal_to_the_whole_job_until_the_workers_checkpoint(tiny):
    """As SLURM does before a time limit (`--signal=USR1@300`, to the job's steps) or at preemption (SIGTERM):
    the signal to every process of the job (launcher, torchrun's agent and both workers). The launching
    process stays until the workers have written their checkpoint, then fails with their status; the
    checkpoint is there for the retry, which resumes from it. SIGUSR1, the harder of the two: the launcher and
    the workers treat both alike (StopSignals, test_signal_checkpoints_the_step_...), but torchrun's agent
    passes SIGUSR1 on only when told to (TORCHRUN_SIGNALS), SIGTERM by default."""
    sig = signal.SIGUSR1
    name = f"signal-launch-{sig.name}"
    s, path = spec(tiny, name, train={**SIGNAL_STEPS, "batch_size": 4})
    log_file = tiny / f"{name}.log"
    code = ("import json, sys; from zsdr.training.launch import launch; "
            f"launch(json.load(open({str(path)!r})), processes=2, spec_path={str(tiny / (name + '.run.json'))!r}, "
            f"log_file={str(log_file)!r})")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert wait_until_logged(proc, Path(s["checkpoint_dir"]) / "train_log.jsonl"), "training ended before step 1"
    os.killpg(proc.pid, sig)
    err = proc.communicate(timeout=180)[1]
    assert proc.returncode == 128 + sig, err
    assert f"{sig.name} received: waiting for the training processes to checkpoint and stop" in err, err
    [step] = checkpoint_steps(s["checkpoint_dir"])
    # the workers' stop, repeated where the job's console sees it (their own lines go to the log file)
    assert (f"stopped by {sig.name} at step {step}: checkpoint written, the next run resumes from it "
            "[2 of 2 processes]") in err, err
    stopped = re.findall(rf"stopped by {sig.name} at step (\d+): checkpoint written", log_file.read_text())
    assert stopped == [str(step)] * 2, log_file.read_text()[-3000:]
    assert not Path(s["out"]).exists()
    # the retry: both processes resume from that checkpoint and say so in the job's log (INFO, --log-info)
    rerun = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    resumed = re.findall(r"resuming from \S+ \(step (\d+) of \d+\)", log_file.read_text())
    assert resumed == [str(step)] * 2, log_file.read_text()[-3000:]
    assert Path(s["out"]).exists()


# ------------------------------------------------------------------------------------------ schedules
@pytest.mark.parametrize("schedule", ["linear", "constant"])
def test_episodes_at_offsets_follow_one_run_wide_schedule(schedule):
    """``schedule_offset`` (ANCE's `episode_schedule: continuous`): three runs of 40 steps at offsets
    0, 40, 80 of a 120-step schedule take exactly the learning rates of one 120-step run; without the
    offset each run restarts its warmup (the `restart` form)."""
    from zsdr.training.config import TrainConfig, build_schedule

    def lrs(offset, steps, horizon):
        param = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([param], lr=1.0)
        sched = build_schedule(opt, TrainConfig(max_steps=steps, lr=1.0, schedule=schedule, warmup_steps=30,
                                                schedule_steps=horizon, schedule_offset=offset), steps)
        out = []
        for _ in range(steps):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return out

    whole = lrs(0, 120, 120)
    episodes = [x for k in range(3) for x in lrs(40 * k, 40, 120)]
    assert episodes == pytest.approx(whole, abs=1e-12)
    restarted = [x for _ in range(3) for x in lrs(0, 40, 120)]
    assert restarted[40] == 0.0 and episodes[40] > 0.9 * (1.0 if schedule == "constant" else 80 / 90)
    with pytest.raises(ValueError, match="schedule_offset"):
        TrainConfig(max_steps=1, schedule_offset=-1)


def test_fused_adamw_takes_the_same_steps():
    """The fused AdamW a CUDA run builds updates the weights as the default one does (checked on the CPU)."""
    from zsdr.training.config import TrainConfig, build_optimizer

    cfg = TrainConfig(batch_size=2, lr=1e-2, max_steps=3, weight_decay=0.01)
    torch.manual_seed(0)
    a = torch.nn.Linear(8, 4)
    b = torch.nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    opt_a, opt_b = build_optimizer(a.parameters(), cfg), build_optimizer(b.parameters(), cfg, fused=True)
    assert opt_b.defaults.get("fused") and not opt_a.defaults.get("fused")
    x = torch.randn(16, 8)
    for _ in range(3):
        for model, opt in ((a, opt_a), (b, opt_b)):
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)


def test_torchrun_command_one_node_standalone_several_nodes_through_srun():
    from zsdr.training.launch import first_host, torchrun_command

    one = torchrun_command(4, 1, env={})
    # --standalone: a free local rendezvous port, so two 4-process trainings share an 8-GPU node
    assert "--standalone" in one and one[one.index("--nproc_per_node") + 1] == "4"
    assert "--rdzv_endpoint" not in one and "--master_port" not in one
    env = {"SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "gpu[07-08]"}
    two = torchrun_command(4, 2, env=env, cpus=32, gpus=4)
    # one task on each node, with the node's CPUs and GPUs (a step's task gets one CPU unless it asks)
    assert two[:2] == ["srun", "--overlap"] and "--nodes=2" in two and "--ntasks=2" in two
    assert "--ntasks-per-node=1" in two and "--cpus-per-task=32" in two and "--gpus-per-task=4" in two
    assert two[two.index("--rdzv_endpoint") + 1] == "gpu07:23456" and two[two.index("--rdzv_id") + 1] == "123456"
    assert two[two.index("--nnodes") + 1] == "2" and two[two.index("--nproc_per_node") + 1] == "4"
    assert "--standalone" not in two
    assert first_host("node1,node2") == "node1" and first_host("a[3,5-7],b") == "a3"
    # the executor's multi-node job keeps only the job id: the rendezvous is on this node, which runs an agent too
    import socket

    bare = torchrun_command(4, 2, env={"SLURM_JOB_ID": "123456"})
    assert bare[bare.index("--rdzv_endpoint") + 1] == f"{socket.gethostname()}:23456"
    with pytest.raises(ValueError, match="needs a SLURM allocation of 2 nodes"):
        torchrun_command(8, 2, env={})


# What the SLURM executor's one-task step (`srun -n1 ... snakemake`) leaves in a job's environment.
STEP = {"SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_NUM_NODES": "2",
        "SLURM_NTASKS": "1", "SLURM_NPROCS": "1", "SLURM_NNODES": "1", "SLURM_STEP_NUM_NODES": "1",
        "SLURM_STEP_NUM_TASKS": "1", "SLURM_TASKS_PER_NODE": "1", "SLURM_CPUS_PER_TASK": "8", "SLURM_GPUS": "8",
        "SLURM_CPU_BIND": "quiet", "SLURM_STEP_ID": "0", "SLURM_NODELIST": "localhost", "SRUN_DEBUG": "3",
        "SBATCH_EXPORT": "ALL", "SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_CLUSTER_NAME": "c"}


def test_multi_node_launch_drops_the_executors_one_task_step_variables():
    """srun reads SLURM_NTASKS, SLURM_NNODES, SLURM_CPUS_PER_TASK ... as its own options: inherited from the
    executor's `srun -n1` step they would make the step over every node one task on one node."""
    from zsdr.training.launch import srun_environment

    env = srun_environment({**STEP, "PATH": "/bin", "OMP_NUM_THREADS": "4"})
    assert env == {"SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_JOB_NODELIST": "localhost",
                   "SLURM_JOB_NUM_NODES": "2", "SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_CLUSTER_NAME": "c",
                   "PATH": "/bin", "OMP_NUM_THREADS": "4"}


# `sinfo -h -N -n <nodes> -o "%N|%t"` of a controller that sees gpu02 dead (after FAKE_SINFO_AFTER calls).
FAKE_SINFO = """#!/bin/sh
n=$(cat "$FAKE_SINFO_CALLS" 2>/dev/null || echo 0); echo $((n + 1)) > "$FAKE_SINFO_CALLS"
if [ "$n" -lt "$FAKE_SINFO_AFTER" ]; then printf 'gpu01|mix\\ngpu02|mix\\n'; else printf 'gpu01|mix\\ngpu02|down*\\n'; fi
"""


def test_a_failed_step_over_nodes_names_the_node_it_lost(tmp_path, monkeypatch):
    """A training step over several nodes that fails names the dead node: srun's own "Node failure on" line,
    else the controller's state of the allocation's nodes, waited for (the other nodes' processes stop at
    once, the controller marks the dead node a few seconds later); else the tasks srun saw end."""
    from zsdr.training import launch as launching
    from zsdr.training.launch import step_failure

    ended = "srun: error: gpu01: task 0: Exited with exit code 1\n"
    message = step_failure("srun: error: Node failure on gpu02\n" + ended, "gpu[01-02]", 1, wait=0)
    assert message.startswith("training step failed: node gpu02 (node failure) died or stopped answering SLURM; "
                              "srun: gpu01: task 0: Exited with exit code 1"), message
    fake = tmp_path / "bin" / "sinfo"
    fake.parent.mkdir()
    fake.write_text(FAKE_SINFO)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SINFO_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("FAKE_SINFO_AFTER", "2")
    monkeypatch.setattr(launching.time, "sleep", lambda s: None)
    message = step_failure(ended, "gpu[01-02]", 1, wait=60)
    assert message.startswith("training step failed: node gpu02 (down*) died or stopped answering SLURM"), message
    assert (tmp_path / "calls").read_text().strip() == "3"
    # every node answers: the failure is the tasks' own, named by their nodes
    (tmp_path / "calls").unlink()
    monkeypatch.setenv("FAKE_SINFO_AFTER", "1000")
    monkeypatch.setattr(launching.time, "monotonic", iter(range(0, 10**6, 30)).__next__)
    assert step_failure(ended, "gpu[01-02]", 1, wait=60) == (
        "training step failed (exit status 1) on gpu[01-02]; srun: gpu01: task 0: Exited with exit code 1; the "
        "processes' checkpoints are kept: the job's retry (or SLURM's requeue) resumes from the last one")


FAKE_SRUN = """#!{python}
# srun on "nodes" of this machine: one copy of the command a task (--ntasks), each told its node, as srun does.
import json, os, subprocess, sys
args, opts = sys.argv[1:], {{}}
while args and args[0].startswith("--"):
    key, _, value = args.pop(0)[2:].partition("=")
    opts[key] = value
slurm = {{k: v for k, v in os.environ.items() if k.startswith(("SLURM_", "SRUN_", "SBATCH_"))}}
json.dump({{"options": opts, "env": slurm}}, open(os.environ["FAKE_SRUN_RECORD"], "w"))
tasks = [subprocess.Popen(args, env={{**os.environ, "SLURM_NODEID": str(i), "SLURM_PROCID": str(i)}})
         for i in range(int(opts["ntasks"]))]
sys.exit(max(t.wait() for t in tasks))
"""


def _free_rendezvous_job() -> str:
    """A job id whose rendezvous port (20000 + id % 20000) is free here."""
    import random
    import socket

    for _ in range(200):
        port = random.randrange(20000, 40000)
        with socket.socket() as sock:
            try:
                sock.bind(("localhost", port))
            except OSError:
                continue
        return str(port - 20000 + 20000 * random.randrange(1, 50))
    pytest.skip("no free port for the rendezvous")


def test_two_processes_on_each_of_two_nodes_train_as_four_on_one(tiny, tmp_path, monkeypatch):
    """A training laid out as 2 nodes x 2 processes (site.gpus_per_node) trains as the same 4 processes on one
    node: the launch on several nodes (inside the executor's one-task step) runs one srun step of a task a node,
    each a torchrun agent meeting the other through a c10d rendezvous, here two agents on this machine."""
    one, _ = spec(tiny, "node-one", train={"batch_size": 2})
    launch(one, processes=4, spec_path=tiny / "node-one.run.json", log_file=tiny / "node-one.log", threads=2)
    srun = tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text(FAKE_SRUN.format(python=sys.executable))
    srun.chmod(0o755)
    record = tmp_path / "srun.json"
    monkeypatch.setenv("PATH", f"{srun.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SRUN_RECORD", str(record))
    for key, value in {**STEP, "SLURM_JOB_ID": _free_rendezvous_job()}.items():
        monkeypatch.setenv(key, value)
    two, _ = spec(tiny, "node-two", train={"batch_size": 2})
    launch(two, processes=2, nodes=2, spec_path=tiny / "node-two.run.json", log_file=tiny / "node-two.log",
           threads=2, cpus=2, gpus=0)
    seen = json.loads(record.read_text())
    assert seen["options"] == {"overlap": "", "nodes": "2", "ntasks": "2", "ntasks-per-node": "1",
                               "kill-on-bad-exit": "1", "cpus-per-task": "2"}
    assert "SLURM_NTASKS" not in seen["env"] and "SLURM_NNODES" not in seen["env"] and "SRUN_DEBUG" not in seen["env"]
    assert seen["env"]["SLURM_JOB_NODELIST"] == "localhost"
    assert json.loads((Path(two["out"]) / "training.json").read_text())["processes"] == 4
    a, b = losses(one["out"]), losses(two["out"])
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 13))
    wa, wb = weights(one["out"]), weights(two["out"])
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _launch_in_process(path, env=None):
    """A training job's process: ``launch`` of the spec at ``path``, as the train rule's script calls it."""
    code = "import json, sys; from zsdr.training.launch import launch; launch(json.load(open(sys.argv[1])))"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-c", code, str(path)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def _holding(proc, folder, limit=120):
    """Wait until ``proc`` holds ``folder``'s checkpoint lock (its lock file names it)."""
    from zsdr.training.lock import holder

    deadline = time.time() + limit
    while holder(folder).get("pid") != proc.pid:
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() is not None else ""
        time.sleep(0.05)


def test_a_second_job_of_the_same_run_fails_naming_the_holder(tiny):
    """Two jobs of one training run (a restarted controller resubmitting a training whose job still runs):
    the second stops at once with the first's host, process and SLURM job; the first trains on undisturbed."""
    import socket

    from zsdr.training.lock import CheckpointInUse

    s, path = spec(tiny, "locked")
    first = _launch_in_process(path, {"SLURM_JOB_ID": "777"})
    _holding(first, s["checkpoint_dir"])
    os.kill(first.pid, signal.SIGSTOP)             # mid-training, for as long as the second job needs
    try:
        with pytest.raises(CheckpointInUse, match=rf"locked is in use by process {first.pid} on "
                                                  rf"{re.escape(socket.gethostname())} \(SLURM job 777, since "):
            launch(s, lock_wait=0.5)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert [r["step"] for r in losses(s["out"])] == list(range(1, 13))


def test_a_second_job_of_the_same_run_waits_for_the_first(tiny):
    """Within `lock_wait` the second job waits for the first to end, then trains the run itself, from the start
    (the first removed its checkpoints once it had written the model)."""
    import threading

    from zsdr.training.lock import holder

    s, path = spec(tiny, "waits")
    first = _launch_in_process(path)
    _holding(first, s["checkpoint_dir"])
    os.kill(first.pid, signal.SIGSTOP)
    errors = []

    def run():
        try:
            launch(s, lock_wait=300)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    second = threading.Thread(target=run)
    try:
        second.start()
        time.sleep(3)
        assert second.is_alive() and holder(s["checkpoint_dir"])["pid"] == first.pid   # waiting, not training
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read()
    second.join(timeout=300)
    assert not second.is_alive() and not errors, errors
    assert [r["step"] for r in losses(s["out"])] == list(range(1, 13))


def test_two_multi_process_trainings_run_side_by_side(tiny, two_processes):
    """Two 2-process trainings at once on one machine (two DDR jobs on one node, or profiles/local-gpu):
    each finds its own rendezvous port, and both finish with the weights of the same training run alone
    (``two_processes``)."""
    import threading

    runs, errors = [], []
    for name in ("side-a", "side-b"):
        s, _ = spec(tiny, name, train={"batch_size": 4})
        runs.append(s)

    def run(s):
        try:
            launch(s, processes=2, spec_path=tiny / f"{Path(s['out']).name}.json",
                   log_file=tiny / f"{Path(s['out']).name}.log")
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(s,)) for s in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    wa, wb, w1 = weights(runs[0]["out"]), weights(runs[1]["out"]), weights(two_processes["out"])
    assert wa.keys() == w1.keys() and all(torch.equal(wa[k], w1[k]) and torch.equal(wb[k], w1[k]) for k in w1)


def test_batch_worker_processes_train_exactly_as_the_thread(tiny):
    steps = {"max_steps": 16, "save_every": 100, "batch_size": 16}
    ref, ref_path = spec(tiny, "thread-batches", train=steps, loop={"workers": 0})
    procs, path = spec(tiny, "process-batches", train=steps, loop={"workers": 2})
    for p in (ref_path, path):
        proc = train_cli(p)
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    a, b = weights(ref["out"]), weights(procs["out"])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [r["loss"] for r in losses(procs["out"])] == [r["loss"] for r in losses(ref["out"])]
    assert [r["accuracy"] for r in losses(procs["out"])] == [r["accuracy"] for r in losses(ref["out"])]


def test_a_signal_to_the_whole_job_with_batch_workers_stops_at_a_step_and_resumes_exactly(tiny, uninterrupted):
    # SLURM signals every process of the job: the batch workers ignore it, the trainer checkpoints
    s, path = spec(tiny, "signal-workers", train={**SIGNAL_STEPS, "snapshot_every": 5}, loop={"workers": 2})
    proc = train_cli(path, warm=False, start_new_session=True)
    assert wait_until_logged(proc, Path(s["checkpoint_dir"]) / "train_log.jsonl", steps=6), "ended before step 6"
    os.killpg(proc.pid, signal.SIGUSR1)
    code, err = proc.wait(timeout=120), proc.stderr.read()
    assert code == 128 + signal.SIGUSR1, err
    assert "stopped by SIGUSR1 at step" in err and "Traceback" not in err, err
    rerun = train_cli(path)
    assert rerun.wait(timeout=300) == 0, rerun.stderr.read()
    assert same_model(s["out"], uninterrupted["out"])
    assert [r["loss"] for r in losses(s["out"])] == [r["loss"] for r in losses(uninterrupted["out"])]


# ------------------------------------------------------------------------------------------ logs
def test_progress_lines_go_to_the_job_log_at_log_every_and_not_to_the_console(tiny):
    """As a workflow job runs a training (workflow_scripts/train.py): its log gets a progress line
    every log_every steps with step/total, the loss, lr, examples/s and the ETA; the console none."""
    s, path = spec(tiny, "progress", train={"log_every": 4})
    log_file = tiny / "progress.log"
    script = ("import json, sys; from zsdr.logs import setup_logging; from zsdr.training.launch import launch; "
              "setup_logging(sys.argv[2]); launch(json.load(open(sys.argv[1])), log_file=sys.argv[2])")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", script, str(path), str(log_file)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr + log_file.read_text()
    lines = [line for line in log_file.read_text().splitlines() if "train progress: step" in line]
    assert [re.search(r"step (\d+)/12 ", line).group(1) for line in lines] == ["4", "8", "12"], lines
    assert all(" INFO zsdr.training.trainer.progress: " in line for line in lines)
    assert re.search(r"loss \d\.\d{4}, accuracy [\d.]+, lr \d\.\d\de-\d\d, [\d.]+ examples/s, ETA \d+:\d\d:\d\d$",
                     lines[0]), lines[0]
    assert "(100%)" in lines[-1] and "done in" in lines[-1]
    assert "train progress" not in proc.stderr and "train progress" not in proc.stdout


def test_progress_line_lists_each_loss_term_then_the_other_values():
    from zsdr.training.train_log import loss_terms, progress_line

    rec = {"step": 30, "epoch": 0, "loss": 0.75, "last_loss": 0.7, "lr": 2e-5, "grad_norm": 1.0,
           "examples_per_s": 512.0, "unit_accuracy": 0.5, "r1": 0.25, "r2": 0.125, "task_loss": 0.5,
           "adversarial_lambda": 0.1, "masked_tokens": 40.0, "loss_target_weak": 0.3}
    assert loss_terms([rec]) == ["r1", "r2", "task_loss", "loss_target_weak"]
    line = progress_line("dpr-berm", rec, total=120, start=20, elapsed=10.0)
    assert line == ("train dpr-berm: step 30/120 (25%), loss 0.7500 (r1 0.25, r2 0.125, task_loss 0.5, "
                    "loss_target_weak 0.3), unit_accuracy 0.5, adversarial_lambda 0.1, masked_tokens 40, "
                    "lr 2.00e-05, 512.0 examples/s, ETA 0:01:30")


def test_loss_plot_draws_each_loss_term_and_the_learning_rate_on_a_labelled_axis(tmp_path):
    from zsdr.training.train_log import loss_figure, plot_losses

    records = [{"step": s, "epoch": 0, "loss": 1.0 / s, "lr": 1e-4 * s, "examples_per_s": 100.0 + s,
                "task_loss": 0.8 / s, "r1": 0.1 / s, "r2": 0.05 / s, "unit_accuracy": 0.5} for s in range(1, 6)]
    fig = loss_figure(records, "dpr-berm")
    loss_axis, lr_axis = fig.axes
    assert [line.get_label() for line in loss_axis.get_lines()] == ["loss (total)", "task_loss", "r1", "r2"]
    assert [line.get_label() for line in lr_axis.get_lines()] == ["learning rate"]
    assert loss_axis.get_xlabel() == "step" and loss_axis.get_ylabel() == "training loss"
    assert lr_axis.get_ylabel() == "learning rate"
    assert [t.get_text() for t in loss_axis.get_legend().get_texts()] == ["loss (total)", "task_loss", "r1", "r2",
                                                                         "learning rate"]
    plot_losses(records, tmp_path / "a.png", "dpr-berm")
    plot_losses(records, tmp_path / "b.png", "dpr-berm")
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    plot_losses([], tmp_path / "empty.png")
    assert (tmp_path / "empty.png").stat().st_size > 0


def test_launch_gives_each_process_its_share_of_every_math_librarys_threads(tmp_path, monkeypatch):
    """Snakemake sets OMP_NUM_THREADS, MKL_NUM_THREADS, ... to the job's threads; each of the job's training
    processes must get its share in all of them (torch's CPU matmuls use MKL's pool: a job of 2 processes on
    2 CPUs with MKL at 2 threads each ran 4x slower)."""
    from zsdr.training.launch import THREAD_VARIABLES, launch

    for name in THREAD_VARIABLES:
        monkeypatch.setenv(name, "4")
    dump = tmp_path / "env.json"
    launcher = [sys.executable, "-c", f"import json, os, sys; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"]
    launch({"kind": "mlm", "out": str(tmp_path / "model")}, processes=2, launcher=launcher, threads=4)
    env = json.loads(dump.read_text())
    assert {name: env[name] for name in THREAD_VARIABLES} == dict.fromkeys(THREAD_VARIABLES, "2")
    assert set(THREAD_VARIABLES) >= {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"}
