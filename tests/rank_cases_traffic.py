"""Code that runs inside each rank for tests/test_traffic.py: kernels whose traffic is counted by hand.

``all_ops`` makes every kind of access once per program, masked (lanes ``VALID..`` off), at a target rank:
load, store, get, put, copy (both ways), the eight masked atomics and a compare-and-swap of a whole block that
always fails. ``functional_all_ops`` is the same through the functional API. Each case records launches with
``iris.traffic.record`` and returns every launch's matrix (collective), so the test compares them with its own
hand count.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

import iris
from iris.interpret import access_events

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")
BLOCK, VALID, GRID = 16, 13, 2


@triton.jit
def all_ops(context, src, dst, counters, target, rank: tl.constexpr, world: tl.constexpr, BLOCK: tl.constexpr,
            VALID: tl.constexpr, TRACE: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, rank, world, tracing=TRACE)
    offs = tl.arange(0, BLOCK)
    mask = offs < VALID
    x = ctx.load(src + offs, target, mask=mask, other=0.0)
    ctx.store(dst + offs, x, target, mask=mask)
    ctx.get(src + offs, dst + offs, target, mask=mask)
    ctx.put(src + offs, dst + offs, target, mask=mask)
    ctx.copy(src + offs, dst + offs, rank, target, mask=mask)
    ctx.copy(src + offs, dst + offs, target, rank, mask=mask)
    c = counters + tl.program_id(0) * BLOCK + offs
    ctx.atomic_add(c, 1, target, mask=mask)
    ctx.atomic_sub(c, 1, target, mask=mask)
    ctx.atomic_xchg(c, 0, target, mask=mask)
    ctx.atomic_and(c, 0, target, mask=mask)
    ctx.atomic_or(c, 0, target, mask=mask)
    ctx.atomic_xor(c, 0, target, mask=mask)
    ctx.atomic_min(c, 0, target, mask=mask)
    ctx.atomic_max(c, 0, target, mask=mask)
    ctx.atomic_cas(c, offs * 0 - 7, offs * 0 + 1, target)  # the counters hold 0: every lane fails, yet counts


@triton.jit
def functional_all_ops(context, src, dst, counters, target, rank: tl.constexpr, BLOCK: tl.constexpr,
                       VALID: tl.constexpr):
    heap_bases = context + 2
    offs = tl.arange(0, BLOCK)
    mask = offs < VALID
    x = iris.load(src + offs, rank, target, heap_bases, mask=mask, other=0.0)
    iris.store(dst + offs, x, rank, target, heap_bases, mask=mask)
    iris.get(src + offs, dst + offs, rank, target, heap_bases, mask=mask)
    iris.put(src + offs, dst + offs, rank, target, heap_bases, mask=mask)
    iris.copy(src + offs, dst + offs, rank, target, rank, heap_bases, mask=mask)
    iris.copy(src + offs, dst + offs, target, rank, rank, heap_bases, mask=mask)
    c = counters + tl.program_id(0) * BLOCK + offs
    iris.atomic_add(c, 1, rank, target, heap_bases, mask=mask)
    iris.atomic_sub(c, 1, rank, target, heap_bases, mask=mask)
    iris.atomic_xchg(c, 0, rank, target, heap_bases, mask=mask)
    iris.atomic_and(c, 0, rank, target, heap_bases, mask=mask)
    iris.atomic_or(c, 0, rank, target, heap_bases, mask=mask)
    iris.atomic_xor(c, 0, rank, target, heap_bases, mask=mask)
    iris.atomic_min(c, 0, rank, target, heap_bases, mask=mask)
    iris.atomic_max(c, 0, rank, target, heap_bases, mask=mask)
    iris.atomic_cas(c, offs * 0 - 7, offs * 0 + 1, rank, target, heap_bases)


def _buffers(ctx):
    return (ctx.zeros(BLOCK, name="src"), ctx.zeros(BLOCK, name="dst"),
            ctx.zeros(GRID * BLOCK, dtype=torch.int32, name="counters"))


def _launch(ctx, api, buffers, target, trace=False):
    context = ctx.get_device_context()
    if api == "functional":
        functional_all_ops[(GRID,)](context, *buffers, target, ctx.cur_rank, BLOCK, VALID)
    else:
        all_ops[(GRID,)](context, *buffers, target, ctx.cur_rank, ctx.num_ranks, BLOCK, VALID, trace)


def _as_json(matrix) -> dict:
    return {"kernel": matrix.kernel, "bytes": matrix.bytes.tolist(), "outside": matrix.outside.tolist(),
            "atomic_ops": {name: counts.tolist() for name, counts in matrix.atomic_ops.items()},
            "operations": matrix.operations.tolist(), "crossing": matrix.crossing().tolist()}


def _record_every_launch(ctx, buffers):
    """Both APIs, at the peer on the right and at this rank's own heap: one launch each, recorded."""
    rank = ctx.cur_rank
    with iris.traffic.record(ctx) as rec:
        assert rec in access_events._observers
        for api in ("device_context", "functional"):
            for target in ((rank + 1) % ctx.num_ranks, rank):
                _launch(ctx, api, buffers, target)
                ctx.barrier()
    return rec


