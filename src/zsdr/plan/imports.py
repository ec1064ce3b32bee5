"""The ``zsdr`` modules a job runs, read from the code itself (:mod:`zsdr.plan.code` stamps them).

A rule lists the ``zsdr`` modules its job runs; :func:`import_closure` adds every ``zsdr`` module
those import when they are loaded, so the job's code inputs are exactly the files whose edit can
change what it computes, and an edit to any of them re-plans the job.

Only imports executed at module level are followed: the top-level statements of a file, the
branches of top-level ``if`` / ``try`` / ``with`` / loop statements and class bodies (all run at
import), but not ``if TYPE_CHECKING:`` blocks and not function bodies. A function-level import is
how the library keeps a rule precise: the trainer imports the loss module a recipe names when it
runs, and the planner lists that loss module only for the trainings that use it.

Loading ``a.b.c`` also runs the ``__init__.py`` of ``a`` and ``a.b``. Such a parent is part of the
closure only when it imports something itself (a docstring-only ``__init__.py`` cannot change a
result); a package that is imported for its own names (``from a.b import name`` with ``name`` not a
submodule) is always part of it.

Each source file is parsed once per content: its imports are kept by the SHA-256 of its bytes, in
memory (re-read when its modification time or size changes) and on disk for the next process
(``.cache/plan-imports.json`` beside the source folder); that SHA-256 is also what a stamp lists
(:func:`file_sha256`). Closures are memoised by the tuple of module names, re-checked against the files
and folders they were computed from, so planning thousands of jobs costs a few ``stat`` calls each.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2]
"""The folder that holds the ``zsdr`` package (``src``)."""

PACKAGE = "zsdr"
"""The package whose modules are followed; imports of anything else are ignored."""

_Stamp = tuple[int, int]


@dataclass(frozen=True)
class _ImportStatement:
    """One module-level import: ``import module`` (``names`` empty, ``level`` 0) or
    ``from <level dots>module import names``."""

    level: int
    module: str
    names: tuple[str, ...]
    is_from: bool


@dataclass(frozen=True)
class _Parsed:
    """What planning needs from a source file: its module-level imports."""

    imports: tuple[_ImportStatement, ...]

    @property
    def imports_anything(self) -> bool:
        """Whether the file imports any module at load time (``__future__`` does not count)."""
        return any(
            not (i.is_from and i.level == 0 and i.module == "__future__") for i in self.imports
        )


_parsed: dict[str, tuple[_Stamp, _Parsed]] = {}
_closures: dict[
    tuple[tuple[str, ...], str, str, str], tuple[tuple[str, ...], tuple[tuple[str, _Stamp], ...]]
] = {}
"""Memoised closures: (modules, root, source, package) -> (files, stamps of what they were computed from)."""
_digests: dict[str, tuple[_Stamp, str]] = {}
"""SHA-256 of the files read: path -> (modification time and size, digest)."""


def _stamp(path: str) -> _Stamp | None:
    """The modification time and size of ``path`` (None when it does not exist)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``<module>.TYPE_CHECKING``: a block only static type checkers run."""
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _load_time_imports(body: Sequence[ast.stmt]) -> Iterator[_ImportStatement]:
    """The import statements of ``body`` that run when the module is loaded."""
    for node in body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield _ImportStatement(0, alias.name, (), False)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            yield _ImportStatement(node.level, node.module or "", names, True)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _load_time_imports(node.body)
            yield from _load_time_imports(node.orelse)
        elif isinstance(node, (ast.Try, ast.TryStar)):
            yield from _load_time_imports(node.body)
            for handler in node.handlers:
                yield from _load_time_imports(handler.body)
            yield from _load_time_imports(node.orelse)
            yield from _load_time_imports(node.finalbody)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _load_time_imports(node.body)
        elif isinstance(node, (ast.For, ast.While)):
            yield from _load_time_imports(node.body)
            yield from _load_time_imports(node.orelse)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                yield from _load_time_imports(case.body)


class _ImportsCache:
    """The module-level imports of source files by the SHA-256 of their content, kept on disk between
    processes in ``<source's parent>/.cache/plan-imports.json``: every Snakemake start plans every job's
    code inputs, and parsing the ~150 source files took ~0.35 s of its ~3.5 s of CPU. Content-addressed,
    so an edit is a new entry and a copy of the checkout reads the same ones; an unreadable or damaged
    file is an empty cache, and one that cannot be written is no cache (planning parses as before)."""

    VERSION = 1
    LIMIT = 5000  # entries kept: past it, only this process's (old versions of edited files go)

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, list] = {}
        self.used: set[str] = set()
        self.dirty = False
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") == self.VERSION and isinstance(data.get("files"), dict):
                self.entries = data["files"]
        except (OSError, ValueError, AttributeError):
            pass

    def get(self, digest: str) -> _Parsed | None:
        raw = self.entries.get(digest)
        if raw is None:
            return None
        try:
            parsed = _Parsed(tuple(_ImportStatement(int(level), str(module), tuple(map(str, names)), bool(is_from))
                                   for level, module, names, is_from in raw))
        except (TypeError, ValueError):
            return None
        self.used.add(digest)
        return parsed

    def put(self, digest: str, parsed: _Parsed) -> None:
        self.entries[digest] = [[i.level, i.module, list(i.names), i.is_from] for i in parsed.imports]
        self.used.add(digest)
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        entries = self.entries
        if len(entries) > self.LIMIT:
            entries = {k: v for k, v in entries.items() if k in self.used}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"version": self.VERSION, "files": entries}), encoding="utf-8")
            os.replace(tmp, self.path)  # atomic: planners running side by side each write a whole file
        except OSError:
            try:
                tmp.unlink()
            except OSError:
                pass


_imports_caches: dict[str, _ImportsCache] = {}


def _imports_cache(source: str) -> _ImportsCache:
    cache = _imports_caches.get(source)
    if cache is None:
        cache = _imports_caches[source] = _ImportsCache(Path(source).parent / ".cache" / "plan-imports.json")
    return cache


def _parse(path: str, cache: _ImportsCache | None = None) -> tuple[_Stamp, _Parsed]:
    """The module-level imports of the source file at ``path``, parsed once per version of it (and,
    with ``cache``, once per content across processes)."""
    st = os.stat(path)
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _parsed.get(path)
    if cached is not None and cached[0] == stamp:
        return cached
    with open(path, "rb") as f:
        data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    _digests[path] = (stamp, digest)
    parsed = cache.get(digest) if cache is not None else None
    if parsed is None:
        parsed = _Parsed(tuple(_load_time_imports(ast.parse(data, filename=path).body)))
        if cache is not None:
            cache.put(digest, parsed)
    entry = (stamp, parsed)
    _parsed[path] = entry
    return entry


class _Closure:
    """One closure computation: the files reached and the stamps of everything it looked at."""

    def __init__(self, source: Path, package: str) -> None:
        self.source = str(source)
        self.package = package
        self.files: set[str] = set()
        self.stamps: dict[str, _Stamp] = {}
        self.pending: list[tuple[str, str, bool]] = []  # (module, file, is a package) to follow
        self.located: dict[str, tuple[str, bool] | None] = {}  # what locate found, its folders stamped then

    def ours(self, name: str) -> bool:
        """Whether ``name`` is the followed package or one of its modules."""
        return name == self.package or name.startswith(self.package + ".")

    def locate(self, name: str) -> tuple[str, bool] | None:
        """The source file of module ``name`` and whether it is a package (None: no such module).

        The folder looked in is stamped, so a module created there later is seen on the next call (of
        :func:`import_closure`; within one computation each name is looked up once: every module's parent
        packages are asked for again and again).
        """
        if name in self.located:
            return self.located[name]
        found = self.located[name] = self._locate(name)
        return found

    def _locate(self, name: str) -> tuple[str, bool] | None:
        base = os.path.join(self.source, *name.split("."))
        parent = os.path.dirname(base)
        if parent not in self.stamps:
            # A folder that does not exist is not stamped: creating it changes its own parent folder,
            # stamped when the package above was located.
            stamp = _stamp(parent)
            if stamp is not None:
                self.stamps[parent] = stamp
        init = os.path.join(base, "__init__.py")
        if os.path.isfile(init):
            return init, True
        if base not in self.stamps:
            stamp = _stamp(base)  # a folder without __init__.py: one may be added to it
            if stamp is not None:
                self.stamps[base] = stamp
        if os.path.isfile(base + ".py"):
            return base + ".py", False
        return None

    def parsed(self, path: str) -> _Parsed:
        """The parsed file at ``path``, stamped so an edit to it is seen on the next call."""
        stamp, parsed = _parse(path, _imports_cache(self.source))
        self.stamps[path] = stamp
        return parsed

    def add(self, name: str) -> None:
        """Module ``name`` is loaded: its file, its parents and what it imports are in the closure."""
        found = self.locate(name)
        if found is None:
            return
        path, is_package = found
        if path not in self.files:
            self.files.add(path)
            self.pending.append((name, path, is_package))
        self.add_parents(name)

    def add_parents(self, name: str) -> None:
        """The packages above ``name``, each where its ``__init__.py`` imports something."""
        parts = name.split(".")
        for i in range(1, len(parts)):
            parent = ".".join(parts[:i])
            found = self.locate(parent)
            if found is None or found[0] in self.files:
                continue
            if self.parsed(found[0]).imports_anything:
                self.files.add(found[0])
                self.pending.append((parent, found[0], True))

    def add_package(self, name: str, folder: str) -> None:
        """Every source file under a package named explicitly, with what each imports."""
        for top, dirs, names in os.walk(folder):
            dirs.sort()
            if top not in self.stamps:
                st = os.stat(top)
                self.stamps[top] = (st.st_mtime_ns, st.st_size)
            rel = os.path.relpath(top, self.source)
            prefix = ".".join(rel.split(os.sep))
            for file in sorted(names):
                if not file.endswith(".py"):
                    continue
                path = os.path.join(top, file)
                module = prefix if file == "__init__.py" else f"{prefix}.{file[:-3]}"
                if path not in self.files:
                    self.files.add(path)
                    self.pending.append((module, path, file == "__init__.py"))
        self.add_parents(name)

    def follow(self) -> None:
        """Add the ``zsdr`` modules imported at load time by every file added, transitively."""
        while self.pending:
            name, path, is_package = self.pending.pop()
            here = name if is_package else name.rpartition(".")[0]
            for statement in self.parsed(path).imports:
                base = self.absolute(statement, here)
                if base is None or not self.ours(base):
                    continue
                if not statement.is_from:
                    self.add(base)
                    continue
                for item in statement.names:
                    if item != "*" and self.locate(f"{base}.{item}") is not None:
                        self.add(f"{base}.{item}")
                    else:
                        self.add(base)

    @staticmethod
    def absolute(statement: _ImportStatement, here: str) -> str | None:
        """The absolute name a (possibly relative) import names; None when it climbs above the top."""
        if statement.level == 0:
            return statement.module
        parts = here.split(".") if here else []
        if statement.level - 1 > len(parts) - 1:
            return None
        parts = parts[: len(parts) - (statement.level - 1)]
        return ".".join([*parts, statement.module] if statement.module else parts) or None


def _compute(modules: tuple[str, ...], source: Path, package: str) -> _Closure:
    """The closure of ``modules`` computed from the files (parsed ones from the per-file cache)."""
    walk = _Closure(source, package)
    for name in modules:
        if not walk.ours(name):
            raise ValueError(f"{name!r} is not a module of the {package!r} package")
        found = walk.locate(name)
        if found is None:
            where = os.path.join(str(source), *name.split("."))
            raise ValueError(
                f"no module named {name!r} (neither {where}.py nor {where}/__init__.py exists)"
            )
        path, is_package = found
        if is_package:
            walk.add_package(name, os.path.dirname(path))
        else:
            walk.add(name)
    walk.follow()
    return walk


def import_closure(
    modules: Iterable[str],
    root: str | Path | None,
    *,
    source: str | Path = SRC,
    package: str = PACKAGE,
) -> list[str]:
    """The sorted source files of ``modules`` and of every ``package`` module they import at load time.

    A module name stands for its file; a package name stands for all the files under it, each
    with its imports. Imports are followed transitively
    through module-level statements (relative ones resolved; ``from pkg import sub`` with ``sub`` a
    submodule imports ``sub``); imports inside functions and ``if TYPE_CHECKING:`` blocks are not, and
    neither is anything outside ``package``. A parent package's ``__init__.py`` is included (and
    followed) when it imports something.

    Paths are relative to ``root`` (the workflow folder) when given, else absolute. ``source`` is the
    folder that holds ``package``. Raises ValueError naming a module that does not exist.
    """
    names = tuple(modules)
    source_path = Path(source).resolve()
    root_path = Path(root).resolve() if root is not None else None
    key = (names, str(root_path), str(source_path), package)
    cached = _closures.get(key)
    if cached is not None:
        files, stamps = cached
        stat = os.stat
        try:
            for path, (mtime, size) in stamps:
                st = stat(path)
                if st.st_mtime_ns != mtime or st.st_size != size:
                    break
            else:
                return list(files)
        except OSError:  # a file or folder it was computed from is gone
            pass
    walk = _compute(names, source_path, package)
    _imports_cache(str(source_path)).save()
    out = []
    for path in sorted(Path(f) for f in walk.files):
        out.append(str(path.relative_to(root_path)) if root_path is not None else str(path))
    _closures[key] = (tuple(out), tuple(walk.stamps.items()))
    return out


def script_modules(
    script: str | Path, *, source: str | Path = SRC, package: str = PACKAGE
) -> list[str]:
    """The ``package`` modules a workflow script imports, wherever in the script (it runs top to
    bottom, so a function-level import of a script is as much part of its job as a top-level one).

    ``from package.a import b`` names ``package.a.b`` when that is a submodule, else ``package.a``.
    """
    path = Path(script)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except OSError as e:
        raise ValueError(f"{path}: cannot read the workflow script ({e.strerror})") from None
    src = Path(source)
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == package]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != package:
                continue
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                folder = src.joinpath(*sub.split("."))
                is_sub = folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file()
                out.append(sub if is_sub else node.module)
    return sorted(set(out))


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, memoised by its modification time and size (a file parsed for its imports
    is not read again)."""
    stamp = _stamp(str(path))
    cached = _digests.get(str(path))
    if cached is not None and stamp is not None and cached[0] == stamp:
        return cached[1]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if stamp is not None:
        _digests[str(path)] = (stamp, digest)
    return digest
