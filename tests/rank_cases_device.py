"""Code that runs inside each rank for tests/test_device.py and tests/gpu/test_device_cuda.py.

The same kernels exercise the three spellings of the device API: the functional ``iris.*`` ops,
``iris.DeviceContext`` and ``iris.gluon.IrisDeviceCtx``. Each case checks its results on the host against
torch references and returns a summary; a failed check raises in the rank (the test shows its log).
Backend: env ``IRIS_TEST_BACKEND`` ("cpu" by default, "cuda" under tests/gpu). Gluon ranges mostly carry a
``gl.CoalescedLayout()``; ``read_from_peer`` is the layout-less example of DESIGN.md, verbatim, which runs
on a GPU too because ``IrisDeviceCtx`` anchors its pointers.
"""

from __future__ import annotations

import functools
import operator
import os
import warnings

import torch
import triton
import triton.language as tl
from iris.device import VolatileCacheModifierWarning
from iris.gluon import IrisDeviceCtx, cta_barrier
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris
from tests import portability_kernels as portability
from tests.gluon_auto_layout_kernels import every_method

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")
SEMS = ("acquire", "release", "acq_rel", "relaxed", None)
SCOPES = ("gpu", "cta", "sys", None)
BLOCK, VALID = 16, 13  # lanes VALID.. are masked off everywhere
RMA_DTYPES = (torch.int32, torch.float32, torch.float16, torch.bfloat16)
API_NAMES = ("functional", "device_context", "gluon")
LAYOUT = gl.constexpr(gl.CoalescedLayout())


def _ctx(heap="8MiB"):
    return iris.iris(heap, backend=BACKEND)


def _host(t):
    return t.detach().cpu()


def _source(rank, dtype):
    """Rank ``rank``'s source block; the kernels only move bits, so torch's rounding is the reference."""
    return ((rank + 1) * 100 + torch.arange(BLOCK)).to(dtype)


def _expect(name, actual, expected):
    if not torch.equal(_host(actual), expected):
        raise AssertionError(f"{name}: got {_host(actual).tolist()}, expected {expected.tolist()}")


# ------------------------------------------------------------------ remote loads, stores, get, put, copy
# Rank r: loaded <- right's src (tail: other); right's stored <- src; got <- left's src;
# right's put_in <- src; copied_in <- left's src (copy remote -> local); right's copied_out <- src
# (copy local -> remote).

