"""The registry of base losses: a recipe's ``loss:`` value -> its class in :mod:`zsdr.training.base_losses`.

The registry reads the package's modules with :mod:`ast` instead of importing them, so the planner
(which derives a training job's code from the loss it names) knows every loss, its module, its
one-line summary and whether it has per-query values without importing torch. A loss is found by
the literal class attributes ``name`` and ``summary`` of a class in one of the package's modules;
:func:`loss_class` imports it when a job trains with it. Adding a loss is one module in the package
and its value in the config schema's ``recipes.<name>.loss`` enum (tests/test_losses.py checks the
two agree).
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "zsdr.training.base_losses"
FOLDER = Path(__file__).resolve().parent / "base_losses"


@dataclass(frozen=True)
class LossInfo:
    """What the registry knows of a loss without importing it."""

    name: str
    target: str        # "module:Class"
    summary: str
    per_query: bool    # per-query values a reducing term can weight

    @property
    def module(self) -> str:
        return self.target.split(":")[0]


def _literal(node: ast.ClassDef, attr: str):
    for stmt in node.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == attr for t in targets) and stmt.value is not None:
            try:
                return ast.literal_eval(stmt.value)
            except ValueError:
                raise RuntimeError(f"{node.name}.{attr} must be a literal (the loss registry reads it without "
                                   "importing the module)") from None
    return None


def discover(folder: Path = FOLDER, package: str = PACKAGE) -> dict[str, LossInfo]:
    """Every loss class of the modules in ``folder`` (the package ``package``): its ``name`` -> what it is.
    RuntimeError when two classes take the same name or a loss lacks its summary."""
    found: dict[str, LossInfo] = {}
    for path in sorted(folder.glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = f"{package}.{path.stem}"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            name = _literal(node, "name")
            if name is None:
                continue
            summary = _literal(node, "summary")
            if not isinstance(name, str) or not isinstance(summary, str) or not summary.strip():
                raise RuntimeError(f"{module}.{node.name}: a loss needs a string name and a one-line summary")
            if name in found:
                raise RuntimeError(f"loss {name!r} is defined twice: {found[name].target} and {module}:{node.name}")
            found[name] = LossInfo(name, f"{module}:{node.name}", " ".join(summary.split()),
                                   bool(_literal(node, "per_query")))
    return found


LOSSES: dict[str, LossInfo] = discover()


def loss_info(name: str) -> LossInfo:
    """What loss ``name`` is; ValueError naming the known losses otherwise."""
    if name not in LOSSES:
        raise ValueError(f"loss {name!r}: expected one of {', '.join(LOSSES)}")
    return LOSSES[name]


def loss_class(name: str) -> type:
    """The class of loss ``name`` (its module imported)."""
    info = loss_info(name)
    module, cls = info.target.split(":")
    found = getattr(importlib.import_module(module), cls)
    if getattr(found, "name", None) != name:  # pragma: no cover - discover() read the same source
        raise RuntimeError(f"{info.target} does not define loss {name!r}")
    return found
