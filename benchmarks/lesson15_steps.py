"""Lesson 15's GEMM with a tile all-reduce in its epilogue, each variant, against torch + NCCL and the library.

Run with one rank per GPU::

    torchrun --nproc_per_node=2 benchmarks/lesson15_steps.py             # the lesson's variants and baselines
    torchrun --nproc_per_node=2 benchmarks/lesson15_steps.py --write     # and the table into RESULTS.md

The kernel is the lesson's own: notebooks/15_fused_kernels_tile_collectives.ipynb's ``%%writefile fused_gemm.py``
cell (:func:`benchmarks.lesson_modules.write_lesson_modules`), through its ``FusedGemmAllReduce``, called as the
lesson's GPU cells call it (``fused(A, B, variant)``: zero the flags or the output, a device barrier, the kernel,
and for two_shot and atomic a device barrier after it). The shape is the lesson's: every rank ends with the sum over
ranks of ``A @ B``, M = N = K = 4096, K split over the ranks, bf16, the kernel's GPU tiles (128 x 256 x 64, one
program per SM).

Each callable is captured ``CALLS`` times in a CUDA graph and replayed (:func:`benchmarks.allreduce.measure`), the
slowest rank's µs per call, the median of ``ROUNDS`` rotated rounds (a GEMM heats the GPU: whatever ran first in one
pass would look faster). Baselines: ``torch.matmul`` then NCCL's ``all_reduce`` (what a practitioner calls),
``ctx.ops.matmul_all_reduce``; bounds: ``torch.matmul`` alone and the lesson's kernel with no collective
("gemm"). Every output is checked against torch + NCCL's (the GEMM alone against ``torch.matmul``'s) before the
timings and again after them.
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
from benchmarks.allreduce import rotated_medians  # noqa: E402
from benchmarks.lesson_modules import lesson_directory  # noqa: E402
from benchmarks.lesson_ranks import gpu_rank  # noqa: E402
from benchmarks.results import environment, steps_table, write_lesson_block  # noqa: E402

LESSON = ROOT / "notebooks" / "15_fused_kernels_tile_collectives.ipynb"
SIZE = 4096  # M = N = K
VARIANTS = ("one_shot", "two_shot", "push", "atomic")
CALLS = 5  # calls per captured graph
TIMED_MS = 40.0
ROUNDS = 3
BASELINE = "torch.matmul + NCCL all_reduce"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="write the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    ctx = gpu_rank("2GiB")
    lesson_directory(LESSON)
    fused_gemm = __import__("fused_gemm")
    world, rank = ctx.num_ranks, ctx.cur_rank
    g = torch.Generator(device=ctx.device).manual_seed(rank)
    A = (torch.randn(SIZE, SIZE // world, generator=g, device=ctx.device) / 64).to(torch.bfloat16)   # the lesson's
    B = torch.randn(SIZE // world, SIZE, generator=g, device=ctx.device).to(torch.bfloat16)
    fused = fused_gemm.FusedGemmAllReduce(ctx, SIZE, SIZE, torch.bfloat16)
    product = torch.empty(SIZE, SIZE, dtype=torch.bfloat16, device=ctx.device)
    local = torch.empty_like(product)
    library = ctx.zeros(SIZE, SIZE, dtype=torch.bfloat16)

    def torch_then_nccl():
        torch.matmul(A, B, out=product)
        dist.all_reduce(product)

    torch_then_nccl()
    want = product.clone()
    want_local = torch.matmul(A, B)
    calls = {BASELINE: torch_then_nccl,
             "ctx.ops.matmul_all_reduce": lambda: ctx.ops.matmul_all_reduce(library, A, B),
             "torch.matmul alone": lambda: torch.matmul(A, B, out=local),
             "fused gemm alone (the lesson's kernel, no collective)": lambda: fused(A, B, "gemm"),
             **{f"fused {v}": (lambda v=v: fused(A, B, v)) for v in VARIANTS}}
    # What each call leaves, and what it must equal: fused's variants share its `out`, so each is run before its
    # check; the GEMM alone leaves this rank's own product, not the sum.
    checks = {BASELINE: (torch_then_nccl, product, want),
              "ctx.ops.matmul_all_reduce": (calls["ctx.ops.matmul_all_reduce"], library, want),
              "fused gemm alone (the lesson's kernel, no collective)": (
                  calls["fused gemm alone (the lesson's kernel, no collective)"], fused.out, want_local),
              **{f"fused {v}": (calls[f"fused {v}"], fused.out, want) for v in VARIANTS}}
    run_checks(checks, ctx, "")
    rows = rotated_medians(calls, ROUNDS, CALLS, TIMED_MS)
    run_checks(checks, ctx, ", after the timings")
    if rank == 0:
        lines = table(rows, world)
        print("\n".join(lines), flush=True)
        if args.write:
            write_lesson_block("15", "benchmarks/lesson15_steps.py", lines, world)
    ctx.barrier()
    dist.destroy_process_group()


def run_checks(checks: dict, ctx, when: str) -> None:
    """Each call once, on an output filled with NaN, then its output against what it must equal: the lesson's own
    check (largest error over the largest value, under 2%)."""
    for name, (call, out, want) in checks.items():
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        ctx.barrier()                     # no peer's call writes into this rank's output before its fill
        call()
        torch.cuda.synchronize()
        ctx.barrier()                     # every peer's writes into this rank's output are done
        error = ((out.float() - want.float()).abs().max() / want.float().abs().max()).item()
        assert error < 2e-2, f"rank {ctx.cur_rank}: {name}{when} differs from torch by {error:.1e} (NaN: unwritten)"


def table(rows: dict, world: int) -> list[str]:
    """The environment, then :func:`benchmarks.results.steps_table` with the fastest fused variant as the final
    kernel (the lesson shows three; a user picks the fastest)."""
    final = min((f"fused {v}" for v in VARIANTS), key=lambda name: rows[name][0])
    return [f"{environment()}; {world} ranks, one per GPU; NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; "
            f"every rank ends with the sum over ranks of A @ B, M = N = K = {SIZE} (each rank K / {world}), bf16; "
            f"CUDA graphs of {CALLS} calls, slowest rank, median of {ROUNDS} rotated rounds.", "",
            *steps_table("15", rows, BASELINE, final)]


if __name__ == "__main__":
    main()
