"""Gluon layouts written for AMD's 64-wide warps, re-expressed for NVIDIA's 32-wide ones when compiled.

Upstream Iris's Gluon kernels spell ``gl.BlockedLayout([1], [64], [num_warps], [0])``: 64 threads per warp,
which Triton refuses on NVIDIA GPUs (a warp there has 32). A blocked layout only says which thread holds
which elements of a tensor; the tensor's values, hence what the kernel computes, do not depend on it. So when
such a layout is compiled for a target whose warps are half as wide, the same layout is built with half the
threads along its fastest-varying dimension that has an even count (``[64]`` becomes ``[32]``; ``[4, 16]``
with order ``[1, 0]`` becomes ``[4, 8]``): each thread then holds twice the elements. One
:class:`WarpWidthNote` per process says so, when the kernel is compiled (a compile Triton finds in its cache
says nothing). Any other mismatch is left to Triton, whose error :mod:`iris.language.hints` explains. Gluon compiles
made with iris are cached under keys of their own (:data:`CACHE_SALT`), so a process without iris never loads
a re-expressed kernel, nor a process with iris one compiled without it. Two things Triton names by that key
change with it: ``TRITON_KERNEL_OVERRIDE``/``TRITON_KERNEL_DUMP`` folders (dump with iris to override with
iris), and a compile Triton hands to a process pool of its own (which runs without iris: no rewrite there).

The target's warp width is the compile options' ``warp_size`` (NVIDIA's options have it: 32); the CPU
interpreter ignores layouts and needs nothing.

Examples
--------
>>> halved_threads_per_warp([64], [0], 32)
[32]
>>> halved_threads_per_warp([4, 16], [1, 0], 32)
[4, 8]
>>> halved_threads_per_warp([32], [0], 32) is None          # already fits
True
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import warnings

from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.language import BlockedLayout

from ..base.patching import replace_once
from ..base.warning_site import warn_once

CACHE_SALT = "iris.language.warp_width 1"  # in every Gluon compile's cache key; a new rule takes a new number


class WarpWidthNote(UserWarning):
    """A Gluon layout for 64-wide warps was re-expressed for 32-wide ones (said once per process)."""


def halved_threads_per_warp(threads_per_warp, order, warp_size: int) -> list[int] | None:
    """``threads_per_warp`` for a warp of ``warp_size`` threads, if it was written for one twice as wide; else None.

    The count halved is that of the fastest-varying dimension (first in ``order``) whose count is even.
    """
    threads = [int(t) for t in threads_per_warp]
    if math.prod(threads) != 2 * warp_size:
        return None
    for dim in order:
        if threads[dim] % 2 == 0:
            threads[dim] //= 2
            return threads
    return None


def _note(layout, threads) -> None:
    warn_once("warp width", f"Gluon layout {layout} was written for 64-wide warps (AMD); compiled with "
              f"threads_per_warp={threads} for this GPU's 32-wide warps. The kernel computes the same values: a "
              "layout only says which thread holds which elements. Said once.", WarpWidthNote, "iris", "triton")


def _for_target_warp(to_ir):
    def build(self, builder):
        warp_size = getattr(getattr(builder, "options", None), "warp_size", None)
        threads = halved_threads_per_warp(self.threads_per_warp, self.order, warp_size) if warp_size else None
        if threads is None:
            return to_ir(self, builder)
        _note(self, threads)
        return to_ir(dataclasses.replace(self, threads_per_warp=threads), builder)

    return build


def _salted(source_hash):
    # Triton's on-disk cache keys a compile by its source, not by what iris does to it: without the salt, a
    # process without iris sharing ~/.triton/cache would load a re-expressed kernel that Triton refuses, and
    # one with iris a compile made without it.
    def salted(self) -> str:
        return hashlib.sha256(f"{source_hash(self)}-{CACHE_SALT}".encode()).hexdigest()

    return salted


def install() -> None:
    """Re-express 64-wide-warp blocked layouts when compiling for 32-wide warps; idempotent.

    Gluon compiles made with iris get a cache key of their own (:data:`CACHE_SALT`).
    """
    if not hasattr(BlockedLayout, "_to_ir"):  # triton 3.6 to 3.9 build layouts there; another release: as it is
        warnings.warn("this Triton's Gluon BlockedLayout has no _to_ir: layouts written for 64-wide warps are "
                      "compiled as written (Triton refuses them on NVIDIA GPUs)", RuntimeWarning, stacklevel=2)
        return
    replace_once(BlockedLayout, "_to_ir", _for_target_warp)
    replace_once(GluonASTSource, "hash", _salted)
