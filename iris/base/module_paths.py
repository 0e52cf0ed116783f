"""Short module paths for deep ones: ``import iris.tracing.timeline`` giving ``iris.instruments.tracing.timeline``.

Why: the lessons, the README and the docs spell some of iris's modules by a short path (``iris.tracing``,
``iris.traffic``, ``iris.flags``...), where the code lives in its layer (``iris.instruments.tracing``,
``iris.language.flags``...). ``import iris`` makes them attributes, but an *import* of the short path
(``import iris.traffic``, ``from iris.tracing.timeline import Timeline``) needs a module of that name, and a package's
submodules need one too, each the very module object of the long path: a second copy of a module would have classes
of its own (``isinstance`` failing across the copies) and state of its own.

Fix: :func:`install` puts a finder on ``sys.meta_path`` that answers for the short paths and every path below them,
importing the long path and handing back *its* module object (registered under the short name too), without running
it again and without touching its ``__name__`` or ``__spec__``. Nothing is imported before it is asked for. The
import system calls a finder only for names whose parent is a package, so a short path must name a package or a
module (not a function); upstream Iris's paths, some of which must shadow nothing, have their own room
(:mod:`iris.upstream`).

Examples
--------
>>> import iris
>>> import iris.tracing.timeline, iris.instruments.tracing.timeline
>>> iris.tracing.timeline is iris.instruments.tracing.timeline
True
>>> from iris.traffic import minimum
>>> minimum is iris.instruments.traffic.minimum
True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys


class _ExistingModule(importlib.abc.Loader):
    """Loads a short path as the module already imported under its long one."""

    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        self._spec = self.module.__spec__  # the import system writes the short path's spec into it: restored below
        return self.module

    def exec_module(self, module) -> None:
        module.__spec__ = self._spec  # the module keeps its own name and spec: it is not run again


class ShortPaths(importlib.abc.MetaPathFinder):
    """A finder for ``{short path: long path}``: each short path, and each path below it, is the long one's module."""

    def __init__(self, paths: dict[str, str]):
        self.paths = dict(paths)

    def long_path(self, name: str) -> str | None:
        """The long path ``name`` stands for, or None when it is not under a short path."""
        for short, long in self.paths.items():
            if name == short or name.startswith(short + "."):
                return long + name[len(short):]
        return None

    def find_spec(self, fullname, path=None, target=None):
        long = self.long_path(fullname)
        if long is None:
            return None
        try:
            module = importlib.import_module(long)
        except ModuleNotFoundError as missing:
            if missing.name == long:  # nothing there: Python's own "No module named" for the short path
                return None
            raise
        spec = importlib.util.spec_from_loader(fullname, _ExistingModule(module),
                                               is_package=hasattr(module, "__path__"))
        if hasattr(module, "__path__"):
            spec.submodule_search_locations = list(module.__path__)
        return spec


def install(paths: dict[str, str]) -> ShortPaths:
    """Answer imports of the short paths in ``paths`` (``{short: long}``) from now on; idempotent per table.

    Examples
    --------
    >>> finder = install({"iris.flags": "iris.language.flags"})
    >>> import iris.flags
    >>> iris.flags.__name__
    'iris.language.flags'
    """
    for finder in sys.meta_path:
        if isinstance(finder, ShortPaths):
            finder.paths.update(paths)
            return finder
    finder = ShortPaths(paths)
    sys.meta_path.insert(0, finder)
    return finder
