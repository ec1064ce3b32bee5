"""Helpers the Snakefile uses to build its targets (no Snakemake import here).

:func:`code_files` maps ``zsdr`` module names to their source files so a rule can list the
library code it runs among its inputs: Snakemake's code trigger only sees a rule's own script,
and an edit to, say, a loss function must re-plan exactly the jobs that use it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent


def code_files(*modules: str, root: str | Path | None = None) -> list[str]:
    """Source files of the given ``zsdr`` modules (a package stands for all its files), sorted.

    Paths are relative to ``root`` (the workflow folder) when given, so the DAG is location-free.
    """
    files: set[Path] = set()
    for name in modules:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise ValueError(f"no module named {name!r}")
        origin = Path(spec.origin)
        if origin.name == "__init__.py" and spec.submodule_search_locations:
            files.update(origin.parent.rglob("*.py"))
        else:
            files.add(origin)
    out = []
    for f in sorted(files):
        out.append(str(f.relative_to(Path(root).resolve())) if root else str(f))
    return out
