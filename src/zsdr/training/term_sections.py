"""The recipe section of a registered loss term (:data:`zsdr.training.term_registry.TERMS`), read from its
module's source without importing it: what the config schema offers under ``recipes.<name>.<section>``
(:func:`zsdr.workflow.config_schema`).

Planning code, kept apart from the registry that training jobs import at load time, so that editing it
changes no job's code stamp.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

from zsdr.training.term_registry import TERMS

# Python annotations of a section's fields -> JSON schema types (anything else: no type check).
_JSON_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "None": "null",
               "list": "array", "dict": "object"}


class TermSourceError(RuntimeError):
    """A registered term whose section cannot be read from its module's source."""


def _source(module: str) -> tuple[Path, ast.Module]:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise TermSourceError(f"cannot find module {module!r} ({exc})") from None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise TermSourceError(f"cannot find the source of module {module!r}")
    path = Path(spec.origin)
    return path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _imported(tree: ast.Module, name: str) -> str | None:
    """The module ``name`` is imported from (``from M import name``), if it is."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if any((a.asname or a.name) == name for a in node.names):
                return node.module
    return None


def _attr(cls: ast.ClassDef, attr: str) -> ast.expr | None:
    for stmt in cls.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == attr for t in targets) and stmt.value is not None:
            return stmt.value
    return None


def _find(module: str, name: str, seen: int = 0) -> tuple[str, list[str], ast.ClassDef]:
    """``(module, source lines, class)`` of class ``name`` as seen from ``module`` (following one import)."""
    path, tree = _source(module)
    found = _classes(tree).get(name)
    if found is not None:
        return module, path.read_text(encoding="utf-8").splitlines(), found
    origin = _imported(tree, name)
    if origin is None or seen > 3:
        raise TermSourceError(f"{module} defines no class {name!r}")
    return _find(origin, name, seen + 1)


def _class_attr(module: str, cls_name: str, attr: str) -> tuple[str, ast.expr | None]:
    """The expression class ``cls_name`` (or a base class of it found in the sources) gives ``attr``."""
    module, _, cls = _find(module, cls_name)
    value = _attr(cls, attr)
    if value is not None:
        return module, value
    for base in cls.bases:
        if isinstance(base, ast.Name):
            try:
                return _class_attr(module, base.id, attr)
            except TermSourceError:
                continue
    return module, None


def _json_type(annotation: ast.expr) -> list[str] | None:
    names = []
    for part in ast.unparse(annotation).replace("Optional[", "None | ").strip("]").split("|"):
        part = part.strip().split("[")[0]
        if part not in _JSON_TYPES:
            return None
        names.append(_JSON_TYPES[part])
    return sorted(set(names))


def _comment(lines: list[str], stmt: ast.stmt) -> str:
    tail = lines[stmt.end_lineno - 1][stmt.end_col_offset:]
    return tail.split("#", 1)[1].strip() if "#" in tail else ""


def section_schema(name: str, where: str | None = None) -> dict[str, Any]:
    """The JSON schema of the recipe section of registered term ``name``, read from its module's source
    without importing it: an object of the fields of the term's ``config_class`` (a dataclass), each with
    the JSON type of its annotation, its default and its line's comment as the description; no other key.
    :class:`TermSourceError` naming the term when its source does not say."""
    target = where or TERMS[name]
    module, _, cls_name = target.partition(":")
    try:
        summary_module, summary = _class_attr(module, cls_name, "summary")
        config_module, config = _class_attr(module, cls_name, "config_class")
        if not isinstance(config, ast.Name):
            raise TermSourceError(f"{target} sets no `config_class = <dataclass>`")
        config_module, lines, dataclass = _find(config_module, config.id)
    except TermSourceError as exc:
        raise TermSourceError(f"loss term {name!r} ({target}): {exc}") from None
    properties: dict[str, Any] = {}
    for stmt in dataclass.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        if ast.unparse(stmt.annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        field: dict[str, Any] = {}
        types = _json_type(stmt.annotation)
        if types:
            field["type"] = types[0] if len(types) == 1 else types
        if stmt.value is not None:
            try:
                field["default"] = ast.literal_eval(stmt.value)
            except ValueError:
                pass
        comment = _comment(lines, stmt)
        if comment:
            field["description"] = comment
        properties[stmt.target.id] = field
    try:
        text = ast.literal_eval(summary) if summary is not None else ""
    except ValueError:
        text = ""
    return {
        "type": "object",
        "additionalProperties": False,
        "description": f"loss term `{name}` ({target}){': ' + text if text else ''}; keys: the fields of "
                       f"{config_module}.{dataclass.name}",
        "properties": properties,
    }