def hand_counted():
    """Every launch's matrix and all launches' sum, recorded once without the race checker and once beside it;
    whether the observer is gone (after the block, and after a block that raised); the error for a launch only
    rank 0 made."""
    ctx = iris.iris("8MiB", backend=BACKEND)
    buffers = _buffers(ctx)
    rank, world = ctx.cur_rank, ctx.num_ranks
    rec = _record_every_launch(ctx, buffers)
    observer_removed = rec not in access_events._observers
    _launch(ctx, "device_context", buffers, (rank + 1) % world)  # after the block: not counted
    counted_after = len(rec.launches)
    try:
        with iris.traffic.record(ctx) as failing:
            raise KeyError("a cell that fails")
    except KeyError:
        pass
    removed_after_error = failing not in access_events._observers
    ctx.barrier()
    matrices = [_as_json(rec.matrix(launch=k)) for k in range(len(rec.launches))]
    every_launch = _as_json(rec.matrix())
    with iris.traffic.record(ctx) as only_rank_0:  # rec.matrix(launch=K) for a launch only rank 0 made
        if rank == 0:
            _launch(ctx, "device_context", buffers, rank)
    try:
        only_rank_0.matrix(launch=0)
        missing = "no error"
    except IndexError as error:
        missing = str(error)
    ctx.start_race_check()  # collective
    checked = _record_every_launch(ctx, buffers)
    races = len(ctx.races())
    ctx.barrier()
    checked_matrices = [_as_json(checked.matrix(launch=k)) for k in range(len(checked.launches))]
    ctx.barrier()
    return {"missing_launch": missing, "matrices": matrices, "checked_matrices": checked_matrices,
            "all": every_launch, "observer_removed": observer_removed, "removed_after_error": removed_after_error,
            "launches_after": counted_after, "races": races,
            "text": rec.matrix(launch=0).with_minimum(iris.traffic.minimum.all_gather(VALID * 4, world)).to_text()}


def traced_counts():
    """all_ops traced (``tracing=True``) at the peer on the right, counted from the trace (``source="trace"``, the
    default on CUDA): every rank's matrix; an untraced launch in the same block counts nothing."""
    ctx = iris.iris("8MiB", backend=BACKEND)
    buffers = _buffers(ctx)
    right = (ctx.cur_rank + 1) % ctx.num_ranks
    with iris.traffic.record(ctx, source="trace") as rec:
        _launch(ctx, "device_context", buffers, right, trace=True)
        _launch(ctx, "device_context", buffers, right, trace=False)
        ctx.barrier()
    matrix = rec.matrix()
    ctx.barrier()
    return {**_as_json(matrix), "source": matrix.source, "launches": len(rec.launches),
            "dropped": rec.dropped_events}


