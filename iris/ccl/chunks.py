"""How the reductions cut a tensor into one chunk per rank, and the flag slots of their kernels.

The flattened tensor of ``n`` elements is cut into ``world`` contiguous chunks of ``chunk = ceil(n / world)``
elements rounded up to a multiple of 16 (so that chunks start 16-element aligned and remote accesses can be wide):
rank r owns elements ``[r * chunk, min((r + 1) * chunk, n))`` (the last ranks' chunks may be shorter or empty).
reduce_scatter's two kernels (two_shot, :mod:`iris.ccl.reduce_scatter`, and push, :mod:`iris.ccl.push_reduce`)
and the all_reduce variants built on them share this.

Examples
--------
>>> chunk_size(1000, 4), owned_range(1000, 3, 4)
(256, (768, 1000))
"""

from __future__ import annotations

import triton.language as tl

from .config import Config
from .launch import block_size, cdiv, programs

# flag slots: inputs ready (or delivered); peers done reading and writing. Kernels read only constexpr globals.
ARRIVED, DONE = tl.constexpr(0), tl.constexpr(1)
SLOTS = 2


def chunk_size(n: int, world: int) -> int:
    """Elements per rank's chunk: ceil(n / world) rounded up to a multiple of 16."""
    return cdiv(cdiv(n, world), 16) * 16


def owned_range(n: int, rank: int, world: int) -> tuple[int, int]:
    """``[lo, hi)``: the flattened elements ``rank`` reduces (possibly empty)."""
    chunk = chunk_size(n, world)
    return min(rank * chunk, n), min((rank + 1) * chunk, n)


def launch_shape(ctx, inp, config: Config, world: int) -> int:
    """Programs for reducing one chunk of ``inp`` over ``world`` ranks."""
    return programs(ctx, config, cdiv(chunk_size(inp.numel(), world), block_size(ctx, config)))
