"""Collectives on the symmetric heap: all_reduce, all_gather, all_to_all, reduce_scatter, broadcast, reduce, gather,
scatter, point-to-point (send, recv, sendrecv, isend/irecv, batch_isend_irecv: :mod:`iris.ccl.p2p`), device barrier.

Each is one Triton kernel per rank that reads and writes the other ranks' heaps directly and synchronises
through flags on the heap (:mod:`iris.language.sync`), with no host round trip: calls are cheap to repeat and can
be captured in CUDA graphs. Reach them as methods of a context (``ctx.ccl.all_reduce(out, inp)``, upstream
Iris's spelling) or as functions taking the context third (``iris.ccl.all_reduce(out, inp, ctx)``).

Common rules:

* every rank calls the collective with tensors of the same shapes and dtype;
* input and output live on the symmetric heap (``ctx.zeros``, ``ctx.empty``, ...), contiguous; a tensor
  elsewhere is a ``ValueError``: other ranks access it directly, so it must sit at the same heap offset on
  every rank;
* inputs are left intact; which collectives may run in place is said in each one's documentation;
* ``op`` is SUM only (other ``ReduceOp`` values raise NotImplementedError);
* ``group``: None or ``dist.group.WORLD`` (every rank), or a torch.distributed sub-group of evenly spaced
  ranks (``[0, 1]``, ``[0, 2]``): its members alone call, and ranks inside the kernels are the group's
  (:mod:`iris.ccl.groups`); each group keeps its own workspaces. The call that allocates a group's workspace
  (its first with a shape) allocates on the heap, which is collective over every rank: make it on every rank
  at once, each rank with its own group;
* ``async_op=False``: in stream order after the call the output is complete and the tensors reusable.
  ``async_op=True``: the final flag exchange (where there is one) is skipped; call ``wait()`` on the
  returned workspace (a device barrier, upstream's "barrier at the end") before touching the tensors or
  calling again.
* Each call returns its :class:`Workspace` (flags, per-program call counters on the device, scratch);
  passing it back reuses it. Allocating one is collective, so the first call must run outside a CUDA graph
  capture.

Examples
--------
>>> import iris, torch
>>> ctx = iris.iris("256MiB")                                          # doctest: +SKIP
>>> inp = ctx.randn(1 << 20, dtype=torch.bfloat16); out = ctx.zeros_like(inp)
>>> ws = ctx.ccl.all_reduce(out, inp, config=iris.ccl.Config(all_reduce_variant="two_shot"))
"""

import sys
import types
import warnings

from . import p2p
from .all_gather import all_gather, all_gather_preamble
from .all_reduce import all_reduce, all_reduce_preamble
from .all_to_all import all_to_all
from .all_to_all_v import all_to_all_v
from .barrier import device_barrier
from .broadcast import broadcast
from .config import (
    ALL_GATHER_VARIANTS,
    ALL_REDUCE_VARIANTS,
    ALL_TO_ALL_VARIANTS,
    AUTOTUNE,
    BROADCAST_VARIANTS,
    REDUCE_VARIANTS,
    Config,
    ReduceOp,
)
from .gather import gather
from .namespace import CCL
from .p2p import P2POp, batch_isend_irecv, init_p2p, irecv, isend, recv, send, sendrecv
from .reduce import reduce, reduce_preamble
from .reduce_scatter import owned_range, reduce_scatter
from .rules import choose_variant
from .scatter import scatter
from .tuning import TuningWarning, set_autotune
from .workspace import Work, Workspace


class _Package(types.ModuleType):
    """``iris.ccl`` itself: an assignment of True or False to ``AUTOTUNE`` (this project's earlier switch) turns
    tuning on or off as :func:`iris.ccl.tuning.set_autotune` does, with a DeprecationWarning; ``AUTOTUNE`` stays
    upstream's sentinel."""

    def __setattr__(self, name, value):
        if name == "AUTOTUNE" and isinstance(value, bool):
            warnings.warn(f"iris.ccl.AUTOTUNE = {value}: AUTOTUNE is upstream Iris's sentinel now, placed in the "
                          "Config fields to tune (Config(all_reduce_variant=iris.ccl.AUTOTUNE)); tuning is turned "
                          f"{'on' if value else 'off'} as asked: say it as iris.ccl.tuning.set_autotune({value}) (or "
                          "IRIS_AUTOTUNE=0 in the environment)", DeprecationWarning, stacklevel=2)
            set_autotune(value)
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "ALL_GATHER_VARIANTS", "ALL_REDUCE_VARIANTS", "ALL_TO_ALL_VARIANTS", "AUTOTUNE", "BROADCAST_VARIANTS", "CCL",
    "Config", "P2POp", "REDUCE_VARIANTS", "ReduceOp", "TuningWarning", "Work", "Workspace", "all_gather",
    "all_gather_preamble", "all_reduce", "all_reduce_preamble", "all_to_all", "all_to_all_v", "batch_isend_irecv",
    "broadcast", "choose_variant", "device_barrier", "gather", "init_p2p", "irecv", "isend", "owned_range", "p2p",
    "recv", "reduce", "reduce_preamble", "reduce_scatter", "scatter", "send", "sendrecv", "set_autotune",
]
