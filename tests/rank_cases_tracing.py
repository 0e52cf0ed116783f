"""Code that runs inside each rank for tests/test_tracing.py (CPU) and tests/gpu/test_tracing_cuda.py.

``every_op_traced`` runs every DeviceContext operation and a user event with ``tracing=True`` and checks, on
the host, each recorded event's name, ranks, address and payload; ``merged_trace`` exports per rank and
merged, with a host-clock bracket per rank to judge the alignment; ``overflow`` traces into buffers fenced
by sentinels. Backend: env ``IRIS_TEST_BACKEND`` ("cpu" by default, "cuda" under tests/gpu).
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import torch
import triton
import triton.language as tl
from iris.gluon import IrisDeviceCtx
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris
from iris import TraceEvent

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")
BLOCK, VALID = 16, 13  # lanes VALID.. are masked off
GRID = 2
# An explicit layout: a traced Gluon kernel whose blocks are layout-less does not compile for sm_90 (triton 3.6's
# GluonInferCoalescedEncodingsPass fails on the event's block reductions: "parent layout must have at least rank
# >= 2"); the CPU interpreter ignores layouts.
LAYOUT = gl.constexpr(gl.BlockedLayout([1], [32], [4], [0]))
# What traced_ops records per program, in order: (name, target) with target "left"/"right"/"self", and the
# payload in bytes (float32 blocks of VALID lanes; int32 scalar atomics; the user event's whole block).
OPS = [("load", "right", 4 * VALID), ("store", "right", 4 * VALID), ("get", "left", 4 * VALID),
       ("put", "right", 4 * VALID), ("copy", "right", 4 * VALID)] + [
    (f"atomic_{op}", "right", 4) for op in ("add", "sub", "xchg", "xor", "and", "or", "min", "max", "cas")] + [
    ("compute", "self", 4 * BLOCK)]


@triton.jit
def traced_ops(context, src, dst, counters, rank: tl.constexpr, world: tl.constexpr, TRACE: tl.constexpr,
               BLOCK: tl.constexpr, VALID: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, rank, world, tracing=TRACE)
    left, right = (rank + world - 1) % world, (rank + 1) % world
    offs = tl.arange(0, BLOCK)
    mask = offs < VALID
    x = ctx.load(src + offs, right, mask=mask, other=0.0)
    ctx.store(dst + offs, x, right, mask=mask)
    ctx.get(src + offs, dst + offs, left, mask=mask)
    ctx.put(src + offs, dst + offs, right, mask=mask)
    ctx.copy(src + offs, dst + offs, rank, right, mask=mask)
    c = counters + tl.program_id(0)
    ctx.atomic_add(c, 1, right)
    ctx.atomic_sub(c, 1, right)
    ctx.atomic_xchg(c, 0, right)
    ctx.atomic_xor(c, 0, right)
    ctx.atomic_and(c, 0, right)
    ctx.atomic_or(c, 0, right)
    ctx.atomic_min(c, 0, right)
    ctx.atomic_max(c, 0, right)
    ctx.atomic_cas(c, 0, 0, right)
    if TRACE:
        phase = ctx.tracing.record_event_start(TraceEvent().compute, rank, src + offs, tl.program_id(0), 7)
        ctx.tracing.record_event_end(phase)


@triton.jit
def user_events_untraced(context, src, rank: tl.constexpr, world: tl.constexpr, BLOCK: tl.constexpr):
    """Upstream's user events in a kernel whose context was initialised with tracing off: nothing happens."""
    ctx = iris.DeviceContext.initialize(context, rank, world)
    offs = tl.arange(0, BLOCK)
    phase = ctx.tracing.record_event_start(TraceEvent().compute, rank, src + offs, tl.program_id(0), 0)
    ctx.store(src + offs, offs.to(tl.float32), rank)
    ctx.tracing.record_event_end(phase)


