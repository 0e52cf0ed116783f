"""What device tracing costs: one kernel's time with tracing compiled out, compiled in but not enabled, and on.

Run with one rank per GPU (or, on a machine without one, on the CPU interpreter)::

    torchrun --nproc_per_node=2 benchmarks/tracing_cost.py

Two kernels written with ``DeviceContext``, each launched three ways:

* **compiled out**: ``initialize(..., tracing=False)``: the kernel holds no tracing code at all;
* **compiled in, not enabled**: ``tracing=True`` but ``ctx.tracing.enable()`` not called (upstream allows
  it): each event costs the loads that find tracing off;
* **on**: ``tracing=True`` and enabled: every event takes a slot with one atomic and writes 13 fields.

Kernels: ``scatter`` (each program puts a 4 KiB block into every other rank's copy and raises a flag there
with a release atomic: the many-small-ops worst case) and ``gemm_scatter`` (lesson 07's GEMM + all-scatter,
with a user ``compute`` event around each tile's K loop, fp16; tiles stored into every rank's C).

GPU: each variant is captured ``CALLS`` times in one CUDA graph, replayed, timed with CUDA events, median of
``REPEATS`` replays, the slowest rank's; the trace counters are reset before each replay (outside the timed
region) so no event is dropped. CPU: the CPU time of one launch, median of 3 (the interpreter's cost: the
figures say what tracing adds to a lesson's cell, not to a GPU kernel). The table goes to
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks.results import environment, write_section  # noqa: E402
from iris import TraceEvent  # noqa: E402
from iris.base.sizes import format_size  # noqa: E402
from iris.instruments.tracing.timeline import format_time  # noqa: E402

CALLS, REPEATS = 10, 21
MODES = ("compiled out", "compiled in, not enabled", "on")


@triton.jit
def scatter(context, src, dst, flags, rank: tl.constexpr, world: tl.constexpr, TRACE: tl.constexpr,
            BLOCK: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, rank, world, tracing=TRACE)
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    for step in tl.static_range(1, world):
        peer = (rank + step) % world
        ctx.put(src + offs, dst + offs, peer)
        ctx.atomic_add(flags + pid, 1, peer, sem="release", scope="sys")


@triton.jit
def gemm_scatter(context, A, B, C, M, N, K, N_LOCAL, rank: tl.constexpr, world: tl.constexpr, TRACE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, rank, world, tracing=TRACE)
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    handle = 0
    if TRACE:
        handle = ctx.tracing.record_event_start(TraceEvent().compute, rank, A + rows * K, pid_m, pid_n)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(A + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(B + (k + ks)[:, None] * N_LOCAL + cols[None, :])
        acc += tl.dot(a, b)
    if TRACE:
        ctx.tracing.record_event_end(handle)
    tile = acc.to(C.dtype.element_ty)
    c_ptrs = C + rows[:, None] * N + (rank * N_LOCAL + cols)[None, :]
    for step in tl.static_range(world):
        ctx.store(c_ptrs, tile, (rank + step) % world)


def kernels(ctx, gpu: bool):
    """name -> (launch(trace: bool), events per launch on this rank)."""
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    context = ctx.get_device_context()
    block, programs = (1024, 1024) if gpu else (64, 4)
    src = ctx.randn(programs * block, dtype=torch.float32)
    dst = ctx.zeros(programs * block, dtype=torch.float32)
    flags = ctx.zeros(programs, dtype=torch.int32)
    m = n = k = 4096 if gpu else 32
    tile_m, tile_n, tile_k = (128, 128, 64) if gpu else (16, 16, 16)
    dtype = torch.float16 if gpu else torch.float32
    n_local = n // world
    a = ctx.randn(m, k, dtype=dtype)
    b = ctx.randn(k, n_local, dtype=dtype)
    c = ctx.zeros(m, n, dtype=dtype)
    grid = (triton.cdiv(m, tile_m), triton.cdiv(n_local, tile_n))

    def launch_scatter(trace):
        scatter[(programs,)](context, src, dst, flags, rank, world, trace, BLOCK=block)

    def launch_gemm(trace):
        gemm_scatter[grid](context, a, b, c, m, n, k, n_local, rank, world, trace, BLOCK_M=tile_m, BLOCK_N=tile_n,
                           BLOCK_K=tile_k, num_warps=8 if gpu else 4, num_stages=3 if gpu else 1)

    shape = f"{m}x{n}x{k} {str(dtype).removeprefix('torch.')}, {tile_m}x{tile_n} tiles"
    return {
        f"scatter ({programs} programs x {world - 1} peers, {format_size(block * 4)} puts)":
            (launch_scatter, programs * 2 * (world - 1)),
        f"gemm_scatter ({shape})": (launch_gemm, grid[0] * grid[1] * (1 + world)),
    }


def time_gpu(ctx, launch, trace: bool, reset) -> float:
    """µs per launch: CALLS launches in one CUDA graph, median of REPEATS timed replays; the slowest rank's."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launch(trace)  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            launch(trace)
    samples = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(REPEATS):
        reset()
        ctx.barrier()  # ranks replay together: the remote stores of one do not land in the other's timing
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / CALLS)
    return max(ctx.group.all_gather_object(statistics.median(samples)))


