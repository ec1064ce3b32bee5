"""A job's start-up, cold (`python <script>`, as without zsdr.warm) against warm (forked by zsdr.warm).

    .venv/bin/python benchmarks/warm_start.py [--jobs 8]

The job is what a mini encode or training job does before and around its work: import torch and
transformers, build the tiny BERT of config.yaml from its config, encode 32 short texts, write the
vectors. Each way runs ``--jobs`` jobs one after another through the same command line Snakemake runs
(bash, then `python <script>`; warm: behind zsdr.warm's client prefix, with the server loaded once
beforehand, as the Snakefile starts it at the start of a run). It prints seconds per job (wall clock on
an otherwise idle machine, which for these one-thread jobs is their CPU time) for both, the ratio, and
the server's own loading time, which a run pays once.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

JOB = """
import sys
import torch
from transformers import BertConfig, BertModel

torch.manual_seed(0)
model = BertModel(BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=256)).eval()
with torch.no_grad():
    vectors = model(input_ids=torch.randint(0, 1000, (32, 24))).last_hidden_state[:, 0]
torch.save(vectors, sys.argv[0] + ".pt")
"""


class Shell:
    value = "set -euo pipefail; "

    @classmethod
    def prefix(cls, value):
        cls.value = value


def run_jobs(folder: Path, n: int, env: dict) -> float:
    start = time.perf_counter()
    for i in range(n):
        script = folder / f"job{i}.py"
        script.write_text(JOB)
        subprocess.run(["bash", "-c", f"{Shell.value}{sys.executable} {script}"], env={**env, "OMP_NUM_THREADS": "1"},
                       check=True)
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    args = parser.parse_args()
    from zsdr.warm import start_server, stop_server

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cold = run_jobs(folder, args.jobs, env)
        os.environ.update(PYTHONPATH=env["PYTHONPATH"])
        start = time.perf_counter()
        warm = start_server(Shell, ROOT / "src" / "zsdr" / "warm_client.py", log=str(folder / "warm.log"))
        while not os.path.exists(os.environ["ZSDR_WARM_SOCKET"]):
            if warm["process"].poll() is not None:
                sys.exit((folder / "warm.log").read_text())
            time.sleep(0.01)
        loading = time.perf_counter() - start
        try:
            hot = run_jobs(folder, args.jobs, {**os.environ})
        finally:
            stop_server(warm)
        log = (folder / "warm.log").read_text()
    assert f"{args.jobs} jobs started warm, 0 cold" in log, log
    print(f"{'way':<6} {'s/job':>8}")
    print(f"{'cold':<6} {cold:>8.3f}")
    print(f"{'warm':<6} {hot:>8.3f}")
    print(f"warm start: {cold / hot:.1f}x faster per job ({cold - hot:.2f} s less); "
          f"the server loads once in {loading:.1f} s")


if __name__ == "__main__":
    main()
