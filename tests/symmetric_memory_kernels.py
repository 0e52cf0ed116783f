"""Kernels that reach memory through per-allocation tables (``ctx.allocate_symmetric``'s ``peer_bases``, a provider's
map), shared by the CPU rank cases (tests/rank_cases_symmetric_memory.py), the GPU tests
(tests/gpu/test_symmetric_memory_cuda.py) and the sm_90 compile check (tests/sm90_compile.py).

Each kernel is written the way a program would: one by hand (the table's arithmetic inline, as upstream Iris's
tests do), the others through iris's device API (functional, ``DeviceContext``, Gluon's ``IrisDeviceCtx``), which
must translate with any such table exactly as with the heap's.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris

BLOCK = 256


@triton.jit
def put_by_hand(src, dst, dst_peers, n, target, CUR_RANK: tl.constexpr, BLOCK: tl.constexpr):
    """Copy ``src`` into ``target``'s ``dst`` (a view of an allocation whose table is ``dst_peers``), translating by
    hand: the peer's address is its base plus the offset of ``dst`` from this rank's base of the same allocation."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    here = tl.load(dst_peers + CUR_RANK)
    there = tl.load(dst_peers + target)
    remote = (dst.to(tl.int64) - here + there).to(dst.dtype)
    tl.store(remote + offs, tl.load(src + offs, mask=mask), mask=mask)


@triton.jit
def store_to_every_rank(data, results, results_peers, n, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    """Store this rank's ``data`` into every rank's ``results`` with ``iris.store``, unaware of where the table came
    from."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    value = tl.load(data + offs, mask=mask)
    for peer in range(world):
        iris.store(results + offs, value, rank, peer, results_peers, mask=mask)


@triton.jit
def scale_peer_functional(a, a_peers, b, b_peers, n, peer, rank, BLOCK: tl.constexpr):
    """Read ``peer``'s ``a``, double it, write it into ``peer``'s ``b``: two allocations, each through its own
    table, with the functional API."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    value = iris.load(a + offs, rank, peer, a_peers, mask=mask)
    iris.store(b + offs, value * 2, rank, peer, b_peers, mask=mask)


@triton.jit
def scale_peer_device_context(a_context, a, b_context, b, n, peer, rank: tl.constexpr, world: tl.constexpr,
                              BLOCK: tl.constexpr):
    """The same with a ``DeviceContext`` per allocation (``SymmetricAddressMap.device_context()``)."""
    on_a = iris.DeviceContext.initialize(a_context, rank, world)
    on_b = iris.DeviceContext.initialize(b_context, rank, world)
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    value = on_a.load(a + offs, peer, mask=mask)
    on_b.store(b + offs, value * 2, peer, mask=mask)


@gluon.jit
def scale_peer_gluon(IrisDeviceCtx: gl.constexpr, a_context, a, b_context, b, n, peer, BLOCK: gl.constexpr,
                     WARP: gl.constexpr):
    """The same in Gluon, with an ``IrisDeviceCtx`` per allocation."""
    layout: gl.constexpr = gl.BlockedLayout([BLOCK // WARP], [WARP], [1], [0])
    on_a = IrisDeviceCtx.initialize(a_context)
    on_b = IrisDeviceCtx.initialize(b_context)
    offs = gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    value = on_a.load(a + offs, peer, mask=mask)
    on_b.store(b + offs, value * 2, peer, mask=mask)


@triton.jit
def atomic_add_everywhere(counter, counter_peers, rank, world: tl.constexpr):
    """Add 1 to every rank's ``counter`` (int32) through its table: the atomics translate with it too."""
    for target in range(world):
        iris.atomic_add(counter, 1, rank, target, counter_peers, sem="relaxed", scope="sys")
