"""A clear error, on the interpreter, for a kernel that addresses a rank whose heap this process does not map.

Why: ranks on another host (or, simulated, with another ``IRIS_HOST``) are not mapped, and the base kernels read
for them is :data:`iris.heap.reach.UNMAPPED_BASE` (:class:`iris.heap.SymmetricHeap`). A pointer translated to such
a rank points nowhere: touching it would end the process with a segfault, where the user needs to be told which
rank addressed which.

Fix: :func:`iris.language.core.translate`, the one routine every remote access goes through, calls
:func:`refuse_unmapped` with the base it read, while :data:`CHECKS` says so: on the interpreter, in a process
whose context has unmapped peers (it called :func:`watch`). :func:`refuse_unmapped` raises the error the context
builds (naming both ranks, their hosts and what connects them) for the first lane that is not masked off.
:data:`CHECKS` is a ``tl.constexpr``: on a GPU it is False when the kernel is compiled, so the call is not even
traced; on the interpreter the test is one truth test and the call a plain Python call.

Examples
--------
>>> watch(lambda peer, where: ValueError(f"{where}: rank 0 does not map rank {peer}'s heap"))  # doctest: +SKIP
>>> bool(CHECKS)                                                                              # doctest: +SKIP
True
"""

import os
import sys

import numpy as np
import triton
import triton.language as tl

from ..heap.reach import UNMAPPED_BASE

# Frames in these folders are the machinery between a kernel and its translation, not the kernel.
_LIBRARY_DIRS = (os.path.dirname(triton.__file__) + os.sep,
                 os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep)

_explain = []  # at most one: builds the error for an unmapped peer, from the context made last


def watch(explain) -> None:
    """Check every translation of interpreted kernels from now on; ``explain(peer, where)`` returns the exception
    to raise when ``peer``'s heap is not mapped here, ``where`` naming the kernel's function and line (the latest
    call wins: the context made last in this process)."""
    if not triton.knobs.runtime.interpret:
        raise RuntimeError("iris.interpret.unmapped_peers.watch: the Triton interpreter is off; on a GPU, "
                           "kernels cannot raise (see iris.language.core)")
    _explain[:] = [explain]
    CHECKS.value = True


# Whether iris.language.core.translate calls refuse_unmapped: a constexpr, so that a GPU compile sees False and traces
# nothing (its value is read when a kernel is compiled; it is set only on the interpreter), and the interpreter
# pays one truth test per translation.
CHECKS = tl.constexpr(False)


def _values(x):
    x = getattr(x, "value", x)
    handle = getattr(x, "handle", None)
    return np.asarray(handle.data if handle is not None else x)


def refuse_unmapped(base, to_rank, mask=None):
    """Raise the watched error if a lane (not masked off) translates to a rank whose base is
    :data:`iris.heap.reach.UNMAPPED_BASE` (unmapped)."""
    unmapped = _values(base) == UNMAPPED_BASE
    if not unmapped.any():  # every lane's base is mapped: the usual case, one numpy reduction
        return
    lanes = (unmapped, _values(to_rank)) + (() if mask is None else (_values(mask).astype(bool),))
    unmapped, ranks, *on = np.broadcast_arrays(*lanes)
    if on:
        unmapped = unmapped & on[0]
    if unmapped.any():
        raise _explain[0](int(ranks[unmapped].reshape(-1)[0]), _kernel_site())


# Triton's dependency walk (the cache key of every kernel calling translate, on a GPU too) rejects plain functions
# a kernel names, and walks a constexpr function's body, which calls numpy; a builtin it skips. The call is never
# traced on a GPU (CHECKS is False there), and on the interpreter it is a plain Python call.
refuse_unmapped.__triton_builtin__ = True


def _kernel_site() -> str:
    """``function (file:line)`` of the kernel code that asked for the translation: the innermost frame outside
    Triton and iris (an iris device function called by the kernel is skipped to its caller)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY_DIRS):
        frame = frame.f_back
    if frame is None:
        return "a kernel"
    return f"kernel code `{frame.f_code.co_name}` ({frame.f_code.co_filename}:{frame.f_lineno})"
