"""Install zsdr and its pinned dependencies into a virtual environment (what `make install` runs).

    python tools/install.py .venv/bin/python [--extra dev] [--torch-index URL]

The packages are installed by uv (a pinned release, itself installed by pip into the environment): it
resolves, downloads and byte-compiles in parallel, about three times faster than pip on a 2-core machine
(`make install`: ~40 s against ~2 min). uv reads none of pip's configuration, so the package sources
pip is configured with here (index-url, extra-index-url, find-links, constraint and cert, from pip's
config files and PIP_* variables: `pip config list`) are handed to it, and extra indexes are searched
as pip searches them (every version from every index). Where uv cannot be installed or fails, pip
installs the same requirements. Byte-compiled files are written at install time, so that no job
compiles torch or transformers again where Python runs with PYTHONDONTWRITEBYTECODE.
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python", help="the virtual environment's python")
    parser.add_argument("--extra", action="append", default=[], help="an optional-dependency group of pyproject.toml")
    parser.add_argument("--torch-index", default="", help="the index torch's wheel comes from (e.g. the CPU wheels)")
    args = parser.parse_args(argv)
    python = args.python
    target = f"{ROOT}[{','.join(args.extra)}]" if args.extra else str(ROOT)
    torch_index = ["--index-url", args.torch_index] if args.torch_index else []

    uv = Path(python).parent / "uv"
    if uv.exists() or run([python, "-m", "pip", "install", "--quiet", UV]):
        sources, env = pip_sources(python)
        uv_install = [str(uv), "pip", "install", "--quiet", "--python", python, "--compile-bytecode"]
        torch_sources = sources
        if torch_index:  # the given index replaces pip's own for torch
            i = sources.index("--index-url") if "--index-url" in sources else None
            torch_sources = sources if i is None else sources[:i] + sources[i + 2:]
        if (run(uv_install + torch_sources + torch_index + [TORCH], env)
                and run(uv_install + sources + ["-e", target], env)):
            return 0
        print("install.py: uv failed (above); installing with pip instead", file=sys.stderr, flush=True)
    pip = [python, "-m", "pip", "install", "--quiet"]
    if run(pip + torch_index + [TORCH]) and run(pip + ["-e", target]):
        return 0
    print(f"install.py: installing {target} into {python} failed (pip's messages above)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
