"""Regenerate the lock files from pyproject.toml (what `make lock` runs).

    python tools/lock.py [.venv/bin/python]

requirements/dev.txt locks an install of zsdr with its `dev` extra, requirements/cpu.txt one without
it: every package at one version with the hashes of its files, for the interpreter given (CPython 3.11
on Linux x86-64 for this project's machines). `make install` and `make install-dev` install exactly
those (tools/install.py). The packages are resolved by uv with the package sources pip is configured
with and the bounds of requirements/constraints.txt; cpu.txt is resolved within dev.txt's versions, so
the two agree. torch is left out of both: its wheel differs per machine (CPU or CUDA build) and
install.py installs it first, at pyproject.toml's pin. tests/test_packaging.py checks that the locks
and pyproject.toml agree.
"""

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements"
CONSTRAINTS = REQUIREMENTS / "constraints.txt"
UNLOCKED = ("torch",)   # installed first by install.py, from the index that fits the machine
HEADER = """\
# The {what} install of zsdr, locked: generated from pyproject.toml by tools/lock.py (`make lock`);
# `make {target}` installs exactly these packages with these hashes (tools/install.py), torch first
# at pyproject.toml's pin. Do not edit by hand: change pyproject.toml or constraints.txt and rerun.
"""
LOCKS = {"dev.txt": (["dev"], "dev", "install-dev"), "cpu.txt": ([], "CPU", "install")}

_spec = importlib.util.spec_from_file_location("install", ROOT / "tools" / "install.py")
install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install)


def compile_lock(uv: Path, python: str, name: str, sources: list[str], env: dict[str, str],
                 within: Path | None = None) -> str:
    """The text of requirements/``name``; ``within``: a lock whose versions it must keep."""
    extras, what, target = LOCKS[name]
    cmd = [str(uv), "pip", "compile", "--quiet", "--python", python, "--generate-hashes", "--no-header",
           "--constraint", str(CONSTRAINTS.relative_to(ROOT)), *sources, "pyproject.toml"]
    cmd += [a for extra in extras for a in ("--extra", extra)]
    cmd += [a for package in UNLOCKED for a in ("--no-emit-package", package)]
    if within is not None:
        cmd += ["--constraint", str(within.relative_to(ROOT))]
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env})
    if proc.returncode != 0:
        sys.exit(f"lock.py: compiling requirements/{name} failed:\n{proc.stderr}")
    return HEADER.format(what=what, target=target) + proc.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("python", nargs="?", default=sys.executable, help="the virtual environment's python")
    args = parser.parse_args(argv)
    uv = install.ensure_uv(args.python)
    if uv is None:
        sys.exit("lock.py: uv could not be installed (pip's messages above)")
    sources, env = install.pip_sources(args.python)
    # both are compiled before either is replaced: a failure leaves the old pair as it was
    dev = REQUIREMENTS / ".dev.txt.new"
    try:
        dev.write_text(compile_lock(uv, args.python, "dev.txt", sources, env))
        cpu = compile_lock(uv, args.python, "cpu.txt", sources, env, within=dev)
        (REQUIREMENTS / ".cpu.txt.new").write_text(cpu.replace(dev.name, "dev.txt"))
        dev.replace(REQUIREMENTS / "dev.txt")
        (REQUIREMENTS / ".cpu.txt.new").replace(REQUIREMENTS / "cpu.txt")
    finally:
        for path in (dev, REQUIREMENTS / ".cpu.txt.new"):
            path.unlink(missing_ok=True)
    for name in LOCKS:
        count = sum(1 for line in (REQUIREMENTS / name).read_text().splitlines() if "==" in line)
        print(f"wrote requirements/{name}: {count} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
