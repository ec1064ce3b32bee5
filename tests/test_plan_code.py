"""zsdr.plan.code: a job's code inputs are the modules it runs and what they import at load time."""

from __future__ import annotations

import os
import textwrap
import types
from pathlib import Path

import pytest

from zsdr.plan.imports import import_closure

ROOT = Path(__file__).resolve().parent.parent

# A small package tree: each key is a file under src/, each value its source.
TREE = {
    "fake/__init__.py": '"""The top package: a docstring only."""\n',
    "fake/core/__init__.py": '"""A package whose __init__ imports nothing."""\nVERSION = 1\n',
    "fake/core/base.py": "import os\n\nfrom fake.core import util\n",
    "fake/core/util.py": "import json\n",
    "fake/core/lazy.py": "def load():\n    import fake.core.heavy\n    return fake.core.heavy\n",
    "fake/core/heavy.py": "X = 1\n",
    "fake/models/__init__.py": "from fake.models import registry\n",
    "fake/models/registry.py": "NAMES = ()\n",
    "fake/models/encoder.py": textwrap.dedent(
        """\
        from __future__ import annotations

        from typing import TYPE_CHECKING

        from . import layers
        from ..core.base import thing

        if TYPE_CHECKING:
            from fake.core import heavy
        try:
            import fake.core.util
        except ImportError:
            pass


        def run():
            from fake.core import lazy
            return lazy
        """
    ),
    "fake/models/layers.py": "import numpy\n",
    "fake/models/empty.py": "",
    "fake/cli.py": "from fake.models import NAMES, encoder\n",
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The fake package under ``tmp_path/src``; the workflow root is ``tmp_path``."""
    for name, text in TREE.items():
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def closure(root: Path, *modules: str) -> list[str]:
    files = import_closure(modules, root, source=root / "src", package="fake")
    return [f.removeprefix("src/fake/") for f in files]


def test_module_level_imports_are_followed_transitively(tree):
    # encoder -> core.base -> core.util (through `from fake.core import util`, a submodule)
    assert closure(tree, "fake.models.encoder") == [
        "core/base.py",
        "core/util.py",
        "models/__init__.py",
        "models/encoder.py",
        "models/layers.py",
        "models/registry.py",
    ]


def test_function_level_imports_are_not_followed(tree):
    assert closure(tree, "fake.core.lazy") == ["core/lazy.py"]
    assert "core/lazy.py" not in closure(tree, "fake.models.encoder")


def test_relative_imports_resolve(tree):
    files = closure(tree, "fake.models.encoder")
    assert "models/layers.py" in files  # from . import layers
    assert "core/base.py" in files  # from ..core.base import thing


def test_type_checking_imports_are_skipped(tree):
    assert "core/heavy.py" not in closure(tree, "fake.models.encoder")


def test_from_package_import_submodule_follows_the_submodule(tree):
    assert closure(tree, "fake.core.base") == ["core/base.py", "core/util.py"]


def test_parent_init_is_included_only_when_it_imports(tree):
    # fake.models' __init__ imports its registry: loading any fake.models module runs it
    assert closure(tree, "fake.models.empty") == ["models/__init__.py", "models/empty.py", "models/registry.py"]
    # fake and fake.core have no imports in their __init__
    assert closure(tree, "fake.core.util") == ["core/util.py"]


def test_package_imported_for_its_names_is_included(tree):
    # `from fake.models import NAMES`: NAMES lives in fake.models' __init__
    files = closure(tree, "fake.cli")
    assert "models/__init__.py" in files and "models/encoder.py" in files and "cli.py" in files


def test_a_named_package_stands_for_all_its_files(tree):
    files = closure(tree, "fake.core")
    assert files == ["core/__init__.py", "core/base.py", "core/heavy.py", "core/lazy.py", "core/util.py"]


def test_paths_are_relative_to_the_root_and_sorted(tree):
    files = import_closure(["fake.core.base"], tree, source=tree / "src", package="fake")
    assert files == ["src/fake/core/base.py", "src/fake/core/util.py"]
    absolute = import_closure(["fake.core.base"], None, source=tree / "src", package="fake")
    assert absolute == [str(tree.resolve() / "src" / f) for f in ("fake/core/base.py", "fake/core/util.py")]


def _rewrite(path: Path, text: str) -> None:
    """Edit a file and move its modification time on (a write within the clock's resolution may not)."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_an_added_import_appears_on_the_next_call(tree):
    assert closure(tree, "fake.core.util") == ["core/util.py"]
    _rewrite(tree / "src/fake/core/util.py", "import json\nimport fake.core.heavy\n")
    assert closure(tree, "fake.core.util") == ["core/heavy.py", "core/util.py"]
    # an __init__ that starts importing joins the closures below it
    _rewrite(tree / "src/fake/core/__init__.py", "import logging\n")
    assert closure(tree, "fake.core.util") == ["core/__init__.py", "core/heavy.py", "core/util.py"]


def test_a_new_submodule_is_seen_on_the_next_call(tree):
    # `from fake.models import NAMES` names an attribute until a module of that name appears
    assert "models/NAMES.py" not in closure(tree, "fake.cli")
    folder = tree / "src/fake/models"
    before = folder.stat().st_mtime_ns
    (folder / "NAMES.py").write_text("")
    os.utime(folder, ns=(before + 10**9, before + 10**9))  # as a later edit would, past the clock's resolution
    assert "models/NAMES.py" in closure(tree, "fake.cli")


def _new_process(monkeypatch):
    """This module's state as a new planner process starts with: nothing parsed or memoised."""
    from zsdr.plan import imports

    for memo in ("_parsed", "_closures", "_imports_caches", "_digests"):
        monkeypatch.setattr(imports, memo, {})
    return imports


def test_the_next_process_reads_the_imports_from_disk_and_parses_only_what_changed(tree, monkeypatch):
    """Each file's imports are kept by the hash of its content in .cache/plan-imports.json: a new process
    parses nothing it has seen, an edited file again; a damaged cache file is no cache."""
    import ast

    first = closure(tree, "fake.cli")
    cache = tree / ".cache" / "plan-imports.json"
    assert cache.is_file() and len(__import__("json").loads(cache.read_text())["files"]) >= 5
    imports = _new_process(monkeypatch)
    parsed: list[str] = []

    def counted(data, filename):
        parsed.append(filename)
        return ast.parse(data, filename=filename)

    spy = types.SimpleNamespace(**{name: getattr(ast, name) for name in dir(ast) if not name.startswith("__")})
    spy.parse = counted
    monkeypatch.setattr(imports, "ast", spy)   # the module's own ast, counting its parses
    assert closure(tree, "fake.cli") == first and parsed == []
    _rewrite(tree / "src/fake/core/util.py", "import json\nimport fake.core.heavy\n")
    imports = _new_process(monkeypatch)
    assert closure(tree, "fake.cli") == sorted([*first, "core/heavy.py"])
    assert sorted(parsed) == [str(tree / "src/fake/core" / f) for f in ("heavy.py", "util.py")]  # edited, newly reached
    cache.write_text('{"version": 1, "files": {')
    imports = _new_process(monkeypatch)
    assert closure(tree, "fake.cli") == sorted([*first, "core/heavy.py"]) and len(parsed) > 1


def test_unknown_module_is_an_error_naming_it(tree):
    with pytest.raises(ValueError, match="fake.models.missing"):
        closure(tree, "fake.models.missing")
    with pytest.raises(ValueError, match="'other.module'"):
        closure(tree, "other.module")


def test_real_tree_coco_loss_imports_the_distributed_gather():
    assert "src/zsdr/distributed.py" in import_closure(["zsdr.losses.coco"], ROOT)


def test_real_tree_margin_mse_loss_brings_no_other_loss():
    files = import_closure(["zsdr.losses.margin_mse"], ROOT)
    assert "src/zsdr/losses/margin_mse.py" in files
    assert [f for f in files if f.startswith("src/zsdr/losses/")] == ["src/zsdr/losses/margin_mse.py"]


def test_real_tree_every_file_exists():
    files = import_closure(["zsdr.training.trainer", "zsdr.retrieval"], ROOT)
    assert files and all((ROOT / f).is_file() for f in files)


def test_code_stamp_changes_only_with_the_code(tmp_path):
    from zsdr.plan.code import code_stamp, stamp_files

    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    rel = code_stamp(["a.py", "b.py"], tmp_path, "job")
    stamp = tmp_path / rel
    assert rel.startswith(".code/job-") and stamp_files(stamp) == ["a.py", "b.py"]
    # sha256sum's format: "<hex>  <path>"
    import hashlib

    first = stamp.read_text()
    assert first.splitlines()[0] == hashlib.sha256(b"x = 1\n").hexdigest() + "  a.py"
    # planning again without an edit leaves the stamp untouched (its time too)
    os.utime(stamp, ns=(1, 1))
    assert code_stamp(["a.py", "b.py"], tmp_path, "job") == rel and stamp.stat().st_mtime_ns == 1
    # an edit keeps the name and rewrites the content
    (tmp_path / "a.py").write_text("x = 3\n")
    os.utime(tmp_path / "a.py", ns=(10**18, 10**18))
    assert code_stamp(["a.py", "b.py"], tmp_path, "job") == rel and stamp.read_text() != first
    # another closure (a new import) is another stamp
    (tmp_path / "c.py").write_text("")
    assert code_stamp(["a.py", "b.py", "c.py"], tmp_path, "job") != rel
    assert not list((tmp_path / ".code").glob(".*.tmp"))


def test_a_registry_is_stamped_by_the_entries_a_job_runs(tmp_path):
    # a job's stamp lists the registry lines it runs, not the registry file: a new line, or an edit of a line
    # another job runs, leaves its stamp as it was; an edit of its own line, or of their order, changes it
    import subprocess

    from zsdr.plan.code import Code, registry_entries, stamp_files

    src = tmp_path / "src" / "zsdr" / "training"
    src.mkdir(parents=True)
    for init in (tmp_path / "src" / "zsdr" / "__init__.py", src / "__init__.py"):
        init.write_text("")
    (tmp_path / "src" / "zsdr" / "io.py").write_text("")
    registry = src / "term_registry.py"
    (src / "terms.py").write_text("from zsdr.training.term_registry import TERMS\n")

    def write(lines):
        registry.write_text('"""Terms."""\n\nTERMS: dict[str, str] = {\n' + "".join(f"    {line}\n" for line in lines)
                            + "}\n")

    write(['"a": "zsdr.training.a:A",', '"b": "zsdr.training.b:B",'])
    code = Code(root=str(tmp_path), workdir=str(tmp_path), runs_elsewhere=False)

    def stamps():
        out = {}
        for entries in ((), ("a",), ("a", "b")):
            rel = code.code("zsdr.training.terms", entries=entries)
            out[entries] = (rel, (tmp_path / rel).read_text())
        return out

    before = stamps()
    assert len({rel for rel, _ in before.values()}) == 3       # one stamp per set of entries
    files = stamp_files(tmp_path / before[("a",)][0])
    assert "src/zsdr/training/term_registry.py" not in files and ".code/entries/term_registry-a.txt" in files
    assert (tmp_path / ".code/entries/term_registry-a.txt").read_text().endswith('"a": "zsdr.training.a:A",\n')
    # sha256sum -c checks the listing as it is, views included
    assert subprocess.run(["sha256sum", "-c", "--quiet", before[("a", "b")][0]], cwd=tmp_path).returncode == 0
    write(['"a": "zsdr.training.a:A",', '"new": "zsdr.training.new:New",', '"b": "zsdr.training.b:B",'])
    assert stamps() == before                                   # a new line: no stamp changes
    write(['"a": "zsdr.training.a:A",', '"new": "zsdr.training.new:New",', '"b": "zsdr.training.b2:B",'])
    after = stamps()
    assert after[()] == before[()] and after[("a",)] == before[("a",)] and after[("a", "b")] != before[("a", "b")]
    write(['"b": "zsdr.training.b2:B",', '"a": "zsdr.training.a:A",'])  # the order the terms run in
    assert stamps()[("a", "b")][1] != after[("a", "b")][1]
    registry.write_text("TERMS = dict(a=1)\n")
    with pytest.raises(ValueError, match=r"term_registry.py: no `TERMS = \{...\}` literal"):
        registry_entries(registry, "TERMS")
