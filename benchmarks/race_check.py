"""Cost of the race checker: the lessons' kernels on the CPU interpreter with and without ``check="races"``.

Every rank holds two contexts, a plain one and a checked one (``check="races"``), and launches each kernel on
both, alternately, in the same processes. A kernel's time is the median over repeats of the slowest rank's launch,
in CPU time of the rank's process (see :func:`time_kernels`). The kernels are the lessons' own (notebooks/02-07, as
copied into tests/race_kernels.py for the race checker's correct corpus) at the lessons' sizes, plus one
collective.
Goal: checked at most 10x plain, so that lesson-sized kernels stay interactive. The table goes to
benchmarks/RESULTS.md.

Run::

    torchrun --nproc_per_node=2 benchmarks/race_check.py
    torchrun --nproc_per_node=2 benchmarks/race_check.py --repeats 9
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402  (before the kernels: switches Triton to its interpreter)
from benchmarks.results import environment, write_section  # noqa: E402
from iris.ccl import Config  # noqa: E402
from iris.interpret import access_events  # noqa: E402
from iris.language.gluon import IrisDeviceCtx  # noqa: E402
from tests import race_kernels as k  # noqa: E402

HEAP = "16MiB"
GOAL = 10.0  # checked / plain


def _cdiv(a, b):
    return (a + b - 1) // b


def lesson_kernels(ctx):
    """``{name: launch}``: the lessons' kernels at the lessons' sizes, on ``ctx``'s heap (allocates, collectively)."""
    rank, world, bases = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_heap_bases()
    peer = (rank + 1) % world
    n = 100
    mine = ctx.arange(n, dtype=torch.float32, name="mine")
    pulled, pushed, doubled = ctx.zeros(n), ctx.zeros(n), ctx.zeros(n)
    counter = ctx.zeros(1, dtype=torch.int32)
    mailbox, flag, received = ctx.zeros(64), ctx.zeros(1, dtype=torch.int32), ctx.zeros(64)
    data, sums = ctx.arange(8 * 32, dtype=torch.float32), ctx.zeros(2, 32)
    buf, out = ctx.arange(256, dtype=torch.float32), ctx.zeros(256)
    x, summed, library_sum = ctx.randn(1000), ctx.zeros(1000), ctx.zeros(1000)
    m, nn, kk = 64, 128, 64
    n_local = nn // world
    a, b_local, c = ctx.randn(m, kk), ctx.randn(kk, n_local), ctx.zeros(m, nn)

    def message():
        if rank == 0:
            k.lesson_produce[(1,)](mailbox, flag, rank, 1, bases, BLOCK=64)
        elif rank == 1:
            k.lesson_consume[(1,)](mailbox, flag, received, BLOCK=64)
            flag.zero_()  # for the next round (the host barrier before it orders this)

    return {
        "02 get_and_put (100 fp32, 2 programs)":
            lambda: k.get_and_put[(2,)](mine, pulled, pushed, n, rank, peer, bases, BLOCK=64),
        "02 double_remote": lambda: k.double_remote[(2,)](mine, doubled, n, rank, peer, bases, BLOCK=64),
        "03 count (relaxed atomics, 8 programs)": lambda: k.count[(8,)](counter, rank, bases, PER_PROGRAM=16),
        "03 produce/consume (release/acquire)": message,
        "04 sum_translating_once": lambda: k.sum_translating_once[(1,)](ctx.get_device_context(), data, sums[1],
                                                                        rank, world, peer, CHUNKS=8, BLOCK=32),
        "05 read_from_peer (Gluon)": lambda: k.read_from_peer[(2,)](IrisDeviceCtx, ctx.get_device_context(), buf,
                                                                    out, peer, 128, num_warps=4),
        "06 one_shot_all_reduce (1000 fp32)": lambda: k.one_shot_all_reduce[(4,)](x, summed, 1000, rank, bases,
                                                                               WORLD=world, BLOCK=256),
        "06 ctx.ccl.all_reduce (1000 fp32)": lambda: ctx.ccl.all_reduce(library_sum, x, config=Config()),
        "07 gemm_all_scatter (64x128x64)": lambda: k.gemm_all_scatter[(2, _cdiv(n_local, 32))](
            a, b_local, c, m, nn, kk, n_local, rank, bases, WORLD=world, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32),
    }


def time_kernels(plain_ctx, checked_ctx, repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """``({name: plain ms}, {name: checked ms})``: medians over ``repeats`` of the slowest rank's launch.

    Plain and checked launches alternate, so that drift (caches warming up, other work on the machine) hits both
    alike; the checker stops observing the interpreter during plain launches, so that they pay nothing for it. A
    launch's time is the CPU time of its rank's process: the interpreter runs kernels on the calling thread, and
    CPU time, unlike wall time, does not count what other processes on a busy machine take from the rank. The
    first launch of each kernel (which rewrites its source) is not counted.
    """
    detector = checked_ctx._race_detector
    plain_kernels, checked_kernels = lesson_kernels(plain_ctx), lesson_kernels(checked_ctx)
    plain, checked = {}, {}
    for name in plain_kernels:
        samples = {False: [], True: []}
        for repeat in range(repeats + 1):
            for is_checked, ctx, launch in ((False, plain_ctx, plain_kernels[name]),
                                            (True, checked_ctx, checked_kernels[name])):
                (access_events.add_observer if is_checked else access_events.remove_observer)(detector)
                ctx.barrier()
                start = time.process_time()
                launch()
                elapsed = time.process_time() - start
                slowest = max(ctx.group.all_gather_object(elapsed))
                if repeat:
                    samples[is_checked].append(slowest)
        plain[name], checked[name] = (statistics.median(samples[c]) * 1e3 for c in (False, True))
    return plain, checked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    plain_ctx = iris.iris(HEAP, backend="cpu")
    checked_ctx = iris.iris(HEAP, backend="cpu", check="races")
    plain, checked = time_kernels(plain_ctx, checked_ctx, args.repeats)
    races = checked_ctx.group.all_gather_object(len(checked_ctx.races()))
    if checked_ctx.get_rank() != 0:
        return
    ratios = {name: checked[name] / plain[name] for name in plain}
    rows = "\n".join(f"| {name} | {plain[name]:.1f} | {checked[name]:.1f} | {ratios[name]:.2f}x |" for name in plain)
    worst = max(ratios.values())
    body = (
        f"{environment()}; {checked_ctx.get_num_ranks()} CPU ranks. Median of {args.repeats} launches (the slowest "
        "rank's, CPU time of its process), plain and checked (`check=\"races\"`) launches alternating in the same "
        "processes.\n\n"
        "| kernel | plain ms | checked ms | checked / plain |\n|---|---|---|---|\n"
        f"{rows}\n\n"
        f"Worst ratio {worst:.2f}x: goal (at most {GOAL:g}x) {'met' if worst <= GOAL else 'missed'}. "
        f"Races reported: {sum(races)} (the lessons' kernels are correct)."
    )
    print(body)
    print("written to", write_section("race_check (CPU interpreter)", body))


if __name__ == "__main__":
    main()
