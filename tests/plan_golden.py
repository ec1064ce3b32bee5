"""The full planned job list of a config, for the golden plan tests.

    python tests/plan_golden.py mini|small|paper [--write]

prints (or, with --write, stores under tests/golden/) every job `snakemake -n --forceall` plans for
`results/all` at that scale: its rule, wildcards, params, resources, inputs (a code stamp as the source
files it lists), outputs, threads and priority, one JSON object per line, sorted. A refactor of the planning code must leave these lists unchanged.

:func:`plan` also plans from another working directory or through another Snakefile (one that imports
this workflow as a module); files of the checkout, which such a plan names by absolute path, are
listed relative to the checkout, so every plan of the same config reads the same.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
CONFIGS = {"mini": [], "small": ["configs/small.yaml"], "paper": ["configs/paper.yaml"]}
TARGET = "results/all"
"""The plan's target: every table and figure (under the scale's own folder, paths.root: small/, paper/)."""
ROOTS = {"mini": "", "small": "small/", "paper": "paper/"}
PLANNED_AS = {"datasets": {"missing": "plan"}}
"""The command line's --config of every plan here: the four bring-your-own sets of the paper scale (BioASQ,
Signal-1M, TREC-NEWS, Robust04) are not in this checkout, and a plan that needs them stops unless told to plan
their jobs anyway (config datasets.missing)."""


def _plain(value):
    """A JSON-able copy of a params/resources value (callables and objects by their type name)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Path):
        return str(value)
    return f"<{type(value).__name__}>"


def _named(namedlist) -> dict:
    items = dict(namedlist.items())
    unnamed = [v for i, v in enumerate(namedlist) if v not in items.values()] if not items else []
    return {**{k: _plain(v) for k, v in items.items()}, **({"_": _plain(unnamed)} if unnamed else {})}


def _in_checkout(path: str) -> str:
    """A path of the checkout relative to it (a plan made elsewhere names the checkout's files by absolute
    path); any other path as it is."""
    if Path(path).is_absolute() and Path(path).resolve().is_relative_to(ROOT):
        return str(Path(path).resolve().relative_to(ROOT))
    return path


def _code_expanded(inputs, workdir: Path = ROOT) -> list[str]:
    """A job's inputs with each code stamp replaced by the source files it lists (what the job runs)."""
    from zsdr.plan.code import STAMPS, stamp_files

    stamps = (Path(workdir) / STAMPS).resolve()
    out = []
    for f in map(str, inputs):
        out += stamp_files(workdir / f) if f.startswith(STAMPS + "/") else [f]
    # a stamp made elsewhere lists the registry views beside it (.code/entries/) by absolute path
    return [f"{STAMPS}/{Path(f).resolve().relative_to(stamps)}"
            if Path(f).is_absolute() and Path(f).resolve().is_relative_to(stamps) else _in_checkout(f) for f in out]


def plan(scale: str, *, snakefile: Path = ROOT / "Snakefile", workdir: Path = ROOT,
         target: str | None = None, configfiles: tuple[Path, ...] = (), compared: bool = False) -> list[str]:
    """The planned jobs of one scale, as sorted JSON lines (``snakefile``: this workflow's, or one that
    imports it as a module; ``workdir``: the working directory)."""
    # The Snakefile sets variables for its jobs (ZSDR_DEBUG, HF_HUB_OFFLINE, ...) in this process's environment:
    # put it back afterwards, or a test that runs `zsdr` in the same process later sees them (ZSDR_DEBUG=1
    # turns its one-line errors into tracebacks).
    saved = dict(os.environ)
    try:
        return _plan(scale, snakefile, workdir, target or ROOTS[scale] + TARGET, configfiles, compared)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def planned_outputs(snakefile: Path, workdir: Path, target: str) -> list[tuple[str, bool]]:
    """``(output, is a folder)`` of every job `snakemake -n --forceall TARGET` plans in ``workdir`` (the mini
    scale), in the order of the plan."""
    saved = dict(os.environ)
    try:
        with _dag("mini", snakefile, workdir, target) as workflow:
            return [(str(f), bool(f.is_directory)) for job in workflow.dag.jobs for f in job.output]
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _dag(scale: str, snakefile: Path, workdir: Path, target: str, configfiles: tuple[Path, ...] = ()):
    """The Snakemake workflow of a scale with every job of ``target`` planned (``--forceall``)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        OutputSettings,
        ResourceSettings,
    )

    with SnakemakeApi(OutputSettings(quiet={"all"})) as api:
        wf = api.workflow(
            resource_settings=ResourceSettings(cores=2),
            config_settings=ConfigSettings(configfiles=[ROOT / c for c in CONFIGS[scale]] + list(configfiles),
                                           config=dict(PLANNED_AS)),
            snakefile=Path(snakefile),
            workdir=Path(workdir),
        )
        dag_api = wf.dag(DAGSettings(targets={target}, forceall=True))
        workflow = wf._workflow
        workflow.dag_settings = dag_api.dag_settings
        workflow._prepare_dag(forceall=True, ignore_incomplete=True, lock_warn_only=True, nolock=True)
        workflow._build_dag()
        yield workflow


def _plan(scale: str, snakefile: Path, workdir: Path, target: str, configfiles: tuple[Path, ...] = (),
          compared: bool = False) -> list[str]:
    with _dag(scale, snakefile, workdir, target, configfiles) as workflow:
        workflow.dag.update_priority()
        lines = []
        for job in workflow.dag.jobs:
            if compared:
                lines.append(json.dumps({"rule": job.rule.name, "wildcards": dict(job.wildcards_dict),
                                         "params": compared_params(job)}, sort_keys=True))
                continue
            resources = {
                k: _plain(v) for k, v in job.resources.items() if k not in ("_cores", "_nodes", "tmpdir")
            }
            lines.append(
                json.dumps(
                    {
                        "rule": job.rule.name,
                        "wildcards": dict(job.wildcards_dict),
                        "output": sorted(str(f) for f in job.output),
                        "input": sorted(_code_expanded(job.input, Path(workdir))),
                        "params": _named(job.params),
                        "resources": resources,
                        "threads": job.threads,
                        "priority": job.priority,
                    },
                    sort_keys=True,
                )
            )
    return sorted(lines)


def compared_params(job) -> list[str]:
    """What Snakemake records of a job's params and compares to plan it again (its own serializer)."""
    from snakemake.persistence import PersistenceBase

    return sorted(p for p in (PersistenceBase._serialize_param_builtin(None, v) for v in job.non_derived_params)
                  if isinstance(p, str))


def golden_path(scale: str) -> Path:
    return GOLDEN / f"plan-{scale}.jsonl.gz"


def main(argv: list[str]) -> None:
    """``scale [--write] [--compared] [--target TARGET] [--configfile FILE ...]``: ``--compared`` prints, per job, the
    params Snakemake compares for reruns instead of the golden line; ``--target``: the jobs of that target only."""
    scale = argv[0]
    extra = tuple(Path(a) for a in argv[argv.index("--configfile") + 1:]) if "--configfile" in argv else ()
    target = argv[argv.index("--target") + 1] if "--target" in argv else None
    lines = plan(scale, configfiles=extra, compared="--compared" in argv, target=target)
    if "--write" in argv:
        GOLDEN.mkdir(exist_ok=True)
        with gzip.open(golden_path(scale), "wt", encoding="utf-8", compresslevel=9) as f:
            # mtime-free gzip keeps the file's bytes a function of its content
            f.write("\n".join(lines) + "\n")
        print(f"{golden_path(scale)}: {len(lines)} jobs")
    else:
        sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
