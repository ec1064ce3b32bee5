"""Installation files stay in step: pip pins, conda environments, Makefile/README/CI commands."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_every_dependency_is_pinned_exactly():
    project = _pyproject()
    for dep in project["dependencies"] + [d for deps in project["optional-dependencies"].values() for d in deps]:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][0-9A-Za-z.+]*", dep), dep
    assert "torch==2.13.0" in project["dependencies"]


def _pip_section(env_file: str) -> list[str]:
    env = yaml.safe_load((ROOT / "envs" / env_file).read_text())
    pip = [d for d in env["dependencies"] if isinstance(d, dict)][0]["pip"]
    return [p for p in pip if "==" in p]


def test_conda_envs_mirror_the_pins():
    base = _pyproject()["dependencies"]
    gpu = _pyproject()["optional-dependencies"]["gpu"]
    assert _pip_section("cpu.yaml") == base
    assert _pip_section("java.yaml") == base
    assert _pip_section("gpu.yaml") == [d for d in base if not d.startswith("faiss-cpu")] + gpu


def test_readme_opens_with_the_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text().splitlines()
    block = readme[readme.index("```bash") + 1: readme.index("```")]
    assert [line.split("#")[0].strip() for line in block] == ["make run", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)
    makefile = (ROOT / "Makefile").read_text()
    assert "snakemake --cores all results/table1.csv" in makefile


def test_every_module_command_is_listed_for_fast_start_up():
    """`zsdr <command>` imports only its own module when MODULE_COMMANDS lists the command; a command
    missing there still works, but only after every command module has been imported."""
    import argparse
    import importlib

    from zsdr.cli import BUILTIN_COMMANDS, MODULE_COMMANDS

    for module in dict.fromkeys(MODULE_COMMANDS.values()):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register_cli(sub)
        for name in sub.choices:
            assert name not in BUILTIN_COMMANDS
            assert MODULE_COMMANDS.get(name) == module, f"zsdr {name} ({module}) is missing from MODULE_COMMANDS"


# ---------------------------------------------------------------------------------------------
# The lock files (requirements/*.txt, written by tools/lock.py)

REQUIREMENTS = ROOT / "requirements"


def _name(requirement: str) -> str:
    """A distribution name as indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[=<>!~ ;\[]", requirement, maxsplit=1)[0]).lower()


def _lock(name: str) -> dict[str, tuple[str, list[str]]]:
    """{package: (version, [hashes])} of a lock file."""
    entries, current = {}, None
    for line in (REQUIREMENTS / name).read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9][A-Za-z0-9_.\-]*)==(\S+)", line):
            current = _name(m.group(1))
            assert current not in entries, f"{name}: {current} twice"
            entries[current] = (m.group(2), [])
        elif current and (h := re.search(r"--hash=(sha256:[0-9a-f]{64})", line)):
            entries[current][1].append(h.group(1))
        elif line.strip() and not line.lstrip().startswith("#"):
            raise AssertionError(f"requirements/{name}: unexpected line {line!r}")
    return entries


def _pins(deps: list[str]) -> dict[str, str]:
    return {_name(d): d.split("==", 1)[1] for d in deps}


def test_the_locks_agree_with_pyproject():
    """Every pin of pyproject.toml is locked at its version (make lock rewrites the locks after a change),
    the CPU lock is the dev lock less the dev extra's own packages, every locked package has a hash,
    and torch is left to install.py (its wheel is the machine's: CPU or CUDA)."""
    project = _pyproject()
    core, dev = _pins(project["dependencies"]), _pins(project["optional-dependencies"]["dev"])
    cpu_lock, dev_lock = _lock("cpu.txt"), _lock("dev.txt")
    for lock_name, lock, pins in (("cpu.txt", cpu_lock, core), ("dev.txt", dev_lock, {**core, **dev})):
        for package, version in pins.items():
            if package == "torch":
                assert package not in lock, f"requirements/{lock_name} locks torch: install.py installs it first"
                continue
            assert package in lock, (f"{package}=={version} (pyproject.toml) is not in "
                                     f"requirements/{lock_name}: make lock")
            assert lock[package][0] == version, (f"requirements/{lock_name} has {package}=={lock[package][0]}, "
                                                 f"pyproject.toml pins {version}: make lock")
        assert all(hashes for _, hashes in lock.values()), [p for p, (_, h) in lock.items() if not h]
    for package, (version, _) in cpu_lock.items():
        assert dev_lock.get(package, (None,))[0] == version, (package, version, dev_lock.get(package))


def test_the_locks_keep_the_constraints():
    """requirements/constraints.txt bounds packages zsdr does not pin (pyserini's openai): both locks
    keep them, and what zsdr does not import is no dependency of its own."""
    from packaging.requirements import Requirement

    constraints = [Requirement(line.split("#")[0].strip())
                   for line in (REQUIREMENTS / "constraints.txt").read_text().splitlines()
                   if line.split("#")[0].strip()]
    assert [str(c) for c in constraints] == ["openai<2.34"]
    for name in ("cpu.txt", "dev.txt"):
        lock = _lock(name)
        for c in constraints:
            assert c.specifier.contains(lock[_name(c.name)][0]), f"requirements/{name}: {c.name} breaks {c}"
    assert "openai" not in _pins(_pyproject()["dependencies"])
    assert "sentence-transformers" in _pins(_pyproject()["dependencies"])  # the README loads models with it


def test_the_locks_name_no_machine():
    """Package sources are the installer's business (pip's configuration): a lock names none."""
    for name in ("cpu.txt", "dev.txt"):
        text = (REQUIREMENTS / name).read_text()
        assert not re.search(r"file:|https?:|--index-url|--find-links|(?<![\w.])/\w", text), name


def test_the_installed_packages_need_nothing_the_lock_lacks():
    """A lock is installed with --no-deps: every requirement of every locked package that is installed
    here (its metadata, markers evaluated) must be locked too, or be torch."""
    from importlib import metadata

    from packaging.requirements import Requirement

    lock = _lock("dev.txt")
    missing = []
    for package in lock:
        try:
            dist = metadata.distribution(package)
        except metadata.PackageNotFoundError:
            continue
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker and not req.marker.evaluate({"extra": ""}):
                continue
            if _name(req.name) not in lock and _name(req.name) != "torch":
                missing.append(f"{package} needs {req}")
    assert not missing, missing
