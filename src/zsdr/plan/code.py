"""Code stamps: the library source a job runs as one input of the job.

A job's code is the load-time import closure of the modules it runs (:func:`zsdr.plan.imports.import_closure`);
:func:`code_stamp` lists those files, with their SHA-256, in one ``sha256sum`` file in the working
directory, so that an edit of any of them re-plans exactly the jobs that run it. :class:`Code` is the plan's
stage that names a job's modules and writes its stamp.

A registry module (:data:`REGISTRIES`: a file that holds one table of ``name -> "module:Class"`` lines and
nothing else a job runs) is not listed whole: a job imports the table but runs only the entries its
settings name, so its stamp lists a view of the file instead, the entries the job names (none unless
the planner says), written beside the stamp. A new line in the table changes the views of the jobs that
name it and no other stamp.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zsdr.plan.imports import file_sha256, import_closure, script_modules


STAMPS = ".code"
"""The folder (in the working directory) of the code stamps: one ``sha256sum`` listing per closure."""

REGISTRIES: dict[str, str] = {"zsdr.training.term_registry": "TERMS"}
"""Registry modules and the name of the one table each holds: a job's stamp lists the entries of the table
the job uses (:func:`registry_view`) instead of the module's file."""

VIEWS = f"{STAMPS}/entries"
"""The folder (in the working directory) of the registry views a stamp lists."""


