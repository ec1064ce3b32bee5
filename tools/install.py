"""Install zsdr and its locked dependencies into a virtual environment (what `make install` runs).

    python tools/install.py .venv/bin/python [--extra dev] [--torch-index URL]

torch is installed first, on its own, at pyproject.toml's pin (--torch-index picks the index its wheel
comes from: the CPU or a CUDA build). Then every other package is installed exactly as the lock file
lists it — requirements/cpu.txt, or requirements/dev.txt with the `dev` extra: one version each, its
file's hash checked, no resolution (tools/lock.py writes the locks from pyproject.toml) — and zsdr
itself, editable. Another extra (no lock of its own) is resolved from pyproject.toml. Last, `python -m
zsdr.sparse.pyserini_java` adds the start-up hook that lets pyserini's own Python API start Java.

The packages are installed by uv (a pinned release, itself installed by pip into the environment): it
downloads and unpacks in parallel, about three times faster than pip on a 2-core machine. uv
reads none of pip's configuration, so the package sources pip is configured with here (index-url,
extra-index-url, find-links, constraint and cert, from pip's config files and PIP_* variables: `pip
config list`) are handed to it, and extra indexes are searched as pip searches them (every version from
every index). Where uv cannot be installed or fails, pip installs the same requirements. Nothing is
byte-compiled here: compiling all of site-packages took ~80 CPU-s on 2 cores, most of it for modules no
job imports (transformers' model families, sympy, sklearn); Python writes the bytecode of what a run
imports the first time it imports it (the Makefile lets it, where PYTHONDONTWRITEBYTECODE is set).
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


def finish(python) -> int:
    """After the packages: the start-up hook that gives pyserini's own Python API a Java it can start
    (zsdr.sparse.pyserini_java)."""
    return 0 if run([python, "-m", PYSERINI_HOOK]) else 1


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
            return finish(python)
        print("install.py: uv failed (above); installing with pip instead", file=sys.stderr, flush=True)
    pip = [python, "-m", "pip", "install", "--quiet"]
    if run(pip + torch_index + [TORCH]) and all(run(pip + step) for step in steps):
        return finish(python)
    lock = lock_file(args.extra)
    hint = (f"; where {lock.relative_to(ROOT)} lacks a wheel of this platform, relock with "
            f"`{python} tools/lock.py`" if lock else "")
    print(f"install.py: installing zsdr into {python} failed (pip's messages above){hint}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
