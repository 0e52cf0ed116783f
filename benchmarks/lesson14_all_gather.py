"""Lesson 14's all-gather steps against NCCL and ``ctx.ccl.all_gather``, on one machine with a GPU per rank.

    torchrun --nproc_per_node=2 benchmarks/lesson14_all_gather.py            # the table, into RESULTS.md
    torchrun --nproc_per_node=2 benchmarks/lesson14_all_gather.py --sweep    # block size and grid, step 4

The kernels come from the lesson (notebooks/14_making_a_kernel_fast.ipynb, its ``%%writefile`` cell). Steps 1 to
3 wait on the host (``ctx.barrier``) and cannot be captured in a CUDA graph: they are timed as eager loops.
Step 4, the library and NCCL are timed both ways: CUDA-graph replays (the goal's figure) and eager loops.
Every figure is the slowest rank's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL starts: multicast stays off, for NCCL too

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import iris  # noqa: E402
from benchmarks.allreduce import calls_per_graph, eager, measure  # noqa: E402
from benchmarks.lesson_modules import lesson_directory  # noqa: E402
from benchmarks.lesson_ranks import gpu_rank  # noqa: E402
from benchmarks.results import environment, write_section  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
SIZES = [256 * KiB, 4 * MiB, 64 * MiB]  # one rank's input, bf16
GOAL = 1.10  # the lesson's final kernel at most this x NCCL's time (CUDA graphs)
LESSON = os.path.join(ROOT, "notebooks", "14_making_a_kernel_fast.ipynb")


def lesson_module():
    lesson_directory(LESSON)
    return importlib.import_module("fast_all_gather")


def check(out, src, world):
    got = [out[s * src.numel():(s + 1) * src.numel()] for s in range(world)]
    want = [torch.empty_like(src) for _ in range(world)]
    dist.all_gather(want, src)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), "wrong all-gather"


def row(ctx, module, nbytes):
    world = ctx.num_ranks
    n = nbytes // 2
    src = ctx.randn(n, dtype=torch.bfloat16, name="src")
    out = ctx.zeros(world * n, dtype=torch.bfloat16, name="out")
    nccl_out = torch.empty_like(out)
    gather = module.AllGather(ctx)
    calls = calls_per_graph(nbytes * world)
    times = {}
    for step in ("first", "wide", "persistent", "on_device"):
        call = getattr(gather, step)
        out.zero_()
        ctx.barrier()
        call(out, src)
        torch.cuda.synchronize()
        ctx.barrier()
        check(out, src, world)
        times[f"{step} eager"] = eager(lambda c=call: c(out, src))
        if step != "on_device":  # the kernel alone, without its host waits: src does not change here
            times[f"{step} kernel graph"] = measure(lambda c=call: c(out, src, barriers=False), calls)[0]
    times["on_device graph"] = measure(lambda: gather.on_device(out, src), calls)[0]
    workspace = iris.ccl.all_gather(out, src, ctx)  # allocates, outside any capture
    times["ctx.ccl graph"] = measure(lambda: iris.ccl.all_gather(out, src, ctx, workspace=workspace), calls)[0]
    times["ctx.ccl eager"] = eager(lambda: ctx.ccl.all_gather(out, src))
    times["NCCL graph"] = measure(lambda: dist.all_gather_into_tensor(nccl_out, src), calls)[0]
    times["NCCL eager"] = eager(lambda: dist.all_gather_into_tensor(nccl_out, src))
    return times


def sweep(ctx, module, nbytes):
    world = ctx.num_ranks
    n = nbytes // 2
    src = ctx.randn(n, dtype=torch.bfloat16, name="src")
    out = ctx.zeros(world * n, dtype=torch.bfloat16, name="out")
    found = {}
    sms = torch.cuda.get_device_properties(ctx.device).multi_processor_count
    for programs in (sms // 4, sms // 2, sms):
        for block in (2048, 4096, 8192, 16384):
            for warps in (4, 8, 16):
                gather = module.AllGather(ctx, programs=programs, block=block, num_warps=warps)
                found[(programs, block, warps)] = measure(lambda g=gather: g.on_device(out, src),
                                                          calls_per_graph(nbytes * world))[0]
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="time step 4's block sizes and grids")
    args = parser.parse_args()
    ctx = gpu_rank("1GiB")
    module = lesson_module()
    if args.sweep:
        for nbytes in SIZES:
            found = sweep(ctx, module, nbytes)
            if ctx.cur_rank == 0:
                best = sorted(found.items(), key=lambda kv: kv[1])[:5]
                print(f"{nbytes >> 10} KiB: best (programs, block, warps) -> us: {best}", flush=True)
        return
    rows = {nbytes: row(ctx, module, nbytes) for nbytes in SIZES}
    if ctx.cur_rank:
        return
    names = list(next(iter(rows.values())))
    lines = [f"{environment()}; {ctx.num_ranks} ranks, a GPU each, bf16; µs per call, slowest rank. Eager: a host "
             "loop of calls; graph: CUDA-graph replays. Steps 1-3 wait on the host and cannot be captured; their "
             "'kernel graph' columns time the kernel alone, without the host waits.", "",
             "| input per rank | " + " | ".join(names) + " | step 4 / NCCL (graph) |",
             "|---" * (len(names) + 2) + "|"]
    for nbytes, times in rows.items():
        ratio = times["on_device graph"] / times["NCCL graph"]
        lines.append(f"| {nbytes >> 10} KiB | " + " | ".join(f"{times[k]:.1f}" for k in names)
                     + f" | {ratio:.2f}{'' if ratio <= GOAL else ' (goal missed)'} |")
    print("\n".join(lines), flush=True)
    write_section(f"lesson14_all_gather (lesson 14's steps against NCCL, {ctx.num_ranks} GPUs)", "\n".join(lines))


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
