"""Install zsdr and its locked dependencies into a virtual environment (what `make install` runs).

    python tools/install.py .venv/bin/python [--extra dev] [--torch-index URL]

torch is installed first, on its own, at pyproject.toml's pin (--torch-index picks the index its wheel
comes from: the CPU or a CUDA build). Then every other package is installed exactly as the lock file
lists it — requirements/cpu.txt, or requirements/dev.txt with the `dev` extra: one version each, its
file's hash checked, no resolution (tools/lock.py writes the locks from pyproject.toml) — and zsdr
itself, editable. Another extra (no lock of its own) is resolved from pyproject.toml. Last, `python -m
zsdr.sparse.pyserini_java` adds the start-up hook that lets pyserini's own Python API start Java.

The packages are installed by uv (a pinned release, itself installed by pip into the environment): it
downloads in parallel, about three times faster than pip on a 2-core machine. uv reads none of pip's
configuration, so the package sources pip is configured with here (index-url, extra-index-url,
find-links, constraint and cert, from pip's config files and PIP_* variables: `pip config list`) are
handed to it, and extra indexes are searched as pip searches them (every version from every index).
Where uv cannot be installed or fails, pip installs the same requirements.

Last, the modules zsdr's jobs, Snakemake and (with `dev`) the tests import are byte-compiled, by importing
them once with bytecode writing on (:data:`IMPORTED`): no job compiles torch or transformers again where
Python runs with PYTHONDONTWRITEBYTECODE. Only those: byte-compiling all of site-packages (uv's
--compile-bytecode) took ~80 CPU-s on 2 cores, most of it for modules nothing here imports (transformers'
hundreds of model families, sympy, sklearn); this step ~20. A module imported later for the first time
(a model family a config names) is compiled by Python on that first import, as any module is.
"""

import argparse
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

UV = "uv==0.9.30"
ROOT = Path(__file__).resolve().parent.parent
# torch is installed first, on its own, so that --torch-index can pick its wheel (pyproject.toml's pin)
TORCH = next(d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
             if d.startswith("torch=="))
LOCKS = {(): ROOT / "requirements" / "cpu.txt", ("dev",): ROOT / "requirements" / "dev.txt"}
CONSTRAINTS = ROOT / "requirements" / "constraints.txt"   # bounds on what zsdr does not import
PYSERINI_HOOK = "zsdr.sparse.pyserini_java"
# What is imported once, bytecode writing on, after the install: every zsdr module (with everything it imports:
# torch, transformers, pandas, faiss, ...), what the warm server preloads for the jobs, the model families the
# configs build and load, and what Snakemake imports for a local or SLURM run and its report; `dev` adds the
# test tools. A name that does not import here (an optional package missing) is skipped. (Not pyserini or
# jnius: importing jnius starts a Java VM; zsdr.sparse.lucene starts it with Anserini's classes when a job
# needs it.)
IMPORTED = {
    (): ["zsdr.*", "zsdr.warm:PRELOAD", "snakemake.cli", "snakemake.api", "snakemake.workflow", "snakemake.dag",
         "snakemake.jobs", "snakemake.scheduling.job_scheduler", "snakemake.executors.local",
         "snakemake.executors.dryrun", "snakemake.persistence", "snakemake.shell", "snakemake.script",
         "snakemake.report.html_reporter", "snakemake_executor_plugin_slurm", "snakemake_executor_plugin_slurm_jobstep",
         "transformers.models.t5.modeling_t5", "transformers.models.t5.tokenization_t5",
         "transformers.models.bert.tokenization_bert", "transformers.models.roberta.tokenization_roberta",
         "transformers.models.distilbert.modeling_distilbert", "transformers.models.electra.modeling_electra",
         "transformers.generation.utils", "peft", "sentence_transformers", "ranx", "scipy.stats", "sklearn.cluster",
         "matplotlib.pyplot"],
    ("dev",): ["pytest", "xdist", "xdist.plugin", "xdist.remote", "_pytest.python", "_pytest.assertion.rewrite",
               "_pytest.fixtures", "_pytest.monkeypatch", "_pytest.tmpdir", "_pytest.capture", "snakefmt"],
}
COMPILE = """
import importlib, pkgutil, sys
sys.dont_write_bytecode = False
done = failed = 0
for name in sys.argv[1:]:
    if name.endswith(".*"):
        package = importlib.import_module(name[:-2])
        names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
                 if not m.name.endswith(".__main__")]   # (a command line: runs when imported)
    elif ":" in name:
        module, attribute = name.split(":")
        names = list(getattr(importlib.import_module(module), attribute))
    else:
        names = [name]
    for module in names:
        try:
            importlib.import_module(module)
            done += 1
        except BaseException:   # an optional package missing, or a module that needs a GPU
            failed += 1
print(f"byte-compiled the imports of {done} modules ({failed} skipped): {len(sys.modules)} modules", flush=True)
"""


def lock_file(extras) -> Path | None:
    """The lock of an install with these extras (None: resolve them from pyproject.toml)."""
    return LOCKS.get(tuple(sorted(set(extras))))