def lesson13_ag_gemm(directory: str):
    """Lesson 13's first all-gather + GEMM kernel (``sequence_parallel.AllGatherGemm``, written from the lesson's
    cells into ``directory``) at the lesson's sizes, one call recorded; its matrix beside an all-gather's need."""
    import sys

    sys.path.insert(0, directory)
    import sequence_parallel

    ctx = iris.iris("16MiB", backend=BACKEND)
    m, hidden, width = 64, 32, 128
    m_local, w_local = m // ctx.num_ranks, width // ctx.num_ranks
    X_local = ctx.zeros(m_local, hidden, name="X_local")
    X_local.copy_(torch.randn(m_local, hidden, generator=torch.Generator().manual_seed(ctx.cur_rank)))
    W1_local = torch.randn(hidden, w_local, generator=torch.Generator().manual_seed(7))
    Y = torch.zeros(m, w_local)
    all_gather_gemm = sequence_parallel.AllGatherGemm(ctx, m, hidden, w_local, block_m=16, block_n=32, block_k=16)
    with iris.traffic.record(ctx) as rec:
        all_gather_gemm(Y, X_local, W1_local, trace=False)
    need = iris.traffic.minimum.all_gather(X_local.nbytes, ctx.num_ranks)
    matrix = rec.matrix(launch=0).with_minimum(need)
    ctx.barrier()
    return {**_as_json(matrix), "ratio": matrix.ratio(), "needed": matrix.needed(), "text": matrix.to_text()}


def rooted_and_p2p_traffic() -> dict:
    """One call of each rooted collective and of a send, recorded: what crossed ranks and the minimum it needs
    (iris.traffic.minimum), per collective, as (world, world) lists."""
    ctx = iris.iris("16MiB", backend=BACKEND)
    rank, world = ctx.cur_rank, ctx.num_ranks
    n, root = 960, world - 1  # chunks of 960 / world elements, multiples of 16, for 2 and 3 ranks alike
    nbytes = 4 * n
    mine, out = ctx.full((n,), float(rank)), ctx.zeros(n)
    rows = ctx.zeros(world * n)
    ctx.ccl.init_p2p(max_numel=n, dtype=torch.float32)
    calls = {
        "broadcast": (lambda: ctx.ccl.broadcast(out, mine, src=root),
                      iris.traffic.minimum.broadcast(nbytes, world, root)),
        "scatter": (lambda: ctx.ccl.scatter(out, rows, src=root), iris.traffic.minimum.scatter(nbytes, world, root)),
        "gather": (lambda: ctx.ccl.gather(rows, mine, dst=root), iris.traffic.minimum.gather(nbytes, world, root)),
        "reduce push": (lambda: ctx.ccl.reduce(out, mine, root=root, config=iris.ccl.Config(reduce_variant="push")),
                        iris.traffic.minimum.reduce(nbytes, world, root, algorithm="direct")),
        "reduce two_shot": (lambda: ctx.ccl.reduce(out, mine, root=root,
                                                   config=iris.ccl.Config(reduce_variant="two_shot", block_size=256)),
                            iris.traffic.minimum.reduce(nbytes, world, root)),
        "send": (lambda: ctx.ccl.send(mine, dst=1) if rank == 0 else ctx.ccl.recv(out, src=0) if rank == 1 else None,
                 iris.traffic.minimum.send(nbytes, world, 0, 1)),
    }
    found = {}
    for name, (call, need) in calls.items():
        call()  # workspaces and first-call work outside the recording
        ctx.barrier()
        with iris.traffic.record(ctx) as rec:
            call()
        ctx.barrier()
        matrix = rec.matrix().with_minimum(need)
        found[name] = {"crossed": matrix.crossing().tolist(), "need": need.tolist(), "text": matrix.to_text()}
    return found
