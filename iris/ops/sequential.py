"""The sequential path of the ops: ``torch.matmul`` into a heap buffer, then iris's collective on it.

Each function takes checked arguments (see :mod:`iris.ops`) and the op's :class:`~iris.ops.config.Workspace`.
The collectives are :mod:`iris.ccl`'s (faster than NCCL for these sizes when eager, and CUDA-graph capturable),
so this path is also the baseline the chunked path must beat: "a matmul followed by a collective", with no
overlap between the two. Each op keeps its collective's workspace in its own (``workspace.collective``), not in
``ctx.ccl``'s cache of one per collective: calls of other shapes in between must not replace it, or a CUDA
graph of the call (:mod:`iris.ops.graphs`) would allocate while capturing.
"""

from __future__ import annotations

import torch

from ..ccl.all_gather import all_gather
from ..ccl.config import Config
from ..ccl.reduce_scatter import chunk_size, reduce_scatter


def _into(out: torch.Tensor, result: torch.Tensor) -> None:
    if out.data_ptr() != result.data_ptr():
        out.copy_(result)


def matmul_all_reduce(ctx, out, A, B, bias, async_op, workspace, all_reduce_variant=None):
    """out = sum over ranks of (A @ B + bias), each rank's bias added to its own product before the sum;
    ``all_reduce_variant`` names iris.ccl's algorithm (None: by size)."""
    partial = workspace.buffer(ctx, "partial", out.shape, out.dtype)
    reduced = workspace.on_heap(ctx, "reduced", out)
    torch.matmul(A, B, out=partial)
    if bias is not None:
        partial += bias  # this rank's bias is part of its contribution (iris.ops's one meaning of a bias)
    workspace.collective = ctx.ccl.all_reduce(reduced, partial, async_op=async_op, workspace=workspace.collective,
                                              config=Config(all_reduce_variant=all_reduce_variant)
                                              if all_reduce_variant is not None else None)
    _wait_if_async(workspace, async_op, reduced is not out)
    _into(out, reduced)


def all_gather_matmul(ctx, out, A_sharded, B, bias, async_op, workspace):
    """out = (every rank's A_sharded, side by side along K) @ B (+ this rank's bias: the product is this rank's)."""
    world = ctx.num_ranks
    m, k_local = A_sharded.shape
    shard = workspace.on_heap(ctx, "shard", A_sharded)
    _into(shard, A_sharded)
    gathered = workspace.buffer(ctx, "gathered", (world * m, k_local), A_sharded.dtype)
    workspace.collective = all_gather(gathered, shard, ctx, workspace=workspace.collective)
    # Rows [r*M, (r+1)*M) hold rank r's shard: columns [r*K_local, (r+1)*K_local) of A.
    a_full = gathered.view(world, m, k_local).transpose(0, 1).reshape(m, world * k_local)
    torch.matmul(a_full, B, out=out)
    if bias is not None:
        out += bias


def matmul_all_gather(ctx, out, A, B, bias, async_op, workspace):
    """out = every rank's A @ B (+ that rank's bias), stacked along M in rank order."""
    local = workspace.buffer(ctx, "local", (A.shape[0], B.shape[1]), out.dtype)
    torch.matmul(A, B, out=local)
    if bias is not None:
        local += bias
    gathered = workspace.on_heap(ctx, "gathered", out)
    workspace.collective = all_gather(gathered, local, ctx, async_op=async_op, workspace=workspace.collective)
    _wait_if_async(workspace, async_op, gathered is not out)
    _into(out, gathered)


def matmul_reduce_scatter(ctx, out, A, B, bias, async_op, workspace):
    """out = this rank's column block of the sum over ranks of (A @ B + bias), each rank's bias added to its own
    product before the sum."""
    world, rank = ctx.num_ranks, ctx.cur_rank
    m, n_local = out.shape
    # The column blocks, each contiguous and padded to the collective's 16-element chunk alignment, so that
    # rank r's chunk of the flat buffer is exactly column block r; each block's GEMM writes it in place.
    block = chunk_size(world * m * n_local, world)
    blocks = workspace.buffer(ctx, "blocks", (world, block), out.dtype)
    for j in range(world):
        block_j = blocks[j, :m * n_local].view(m, n_local)
        torch.matmul(A, B[:, j * n_local:(j + 1) * n_local], out=block_j)
        if bias is not None:
            block_j += bias[j * n_local:(j + 1) * n_local]  # part of this rank's contribution, as in matmul_all_reduce
    workspace.collective = reduce_scatter(blocks, blocks, ctx, workspace=workspace.collective)
    out.copy_(blocks[rank, :m * n_local].view(m, n_local))


def _wait_if_async(workspace, async_op: bool, needed: bool) -> None:
    """With ``async_op``, finish the collective now when the op still has work on its result (a copy, the bias)."""
    if async_op and needed:
        workspace.wait()
