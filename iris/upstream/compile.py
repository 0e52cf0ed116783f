"""Upstream Iris's ``iris.compile``: the package of its torch.compile collectives, whose names live here in
:mod:`iris.distributed.compiled` (this module holds no code of its own).

Upstream's package re-exports its ``functional_collectives`` (``setup``, ``IrisCompileContext``, ``all_reduce``,
``all_gather``, ``reduce_scatter``) on one branch and its ``functional`` (``set_context``, ``get_context``) on
another; both submodules are :mod:`iris.distributed.compiled` here (``iris.upstream`` sets them as this module's
attributes), and importing either registers the ``torch.ops.iris`` operators, as upstream's import does.

Examples
--------
>>> import iris
>>> from iris.compile import functional_collectives as fc
>>> fc is iris.distributed.compiled and iris.compile.setup is fc.setup
True
"""

from ..distributed.compiled import (
    IrisCompileContext,
    all_gather,
    all_reduce,
    get_context,
    reduce_scatter,
    set_context,
    setup,
    wait_tensor,
)

__all__ = ["IrisCompileContext", "all_gather", "all_reduce", "get_context", "reduce_scatter", "set_context", "setup",
           "wait_tensor"]
