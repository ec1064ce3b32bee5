"""The library's layering, read from the source: every ``zsdr`` import (module level and inside
functions, relative ones resolved) goes down or sideways in :data:`LAYERS`, never along an arrow of
:data:`NEVER`, names no private (``_name``) symbol of another module, and the imports form no cycle
(function-level ones included); and no module is longer than :data:`MAX_LINES` (docs/layout.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "zsdr"

# Lowest first: the order of ../shared/DESIGN.md ("data <- sparse/models <- losses <- training/pretrain <-
# retrieval <- evaluation <- tables"), below it the modules every layer uses, above it the planner and,
# on top, the command line. A module may import from its own layer or any layer below it, never above.
# A name stands for that module or package and everything under it, except ``zsdr`` itself (the
# package's ``__init__``), which stands for that file alone: a new top-level module needs a layer.
LAYERS: list[tuple[str, ...]] = [
    ("zsdr", "zsdr.io", "zsdr.files", "zsdr.argtypes", "zsdr.logs", "zsdr.devices", "zsdr.distributed", "zsdr.warm",
     "zsdr.warm_client", "zsdr.batching"),
    ("zsdr.data", "zsdr.provenance"),
    ("zsdr.sparse", "zsdr.models"),
    ("zsdr.losses",),
    ("zsdr.training", "zsdr.pretrain"),
    ("zsdr.retrieval",),
    ("zsdr.evaluation",),
    ("zsdr.tables", "zsdr.regressions"),
    ("zsdr.plan", "zsdr.workflow", "zsdr.docs", "zsdr.readme_table"),
    ("zsdr.cli", "zsdr.__main__"),
]

# Arrows the order above allows but the design does not: (importer, imported, why). What both sides
# need lives below both (the training set in zsdr.data.training_set, BERM's unit pooling in
# zsdr.losses.semantic_units, COCO's span files in zsdr.data.spans, a model folder's check in zsdr.models.checkpoints).
NEVER: list[tuple[str, str, str]] = [
    ("zsdr.evaluation", "zsdr.training", "evaluation measures models and runs, whatever trained them"),
    ("zsdr.evaluation", "zsdr.pretrain", "evaluation measures models and runs, whatever trained them"),
    ("zsdr.losses", "zsdr.models", "a loss is a function of tensors and the labels it is given"),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of the longest layer name that is ``module`` or a package above it."""
    best, found = -1, None
    for i, names in enumerate(LAYERS):
        for name in names:
            under = name != "zsdr" and module.startswith(name + ".")
            if (module == name or under) and len(name) > best:
                best, found = len(name), i
    if found is None:
        raise AssertionError(f"{module} belongs to no layer: add it to LAYERS")
    return found


def _is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


