"""Does the bench view time what the benchmarks time? ``ctx.ccl.all_reduce`` at a few sizes and one ``ctx.ops``
call, timed the way benchmarks/allreduce.py and benchmarks/fused_ops.py time them and with ``iris.perf.compare``
(what ``workbench.bench`` runs on every rank), in one run, alternating, the median of a few rounds each.

Run on one machine with 2 or more GPUs (one rank each)::

    torchrun --nproc_per_node=2 benchmarks/bench_view_check.py

Prints, per call: the benchmark's µs, compare's µs, their ratio and whether it is within 5% (the goal of issue
27), and compare's full report (spec and measured roofs, shares) for the last round.
"""

from __future__ import annotations

import os
import statistics
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL starts, as the benchmarks run it

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks import fused_ops  # noqa: E402
from benchmarks.allreduce import calls_per_graph, measure  # noqa: E402
from benchmarks.lesson_ranks import gpu_rank  # noqa: E402
from benchmarks.results import environment  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
ALL_REDUCE_BYTES = [8 * KiB, 1 * MiB, 64 * MiB]
OPS_CASE = ("matmul_reduce_scatter", 8192, 8192, 8192)
ROUNDS = 3
GOAL = 0.05  # compare's time within 5% of the benchmark's


def all_reduce_cases(ctx, world):
    """(name, benchmark timing, compare's candidates, its work) per size: the call as a notebook writes it."""
    for nbytes in ALL_REDUCE_BYTES:
        n = nbytes // 2
        inp, out = ctx.randn(n, dtype=torch.bfloat16), ctx.zeros(n, dtype=torch.bfloat16)
        nccl = inp.clone()
        ours = lambda out=out, inp=inp: ctx.ccl.all_reduce(out, inp)  # noqa: E731
        bus = 2 * (world - 1) * nbytes // world  # bytes each rank sends over its links (ring/two-shot count)
        yield (f"ctx.ccl.all_reduce {nbytes // KiB} KiB", lambda f=ours, s=nbytes: measure(f, calls_per_graph(s))[0],
               {"ctx.ccl.all_reduce": ours, "NCCL": lambda x=nccl: dist.all_reduce(x)},
               {"bytes": 2 * nbytes, "peer_bytes": bus // (world - 1)})


def ops_case(ctx, rank, world):
    op, m, n, k = OPS_CASE
    case = fused_ops.operands(op, m, n, k, rank, world, ctx, torch.bfloat16)
    case.ours()  # allocates its workspace (collective), outside any capture
    torch.cuda.synchronize()
    work = {"flops": 2 * m * n * (k // world), "bytes": 2 * (m * k // world + k // world * n + m * n)}
    return (f"ctx.ops.{op} {m}x{n}x{k}", lambda: measure(case.ours, fused_ops.CALLS, fused_ops.TIMED_MS)[0],
            {f"ctx.ops.{op}": case.ours, "torch + NCCL": case.sequence}, {**work, "timed_ms": fused_ops.TIMED_MS})


def main() -> None:
    ctx = gpu_rank("4GiB")
    rank, world = ctx.cur_rank, ctx.num_ranks
    lines, last_reports = [], []
    for name, bench, candidates, work in [*all_reduce_cases(ctx, world), ops_case(ctx, rank, world)]:
        label = next(iter(candidates))
        benchmark_us, compare_us = [], []
        for _ in range(ROUNDS):  # alternating, so that a drift of clocks touches both alike
            benchmark_us.append(bench())
            report = iris.perf.compare(ctx, candidates, **work)
            compare_us.append(report[label].time_us)
        ratio = statistics.median(compare_us) / statistics.median(benchmark_us)
        lines.append(f"| {name} | {statistics.median(benchmark_us):.1f} | {statistics.median(compare_us):.1f} | "
                     f"{ratio:.3f} | {'yes' if abs(ratio - 1) <= GOAL else 'NO'} | {report[label].mode} |")
        last_reports.append(report)
        ctx.barrier()
    if rank == 0:
        print(f"{environment()}; {world} ranks, one per GPU; median of {ROUNDS} alternating rounds, µs per call, "
              "slowest rank")
        print("| call | benchmark µs | compare µs | compare / benchmark | within 5% | compare timed |")
        print("|---|---|---|---|---|---|")
        print("\n".join(lines))
        for report in last_reports:
            print(report)
    ctx.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