@gluon.jit
def traced_ops_gluon(IrisDeviceCtx: gl.constexpr, context, src, dst, counters, TRACE: gl.constexpr,
                     BLOCK: gl.constexpr, VALID: gl.constexpr):
    """traced_ops with IrisDeviceCtx (rank and world size read at run time)."""
    ctx = IrisDeviceCtx.initialize(context, tracing=TRACE)
    rank, world = ctx.cur_rank, ctx.num_ranks
    left, right = (rank + world - 1) % world, (rank + 1) % world
    offs = gl.arange(0, BLOCK, layout=LAYOUT)
    mask = offs < VALID
    x = ctx.load(src + offs, right, mask=mask, other=0.0)
    ctx.store(dst + offs, x, right, mask=mask)
    ctx.get(src + offs, dst + offs, left, mask=mask)
    ctx.put(src + offs, dst + offs, right, mask=mask)
    ctx.copy(src + offs, dst + offs, rank, right, mask=mask)
    c = counters + gl.program_id(0)
    ctx.atomic_add(c, 1, right)
    ctx.atomic_sub(c, 1, right)
    ctx.atomic_xchg(c, 0, right)
    ctx.atomic_xor(c, 0, right)
    ctx.atomic_and(c, 0, right)
    ctx.atomic_or(c, 0, right)
    ctx.atomic_min(c, 0, right)
    ctx.atomic_max(c, 0, right)
    ctx.atomic_cas(c, 0, 0, right)
    if TRACE:
        phase = ctx.tracing.record_event_start(TraceEvent().compute, rank, src + offs, gl.program_id(0), 7)
        ctx.tracing.record_event_end(phase)


@triton.jit
def functional_ops(context, src, dst, counters, rank: tl.constexpr, world: tl.constexpr, BLOCK: tl.constexpr,
                   VALID: tl.constexpr):
    """traced_ops without tracing, through the functional API: the code an untraced DeviceContext must match."""
    heap_bases = context + 2
    left, right = (rank + world - 1) % world, (rank + 1) % world
    offs = tl.arange(0, BLOCK)
    mask = offs < VALID
    x = iris.load(src + offs, rank, right, heap_bases, mask=mask, other=0.0)
    iris.store(dst + offs, x, rank, right, heap_bases, mask=mask)
    iris.get(src + offs, dst + offs, rank, left, heap_bases, mask=mask)
    iris.put(src + offs, dst + offs, rank, right, heap_bases, mask=mask)
    iris.copy(src + offs, dst + offs, rank, right, rank, heap_bases, mask=mask)
    c = counters + tl.program_id(0)
    iris.atomic_add(c, 1, rank, right, heap_bases)
    iris.atomic_sub(c, 1, rank, right, heap_bases)
    iris.atomic_xchg(c, 0, rank, right, heap_bases)
    iris.atomic_xor(c, 0, rank, right, heap_bases)
    iris.atomic_and(c, 0, rank, right, heap_bases)
    iris.atomic_or(c, 0, rank, right, heap_bases)
    iris.atomic_min(c, 0, rank, right, heap_bases)
    iris.atomic_max(c, 0, rank, right, heap_bases)
    iris.atomic_cas(c, 0, 0, rank, right, heap_bases)


def _ctx():
    return iris.iris("8MiB", backend=BACKEND)


def _launch(ctx, src, dst, counters, trace=True, api="device_context"):
    if api == "gluon":
        traced_ops_gluon[(GRID,)](IrisDeviceCtx, ctx.get_device_context(), src, dst, counters, trace, BLOCK, VALID)
    else:
        traced_ops[(GRID,)](ctx.get_device_context(), src, dst, counters, ctx.cur_rank, ctx.num_ranks, trace,
                            BLOCK, VALID)


def _buffers(ctx):
    return (ctx.zeros(BLOCK, name="src"), ctx.zeros(BLOCK, name="dst"),
            ctx.zeros(GRID, dtype=torch.int32, name="counters"))


def ns(us: float) -> int:
    """A trace time (µs, three decimals) back in nanoseconds."""
    return round(us * 1000)


