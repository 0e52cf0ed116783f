"""The CUDA virtual-memory heap (``allocator_type="vmem"``) against the CUDA IPC heap (``"torch"``), in one run.

Run on a machine with 2 GPUs (one rank each)::

    torchrun --nproc_per_node=2 benchmarks/vmm_vs_ipc.py

Both heaps live in the same processes, and each measurement alternates between them (three rounds, the median
per heap): remote memory access bandwidth, every rank reading (get) or writing (put) a large buffer of the
other rank's heap with a plain Triton kernel through ``iris.load`` / ``iris.store``, both ranks at once; and
``ctx.ccl.all_reduce(out, inp)`` latency, small and large. Everything is timed as CUDA-graph replays
(:func:`iris.perf.replay_time`), slowest rank. The table goes to benchmarks/RESULTS.md, with whether the VMM
heap is within 3% of the IPC heap everywhere (what decides ``iris.runtime.heap_choice.CUDA_DEFAULT``).
"""

from __future__ import annotations

import os
import statistics
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks.results import environment, write_section  # noqa: E402
from iris.perf import replay_time  # noqa: E402

RMA_BYTES = 256 << 20
ALL_REDUCE_BYTES = [16 << 10, 64 << 20]
ROUNDS = 3
WITHIN = 0.03
BLOCK = 4096


@triton.jit
def remote_get(src, dst, n, cur, peer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, iris.load(src + offs, cur, peer, heap_bases, mask=mask, hint=16), mask=mask)


@triton.jit
def remote_put(src, dst, n, cur, peer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    iris.store(dst + offs, tl.load(src + offs, mask=mask), cur, peer, heap_bases, mask=mask, hint=16)


def measurements(ctx) -> dict:
    """{what: (callable, bytes or None)} on ``ctx``'s heap; each callable is one timed call."""
    rank, peer = ctx.cur_rank, (ctx.cur_rank + 1) % ctx.num_ranks
    n = RMA_BYTES // 4
    src, dst = ctx.full((n,), float(rank), dtype=torch.float32), ctx.zeros(n, dtype=torch.float32)
    grid = (triton.cdiv(n, BLOCK),)
    bases = ctx.get_heap_bases()
    found = {
        "get 256 MiB (GB/s)": (lambda: remote_get[grid](src, dst, n, rank, peer, bases, BLOCK=BLOCK, num_warps=8),
                               RMA_BYTES),
        "put 256 MiB (GB/s)": (lambda: remote_put[grid](src, dst, n, rank, peer, bases, BLOCK=BLOCK, num_warps=8),
                               RMA_BYTES),
    }
    for nbytes in ALL_REDUCE_BYTES:
        inp = ctx.full((nbytes // 2,), 1.0, dtype=torch.bfloat16)
        out = ctx.zeros(nbytes // 2, dtype=torch.bfloat16)
        call = lambda inp=inp, out=out: ctx.ccl.all_reduce(out, inp)  # noqa: E731
        found[f"all_reduce {nbytes >> 10} KiB bf16 (µs)"] = (call, None)
    remote_get[grid](src, dst, n, rank, peer, bases, BLOCK=BLOCK, num_warps=8)
    torch.cuda.synchronize()
    assert bool((dst == float(peer)).all()), f"rank {rank}: the get read wrong values"
    return found


def main() -> None:
    heaps = {"ipc": iris.iris(1 << 30, "torch"), "vmm": iris.iris(1 << 30, "vmem")}
    cases = {name: measurements(ctx) for name, ctx in heaps.items()}
    times: dict = {}
    for _ in range(ROUNDS):
        for name in heaps:  # alternating, so that drift touches both alike
            for what, (fn, _) in cases[name].items():
                times.setdefault((what, name), []).append(replay_time(fn, calls=4 if "all_reduce" in what else 1).us)
    rows, within = [], True
    for what, (_, nbytes) in cases["ipc"].items():
        ipc, vmm = (statistics.median(times[(what, name)]) for name in ("ipc", "vmm"))
        shown = (nbytes / ipc / 1e3, nbytes / vmm / 1e3) if nbytes else (ipc, vmm)  # GB/s, or µs
        slower = vmm / ipc - 1
        within &= slower <= WITHIN
        rows.append(f"| {what} | {shown[0]:.1f} | {shown[1]:.1f} | {slower * 100:+.1f}% |")
    if heaps["ipc"].cur_rank == 0:
        body = "\n".join([
            f"{environment()}; 2 ranks, one GPU each; `torchrun --nproc_per_node=2 benchmarks/vmm_vs_ipc.py`.",
            "",
            "Both heaps in the same processes, measurements alternating between them, median of "
            f"{ROUNDS} rounds; CUDA-graph replays, slowest rank. RMA: a plain Triton kernel through "
            "`iris.load`/`iris.store`, both ranks reading (get) or writing (put) the other's heap at once. "
            "`VMM time vs IPC`: + is slower.",
            "",
            "| measurement | IPC heap | VMM heap | VMM time vs IPC |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Within 3% everywhere: **{'yes' if within else 'no'}**.",
        ])
        write_section("The VMM heap against the IPC heap (issue 30)", body)
        print(body)


if __name__ == "__main__":
    main()