class Import:
    """One imported zsdr module, with the names taken from it and whether it runs at import time."""

    def __init__(self, module: str, names: list[str], line: int, top: bool):
        self.module, self.names, self.line, self.top = module, names, line, top


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not _is_package(importer):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str) -> list[Import]:
    """Every import of a zsdr module in ``module``; ``top`` when it runs as the module is imported
    (module body, class bodies, module-level if/try; not function bodies or ``TYPE_CHECKING``)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))
    found: list[Import] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_top = top
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                child_top = False
            elif isinstance(child, ast.If) and _type_checking(child):
                child_top = False
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name == "zsdr" or alias.name.startswith("zsdr."):
                        found.append(Import(alias.name, [], child.lineno, top))
            elif isinstance(child, ast.ImportFrom):
                target = _resolve(module, child)
                if target == "zsdr" or target.startswith("zsdr."):
                    names = [a.name for a in child.names]
                    # ``from zsdr.pkg import mod`` imports the module zsdr.pkg.mod.
                    subs = [n for n in names if f"{target}.{n}" in MODULES]
                    rest = [n for n in names if n not in subs]
                    for n in subs:
                        found.append(Import(f"{target}.{n}", [], child.lineno, top))
                    if rest or not subs:
                        found.append(Import(target, rest, child.lineno, top))
            visit(child, child_top)

    visit(tree, True)
    return found


IMPORTS: dict[str, list[Import]] = {m: imports_of(m) for m in MODULES}


def test_every_module_has_a_layer_and_every_import_a_module():
    for module, found in IMPORTS.items():
        layer_of(module)
        for imp in found:
            assert imp.module in MODULES, f"{module}:{imp.line} imports {imp.module}, which is not in src/zsdr"


def _label(module: str) -> str:
    return "/".join(name.removeprefix("zsdr.") for name in LAYERS[layer_of(module)])


def test_no_import_goes_up_a_layer():
    upward = [
        f"{module}:{imp.line} ({_label(module)}) imports {imp.module} ({_label(imp.module)})"
        for module, found in IMPORTS.items()
        for imp in found
        if imp.module in MODULES and layer_of(imp.module) > layer_of(module)
    ]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def _under(module: str, name: str) -> bool:
    return module == name or module.startswith(name + ".")


def test_no_import_goes_along_a_never_arrow():
    broken = [
        f"{module}:{imp.line} imports {imp.module}: {why}"
        for module, found in IMPORTS.items()
        for imp in found
        for importer, imported, why in NEVER
        if _under(module, importer) and _under(imp.module, imported)
    ]
    assert not broken, "imports the design forbids:\n" + "\n".join(broken)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_module_imports_private_names_of_another():
    private = []
    for module, found in IMPORTS.items():
        for imp in found:
            if imp.module == module:
                continue
            parts = imp.module.split(".")
            names = [n for n in imp.names if _private(n)]
            if any(_private(p) for p in parts[1:]) or names:
                private.append(f"{module}:{imp.line} imports {', '.join(names) or 'the module'} from {imp.module}")
    assert not private, "private names used across modules:\n" + "\n".join(private)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_no_import_cycles():
    # function-level imports included: a circle through a function is a circle of the design all the same
    graph = {m: {i.module for i in found if i.module in MODULES and i.module != m} for m, found in IMPORTS.items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    "importer, source, want",
    [
        ("zsdr.tables.figures", ast.ImportFrom(module="inputs", names=[], level=1), "zsdr.tables.inputs"),
        ("zsdr.training", ast.ImportFrom(module="data", names=[], level=1), "zsdr.training.data"),
        ("zsdr.training.base_losses", ast.ImportFrom(module="tasks", names=[], level=2), "zsdr.training.tasks"),
        ("zsdr.tables.figures", ast.ImportFrom(module=None, names=[], level=2), "zsdr"),
    ],
)
def test_relative_imports_resolve(importer, source, want):
    assert _resolve(importer, source) == want


def test_the_layers_catch_what_they_should():
    assert layer_of("zsdr.tables.figures") > layer_of("zsdr.evaluation.metrics") > layer_of("zsdr.training.tasks")
    assert layer_of("zsdr.cli") > layer_of("zsdr.workflow") == layer_of("zsdr.plan.core")
    never = {(a, b) for a, b, _ in NEVER}
    assert ("zsdr.evaluation", "zsdr.training") in never and ("zsdr.losses", "zsdr.models") in never
    assert _under("zsdr.training.berm_term", "zsdr.training") and not _under("zsdr.trainingx", "zsdr.training")
    assert layer_of("zsdr.losses.coco") < layer_of("zsdr.training.distributed")
    assert layer_of("zsdr.sparse.lucene") == layer_of("zsdr.models.encoder")
    with pytest.raises(AssertionError, match="no layer"):
        layer_of("zsdr.somewhere_new")
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# docs/layout.md: "no module over 600 lines: a large topic is a package or a few modules by concern". The rule
# holds for the library (src/zsdr); tests/, benchmarks/ and workflow_scripts/ are not held to it.
MAX_LINES = 600


def over_max_lines(modules: dict[str, Path], limit: int = MAX_LINES) -> list[str]:
    """``module: N lines`` for every module of ``modules`` longer than ``limit`` lines (as ``wc -l`` counts)."""
    counts = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules.items()}
    return [f"{name}: {counts[name]} lines" for name, path in modules.items() if counts[name] > limit]


def test_no_module_over_the_line_limit():
    long = over_max_lines(MODULES)
    assert not long, (f"modules over {MAX_LINES} lines (docs/layout.md: split a large topic into a package or a few "
                      "modules by concern):\n" + "\n".join(long))


def test_the_line_limit_catches_a_long_module(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    found = over_max_lines({"short": tmp_path / "short.py", "long": tmp_path / "long.py"})
    assert found == [f"long: {MAX_LINES + 1} lines"]
