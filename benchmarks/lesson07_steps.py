"""Lesson 7's GEMM + all-scatter kernel, step by step, against torch.matmul + NCCL all_gather and ``ctx.ops``.

Run with one rank per GPU::

    torchrun --nproc_per_node=2 benchmarks/lesson07_steps.py             # the lesson's steps
    torchrun --nproc_per_node=2 benchmarks/lesson07_steps.py --sweep     # and every launch configuration tried
    torchrun --nproc_per_node=2 benchmarks/lesson07_steps.py --write     # and the table into RESULTS.md

The kernels are the lesson's own: notebooks/07_gemm_all_scatter.ipynb's ``%%writefile gemm_all_scatter.py``
cells (:func:`benchmarks.lesson_modules.write_lesson_modules`). The shapes are the lesson's GPU cell's: every rank
gets ``C`` of 4096 x 4096 (bf16) for ``K`` = 4096 and 16384. The lesson's kernel computes this rank's columns of
``C = A @ B`` (``A`` on every rank, ``B``'s columns split) and stores them into every rank's ``C``; torch + NCCL
and ``ctx.ops.matmul_all_gather`` compute this rank's rows and gather them: the same GEMM work per rank and the
same bytes between ranks. Each callable is captured ``CALLS`` times in a CUDA graph and replayed
(:func:`benchmarks.allreduce.measure`), the slowest rank's time; each of our kernels is followed by
``ctx.device_barrier()`` (the product is complete on every rank once it returns, as after NCCL's all_gather), and
every result is checked against ``torch.matmul`` before a time is reported. Beside the steps: ``torch.matmul``
alone, and the wide kernel with ``WORLD=1`` (its tiles, no scatter).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off, for NCCL too

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.allreduce import measure  # noqa: E402
from benchmarks.lesson13_steps import relative_error  # noqa: E402
from benchmarks.lesson_modules import lesson_directory  # noqa: E402
from benchmarks.lesson_ranks import gpu_rank  # noqa: E402
from benchmarks.results import environment, write_lesson_block  # noqa: E402

LESSON = ROOT / "notebooks" / "07_gemm_all_scatter.ipynb"
M, N = 4096, 4096
KS = (4096, 16384)
FIRST = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8)  # the first kernel's GPU launch
CALLS = 5
TIMED_MS = 40.0


def lesson_module():
    lesson_directory(LESSON)
    return __import__("gemm_all_scatter")


def sweep_configs() -> dict:
    configs = {}
    for bm, bn, bk, stages, warps in ((128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 64, 3, 4),
                                      (256, 128, 64, 3, 8), (128, 256, 64, 4, 8)):
        for group in (8, 16):
            configs[f"{bm}x{bn}x{bk} s{stages} w{warps} group {group}"] = dict(
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, num_stages=stages, num_warps=warps)
    return configs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="also time every configuration of sweep_configs()")
    parser.add_argument("--write", action="store_true", help="write the steps' table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    ctx = gpu_rank("1GiB")
    lesson = lesson_module()
    wide = {"2 gemm_all_scatter_wide, the first kernel's blocks": dict(FIRST, GROUP_M=8, num_stages=3),
            "3 gemm_all_scatter_wide, blocks chosen by measurement": lesson.GPU_CONFIG}
    if args.sweep:
        wide |= {f"sweep {k}": v for k, v in sweep_configs().items()}
    times = {k: steps_at(k, ctx, lesson, wide) for k in KS}
    if ctx.cur_rank == 0:
        lines = table(times, ctx.num_ranks)
        print("\n".join(lines), flush=True)
        if args.write:
            write_lesson_block("07", "benchmarks/lesson07_steps.py", lines, ctx.num_ranks)
    ctx.barrier()
    dist.destroy_process_group()


def steps_at(k: int, ctx, lesson, wide: dict) -> dict:
    """µs per call of every step and baseline for ``C`` of M x N and this ``k``; each result is checked (on an
    output filled with NaN) after the timings and before they are returned."""
    world, rank = ctx.num_ranks, ctx.cur_rank
    m_local, n_local = M // world, N // world
    bf16 = dict(device=ctx.device, dtype=torch.bfloat16)
    C = ctx.zeros(M, N, dtype=torch.bfloat16)
    heap_bases = ctx.get_heap_bases()
    same = torch.Generator(device=ctx.device).manual_seed(0)      # A and B the same on every rank
    A = torch.randn(M, k, generator=same, **bf16)
    B = torch.randn(k, N, generator=same, **bf16) / k ** 0.5
    B_cols = B[:, rank * n_local:(rank + 1) * n_local].contiguous()
    A_rows = A[rank * m_local:(rank + 1) * m_local].contiguous()
    want = A @ B
    local, gathered = torch.empty(m_local, N, **bf16), torch.empty(M, N, **bf16)

    def torch_then_nccl():
        torch.matmul(A_rows, B, out=local)
        dist.all_gather_into_tensor(gathered, local)

    row = {"torch.matmul + NCCL all_gather": measure(torch_then_nccl, CALLS, TIMED_MS)[0],
           "ctx.ops.matmul_all_gather": measure(lambda: ctx.ops.matmul_all_gather(C, A_rows, B), CALLS,
                                                TIMED_MS)[0],
           "torch.matmul alone": measure(lambda: torch.matmul(A_rows, B, out=local), CALLS, TIMED_MS)[0]}
    checks = {"torch.matmul + NCCL all_gather": (torch_then_nccl, gathered)}

    def first():
        grid = (M // FIRST["BLOCK_M"], n_local // FIRST["BLOCK_N"])
        lesson.gemm_all_scatter[grid](A, B_cols, C, M, N, k, n_local, rank, heap_bases, WORLD=world, **FIRST)
        ctx.device_barrier()

    steps = {"1 gemm_all_scatter (the first kernel)": first}
    for name, config in wide.items():
        def step(config=config, scatter_to=world, as_rank=rank):
            tiles = M // config["BLOCK_M"] * (n_local // config["BLOCK_N"])
            lesson.gemm_all_scatter_wide[(tiles,)](A, B_cols, C, M, N, k, n_local, as_rank, heap_bases,
                                                   WORLD=scatter_to, **config)
            if scatter_to > 1:
                ctx.device_barrier()
        steps[name] = step
        if not name.startswith("sweep"):
            row[f"{name[2:]}: its tiles alone"] = measure(lambda step=step: step(scatter_to=1, as_rank=0),
                                                          CALLS, TIMED_MS)[0]
    for name, step in steps.items():
        checks[name] = (step, C)
        row[name] = measure(step, CALLS, TIMED_MS)[0]
    for name, (step, out) in checks.items():
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        ctx.barrier()                             # no peer's kernel writes into my C before my fill
        step()
        torch.cuda.synchronize()
        error = relative_error(out, want)
        assert error < 1e-2, f"K={k}, rank {rank}: {name} differs from torch.matmul by {error:.1e}"
    if rank == 0:
        print(f"K={k}: " + ", ".join(f"{name} {us:.1f}" for name, us in row.items()), flush=True)
    return row


def table(times: dict, world: int) -> list:
    """One row per K and step or baseline: µs per call and the ratio to torch + NCCL (the goal: at most 1.10)."""
    lines = [f"{environment()}; {world} ranks, one per GPU; NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; "
             f"C of {M} x {N} on every rank, each rank computing 1/{world} of it, bf16; CUDA graphs of {CALLS} calls, "
             "slowest rank.", "", "| lesson 07 | K | step or baseline | µs | / torch + NCCL |", "|---|---|---|---|---|"]
    sweeps = []
    for k, row in times.items():
        base = row["torch.matmul + NCCL all_gather"]
        for name, us in row.items():
            if name.startswith("sweep"):
                sweeps.append(f"| sweep | {k} | {name[len('sweep '):]} | {us:.1f} | {us / base:.2f} |")
            else:
                lines.append(f"| GEMM + all-scatter | {k} | {name} | {us:.1f} | {us / base:.2f} |")
    return lines + sweeps


if __name__ == "__main__":
    main()
