"""Lesson 10's GEMM + all-reduce kernel, step by step, against torch.matmul + NCCL and ``ctx.ops`` on GPUs.

Run with one rank per GPU::

    torchrun --nproc_per_node=2 benchmarks/lesson10_steps.py             # the lesson's steps at M = 1, 16, 64
    torchrun --nproc_per_node=2 benchmarks/lesson10_steps.py --sweep     # and every launch configuration tried
    torchrun --nproc_per_node=2 benchmarks/lesson10_steps.py --json times.json     # every time measured
    python benchmarks/lesson10_steps.py --report times.json --write    # the table again, into RESULTS.md

The kernels are the lesson's own: the ``%%writefile tp_all_reduce.py`` cell of
notebooks/10_tp_all_reduce_decode.ipynb is written to a temporary folder (:mod:`benchmarks.lesson_modules`) and
imported, and its ``GPU_STEPS`` name the steps. The shapes are the lesson's:
``(M x 4096) @ (4096 x 4096)``, K split over the ranks, bf16.
Each callable is captured ``CALLS`` times in a CUDA graph and replayed (:func:`iris.perf.replay_time`),
the slowest rank's time; every result is checked against NCCL's sum before a time is reported. Beside the
steps: ``torch.matmul`` alone (no all-reduce can beat it) and each step's GEMM alone (the lesson's
``partial_tile`` with the step's tiles, no communication), which says how much of a step's time is the GEMM.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off, for NCCL too

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.lesson_modules import lesson_directory  # noqa: E402
from benchmarks.lesson_ranks import gpu_rank  # noqa: E402
from benchmarks.results import environment, write_lesson_block  # noqa: E402
from iris.perf import replay_time  # noqa: E402

LESSON = ROOT / "notebooks" / "10_tp_all_reduce_decode.ipynb"
N, K = 4096, 4096
ROWS = (1, 16, 64)
CALLS = 10  # calls per captured graph
TIMED_MS = 40.0  # replays per measurement: about this long

lesson_directory(LESSON)
import tp_all_reduce as tp  # noqa: E402  (the lesson's module, written just above)

partial_tile = tp.partial_tile


@triton.jit
def gemm_only(A, B, out, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """A step's GEMM without its all-reduce: the same tiles, the same ``partial_tile``."""
    rows = tl.arange(0, BLOCK_M)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    partial = partial_tile(A, B, rows, cols, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    tl.store(out + rows[:, None] * N + cols[None, :], partial.to(out.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def sweep_configs() -> dict:
    """{name: GemmAllReduce keywords}: the launch configurations a measurement chooses among."""
    configs = {}
    for block_n, block_k, stages, warps in itertools.product((32, 64), (128, 256), (3, 4), (2, 4, 8)):
        if block_n * block_k * stages > 64 * 256 * 3:
            continue  # more shared memory than an SM has at M = 64 (A's and B's tiles, each stage)
        configs[f"n{block_n} k{block_k} s{stages} w{warps}"] = dict(
            block_n=block_n, block_k=block_k, num_stages=stages, num_warps=warps, wide=True)
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="also time every configuration of sweep_configs()")
    parser.add_argument("--json", help="write every time measured to this file (rank 0)")
    parser.add_argument("--report", help="no timing: the table from a file that --json wrote")
    parser.add_argument("--write", action="store_true", help="with --report: the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        times = {int(m): row for m, row in saved["times"].items()}
        swept = [name for name in sweep_configs() if name in times[ROWS[0]]]
        lines = table(times, list(tp.GPU_STEPS), saved["environment"]) + (sweep_table(times, swept) if swept else [])
        print("\n".join(lines))
        if args.write:
            write_lesson_block("10", "benchmarks/lesson10_steps.py", lines, saved["world"])
        return
    ctx = gpu_rank("1GiB")
    world, rank = ctx.num_ranks, ctx.cur_rank
    configs = dict(tp.GPU_STEPS)
    if args.sweep:
        configs.update(sweep_configs())
    kernels = {name: tp.GemmAllReduce(ctx, N, m_max=max(ROWS), dtype=torch.bfloat16, **kw)
               for name, kw in configs.items()}
    for name, kernel in kernels.items():
        assert kernel.tiles <= ctx.get_cu_count(), f"{name}: {kernel.tiles} programs, more than the SMs"
    times = {}
    for m in ROWS:
        times[m] = time_shape(ctx, kernels, m)
        if rank == 0:
            print(f"M={m}: " + ", ".join(f"{k} {v:.1f}" for k, v in times[m].items()), flush=True)
    if rank == 0:
        where = (f"{environment()}; {world} ranks, one per GPU; NCCL "
                 f"{'.'.join(map(str, torch.cuda.nccl.version()))} (NCCL_NVLS_ENABLE={os.environ['NCCL_NVLS_ENABLE']})")
        print("\n".join(table(times, list(tp.GPU_STEPS), where)))
        if args.sweep:
            print("\n".join(sweep_table(times, list(sweep_configs()))))
        if args.json:
            Path(args.json).write_text(json.dumps({"environment": where, "world": world, "times": times}, indent=1))
    ctx.barrier()
    dist.destroy_process_group()


def time_shape(ctx, kernels: dict, m: int) -> dict:
    """{name: µs} at M = m: the baselines, each kernel and each kernel's GEMM alone; every result checked."""
    rank, k_local = ctx.cur_rank, K // ctx.num_ranks
    generator = torch.Generator(device=ctx.device).manual_seed(rank)
    A = torch.randn(m, k_local, device=ctx.device, dtype=torch.bfloat16, generator=generator)
    B = torch.randn(k_local, N, device=ctx.device, dtype=torch.bfloat16, generator=generator) / k_local ** 0.5
    expected = torch.empty(m, N, device=ctx.device, dtype=torch.bfloat16)
    local = torch.empty_like(expected)
    ops_out = ctx.zeros(m, N, dtype=torch.bfloat16)

    def torch_then_nccl():
        torch.matmul(A, B, out=expected)
        dist.all_reduce(expected)

    row = {"torch.matmul + NCCL": replay_time(torch_then_nccl, CALLS, TIMED_MS).us,
           "torch.matmul alone": replay_time(lambda: torch.matmul(A, B, out=local), CALLS, TIMED_MS).us,
           "ctx.ops": replay_time(lambda: ctx.ops.matmul_all_reduce(ops_out, A, B), CALLS, TIMED_MS).us}
    torch_then_nccl()
    checks = {"ctx.ops": ops_out}
    for name, kernel in kernels.items():
        row[name], row[f"{name}: GEMM alone"], checks[name] = time_kernel(kernel, ctx, A, B, local)
    torch.cuda.synchronize()
    for name, value in checks.items():
        error = (value.float() - expected.float()).abs().max().item()
        assert error <= 5e-2 + 2e-2 * expected.float().abs().max().item(), (
            f"M={m}, rank {rank}: {name} differs from NCCL's sum by {error}")
    return row


def time_kernel(kernel, ctx, A, B, scratch) -> tuple:
    """(µs of the kernel, µs of its GEMM alone, its output from one more call, every element written by it)."""
    (m, k_local), out = A.shape, ctx.zeros(A.shape[0], N, dtype=torch.bfloat16)
    whole = replay_time(lambda: kernel(out, A, B), CALLS, TIMED_MS).us
    gemm = replay_time(lambda: gemm_only[(kernel.tiles,)](
        A, B, scratch, m, N, k_local, BLOCK_M=max(16, triton.next_power_of_2(m)), BLOCK_N=kernel.block_n,
        BLOCK_K=kernel.block_k, **kernel.options), CALLS, TIMED_MS).us
    out.fill_(float("nan"))
    kernel(out, A, B)
    return whole, gemm, out


def table(times: dict, steps: list, where: str) -> list:
    """The steps' table: µs per call and the ratio to torch.matmul + NCCL (the goal: at most 1.10)."""
    lines = [f"Lesson 10, GEMM + all-reduce for decode: {where}; (M x {K}) @ ({K} x {N}), K split over the ranks, "
             f"bf16; CUDA graphs of {CALLS} calls replayed, slowest rank's µs per call; B (16 MiB per rank) stays "
             "in L2 between calls, for every row alike.",
             "", "| lesson 10 | M | µs | / torch + NCCL | its GEMM alone, µs |", "|---|---|---|---|---|"]
    for m, row in times.items():
        base = row["torch.matmul + NCCL"]
        for name in ("torch.matmul + NCCL", "ctx.ops", *steps):
            gemm = row.get(f"{name}: GEMM alone")
            lines.append(f"| {name} | {m} | {row[name]:.1f} | {row[name] / base:.2f} | "
                         f"{'' if gemm is None else f'{gemm:.1f}'} |")
        lines.append(f"| torch.matmul alone | {m} | {row['torch.matmul alone']:.1f} | "
                     f"{row['torch.matmul alone'] / base:.2f} | |")
    return lines


def sweep_table(times: dict, names: list) -> list:
    """Every configuration of the sweep (BLOCK_N, BLOCK_K, stages, warps; wide stores): µs, and its GEMM alone."""
    lines = ["", "Launch configurations (`--sweep`), wide stores in all:", "",
             "| config | " + " | ".join(f"M={m} µs (GEMM alone)" for m in times) + " |",
             "|---|" + "---|" * len(times)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(
            f"{row[name]:.1f} ({row[f'{name}: GEMM alone']:.1f})" for row in times.values()) + " |")
    return lines


if __name__ == "__main__":
    main()