def every_op_traced():
    """Every op and a user event recorded once per program, with the right ranks, addresses and payloads,
    through DeviceContext and through Gluon's IrisDeviceCtx."""
    ctx = _ctx()
    src, dst, counters = _buffers(ctx)
    for api in ("device_context", "gluon"):  # compiled with tracing, run before enable: touches nothing
        _launch(ctx, src, dst, counters, api=api)
    ctx.tracing.enable(max_events=1000)
    assert ctx.tracing.recorded() == 0
    recorded = {}
    for api in ("device_context", "gluon"):
        _launch(ctx, src, dst, counters, trace=False, api=api)  # untraced: records nothing
        assert ctx.tracing.recorded() == 0, api
        recorded[api] = _check_one_run(ctx, src, dst, counters, api)
        ctx.tracing.reset()
        assert ctx.tracing.recorded() == 0
    ctx.barrier()
    return {"rank": ctx.cur_rank, "events": recorded}


def _check_one_run(ctx, src, dst, counters, api):
    r, n = ctx.cur_rank, ctx.num_ranks
    target = {"left": (r - 1) % n, "right": (r + 1) % n, "self": r}
    ctx.barrier()
    before = time.monotonic_ns()
    _launch(ctx, src, dst, counters, api=api)
    ctx.barrier()
    after = time.monotonic_ns()
    with tempfile.TemporaryDirectory() as scratch:
        trace = ctx.tracing.export(os.path.join(scratch, "ops.json"))
        assert os.listdir(scratch) == [f"ops_rank{r}.json"]
    events = [e for e in trace["traceEvents"] if e["ph"] != "M"]
    assert len(events) == GRID * len(OPS) and trace["metadata"]["dropped_events"] == 0, api
    for program in range(GRID):
        mine = [e for e in events if e["args"]["program_id"] == program]
        assert [e["name"] for e in mine] == [name for name, _, _ in OPS], (api, [e["name"] for e in mine])
        for event, (name, who, payload) in zip(mine, OPS, strict=True):
            args = event["args"]
            assert event["pid"] == r and args["target_rank"] == target[who], (api, name, event)
            assert args["payload_size"] == payload, (api, name, args["payload_size"], payload)
            expected = {"get": src, "compute": src, "load": src}.get(name, counters if "atomic" in name else dst)
            expected_address = expected.data_ptr() + (4 * program if "atomic" in name else 0)
            assert int(args["address"], 16) == expected_address, (api, name, args["address"])
            label = {"get": "src", "compute": "src", "load": "src"}.get(name, "counters" if "atomic" in name else "dst")
            assert args["location"] == (f"counters[{program}]" if "atomic" in name else f"{label}[0]"), (api, args)
            assert args["heap_offset"] == expected_address - ctx.heap.bases[r], (api, name)
            assert event["ph"] == "X" and event["dur"] >= 0 and event["cat"] == "iris"
            if BACKEND == "cpu":  # the interpreter's clock is the host's monotonic clock
                start, end = ns(event["ts"]), ns(event["ts"] + event["dur"])
                assert before <= start <= end <= after + 1, (api, before, event, after)  # (µs rounding: 1 ns)
    assert [e["args"]["pid_n"] for e in events if e["name"] == "compute"] == [7] * GRID
    assert sorted(e["args"]["op_index"] for e in events) == list(range(len(events)))
    return len(events)


def merged_trace(name):
    """Per-rank files and the merged one on rank 0, with each rank's host-clock bracket around its kernel."""
    ctx = _ctx()
    r = ctx.cur_rank
    src, dst, counters = _buffers(ctx)
    ctx.tracing.enable(max_events=4 * len(OPS))
    ctx.barrier()
    time.sleep(0.05 * r)  # ranks start their kernels at visibly different times
    before = time.monotonic_ns()
    _launch(ctx, src, dst, counters)
    ctx.barrier()
    after = time.monotonic_ns()
    merged = ctx.tracing.export(name, merge=True)
    ctx.barrier()
    if r != 0:
        assert merged == {}
    with open(name.replace(".json", f"_rank{r}.json")) as f:
        mine = json.load(f)
    return {"rank": r, "bracket": [before, after], "merged": merged, "mine_metadata": mine["metadata"],
            "mine_events": len(mine["traceEvents"])}


