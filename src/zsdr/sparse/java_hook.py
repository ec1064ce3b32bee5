"""The start-up half of :mod:`zsdr.sparse.pyserini_java`: a meta path finder that waits for the
``jnius`` package (whose import starts the JVM) and has :func:`zsdr.sparse.pyserini_java.prepare_jvm`
run just before it loads. Imported at every interpreter start of the environment (the ``.pth`` file
``make install`` writes), so it imports nothing itself.
"""

from __future__ import annotations

import os
import sys


class _JavaForPyjnius:
    """Finds nothing itself: wraps the loader of ``jnius``, once, then leaves ``sys.meta_path``."""

    def find_spec(self, name, path=None, target=None):
        if name != "jnius":
            return None
        import importlib.util

        remove_hook()
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


class _Loader:
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        from zsdr.sparse.pyserini_java import prepare_jvm

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


def install_hook() -> None:
    """Prepare the JVM of the first ``import jnius`` of this process (once; nothing if it was imported)."""
    if "jnius" not in sys.modules and not hooked():
        sys.meta_path.insert(0, _JavaForPyjnius())


def hooked() -> bool:
    return any(isinstance(f, _JavaForPyjnius) for f in sys.meta_path)


def remove_hook() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _JavaForPyjnius)]
