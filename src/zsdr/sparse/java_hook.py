"""The start-up half of :mod:`zsdr.sparse.pyserini_java`: a meta path finder that waits for the
``jnius`` package (whose import starts the JVM) and has :func:`prepare_jvm` run just before it loads
(:mod:`zsdr.sparse.pyserini_java` says why).

The finder's code, :data:`FINDER`, is also what the ``.pth`` line of the environment runs at every
interpreter start (:data:`zsdr.sparse.pyserini_java.PTH_LINE`): it imports nothing, not even this
module, until ``jnius`` is imported, and does nothing where zsdr is no longer installed.
"""

from __future__ import annotations

import os
import sys

NAME = "ZsdrJavaForPyjnius"
FINDER = f'''
class {NAME}:
    """Prepares Java for pyjnius at its first import (zsdr.sparse.java_hook), then leaves sys.meta_path."""

    def find_spec(self, name, path=None, target=None):
        if name != "jnius":
            return None
        import sys
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "{NAME}"]
        try:
            from zsdr.sparse.java_hook import jnius_spec
        except ImportError:
            return None
        return jnius_spec()
'''
exec(FINDER)  # defines the finder class here too


def jnius_spec():
    """The module spec of ``jnius`` (None: not installed), its loader wrapped in :class:`_Loader`."""
    import importlib.util

    spec = importlib.util.find_spec("jnius")
    if spec is not None and spec.loader is not None:
        spec.loader = _Loader(spec.loader)
    return spec


class _Loader:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        saved = prepare_jvm()
        try:
            self.loader.exec_module(module)
        finally:
            if saved is not False:  # the JVM runs: the caller's JAVA_HOME back
                if saved is None:
                    os.environ.pop("JAVA_HOME", None)
                else:
                    os.environ["JAVA_HOME"] = saved

    def __getattr__(self, name):  # get_resource_reader, is_package, ... of the real loader
        return getattr(self.loader, name)


def hooked() -> bool:
    """Whether the finder waits on ``sys.meta_path`` (put there by the ``.pth`` line or :func:`install_hook`)."""
    return any(type(f).__name__ == NAME for f in sys.meta_path)


def install_hook() -> None:
    """Prepare the JVM of the first ``import jnius`` of this process (once; nothing if it was imported)."""
    if "jnius" not in sys.modules and not hooked():
        sys.meta_path.insert(0, globals()[NAME]())


def prepare_jvm() -> str | None | bool:
    """Point ``$JAVA_HOME`` at a Java 21+ runtime and fit pyjnius's JVM options to it, unless a JVM
    runs already or no such runtime is found (then pyjnius goes on as it would). Returns the previous
    ``$JAVA_HOME`` (None: unset) to restore once the JVM runs, or False where nothing was changed."""
    try:
        import jnius_config
    except ImportError:
        return False
    if jnius_config.vm_running:
        return False
    from zsdr.sparse import jvm

    try:
        home = jvm.java_home(prefer_env=True)
    except jvm.LuceneUnavailable:
        return False
    jnius_config.set_options(*jvm.runtime_options(home, jnius_config.get_options()))
    saved = os.environ.get("JAVA_HOME")
    os.environ["JAVA_HOME"] = str(home)
    return saved