def user_events_when_tracing_is_compiled_out():
    """record_event_start/end on a context initialised with tracing=False touch nothing (with the race checker on,
    tracing enabled on the host or not): the kernel's own store lands, the context and every rank's heap else
    stay as they were."""
    ctx = iris.iris("8MiB", backend=BACKEND, check="races" if BACKEND == "cpu" else None)
    src = ctx.zeros(BLOCK, name="src")
    bystander = ctx.full((4096,), 3.0, name="bystander")
    context = ctx.get_device_context()
    recorded = []
    for enabled in (False, True):
        if enabled:
            ctx.tracing.enable(max_events=64)
            context = ctx.get_device_context()
        before = context.clone()
        ctx.barrier()
        user_events_untraced[(1,)](context, src, ctx.cur_rank, ctx.num_ranks, BLOCK)
        ctx.barrier()
        assert torch.equal(context, before), (before, context)
        recorded.append(ctx.tracing.recorded() if enabled else 0)
    assert torch.equal(src.cpu(), torch.arange(BLOCK, dtype=torch.float32))
    assert bool((bystander == 3.0).all())
    return {"rank": ctx.cur_rank, "recorded": recorded, "races": len(ctx.races()) if BACKEND == "cpu" else 0}


def overflow():
    """Events past max_events are dropped and counted; the buffers' neighbours (sentinels) stay untouched."""
    ctx = _ctx()
    keep, fence = 5, 64
    src, dst, counters = _buffers(ctx)
    ctx.tracing.enable(max_events=keep)
    tracing = ctx.tracing
    # Each buffer becomes the middle of a larger one filled with a sentinel, so a write past max_events
    # (or before slot 0) would show.
    fenced = {name: torch.full((fence + keep + fence,), -7, dtype=b.dtype, device=b.device)
              for name, b in tracing.trace_buffers.items()}
    tracing.trace_buffers = {name: f[fence:fence + keep] for name, f in fenced.items()}
    tracing._point_context_at_buffers()
    for _ in range(2):
        _launch(ctx, src, dst, counters)
    total = 2 * GRID * len(OPS)
    assert tracing.recorded() == total and tracing.dropped() == total - keep
    for name, f in fenced.items():
        assert bool((f[:fence] == -7).all()) and bool((f[fence + keep:] == -7).all()), name
    with tempfile.TemporaryDirectory() as scratch:
        trace = tracing.export(os.path.join(scratch, "overflow.json"))
    events = [e for e in trace["traceEvents"] if e["ph"] != "M"]
    names = [e["name"] for e in events]
    if BACKEND == "cpu":  # the interpreter runs the programs one after another: the first program's first ops
        assert names == [name for name, _, _ in OPS[:keep]], names
    else:  # programs run at once on a GPU: whichever events took the first slots
        assert len(names) == keep and set(names) <= {name for name, _, _ in OPS}, names
    assert trace["metadata"]["dropped_events"] == total - keep and trace["metadata"]["num_events"] == keep
    ctx.barrier()
    return {"rank": ctx.cur_rank, "dropped": tracing.dropped()}


def cost():
    """Seconds per launch of traced_ops with tracing off and on (GPU: CUDA events, median of many)."""
    ctx = _ctx()
    src, dst, counters = _buffers(ctx)
    ctx.tracing.enable(max_events=1_000_000)
    timings = {}
    for trace in (False, True, False, True):
        ctx.barrier()
        _launch(ctx, src, dst, counters, trace)  # compile and warm up
        ctx.tracing.reset()
        ctx.barrier()
        if BACKEND == "cuda":
            samples = []
            for _ in range(200):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                _launch(ctx, src, dst, counters, trace)
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end) * 1e-3)
                ctx.tracing.reset()
        else:
            samples = []
            for _ in range(3):
                t0 = time.perf_counter()
                _launch(ctx, src, dst, counters, trace)
                samples.append(time.perf_counter() - t0)
        timings["on" if trace else "off"] = sorted(samples)[len(samples) // 2]
    ctx.barrier()
    return {"rank": ctx.cur_rank, **timings}
