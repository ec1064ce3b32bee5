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
