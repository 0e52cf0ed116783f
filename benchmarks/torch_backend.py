"""torch.distributed on the ``iris`` backend against NCCL, and what the backend adds over ``ctx.ccl``, in one run.

Run on one machine with N GPUs (one rank each)::

    torchrun --nproc_per_node=N benchmarks/torch_backend.py               # 8 KiB to 256 MiB
    torchrun --nproc_per_node=1 benchmarks/torch_backend.py               # one GPU: the overhead alone

The default group is iris (``dist.init_process_group("iris")``); NCCL runs in a group of its own over the same
ranks (NVLink multicast off). Two measurements:

* **overhead**: host time per eager call of ``dist.all_reduce`` (8 KiB, float32) on the iris group against
  ``ctx.ccl.all_reduce`` on heap tensors of the same context, 2000 calls each after a warm-up, the median of 3
  rounds. The difference is what the backend adds: the torch.distributed dispatch, the staging copies in and out
  of the heap, the work handle. (Issue 56's goal: at most 3 µs.)
* **against NCCL** (N >= 2 GPUs): each operation eager, as a training loop calls it (``all_reduce``,
  ``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``broadcast``, ``all_to_all_single``), 20 calls timed with
  CUDA events after 5 warm-up calls, the slowest rank's mean, the median of 3 rounds, iris and NCCL alternating
  within each round; each of ours checked against NCCL's result first. (Goal: at most 0.6x NCCL's time up to
  256 KiB.)

The tables go to benchmarks/RESULTS.md (section "torch.distributed's iris backend").
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL starts: multicast stays off

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks.results import environment, write_section  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
SIZES = [8 * KiB, 32 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]
ROUNDS, CALLS, WARMUP, OVERHEAD_CALLS = 3, 20, 5, 2000


def _host_us_per_call(fn) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(OVERHEAD_CALLS):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / OVERHEAD_CALLS * 1e6


def overhead(ctx) -> tuple[float, float]:
    """Median µs per call of dist.all_reduce (iris group) and of ctx.ccl.all_reduce, 8 KiB float32."""
    numel = 8 * KiB // 4
    plain = torch.ones(numel, device=ctx.get_device())
    inp, out = ctx.ones(numel), ctx.zeros(numel)
    rounds = [(_host_us_per_call(lambda: dist.all_reduce(plain)),
               _host_us_per_call(lambda: ctx.ccl.all_reduce(out, inp))) for _ in range(ROUNDS)]
    return statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)


def _operations(world: int):
    """(name, make the tensors for n bytes, call it on a group): the operations a training loop uses."""
    return [
        ("all_reduce", lambda n: (torch.arange(n // 4, device="cuda", dtype=torch.float32),),
         lambda g, t: dist.all_reduce(t, group=g)),
        ("all_gather_into_tensor", lambda n: (torch.zeros(world * (n // 4), device="cuda"),
                                              torch.arange(n // 4, device="cuda", dtype=torch.float32)),
         lambda g, out, inp: dist.all_gather_into_tensor(out, inp, group=g)),
        ("reduce_scatter_tensor", lambda n: (torch.zeros(n // 4 // world, device="cuda"),
                                             torch.arange(n // 4 // world * world, device="cuda",
                                                          dtype=torch.float32)),
         lambda g, out, inp: dist.reduce_scatter_tensor(out, inp, group=g)),
        ("broadcast", lambda n: (torch.arange(n // 4, device="cuda", dtype=torch.float32),),
         lambda g, t: dist.broadcast(t, src=0, group=g)),
        ("all_to_all_single", lambda n: (torch.zeros(n // 4 // world * world, device="cuda"),
                                         torch.arange(n // 4 // world * world, device="cuda", dtype=torch.float32)),
         lambda g, out, inp: dist.all_to_all_single(out, inp, group=g)),
    ]


def _time_ms(call, group, tensors) -> float:
    for _ in range(WARMUP):
        call(group, *tensors)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dist.barrier(group=group)
    torch.cuda.synchronize()
    start.record()
    for _ in range(CALLS):
        call(group, *tensors)
    end.record()
    torch.cuda.synchronize()
    mine = torch.tensor([start.elapsed_time(end) / CALLS], device="cuda")
    dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=group)  # the slowest rank's
    return mine.item()


def against_nccl(world: int, rank: int) -> list[str]:
    nccl = dist.new_group(backend="nccl")
    rows = ["| operation | size | iris (µs) | NCCL (µs) | iris / NCCL |", "|---|---|---|---|---|"]
    for name, make, call in _operations(world):
        for nbytes in SIZES:
            ours, theirs = make(nbytes), make(nbytes)
            call(None, *ours)
            call(nccl, *theirs)
            if not torch.allclose(ours[0], theirs[0], rtol=1e-4):
                raise AssertionError(f"rank {rank}: {name} of {nbytes} bytes: iris and NCCL disagree")
            rounds = [(_time_ms(call, None, ours), _time_ms(call, nccl, theirs)) for _ in range(ROUNDS)]
            a, b = statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)
            rows.append(f"| {name} | {_size(nbytes)} | {a * 1e3:.1f} | {b * 1e3:.1f} | {a / b:.2f} |")
    return rows


def _size(nbytes: int) -> str:
    return f"{nbytes // MiB} MiB" if nbytes >= MiB else f"{nbytes // KiB} KiB"


def main() -> None:
    dist.init_process_group("iris")
    rank, world = dist.get_rank(), dist.get_world_size()
    ctx = iris.distributed.context()
    backend_us, ccl_us = overhead(ctx)
    lines = [f"`torchrun --nproc_per_node={world} benchmarks/torch_backend.py`; {environment()}", "",
             f"Overhead at {world} rank(s), 8 KiB float32, eager, host time per call (median of {ROUNDS} x "
             f"{OVERHEAD_CALLS}): dist.all_reduce on the iris group {backend_us:.1f} µs, ctx.ccl.all_reduce "
             f"{ccl_us:.1f} µs: the backend adds {backend_us - ccl_us:.1f} µs (goal: at most 3 µs).", ""]
    if world >= 2 and torch.cuda.device_count() >= world:
        lines += against_nccl(world, rank)
    else:
        lines.append(f"Against NCCL: not measured ({torch.cuda.device_count()} GPU(s) for {world} rank(s); it needs "
                     "a GPU per rank and at least 2).")
    if rank == 0:
        write_section(f"torch.distributed's iris backend, {world} rank(s)", "\n".join(lines))
        print("\n".join(lines))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
