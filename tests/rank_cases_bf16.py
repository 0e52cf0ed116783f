"""Code that runs inside each rank for tests/test_interpret_bf16.py: bf16, fp16 and fp32 atomic adds of every rank
into rank 0's counters on the CPU backend, at the same time.

Returns JSON: the values each lane saw before its add (bf16, fp16 and fp32), and rank 0's counters afterwards.
"""

from __future__ import annotations

import torch

import iris

from . import bf16_kernels as k

PROGRAMS, BLOCK = 4, 32  # 2 ranks x 128 adds of 1.0: every partial sum up to 256 is exact in bf16


def atomic_adds_into_rank_zero():
    ctx = iris.iris("1MiB", backend="cpu")
    rank = ctx.get_rank()
    counter = ctx.zeros(1, dtype=torch.bfloat16, name="counter")
    halves = ctx.zeros(1, dtype=torch.float16, name="halves")
    seen = torch.full((PROGRAMS * BLOCK,), -1.0, dtype=torch.bfloat16)
    singles = ctx.zeros(1, dtype=torch.float32, name="singles")
    seen_halves = torch.full((PROGRAMS * BLOCK,), -1.0, dtype=torch.float16)
    seen_singles = torch.full((PROGRAMS * BLOCK,), -1.0, dtype=torch.float32)
    ctx.barrier()  # both ranks launch together, so that their adds interleave
    k.add_into_rank[(PROGRAMS,)](counter, halves, singles, seen, seen_halves, seen_singles, rank, 0,
                                 ctx.get_heap_bases(), BLOCK=BLOCK)
    ctx.barrier()
    return {"seen": seen.float().tolist(), "seen_halves": seen_halves.float().tolist(),
            "seen_singles": seen_singles.tolist(), "counter": counter.float().item(),
            "halves": halves.float().item(), "singles": singles.item()}