def requirements(extras) -> list[list[str]]:
    """The installer's arguments of each step after torch: the lock's packages, then zsdr itself."""
    lock = lock_file(extras)
    target = f"{ROOT}[{','.join(extras)}]" if extras else str(ROOT)
    if lock is None:
        return [["--constraint", str(CONSTRAINTS), "-e", target]]
    return [["--require-hashes", "--no-deps", "-r", str(lock)], ["--no-deps", "-e", str(ROOT)]]


def pip_sources(python):
    """uv's options for the package sources of pip's configuration (environment variables first)."""
    return uv_options(subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout)


def uv_options(pip_config):
    """uv's options and environment for the output of `pip config list` (`section.option='value'` lines)."""
    found = {}
    rank = {":env:": 0, "install": 1, "global": 2}
    for line in pip_config.splitlines():
        key, sep, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if not sep or section not in rank:
            continue
        value = value.strip().strip("'\"")
        if name not in found or rank[section] < found[name][0]:
            found[name] = (rank[section], value)
    args, env = [], {}
    if "index-url" in found:
        args += ["--index-url", found["index-url"][1]]
    extra = found.get("extra-index-url", (0, ""))[1].split()
    for url in extra:
        args += ["--extra-index-url", url]
    for path in found.get("find-links", (0, ""))[1].split():
        args += ["--find-links", path]
    if extra or "find-links" in found:
        args += ["--index-strategy", "unsafe-best-match"]
    for path in found.get("constraint", (0, ""))[1].split():
        args += ["--constraint", path]
    if "cert" in found:
        env["SSL_CERT_FILE"] = found["cert"][1]
    return args, env


def run(cmd, env=None):
    print("+", shlex.join(cmd), flush=True)
    return subprocess.run(cmd, env={**os.environ, **(env or {})}).returncode == 0


def sources_for(step: list[str], sources: list[str]) -> list[str]:
    """The package sources of one install step: a lock's (--require-hashes) without pip's constraints,
    which uv refuses there unless pinned with == (the lock was compiled within them: tools/lock.py)."""
    if "--require-hashes" not in step:
        return sources
    kept, skip = [], False
    for arg in sources:
        if skip:
            skip = False
        elif arg == "--constraint":
            skip = True
        else:
            kept.append(arg)
    return kept


def ensure_uv(python) -> Path | None:
    """The environment's uv, installed by pip if it is not there yet (None: pip could not)."""
    uv = Path(python).parent / "uv"
    return uv if uv.exists() or run([python, "-m", "pip", "install", "--quiet", UV]) else None


def compile_imports(python, extras) -> bool:
    """Byte-compile what zsdr's jobs, Snakemake and the extras' tools import (:data:`IMPORTED`), by importing
    it once with bytecode writing on (whatever PYTHONDONTWRITEBYTECODE says here)."""
    names = [n for key in ((), *((e,) for e in extras)) for n in IMPORTED.get(key, [])]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    print("+ byte-compiling what zsdr imports", flush=True)
    return subprocess.run([python, "-c", COMPILE, *names], env={**env, "HF_HUB_OFFLINE": "1"}).returncode == 0


def finish(python, extras=()) -> int:
    """After the packages: the start-up hook that gives pyserini's own Python API a Java it can start
    (zsdr.sparse.pyserini_java), then the byte-compiled imports."""
    return 0 if run([python, "-m", PYSERINI_HOOK]) and compile_imports(python, extras) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python", help="the virtual environment's python")
    parser.add_argument("--extra", action="append", default=[], help="an optional-dependency group of pyproject.toml")
    parser.add_argument("--torch-index", default="", help="the index torch's wheel comes from (e.g. the CPU wheels)")
    args = parser.parse_args(argv)
    python = args.python
    steps = requirements(args.extra)
    torch_index = ["--index-url", args.torch_index] if args.torch_index else []

    uv = ensure_uv(python)
    if uv is not None:
        sources, env = pip_sources(python)
        uv_install = [str(uv), "pip", "install", "--quiet", "--python", python]
        torch_sources = sources
        if torch_index:  # the given index replaces pip's own for torch
            i = sources.index("--index-url") if "--index-url" in sources else None
            torch_sources = sources if i is None else sources[:i] + sources[i + 2:]
        if (run(uv_install + torch_sources + torch_index + [TORCH], env)
                and all(run(uv_install + sources_for(step, sources) + step, env) for step in steps)):
            return finish(python, args.extra)
        print("install.py: uv failed (above); installing with pip instead", file=sys.stderr, flush=True)
    pip = [python, "-m", "pip", "install", "--quiet"]
    if run(pip + torch_index + [TORCH]) and all(run(pip + step) for step in steps):
        return finish(python, args.extra)
    lock = lock_file(args.extra)
    hint = (f"; where {lock.relative_to(ROOT)} lacks a wheel of this platform, relock with "
            f"`{python} tools/lock.py`" if lock else "")
    print(f"install.py: installing zsdr into {python} failed (pip's messages above){hint}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
