"""matmul_reduce_scatter in upstream Iris's form: a full (M, N) ``out`` of which each rank fills its own tiles.

Upstream numbers the ``block_size_m x block_size_n`` tiles of the product row-major and gives each rank a
contiguous run of ``tiles // world`` of them (the last rank takes the rest); a rank's ``out`` holds the sum over
ranks of ``A @ B + bias`` on its tiles and is left as it was elsewhere. Here: each rank's cuBLAS product goes
into a heap buffer, a device barrier, then one program per owned tile reads that tile from every rank's buffer
(in rank order, summing in float32, so each element is rounded once) and writes it into ``out``. Our own
form, an ``(M, N / world)`` column block (:mod:`iris.ops.sequential`, :mod:`iris.ops.chunked`), moves the same
bytes with the copy engines; this one exists so that upstream's code and tests run unchanged.

Examples
--------
>>> C = ctx.zeros(M, N, dtype=torch.float16)                                    # doctest: +SKIP
>>> iris.ops.matmul_reduce_scatter(ctx, C, A, B, config=FusedConfig(block_size_m=64, block_size_n=64))
>>> owned_range(total_tiles=4, rank=1, world=2)
(2, 4)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language import TRITON_MAX_TENSOR_NUMEL

from ..language.core import DeviceContext


def owned_range(total_tiles: int, rank: int, world: int) -> tuple[int, int]:
    """The tile ids ``[first, stop)`` that ``rank`` owns: runs of ``total_tiles // world``, the last rank's to
    the end (upstream's split)."""
    per_rank = total_tiles // world
    first = rank * per_rank
    return first, total_tiles if rank == world - 1 else first + per_rank


@triton.jit
def sum_owned_tiles_kernel(context, partial, out, M, N, stride_pm, stride_om, stride_on, first_tile,
                           rank: tl.constexpr, world: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           TILE_M: tl.constexpr, TILE_N: tl.constexpr):
    ctx = DeviceContext.initialize(context, rank, world)
    tile = first_tile + tl.program_id(0)
    tiles_n = tl.cdiv(N, TILE_N)
    rows = (tile // tiles_n) * TILE_M + tl.arange(0, BLOCK_M)  # BLOCK: the tile rounded up to a power of two
    cols = (tile % tiles_n) * TILE_N + tl.arange(0, BLOCK_N)
    inside = (tl.arange(0, BLOCK_M) < TILE_M)[:, None] & (tl.arange(0, BLOCK_N) < TILE_N)[None, :]
    mask = inside & (rows < M)[:, None] & (cols < N)[None, :]
    total = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for source in tl.static_range(world):  # rank order: every owner sums alike
        total += ctx.load(partial + rows[:, None] * stride_pm + cols[None, :], source, mask=mask).to(tl.float32)
    tl.store(out + rows[:, None] * stride_om + cols[None, :] * stride_on, total.to(out.dtype.element_ty), mask=mask)


def matmul_reduce_scatter(ctx, out, A, B, bias, async_op, workspace, config):
    """``out`` (M, N): this rank's tiles of the sum over ranks of ``A @ B + bias`` (each rank's bias added to its
    own product); tiles of ``config.block_size_m x config.block_size_n``, owned as :func:`owned_range` says."""
    m, n = out.shape
    rank, world = ctx.cur_rank, ctx.num_ranks
    tile_m, tile_n = config.block_size_m, config.block_size_n
    block_m, block_n = triton.next_power_of_2(tile_m), triton.next_power_of_2(tile_n)
    if block_m * block_n > TRITON_MAX_TENSOR_NUMEL:
        raise ValueError(f"rank {rank}: matmul_reduce_scatter with a full (M, N) out: a tile of block_size_m x "
                         f"block_size_n = {tile_m} x {tile_n} is over Triton's {TRITON_MAX_TENSOR_NUMEL} elements "
                         "per block: use smaller tiles")
    partial = workspace.buffer(ctx, "partial", (m, n), out.dtype)
    ctx.device_barrier()  # no peer still reads this rank's partial of the last call
    torch.matmul(A, B, out=partial)
    if bias is not None:
        partial += bias
    ctx.device_barrier()  # every rank's partial is complete
    first, stop = owned_range(triton.cdiv(m, tile_m) * triton.cdiv(n, tile_n), rank, world)
    if stop > first:
        sum_owned_tiles_kernel[(stop - first,)](
            ctx.get_device_context(), partial, out, m, n, partial.stride(0), out.stride(0), out.stride(1), first,
            rank=rank, world=world, BLOCK_M=block_m, BLOCK_N=block_n, TILE_M=tile_m, TILE_N=tile_n)
    if not async_op:
        ctx.device_barrier()  # no peer reads this rank's partial any more: its caller may free or reuse the heap
