"""Upstream Iris's module paths (``iris.host.iris``, ``iris.mem.triton.ops``, ``iris.device.utils``...) as aliases.

Upstream's programs and docs import from its package layout; this project has its own (one module per idea).
:data:`UPSTREAM_MODULES` says which of our modules each upstream path is: importing the path gives *that*
module object, not a copy, so every name in it is ours. Upstream's folders between ``iris`` and those modules
(``iris.host``, ``iris.mem.triton``...) are empty namespaces holding only the aliases below them: none of our
modules is given attributes it did not have, except ``iris.device.utils`` (our ``iris.device`` is a module,
upstream's a folder).

Examples
--------
>>> import iris
>>> from iris.host.tracing.events import TraceEvent
>>> TraceEvent is iris.TraceEvent
True
>>> import iris.host.iris
>>> iris.host.iris is iris.context
True
"""

from __future__ import annotations

import importlib
import sys
import types

# upstream path -> our module. Upstream's backward-compatibility shims iris.device.triton / iris.device.gluon are
# left out: they would be attributes `triton` / `gluon` of our iris.device, where those names are Triton's.
UPSTREAM_MODULES = {
    "iris.host.iris": "iris.context",
    "iris.host.platform.hip": "iris.hip",
    "iris.host.platform.utils": "iris.platform_utils",
    "iris.host.logging.logging": "iris.logging",
    "iris.host.memory.tensors": "iris.tensor_creation",
    "iris.host.memory.symmetric_heap": "iris.heap",
    "iris.host.distributed.helpers": "iris.distributed",
    "iris.host.tracing.events": "iris.tracing.events",
    "iris.host.tracing.core": "iris.tracing.host",
    "iris.mem.triton.ops": "iris.device",
    "iris.mem.triton.context": "iris.device",
    "iris.mem.gluon.context": "iris.gluon",
    "iris.mem.utils": "iris.device_utils",
    "iris.device.utils": "iris.device_utils",
}


def _namespace(path: str) -> types.ModuleType:
    """The module at ``path``: ours if it exists, else an empty namespace registered there (upstream's folder)."""
    if path in sys.modules:
        return sys.modules[path]
    namespace = types.ModuleType(path, f"Upstream Iris's folder {path}: aliases of this project's modules "
                                       "(iris.upstream_layout).")
    namespace.__path__ = []  # a package, so that a path upstream has and we lack says "No module named ..."
    sys.modules[path] = namespace
    parent, _, name = path.rpartition(".")
    setattr(_namespace(parent), name, namespace)
    return namespace


def install() -> None:
    """Register every path of :data:`UPSTREAM_MODULES`; idempotent. ``import iris`` calls it."""
    for path, ours in UPSTREAM_MODULES.items():
        module = importlib.import_module(ours)
        parent, _, name = path.rpartition(".")
        sys.modules[path] = module
        setattr(_namespace(parent), name, module)
