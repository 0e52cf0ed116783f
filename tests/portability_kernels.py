"""Kernels as code written for AMD GPUs, or tried only on the CPU interpreter, has them: NVIDIA GPUs refuse them
as written. For tests/sm90_compile.py (compiled for sm_90 on a CPU machine), tests/rank_cases_device.py and
tests/gpu/rank_cases_device_cuda.py.

* ``amd_layout_load``, ``amd_layout_copy``: upstream Iris's Gluon examples' ``gl.BlockedLayout([1], [64],
  [num_warps], [0])`` (64-wide warps); the interpreter ignores layouts, and for an NVIDIA GPU (32-wide warps)
  :mod:`iris.language.warp_width` re-expresses them with ``[32]`` threads per warp.
* ``narrow_layout_copy``: ``gl.BlockedLayout([1], [16], [1], [0])``, which fits no warp width and cannot be
  re-expressed: an NVIDIA GPU refuses it and :func:`iris.gluon.layout_hints` explains.
* ``volatile_load_*``: ``volatile=True`` with the cache modifier ``CM``, through each iris API (which refuses
  ``.ca``/``.cg`` everywhere: :func:`iris.device.volatile_load_modifier`) and through a plain ``tl.load`` (which
  iris cannot see: ptxas refuses it on a GPU, and ``layout_hints`` explains).
"""

import triton
import triton.language as tl
from iris.device import VolatileCacheModifierError
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris  # before any kernel is defined: without a GPU it turns on the interpreter

BLOCK = 16


@gluon.jit
def amd_layout_load(IrisDeviceCtx: gl.constexpr, context_tensor, src, out, peer, BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    layout: gl.constexpr = gl.BlockedLayout([1], [64], [1], [0])
    offsets = gl.arange(0, BLOCK, layout=layout)
    gl.store(out + offsets, ctx.load(src + offsets, peer))


@gluon.jit
def amd_layout_copy(src, out, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [64], [4], [0])  # 64-wide warps, launched with num_warps=4
    offsets = gl.arange(0, BLOCK, layout=layout)
    gl.store(out + offsets, gl.load(src + offsets) + 1.0)


@gluon.jit
def narrow_layout_copy(src, out, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [16], [1], [0])  # 16 threads per warp: no GPU's warp width
    offsets = gl.arange(0, BLOCK, layout=layout)
    gl.store(out + offsets, gl.load(src + offsets))


@triton.jit
def volatile_load_functional(src, out, heap_bases, rank, peer, CM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, iris.load(src + offs, rank, peer, heap_bases, volatile=True, cache_modifier=CM))


@triton.jit
def volatile_load_device_context(context, src, out, peer, rank: tl.constexpr, world: tl.constexpr,
                                 CM: tl.constexpr, BLOCK: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, rank, world)
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, ctx.load(src + offs, peer, volatile=True, cache_modifier=CM))


@gluon.jit
def volatile_load_gluon(IrisDeviceCtx: gl.constexpr, context_tensor, src, out, peer, CM: gl.constexpr,
                        BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK, layout=gl.CoalescedLayout())
    gl.store(out + offs, ctx.load(src + offs, peer, volatile=True, cache_modifier=CM))


@triton.jit
def volatile_load_plain(src, out, CM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(src + offs, volatile=True, cache_modifier=CM))


def volatile_refusal(error: BaseException) -> VolatileCacheModifierError | None:
    """The refusal under what Triton raised (a CompilationError on a GPU, an InterpreterError on the CPU)."""
    while error is not None and not isinstance(error, VolatileCacheModifierError):
        error = error.__cause__
    return error