def time_cpu(ctx, launch, trace: bool, reset) -> float:
    """CPU µs of one interpreted launch (this process's CPU time: steady on a shared machine, where wall time
    is not), median of 3; the slowest rank's."""
    launch(trace)
    samples = []
    for _ in range(3):
        reset()
        ctx.barrier()
        start = time.process_time()
        launch(trace)
        samples.append((time.process_time() - start) * 1e6)
    return max(ctx.group.all_gather_object(statistics.median(samples)))


def main() -> None:
    ctx = iris.iris("1GiB" if torch.cuda.is_available() else "64MiB")
    gpu = ctx.backend == "cuda"
    timer = time_gpu if gpu else time_cpu
    launches = kernels(ctx, gpu)
    times = {name: {} for name in launches}
    for name, (launch, _) in launches.items():  # before ctx.tracing.enable(): a traced kernel finds it off
        times[name]["compiled out"] = timer(ctx, launch, False, lambda: None)
        times[name]["compiled in, not enabled"] = timer(ctx, launch, True, lambda: None)
    ctx.tracing.enable(max_events=max(2 * CALLS * events for _, events in launches.values()))
    for name, (launch, events) in launches.items():
        times[name]["on"] = timer(ctx, launch, True, ctx.tracing.reset)
        recorded, dropped = ctx.tracing.recorded(), ctx.tracing.dropped()
        assert recorded == (CALLS if gpu else 1) * events and dropped == 0, (name, recorded, events, dropped)
    if ctx.get_rank() == 0:
        report([(name, events, times[name]) for name, (_, events) in launches.items()], gpu, ctx.get_num_ranks())
    ctx.barrier()


def report(rows, gpu: bool, world: int) -> None:
    unit = "µs per launch, CUDA-graph replays" if gpu else "µs per interpreted launch (CPU time of the rank)"
    lines = [f"{environment()}; {world} ranks. {unit}; the slowest rank's median.", "",
             "| kernel | events per launch and rank | compiled out | compiled in, not enabled | on | on / out |"
             " per event on |",
             "|---|---|---|---|---|---|---|"]
    for name, events, t in rows:
        out = t["compiled out"]
        lines.append(f"| {name} | {events} | {out:.1f} | {t['compiled in, not enabled']:.1f} | {t['on']:.1f} | "
                     f"{t['on'] / out:.2f}x | {format_time((t['on'] - out) / events)} |")
    lines += ["", "Compiled out, a kernel holds no tracing code (the sm_90 compile test checks its code is the "
                  "untraced kernel's); compiled in but not enabled, each event costs the loads that find it off."]
    if not gpu:
        lines += ["The interpreter runs every operation of the recording code (some 30 per event), masked or not, so "
                  "there tracing compiled in costs about as much enabled as not, about 10 ms per event: a lesson's "
                  "cell with a few hundred events takes seconds longer. Trace on the CPU to see order and waits, "
                  "not to time."]
    table = "\n".join(lines)
    print(table)
    write_section(f"tracing cost ({'GPU' if gpu else 'CPU interpreter'})", table)


if __name__ == "__main__":
    main()
