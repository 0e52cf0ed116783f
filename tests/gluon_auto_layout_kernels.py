"""Gluon kernels written with layout-less ranges (``gl.arange(0, BLOCK)``), as upstream Iris's documentation
and DESIGN.md's as_remote example write them, for tests/test_gluon_sm90.py (compiled for sm_90 on a CPU
machine) and tests/gpu/rank_cases_device_cuda.py (run on GPUs).

``every_method`` sends an auto-layout block through every ``IrisDeviceCtx`` method: each must anchor it
(:func:`iris.gluon.anchor_auto_layout`); ``counters`` holds ``BLOCK + 1`` int32, the last one a lock.
``blocked_copy`` uses an explicit layout that must come through
untouched. ``no_iris_call`` has nothing to anchor: it still fails on a GPU, and ``layout_hints`` explains.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris  # noqa: F401  (before any kernel is defined: without a GPU it turns on the interpreter)


@gluon.jit
def every_method(IrisDeviceCtx: gl.constexpr, context_tensor, src, dst, counters, out, peer, BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK)  # no layout: the compiler is to decide
    mask = offs < BLOCK
    gl.store(out + offs, ctx.load(src + offs, peer, mask=mask), mask=mask)
    ctx.store(dst + offs, gl.load(src + offs), peer, mask=mask)
    ctx.get(src + offs, dst + offs, peer, mask=mask)
    ctx.put(src + offs, dst + offs, peer, mask=mask)
    ctx.copy(src + offs, dst + offs, peer, ctx.cur_rank, mask=mask)
    ones = gl.full([BLOCK], 1, gl.int32, gl.AutoLayout())
    ctx.atomic_add(counters + offs, ones, peer, mask=mask, sem="release", scope="sys")
    ctx.atomic_sub(counters + offs, ones, peer, mask=mask)
    ctx.atomic_xchg(counters + offs, ones, peer, mask=mask)
    ctx.atomic_xor(counters + offs, ones, peer, mask=mask)
    ctx.atomic_and(counters + offs, ones, peer, mask=mask)
    ctx.atomic_or(counters + offs, ones, peer, mask=mask)
    ctx.atomic_min(counters + offs, ones, peer, mask=mask)
    ctx.atomic_max(counters + offs, ones, peer, mask=mask, sem="acquire")
    ctx.atomic_cas(counters + offs, ones, ones + 1, peer, sem="acq_rel", scope="gpu")
    gl.store(out + offs, gl.load(ctx.as_remote(src + offs, peer), mask=mask), mask=mask)
    # scalars, no mask: a lock (the element after the counters, 0 when free) taken and released
    while ctx.atomic_cas(counters + BLOCK, 0, 1, peer, sem="acquire", scope="sys") != 0:
        pass
    ctx.atomic_xchg(counters + BLOCK, 0, peer, sem="release", scope="sys")


@gluon.jit
def blocked_copy(IrisDeviceCtx: gl.constexpr, context_tensor, src, out, peer, BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([2], [32], [gl.num_warps()], [0]))
    gl.store(out + offs, ctx.load(src + offs, peer))


@gluon.jit
def no_iris_call(src, out, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK)
    gl.store(out + offs, gl.load(src + offs))