@triton.jit
def rma_functional(src, loaded, stored, got, put_in, copied_in, copied_out, heap_bases, rank, left, right, n,
                   BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    # (volatile=True: the spin locks and _volatile_loads; PTX cannot combine it with .cg, and iris refuses that)
    x = iris.load(src + offs, rank, right, heap_bases, mask=mask, other=-7, cache_modifier=".cg", hint=16)
    tl.store(loaded + offs, x)
    mine = tl.load(src + offs, mask=mask)
    iris.store(stored + offs, mine, rank, right, heap_bases, mask, 16, ".wt")  # upstream: mask, hint, cache
    iris.get(src + offs, got + offs, rank, left, heap_bases, mask=mask, load_cache_modifier=".ca",
             store_cache_modifier=".cs")
    iris.put(src + offs, put_in + offs, rank, right, heap_bases, mask=mask, other=0, hint=16)
    iris.copy(src + offs, copied_in + offs, left, rank, rank, heap_bases, mask=mask,
              load_cache_modifier=".cv")
    iris.copy(src + offs, copied_out + offs, rank, right, rank, heap_bases, mask=mask,
              store_cache_modifier=".wb")


@triton.jit
def rma_device_context(context, src, loaded, stored, got, put_in, copied_in, copied_out, n,
                       rank: tl.constexpr, world: tl.constexpr, BLOCK: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, rank, world)
    left, right = (rank + world - 1) % world, (rank + 1) % world
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = ctx.load(src + offs, right, mask=mask, other=-7, cache_modifier=".cg", hint=16)
    tl.store(loaded + offs, x)
    ctx.store(stored + offs, tl.load(src + offs, mask=mask), right, mask=mask, cache_modifier=".wt", hint=16)
    ctx.get(src + offs, got + offs, left, mask=mask, load_cache_modifier=".ca", store_cache_modifier=".cs")
    ctx.put(src + offs, put_in + offs, right, mask=mask, other=0, hint=16)
    ctx.copy(src + offs, copied_in + offs, left, rank, mask=mask, load_cache_modifier=".cv")
    ctx.copy(src + offs, copied_out + offs, rank, right, mask=mask, store_cache_modifier=".wb")


@gluon.jit
def rma_gluon(IrisDeviceCtx: gl.constexpr, context_tensor, src, loaded, stored, got, put_in, copied_in,
              copied_out, n, BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    left = (ctx.cur_rank + ctx.num_ranks - 1) % ctx.num_ranks
    right = (ctx.cur_rank + 1) % ctx.num_ranks
    offs = gl.arange(0, BLOCK, layout=LAYOUT)
    mask = offs < n
    x = ctx.load(src + offs, right, mask=mask, other=-7, cache_modifier=".cg", hint=16)
    gl.store(loaded + offs, x)
    ctx.store(stored + offs, gl.load(src + offs, mask=mask), right, mask=mask, cache_modifier=".wt", hint=16)
    ctx.get(src + offs, got + offs, left, mask=mask, load_cache_modifier=".ca", store_cache_modifier=".cs")
    ctx.put(src + offs, put_in + offs, right, mask=mask, other=0, hint=16)
    ctx.copy(src + offs, copied_in + offs, left, ctx.cur_rank, mask=mask, load_cache_modifier=".cv")
    ctx.copy(src + offs, copied_out + offs, ctx.cur_rank, right, mask=mask, store_cache_modifier=".wb")


def _launch_rma(api, ctx, bufs):
    r, n = ctx.cur_rank, ctx.num_ranks
    if api == "functional":
        rma_functional[(1,)](*bufs, ctx.get_heap_bases(), r, (r - 1) % n, (r + 1) % n, VALID, BLOCK=BLOCK)
    elif api == "device_context":
        rma_device_context[(1,)](ctx.get_device_context(), *bufs, VALID, rank=r, world=n, BLOCK=BLOCK)
    else:
        rma_gluon[(1,)](IrisDeviceCtx, ctx.get_device_context(), *bufs, VALID, BLOCK)


def _check_rma(api, dtype, ctx, bufs):
    r, n = ctx.cur_rank, ctx.num_ranks
    left, right = _source((r - 1) % n, dtype), _source((r + 1) % n, dtype)
    valid = torch.arange(BLOCK) < VALID
    zero = torch.zeros(BLOCK, dtype=dtype)
    loaded = torch.where(valid, right, torch.full((BLOCK,), -7, dtype=dtype))
    if dtype == torch.bfloat16 and BACKEND == "cpu":
        # triton 3.6's interpreter turns a bf16 `other` into NaN even in a plain tl.load: check the data only.
        bufs[1], loaded = bufs[1][:VALID], loaded[:VALID]
    _expect(f"{api} {dtype} load", bufs[1], loaded)
    for i, op in enumerate(("store", "get", "put", "copy remote->local", "copy local->remote"), start=2):
        _expect(f"{api} {dtype} {op}", bufs[i], torch.where(valid, left, zero))


def every_rma_op():
    """Every RMA op of the three APIs over int32/float32/float16/bfloat16, masked, between ring neighbours."""
    ctx = _ctx()
    for api in API_NAMES:
        for dtype in RMA_DTYPES:
            src = ctx.zeros(BLOCK, dtype=dtype)
            src.copy_(_source(ctx.cur_rank, dtype).to(ctx.device))
            bufs = [src] + [ctx.zeros(BLOCK, dtype=dtype) for _ in range(6)]
            ctx.barrier()
            _launch_rma(api, ctx, bufs)
            ctx.barrier()
            _check_rma(api, dtype, ctx, bufs)
            ctx.barrier()  # nobody frees or reuses buffers a peer may still check
    return {"rank": ctx.cur_rank, "checked": len(API_NAMES) * len(RMA_DTYPES)}


# ------------------------------------------------------------------ atomics, every sem x scope
# Rows of `cnt` (BLOCK lanes each) on every rank: 0 add, 1 sub, 2 or, 3 and, 4 xor, 5 min, 6 max,
# 7 + r: rank r's xchg slot, 7 + world + r: rank r's cas slot. Every rank updates every rank's rows, once
# per (sem, scope) launch `step`; xchg and cas slots have one writer, so their old values are exact.
# KIND 0: int32, every op. KIND 1: float32: add, xchg, cas. KIND 2: fp16/bf16: add only, into the right
# neighbour alone (the CPU interpreter's fp16 atomics are atomic only within one process).

@triton.jit
def atomics_functional(cnt, olds, heap_bases, rank, world, n, step, BLOCK: tl.constexpr, KIND: tl.constexpr,
                       SEM: tl.constexpr, SCOPE: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    if KIND == 2:
        iris.atomic_add(cnt + offs, 1, rank, (rank + 1) % world, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
    else:
        for target in range(world):
            iris.atomic_add(cnt + offs, 1, rank, target, heap_bases, mask=mask, sem=SEM, scope=SCOPE, hint=16)
            slot = cnt + (7 + rank) * BLOCK + offs
            old = iris.atomic_xchg(slot, step + 1, rank, target, heap_bases, mask=mask, sem=SEM,
                                   scope=SCOPE)
            tl.store(olds + (target * 2) * BLOCK + offs, old, mask=mask)
            slot = cnt + (7 + world + rank) * BLOCK + offs
            expected = tl.zeros([BLOCK], cnt.dtype.element_ty) + step
            old = iris.atomic_cas(slot, expected, expected + 1, rank, target, heap_bases, sem=SEM,
                                  scope=SCOPE)
            tl.store(olds + (target * 2 + 1) * BLOCK + offs, old, mask=mask)
            if KIND == 0:
                bit = 1 << rank
                iris.atomic_sub(cnt + BLOCK + offs, 1, rank, target, heap_bases, mask=mask, sem=SEM,
                                scope=SCOPE)
                iris.atomic_or(cnt + 2 * BLOCK + offs, bit, rank, target, heap_bases, mask=mask, sem=SEM,
                               scope=SCOPE)
                iris.atomic_and(cnt + 3 * BLOCK + offs, ~(bit << 8), rank, target, heap_bases, mask=mask,
                                sem=SEM, scope=SCOPE)
                iris.atomic_xor(cnt + 4 * BLOCK + offs, (step + 1) << (8 * rank), rank, target, heap_bases,
                                mask=mask, sem=SEM, scope=SCOPE)
                low = 1000 - step * 10 - rank + offs
                iris.atomic_min(cnt + 5 * BLOCK + offs, low, rank, target, heap_bases, mask=mask, sem=SEM,
                                scope=SCOPE)
                iris.atomic_max(cnt + 6 * BLOCK + offs, step * 10 + rank - offs, rank, target, heap_bases,
                                mask=mask, sem=SEM, scope=SCOPE)


@triton.jit
def atomics_device_context(context, cnt, olds, n, step, rank: tl.constexpr, world: tl.constexpr,
                           BLOCK: tl.constexpr, KIND: tl.constexpr, SEM: tl.constexpr, SCOPE: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, rank, world)
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    if KIND == 2:
        ctx.atomic_add(cnt + offs, 1, (rank + 1) % world, mask=mask, sem=SEM, scope=SCOPE)
    else:
        for target in range(world):
            ctx.atomic_add(cnt + offs, 1, target, mask=mask, sem=SEM, scope=SCOPE, hint=16)
            old = ctx.atomic_xchg(cnt + (7 + rank) * BLOCK + offs, step + 1, target, mask=mask, sem=SEM,
                                  scope=SCOPE)
            tl.store(olds + (target * 2) * BLOCK + offs, old, mask=mask)
            expected = tl.zeros([BLOCK], cnt.dtype.element_ty) + step
            slot = cnt + (7 + world + rank) * BLOCK + offs
            old = ctx.atomic_cas(slot, expected, expected + 1, target, sem=SEM, scope=SCOPE)
            tl.store(olds + (target * 2 + 1) * BLOCK + offs, old, mask=mask)
            if KIND == 0:
                bit = 1 << rank
                ctx.atomic_sub(cnt + BLOCK + offs, 1, target, mask=mask, sem=SEM, scope=SCOPE)
                ctx.atomic_or(cnt + 2 * BLOCK + offs, bit, target, mask=mask, sem=SEM, scope=SCOPE)
                ctx.atomic_and(cnt + 3 * BLOCK + offs, ~(bit << 8), target, mask=mask, sem=SEM, scope=SCOPE)
                ctx.atomic_xor(cnt + 4 * BLOCK + offs, (step + 1) << (8 * rank), target, mask=mask, sem=SEM,
                               scope=SCOPE)
                low = 1000 - step * 10 - rank + offs
                ctx.atomic_min(cnt + 5 * BLOCK + offs, low, target, mask=mask, sem=SEM, scope=SCOPE)
                ctx.atomic_max(cnt + 6 * BLOCK + offs, step * 10 + rank - offs, target, mask=mask, sem=SEM,
                               scope=SCOPE)


@gluon.jit
def atomics_gluon(IrisDeviceCtx: gl.constexpr, context_tensor, cnt, olds, n, step, BLOCK: gl.constexpr,
                  KIND: gl.constexpr, SEM: gl.constexpr, SCOPE: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    rank, world = ctx.cur_rank, ctx.num_ranks
    offs = gl.arange(0, BLOCK, layout=LAYOUT)
    mask = offs < n
    dtype = cnt.dtype.element_ty
    one = gl.full([BLOCK], 1, dtype, LAYOUT)  # Gluon does not broadcast scalar operands of atomics
    if KIND == 2:
        ctx.atomic_add(cnt + offs, one, (rank + 1) % world, mask=mask, sem=SEM, scope=SCOPE)
    else:
        for target in range(world):
            ctx.atomic_add(cnt + offs, one, target, mask=mask, sem=SEM, scope=SCOPE, hint=16)
            new = gl.full([BLOCK], step + 1, dtype, LAYOUT)
            slot = cnt + (7 + rank) * BLOCK + offs
            old = ctx.atomic_xchg(slot, new, target, mask=mask, sem=SEM, scope=SCOPE)
            gl.store(olds + (target * 2) * BLOCK + offs, old, mask=mask)
            slot = cnt + (7 + world + rank) * BLOCK + offs
            expected = gl.full([BLOCK], step, dtype, LAYOUT)
            old = ctx.atomic_cas(slot, expected, new, target, sem=SEM, scope=SCOPE)
            gl.store(olds + (target * 2 + 1) * BLOCK + offs, old, mask=mask)
            if KIND == 0:
                bit = gl.full([BLOCK], 1, gl.int32, LAYOUT) << rank
                ctx.atomic_sub(cnt + BLOCK + offs, one, target, mask=mask, sem=SEM, scope=SCOPE)
                ctx.atomic_or(cnt + 2 * BLOCK + offs, bit, target, mask=mask, sem=SEM, scope=SCOPE)
                ctx.atomic_and(cnt + 3 * BLOCK + offs, ~(bit << 8), target, mask=mask, sem=SEM, scope=SCOPE)
                ctx.atomic_xor(cnt + 4 * BLOCK + offs, new << (8 * rank), target, mask=mask, sem=SEM,
                               scope=SCOPE)
                low = 1000 - step * 10 - rank + offs
                ctx.atomic_min(cnt + 5 * BLOCK + offs, low, target, mask=mask, sem=SEM, scope=SCOPE)
                ctx.atomic_max(cnt + 6 * BLOCK + offs, step * 10 + rank - offs, target, mask=mask, sem=SEM,
                               scope=SCOPE)


def _atomic_dtypes():
    # bf16 atomics on the CPU interpreter are covered by tests/rank_cases_bf16.py.
    if BACKEND == "cuda":
        return [(torch.int32, 0), (torch.float32, 1), (torch.float16, 2), (torch.bfloat16, 2)]
    return [(torch.int32, 0), (torch.float32, 1), (torch.float16, 2)]


def _launch_atomics(api, ctx, cnt, olds, step, kind, sem, scope):
    r, n = ctx.cur_rank, ctx.num_ranks
    if api == "functional":
        atomics_functional[(1,)](cnt, olds, ctx.get_heap_bases(), r, n, VALID, step, BLOCK=BLOCK, KIND=kind,
                                 SEM=sem, SCOPE=scope)
    elif api == "device_context":
        atomics_device_context[(1,)](ctx.get_device_context(), cnt, olds, VALID, step, rank=r, world=n,
                                     BLOCK=BLOCK, KIND=kind, SEM=sem, SCOPE=scope)
    else:
        atomics_gluon[(1,)](IrisDeviceCtx, ctx.get_device_context(), cnt, olds, VALID, step, BLOCK, kind, sem,
                            scope)


def _atomic_rows(n, kind, steps, dtype):
    """Host reference of every rank's ``cnt`` after ``steps`` launches on each of the ``n`` ranks."""
    lanes = torch.arange(BLOCK)
    rows = torch.zeros(7 + 2 * n, BLOCK, dtype=torch.int64)
    rows[0] = steps if kind == 2 else steps * n
    if kind == 0:
        rows[1] = -steps * n
        rows[2] = (1 << n) - 1
        rows[3] = ~(((1 << n) - 1) << 8)
        xor_of_steps = functools.reduce(operator.xor, range(1, steps + 1))
        rows[4] = functools.reduce(operator.or_, (xor_of_steps << (8 * r) for r in range(n)))
        rows[5] = 1000 - (steps - 1) * 10 - (n - 1) + lanes
        rows[6] = (steps - 1) * 10 + (n - 1) - lanes
    if kind in (0, 1):
        rows[7:7 + n] = steps
    if kind != 2:
        rows[7 + n:] = steps
    valid = (lanes < VALID).expand(7 + 2 * n, BLOCK).clone()
    if kind != 2:
        valid[7 + n:] = True  # atomic_cas has no mask: every lane of the cas slots changes
    return torch.where(valid, rows.to(dtype), _atomic_start(n, kind, dtype))


def _atomic_start(n, kind, dtype):
    start = torch.zeros(7 + 2 * n, BLOCK, dtype=dtype)
    if kind == 0:
        start[3], start[5], start[6] = -1, 1 << 30, -(1 << 30)
    return start


def every_atomic():
    """Every atomic of the three APIs, each launched once per (sem, scope) pair, on every rank's counters."""
    ctx = _ctx()
    r, n = ctx.cur_rank, ctx.num_ranks
    combos = [(sem, scope) for sem in SEMS for scope in SCOPES]
    for api in API_NAMES:
        for dtype, kind in _atomic_dtypes():
            cnt = ctx.zeros(7 + 2 * n, BLOCK, dtype=dtype)
            cnt.copy_(_atomic_start(n, kind, dtype).to(ctx.device))
            olds = ctx.zeros(2 * n, BLOCK, dtype=dtype)
            ctx.barrier()
            for step, (sem, scope) in enumerate(combos):
                _launch_atomics(api, ctx, cnt, olds, step, kind, sem, scope)
                if kind != 2:  # this rank's xchg/cas slots on every target held `step` before this launch
                    checked = olds[:, :VALID]
                    _expect(f"{api} {dtype} xchg/cas old values at step {step}", checked,
                            torch.full(checked.shape, step, dtype=dtype))
            ctx.barrier()
            _expect(f"{api} {dtype} atomics on rank {r}", cnt, _atomic_rows(n, kind, len(combos), dtype))
            ctx.barrier()
    return {"rank": r, "launches": len(combos) * len(API_NAMES) * len(_atomic_dtypes())}


# ------------------------------------------------------------------ synchronisation across ranks

@triton.jit
def locked_increments_functional(lock, counter, heap_bases, rank, times):
    """A spin lock on rank 0 (atomic_cas acquire / atomic_xchg release) guarding a plain load + store."""
    for _ in range(times):
        while iris.atomic_cas(lock, 0, 1, rank, 0, heap_bases, sem="acquire", scope="sys") != 0:
            pass
        value = iris.load(counter, rank, 0, heap_bases, volatile=True)
        iris.store(counter, value + 1, rank, 0, heap_bases)
        tl.debug_barrier()  # on a GPU: every thread's store before the (one-thread) release
        iris.atomic_xchg(lock, 0, rank, 0, heap_bases, sem="release", scope="sys")


@gluon.jit
def locked_increments_gluon(IrisDeviceCtx: gl.constexpr, context_tensor, lock, counter, times):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    for _ in range(times):
        while ctx.atomic_cas(lock, 0, 1, 0, sem="acquire", scope="sys") != 0:
            pass
        value = ctx.load(counter, 0, volatile=True)
        ctx.store(counter, value + 1, 0)
        cta_barrier()
        ctx.atomic_xchg(lock, 0, 0, sem="release", scope="sys")


@triton.jit
def ring_messages_functional(inbox, flag, heap_bases, rank, world, rounds, BLOCK: tl.constexpr):
    """Producer/consumer: put a message into the right neighbour's inbox, then raise its flag (release);
    wait for the own flag (acquire) before reading what the left neighbour sent."""
    offs = tl.arange(0, BLOCK)
    right = (rank + 1) % world
    for k in range(rounds):
        message = rank * 1000 + k * 100 + offs
        iris.store(inbox + k * BLOCK + offs, message, rank, right, heap_bases)
        tl.debug_barrier()  # on a GPU: every thread's part of the message before the (one-thread) release
        iris.atomic_add(flag, 1, rank, right, heap_bases, sem="release", scope="sys")
        while iris.atomic_add(flag, 0, rank, rank, heap_bases, sem="acquire", scope="sys") <= k:
            pass


@triton.jit
def ring_messages_device_context(context, inbox, flag, rounds, rank: tl.constexpr, world: tl.constexpr,
                                 BLOCK: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, rank, world)
    offs = tl.arange(0, BLOCK)
    right = (rank + 1) % world
    for k in range(rounds):
        tl.store(ctx.as_remote(inbox + k * BLOCK + offs, right), rank * 1000 + k * 100 + offs)
        tl.debug_barrier()
        ctx.atomic_xchg(flag + k, 1, right, sem="release", scope="sys")
        while ctx.atomic_cas(flag + k, 1, 1, rank, sem="acquire", scope="sys") != 1:
            pass


@gluon.jit
def ring_messages_gluon(IrisDeviceCtx: gl.constexpr, context_tensor, inbox, flag, rounds,
                        BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK, layout=LAYOUT)
    right = (ctx.cur_rank + 1) % ctx.num_ranks
    for k in range(rounds):
        ctx.put(inbox + (rounds + k) * BLOCK + offs, inbox + k * BLOCK + offs, right)
        cta_barrier()
        ctx.atomic_add(flag, 1, right, sem="release", scope="sys")
        while ctx.atomic_or(flag, 0, ctx.cur_rank, sem="acquire", scope="sys") <= k:
            pass


@triton.jit
def device_as_remote(context, buf, addresses, values, rank: tl.constexpr, world: tl.constexpr,
                     BLOCK: tl.constexpr):
    """Write where ``as_remote`` points on every rank, and what a plain tl.load reads there."""
    ctx = iris.DeviceContext.initialize(context, rank, world)
    offs = tl.arange(0, BLOCK)
    for peer in tl.static_range(world):
        remote = ctx.as_remote(buf + offs, peer, hint=16)
        tl.store(addresses + peer * BLOCK + offs, remote.to(tl.int64))
        tl.store(values + peer * BLOCK + offs, tl.load(remote))


@gluon.jit
def device_as_remote_gluon(IrisDeviceCtx: gl.constexpr, context_tensor, buf, addresses, values,
                           BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK, layout=LAYOUT)
    for peer in range(ctx.num_ranks):
        remote = ctx.as_remote(buf + offs, peer)
        gl.store(addresses + peer * BLOCK + offs, remote.to(gl.int64))
        gl.store(values + peer * BLOCK + offs, gl.load(remote))


# DESIGN.md's example, verbatim.
@gluon.jit
def read_from_peer(IrisDeviceCtx: gl.constexpr, context_tensor, buf, out, peer: gl.constexpr, BLOCK: gl.constexpr):  # noqa: E501
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK)       # no layout given: auto layout
    mask = offs < BLOCK
    remote_ptr = ctx.as_remote(buf + offs, peer)                  # translate once ...
    gl.store(out + offs, gl.load(remote_ptr, mask=mask), mask=mask)  # ... then plain gl.load / gl.store


def _locks(ctx, times):
    r = ctx.cur_rank
    for api in ("functional", "gluon"):
        lock, counter = ctx.zeros(1, dtype=torch.int32), ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()
        if api == "functional":
            locked_increments_functional[(1,)](lock, counter, ctx.get_heap_bases(), r, times, num_warps=1)
        else:
            locked_increments_gluon[(1,)](IrisDeviceCtx, ctx.get_device_context(), lock, counter, times,
                                          num_warps=1)
        ctx.barrier()
        if r == 0:
            total = torch.tensor([times * ctx.num_ranks], dtype=torch.int32)
            _expect(f"{api} spin-lock counter", counter, total)
        ctx.barrier()


def _ring(ctx, rounds):
    r, n = ctx.cur_rank, ctx.num_ranks
    left = (r - 1) % n
    expected = left * 1000 + torch.arange(rounds)[:, None] * 100 + torch.arange(BLOCK)[None, :]
    for api in API_NAMES:
        inbox = ctx.zeros(2 * rounds, BLOCK, dtype=torch.int32)  # gluon sends rows rounds.. of its own
        flag = ctx.zeros(rounds, dtype=torch.int32)
        inbox[rounds:] = (r * 1000 + torch.arange(rounds)[:, None] * 100 + torch.arange(BLOCK)).to(ctx.device)
        ctx.barrier()
        if api == "functional":
            ring_messages_functional[(1,)](inbox, flag, ctx.get_heap_bases(), r, n, rounds, BLOCK=BLOCK)
        elif api == "device_context":
            ring_messages_device_context[(1,)](ctx.get_device_context(), inbox, flag, rounds, rank=r, world=n,
                                               BLOCK=BLOCK)
        else:
            ring_messages_gluon[(1,)](IrisDeviceCtx, ctx.get_device_context(), inbox, flag, rounds, BLOCK)
        # Each rank's kernel returned only after its own flag showed every round: the messages are there
        # without a host barrier (what a barrier would hide is what this checks).
        _expect(f"{api} ring messages from rank {left}", inbox[:rounds], expected.to(torch.int32))
        ctx.barrier()


def _as_remote(ctx):
    r, n = ctx.cur_rank, ctx.num_ranks
    buf = ctx.zeros(BLOCK, dtype=torch.float32)
    buf.copy_(_source(r, torch.float32).to(ctx.device))
    ctx.barrier()
    expected_addresses = torch.tensor([[ctx.as_remote(buf, p).data_ptr() + 4 * i for i in range(BLOCK)]
                                       for p in range(n)], dtype=torch.int64)
    expected_values = torch.stack([_host(ctx.as_remote(buf, p)) for p in range(n)])
    for api in ("device_context", "gluon"):
        addresses = ctx.zeros(n, BLOCK, dtype=torch.int64)
        values = ctx.zeros(n, BLOCK, dtype=torch.float32)
        if api == "device_context":
            device_as_remote[(1,)](ctx.get_device_context(), buf, addresses, values, rank=r, world=n,
                                   BLOCK=BLOCK)
        else:
            device_as_remote_gluon[(1,)](IrisDeviceCtx, ctx.get_device_context(), buf, addresses, values,
                                         BLOCK)
        _expect(f"{api} as_remote addresses", addresses, expected_addresses)
        _expect(f"{api} as_remote values", values, expected_values)
        _expect(f"{api} as_remote values vs sources", values, torch.stack([_source(p, torch.float32)
                                                                            for p in range(n)]))
    ctx.barrier()


def _read_from_peer(ctx):
    r, n = ctx.cur_rank, ctx.num_ranks
    buf = ctx.full((64,), float(r), dtype=torch.float32)
    out = ctx.zeros(64, dtype=torch.float32)
    ctx.barrier()
    peer = (r + 1) % n
    read_from_peer[(1,)](IrisDeviceCtx, ctx.get_device_context(), buf, out, peer, 64)
    _expect("read_from_peer", out, torch.full((64,), float(peer)))
    ctx.barrier()


def _every_method_layoutless(ctx):
    """Every IrisDeviceCtx method on layout-less blocks (tests/gluon_auto_layout_kernels.py): anchored on a
    GPU, plain on the CPU. This rank's counters are touched by its left neighbour only:
    0 +1 -1 xchg1 ^1 &1 |1 min1 max1 cas(1->2) = 2, and the lock after them is free again."""
    r, n = ctx.cur_rank, ctx.num_ranks
    peer, block = (r + 1) % n, 128
    src = ctx.full((block,), float(r), dtype=torch.float32)
    dst, out = ctx.zeros(block, dtype=torch.float32), ctx.zeros(block, dtype=torch.float32)
    counters = ctx.zeros(block + 1, dtype=torch.int32)
    ctx.barrier()
    every_method[(1,)](IrisDeviceCtx, ctx.get_device_context(), src, dst, counters, out, peer, block)
    ctx.barrier()
    _expect("every_method: loads through as_remote", out, torch.full((block,), float(peer)))
    expected = torch.full((block + 1,), 2, dtype=torch.int32)
    expected[block] = 0
    _expect("every_method: atomics in order, lock released", counters, expected)


def _volatile_loads(ctx):
    """A volatile load with ``.cv`` reads the peer's data through every API. With ``.ca``/``.cg``, which PTX
    cannot express, every API refuses it on a GPU; the CPU interpreter runs it (upstream code has such loads)
    and warns that a GPU would not."""
    r, n = ctx.cur_rank, ctx.num_ranks
    peer, block = (r + 1) % n, portability.BLOCK
    src, out = ctx.full((block,), float(r), dtype=torch.float32), ctx.zeros(block, dtype=torch.float32)
    ctx.barrier()
    launches = {
        "functional": lambda cm: portability.volatile_load_functional[(1,)](
            src, out, ctx.get_heap_bases(), r, peer, cm, block),
        "device_context": lambda cm: portability.volatile_load_device_context[(1,)](
            ctx.get_device_context(), src, out, peer, r, n, cm, block),
        "gluon": lambda cm: portability.volatile_load_gluon[(1,)](
            IrisDeviceCtx, ctx.get_device_context(), src, out, peer, cm, block),
    }
    for api, launch in launches.items():
        out.zero_()
        launch(".cv")
        _expect(f"{api} volatile .cv load", out, torch.full((block,), float(peer)))
        for modifier in (".ca", ".cg"):
            if BACKEND == "cpu":
                out.zero_()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    launch(modifier)
                _expect(f"{api} volatile {modifier} load on the interpreter", out, torch.full((block,), float(peer)))
                if not any(isinstance(w.message, VolatileCacheModifierWarning) for w in caught):
                    raise AssertionError(f"{api}: no warning that a GPU refuses volatile with {modifier}")
                continue
            try:
                launch(modifier)
            except Exception as error:  # a CompilationError
                if portability.volatile_refusal(error) is None:
                    raise
            else:
                raise AssertionError(f"{api}: a volatile load with cache_modifier={modifier!r} was accepted")
    ctx.barrier()


def synchronisation_and_as_remote(times=8, rounds=4):
    """Spin lock across ranks, ring message passing, host/device as_remote agreement, DESIGN's example, every
    IrisDeviceCtx method on layout-less blocks, volatile loads."""
    ctx = _ctx()
    _volatile_loads(ctx)
    _locks(ctx, times)
    _ring(ctx, rounds)
    _as_remote(ctx)
    _read_from_peer(ctx)  # layout-less: IrisDeviceCtx anchors it on a GPU (see iris.gluon)
    _every_method_layoutless(ctx)
    return {"rank": ctx.cur_rank}


# ------------------------------------------------------------------ debug mode

@triton.jit
def put_block(src, dst, heap_bases, rank, peer, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.put(src + offs, dst + offs, rank, peer, heap_bases, mask=offs < n)


@triton.jit
def read_last_bytes(context, buf, out, rank: tl.constexpr, world: tl.constexpr, BLOCK: tl.constexpr):
    """Masked lanes past the end of the heap must not trip the check."""
    ctx = iris.DeviceContext.initialize(context, rank, world)
    offs = tl.arange(0, BLOCK)
    tl.store(out + offs, ctx.load(buf + offs, (rank + 1) % world, mask=offs < 4, other=0.0), mask=offs < 4)


def _error_of(launch):
    try:
        launch()
    except iris.IrisDebugError as error:
        return str(error)
    raise AssertionError("debug mode let a bad pointer through")


def debug_mode_catches_bad_pointers():
    """With IRIS_DEBUG=1: good launches pass, a non-heap pointer and a wrong rank raise IrisDebugError."""
    ctx, r, n, src, dst, tail, out = _debug_setup()
    outside = torch.zeros(BLOCK, dtype=torch.float32, device=ctx.device)  # not on the heap
    put_error = _error_of(lambda: put_block[(1,)](src, outside, ctx.get_heap_bases(), r, (r + 1) % n, 10,
                                                  BLOCK=BLOCK))
    rank_error = _error_of(lambda: read_last_bytes[(1,)](ctx.get_device_context(), tail, out,
                                                         rank=(r + 1) % n, world=n, BLOCK=TAIL_BLOCK))
    ctx.barrier()
    return {"rank": r, "put": put_error, "wrong_rank": rank_error}


TAIL_BLOCK = 128  # 512 bytes from the start of the heap's last 256-byte block: past the heap's end


def _debug_setup():
    """Debug-mode context; good launches (incl. masked lanes past the heap's end) must pass the checks."""
    ctx = _ctx("1MiB")
    r, n = ctx.cur_rank, ctx.num_ranks
    assert ctx.debug_mode
    src = ctx.full((BLOCK,), float(r + 1), dtype=torch.float32)
    dst = ctx.zeros(BLOCK, dtype=torch.float32)
    out = ctx.zeros(4, dtype=torch.float32)
    # Fill all but the heap's last 256 bytes.
    ctx.empty((ctx.heap_usage().largest_free - 256) // 4, dtype=torch.float32)
    tail = ctx.full((4,), float(r), dtype=torch.float32)
    ctx.barrier()
    put_block[(1,)](src, dst, ctx.get_heap_bases(), r, (r + 1) % n, BLOCK, BLOCK=BLOCK)
    read_last_bytes[(1,)](ctx.get_device_context(), tail, out, rank=r, world=n, BLOCK=TAIL_BLOCK)
    ctx.barrier()
    _expect("debug-mode put", dst, torch.full((BLOCK,), float((r - 1) % n + 1)))
    _expect("debug-mode tail read", out, torch.full((4,), float((r + 1) % n)))
    return ctx, r, n, src, dst, tail, out