def registry_entries(path: str | Path, table: str) -> list[tuple[str, str]]:
    """The ``(name, value)`` lines of the dict literal ``table`` assigned at the top of the source file
    ``path``, in their order. ValueError naming the file when it holds no such literal."""
    path = Path(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == table:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                break
            if isinstance(value, dict):
                return [(str(k), str(v)) for k, v in value.items()]
            break
    raise ValueError(f"{path}: no `{table} = {{...}}` literal (a registry module holds its table as one dict "
                     "literal, zsdr.plan.code.REGISTRIES)")


def registry_view(path: str | Path, table: str, names: Iterable[str]) -> str:
    """The view of registry file ``path`` a job's stamp lists: the lines of ``table`` whose names the job
    uses, in the table's order (the order terms run in), as ``"name": "value",`` lines under a header."""
    used = set(names)
    lines = [f"{json.dumps(name)}: {json.dumps(value)},"
             for name, value in registry_entries(path, table) if name in used]
    return f"# {table} entries this job runs, in the table's order\n" + "".join(f"{line}\n" for line in lines)


def _view_name(rel: str, names: Sequence[str]) -> str:
    """The file name of the view of registry file ``rel`` (relative to the workflow folder) for ``names``."""
    joined = "+".join(sorted(names)) or "none"
    if len(joined) > 64 or not all(c.isalnum() or c in "+-_." for c in joined):
        joined = hashlib.sha256(joined.encode()).hexdigest()[:12]
    return f"{Path(rel).stem}-{joined}.txt"


def code_stamp(files: Sequence[str], root: str | Path, label: str, workdir: str | Path | None = None,
               views: dict[str, tuple[str, str]] | None = None) -> str:
    """The code stamp of ``files`` (paths relative to ``root``, the workflow folder):
    ``<STAMPS>/<label>-<id>.sha256`` in ``workdir`` (the working directory; default ``root``), a
    ``sha256sum`` listing of the files that ``sha256sum -c`` checks from ``workdir``: the paths as
    given when ``workdir`` is ``root``, absolute otherwise. It is rewritten when and only when its
    content changes. Its name depends on the list of files only, so an edit keeps the name and
    changes the content (the job is re-planned as an updated input), while a new import changes the
    list and so the name (re-planned as a changed set of inputs).

    One stamp stands for a job's code instead of its dozens of source files: Snakemake's planning
    time grows with the number of input files of ~16,000 jobs, and the stamp keeps it to one. The
    stamp lives in the working directory, beside the outputs it re-plans, so a workflow run from
    another directory neither writes into the checkout nor shares stamps with other runs.

    ``views``: ``{file: (view file name, text)}`` for registry files (:data:`REGISTRIES`) of ``files``:
    the stamp lists ``<VIEWS>/<view file name>`` (written in ``workdir`` when its text differs) instead.
    """
    root_path = Path(root)
    into = root_path if workdir is None else Path(workdir)
    here = _same_folder(root_path, into)
    views = views or {}
    lines, shown_files = [], []
    for f in files:
        if f in views:
            view_name, text = views[f]
            rel_view = f"{VIEWS}/{view_name}"
            _write_if_changed(into / rel_view, text)
            shown = rel_view if here else str(into.resolve() / rel_view)
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            shown_files.append(rel_view)
        else:
            shown = f if here else str(root_path.resolve() / f)
            digest = file_sha256(root_path / f)
            shown_files.append(f)
        lines.append(f"{digest}  {shown}\n")
    body = "".join(lines)
    name = hashlib.sha256("\n".join(shown_files).encode()).hexdigest()[:12]
    rel = f"{STAMPS}/{label}-{name}.sha256"
    _write_if_changed(into / rel, body)
    return rel


def _write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` unless it holds it already (its modification time then stays)."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # atomic: concurrent planners write the same bytes


def _same_folder(a: Path, b: Path) -> bool:
    """Whether two paths name the same folder (a symlink and its target do)."""
    try:
        return a.resolve() == b.resolve() or os.path.samefile(a, b)
    except OSError:
        return False


def stamp_files(stamp: str | Path) -> list[str]:
    """The files a code stamp lists."""
    return [line.split("  ", 1)[1] for line in Path(stamp).read_text(encoding="utf-8").splitlines()]


@dataclass(frozen=True)
class Code:
    """Code inputs: the library source files a job runs, so that a code edit re-plans it.

    ``root`` is the workflow folder (the checkout that holds the Snakefile, ``src/`` and
    ``workflow_scripts/``); ``workdir`` the working directory the workflow runs in, where outputs and
    code stamps go. They are the same folder unless the workflow runs with ``--directory`` or as a
    module of another workflow (``runs_elsewhere``)."""

    root: str
    workdir: str
    runs_elsewhere: bool

    def source_file(self, rel: str) -> str:
        """A file of the workflow folder (``rel``: relative to it) as a job input: ``rel`` itself when
        the workflow runs in its own folder, else its absolute path, so that Snakemake, which resolves
        inputs against the working directory, finds it from anywhere."""
        return str(Path(self.root).resolve() / rel) if self.runs_elsewhere else rel

    def code_files(self, *modules: str, script: str | None = None) -> list[str]:
        """The source files a job runs (paths relative to the workflow folder): the load-time import
        closure of ``modules`` (what the job's script calls into; a module imported lazily by the
        library, such as a recipe's loss, is named here by the rule or the planner) and of every
        ``zsdr`` module its workflow script ``workflow_scripts/<script>.py`` imports."""
        source = Path(self.root) / "src"  # the workflow's own copy of the library
        names = ["zsdr.io", *modules]
        if script is not None:
            script_path = Path(self.root) / "workflow_scripts" / f"{script}.py"
            names += script_modules(script_path, source=source)
        return import_closure(dict.fromkeys(names), root=self.root, source=source)

    def code(self, *modules: str, script: str | None = None, entries: Iterable[str] = ()) -> str:
        """A job's code input: the stamp (:func:`code_stamp`, in the working directory) of
        :meth:`code_files`, so that editing any of those files re-plans exactly the jobs that run it.
        A registry module of the closure (:data:`REGISTRIES`) is listed as the view of its ``entries``
        (the names of its table the job runs, such as a training's term sections; none by default)."""
        files = self.code_files(*modules, script=script)
        names = sorted(set(entries))
        views = {}
        for module, table in REGISTRIES.items():
            rel = os.path.join("src", *module.split(".")) + ".py"
            if rel in files:
                views[rel] = (_view_name(rel, names), registry_view(Path(self.root) / rel, table, names))
        label = script or modules[-1].rsplit(".", 1)[-1]
        return code_stamp(files, self.root, label, self.workdir if self.runs_elsewhere else None, views)


def build_code(root: str | os.PathLike, workdir: str | os.PathLike | None = None) -> Code:
    """The code stage of the workflow folder ``root`` run in ``workdir`` (default: ``root``)."""
    root = str(root)
    workdir = root if workdir is None else str(workdir)
    return Code(root=root, workdir=workdir, runs_elsewhere=not _same_folder(Path(root), Path(workdir)))
