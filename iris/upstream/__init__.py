"""The one room for upstream Iris's names: its module paths (``iris.host.iris``, ``iris.mem.triton.ops``,
``iris.device.utils``, ``iris.hip``, ``iris.gluon``, ``iris.experimental.iris_gluon``...) as aliases of ours.

Upstream's programs and docs import from its package layout; this project has its own (``iris.base``,
``iris.heap``, ``iris.interpret``, ``iris.language``, ``iris.instruments``, ``iris.ccl``, ``iris.ops``,
``iris.runtime``, ``iris.bench``, ``iris.perf``: see the architecture page of the docs). :data:`UPSTREAM_MODULES`
says which of our modules each upstream path is: importing the path gives *that* module object, not a copy, so
every name in it is ours. Upstream's folders between ``iris`` and those modules (``iris.host``,
``iris.mem.triton``, ``iris.experimental``...) are empty namespaces holding only the aliases below them: none of
our modules is given attributes it did not have, except ``utils`` on :mod:`iris.language.core` (upstream's
``iris.device`` is a folder holding ``utils``; ours is that module). Where upstream's module holds names of its
own beside ours, this room holds a thin module with them (:mod:`.hip`, :mod:`.platform_utils`,
:mod:`.device_utils`; :mod:`.compile`, upstream's package ``iris.compile``, whose submodules are set as its
attributes). Nothing in this project imports this room but ``iris/__init__.py``, which installs it
(``tests/test_layers.py`` checks both).

Some upstream paths name, below one of our modules, a name that module already has for something else:
``iris.ops.matmul_reduce_scatter`` (upstream's module; ours is the function ``iris.ops.matmul_reduce_scatter``)
and ``iris.device.triton`` (upstream's old folder; in our ``iris.device`` the name ``triton`` is Triton itself,
which its kernels use). :data:`IMPORT_ONLY` lists them: they are entries of ``sys.modules`` and nothing else.
Python's import reads ``sys.modules`` before it looks at the parent (it would refuse ``iris.device.triton``
since ``iris.device`` is no package), so ``from iris.ops.matmul_reduce_scatter import matmul_reduce_scatter``
and ``from iris.device.triton.context import DeviceContext`` work, while ``iris.ops.matmul_reduce_scatter``
stays the function and ``iris.device.triton`` stays Triton. The one thing that does not work is reaching such a
path by attributes after ``import iris.device.triton.context``; upstream's tests and examples import by ``from``.
(A finder on ``sys.meta_path`` would not do: the import system calls it only for a parent with ``__path__``,
and after loading it sets the module as the parent's attribute, the very shadowing avoided here.)

Examples
--------
>>> import iris
>>> from iris.host.tracing.events import TraceEvent
>>> TraceEvent is iris.TraceEvent
True
>>> import iris.host.iris
>>> iris.host.iris is iris.runtime.context
True
>>> import iris.device, iris.language.core
>>> iris.device is iris.language.core
True
>>> from iris.device.triton.context import DeviceContext
>>> DeviceContext is iris.DeviceContext and iris.device.triton is __import__("triton")
True
"""

from __future__ import annotations

import importlib
import sys
import types

# upstream path -> our module, registered in sys.modules and as an attribute of its parent (in this order: a path's
# parent before it).
UPSTREAM_MODULES = {
    "iris.device": "iris.language.core",
    "iris.gluon": "iris.language.gluon",
    "iris.tensor_creation": "iris.runtime.tensor_creation",
    "iris.iris_gluon": "iris.runtime.gluon_context",
    "iris.experimental.iris_gluon": "iris.runtime.gluon_context",
    "iris.experimental.symmetric_memory": "iris.runtime.symmetric_memory",
    "iris.experimental.torch_symm_mem_provider": "iris.runtime.torch_symm_mem",
    "iris.hip": "iris.upstream.hip",
    "iris.host.iris": "iris.runtime.context",
    "iris.host.platform.hip": "iris.upstream.hip",
    "iris.host.platform.utils": "iris.upstream.platform_utils",
    "iris.host.logging.logging": "iris.base.logging",
    "iris.host.memory.tensors": "iris.runtime.tensor_creation",
    "iris.host.memory.symmetric_heap": "iris.heap",
    "iris.host.distributed.helpers": "iris.base.distributed",
    "iris.host.distributed.topology": "iris.heap.discover",
    "iris.host.tracing.events": "iris.language.trace_events",
    "iris.host.tracing.core": "iris.instruments.tracing.host",
    "iris.mem.triton.ops": "iris.language.core",
    "iris.mem.triton.context": "iris.language.core",
    "iris.mem.gluon.context": "iris.language.gluon",
    "iris.mem.utils": "iris.upstream.device_utils",
    "iris.device.utils": "iris.upstream.device_utils",
    "iris.ops.workspace": "iris.ops.config",
    "iris.compile": "iris.upstream.compile",
    "iris.compile.functional_collectives": "iris.distributed.compiled",
    "iris.compile.functional": "iris.distributed.compiled",
}

# upstream path -> our module (or an upstream folder registered above), in sys.modules only: the parent already
# has this name for something else (see the module's docstring). Upstream's per-op modules are all in iris.ops;
# its old iris.device.triton / iris.device.gluon folders are its iris.mem.triton / iris.mem.gluon.
IMPORT_ONLY = {
    "iris.ops.matmul_all_reduce": "iris.ops",
    "iris.ops.matmul_all_gather": "iris.ops",
    "iris.ops.matmul_reduce_scatter": "iris.ops",
    "iris.ops.all_gather_matmul": "iris.ops",
    "iris.device.triton": "iris.mem.triton",
    "iris.device.triton.context": "iris.language.core",
    "iris.device.triton.ops": "iris.language.core",
    "iris.device.gluon": "iris.mem.gluon",
    "iris.device.gluon.context": "iris.language.gluon",
}


def _namespace(path: str) -> types.ModuleType:
    """The module at ``path``: ours if it exists, else an empty namespace registered there (upstream's folder)."""
    if path in sys.modules:
        return sys.modules[path]
    namespace = types.ModuleType(path, f"Upstream Iris's folder {path}: aliases of this project's modules "
                                       "(iris.upstream).")
    namespace.__path__ = []  # a package, so that a path upstream has and we lack says "No module named ..."
    sys.modules[path] = namespace
    parent, _, name = path.rpartition(".")
    setattr(_namespace(parent), name, namespace)
    return namespace


def install() -> None:
    """Register every path of :data:`UPSTREAM_MODULES` and :data:`IMPORT_ONLY`; idempotent. ``import iris``
    calls it."""
    for path, ours in UPSTREAM_MODULES.items():
        module = importlib.import_module(ours)
        parent, _, name = path.rpartition(".")
        sys.modules[path] = module
        setattr(_namespace(parent), name, module)
    for path, ours in IMPORT_ONLY.items():  # after the table above: iris.mem.triton and iris.mem.gluon exist
        sys.modules[path] = importlib.import_module(ours)
