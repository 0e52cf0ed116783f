"""all_to_all_v: all_to_all with column chunks of any width, as ``torch.distributed.all_to_all`` of unequal tensors.

Upstream Iris's form: ``all_to_all_v(output, input, output_split_sizes, input_split_sizes)``. Rank r's input is
``(M, sum(input_split_sizes))``, its chunk j (``input_split_sizes[j]`` columns, in order) going to rank j; its output
is ``(M, sum(output_split_sizes))``, chunk s (``output_split_sizes[s]`` columns) coming from rank s. As with
torch.distributed, rank j's ``output_split_sizes[r]`` must equal rank r's ``input_split_sizes[j]``. Both tensors are
2-D with contiguous rows (the input may be a narrower view of a wider heap buffer, as upstream's tests make it), on
the heap at the same offset on every rank; the split sizes may differ between ranks.

One kernel: each rank publishes where its chunks start and how wide they are (a row of its workspace's table on the
heap, one per program), one flag exchange, each rank pulls its chunk from every peer (every rank starting with a
different one) in tiles of ``Config.block_size_m x block_size_n``, a second exchange says that nobody reads the
inputs or the tables any more. On the CPU backend a width that disagrees with the sender's is a ValueError once the
call returned (the kernel writes what it found into a status word); on a GPU it is not checked, as NCCL does not.

Examples
--------
>>> world, r = ctx.num_ranks, ctx.cur_rank
>>> inp = ctx.zeros(8, 4 * world); out = ctx.zeros(8, sum(4 * (s + 1) for s in range(world)))  # doctest: +SKIP
>>> ctx.ccl.all_to_all_v(out, inp[:, :4 * world], [4 * (s + 1) for s in range(world)], [4] * world)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..language.sync import exchange, lanes
from .all_to_all import tile_of
from .config import Config
from .fast_path import call_key, launch, replay
from .flag_slots import ARRIVED, DONE, SLOTS
from .groups import GroupContext, kernel_members
from .launch import programs
from .workspace import Workspace, reuse_or_allocate


@triton.jit
def all_to_all_v_kernel(context, inp, out, splits, table, flags, epochs, status, M, inp_stride, out_stride,
                        rank: tl.constexpr,
                        world: tl.constexpr, rank_start: tl.constexpr, rank_stride: tl.constexpr,
                        num_ranks: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        WAIT_DONE: tl.constexpr):
    # splits (this rank's, local): [input offsets, input widths, output offsets, output widths], ``world`` each.
    # table (on the heap): a row per program, [input offsets, input widths, input row stride].
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    row = table + pid * (2 * world + 1)
    lane = tl.arange(0, lanes(world))
    live = lane < world
    tl.store(row + lane, tl.load(splits + lane, mask=live), mask=live)
    tl.store(row + world + lane, tl.load(splits + world + lane, mask=live), mask=live)
    tl.store(row + 2 * world, inp_stride.to(tl.int64))
    exchange(ctx, flags, ARRIVED, epoch, pid, num_programs)
    for i in tl.static_range(world):
        source = (rank + i) % world  # every rank starts with a different peer
        theirs = ctx.as_remote(row, source)
        start = tl.load(theirs + rank)
        width = tl.load(theirs + world + rank)
        stride = tl.load(theirs + 2 * world)
        cols = tl.load(splits + 3 * world + source)
        at = tl.load(splits + 2 * world + source)
        if width != cols:
            tl.store(status, source + 1)
        tiles_n = tl.cdiv(cols, BLOCK_N)
        for tile in range(pid, tl.cdiv(M, BLOCK_M) * tiles_n, num_programs):
            rows, c, mask = tile_of(tile, tiles_n, M, tl.minimum(cols, width), BLOCK_M, BLOCK_N)
            src = ctx.as_remote(inp + rows[:, None] * stride + (start + c)[None, :], source, mask)
            tl.store(out + rows[:, None] * out_stride + (at + c)[None, :], tl.load(src, mask=mask), mask=mask)
    if WAIT_DONE:  # nobody reads this rank's input or table row any more
        exchange(ctx, flags, DONE, epoch, pid, num_programs)
    tl.store(epochs + pid, epoch)


def _splits(ctx, name: str, sizes, world: int, width: int) -> list[int]:
    sizes = [int(s) for s in sizes] if sizes is not None else None
    if sizes is None or len(sizes) != world or any(s < 0 for s in sizes):
        raise ValueError(f"rank {ctx.cur_rank}: all_to_all_v {name}={sizes}: give one width >= 0 per rank of the "
                         f"group ({world})")
    if sum(sizes) != width:
        raise ValueError(f"rank {ctx.cur_rank}: all_to_all_v {name} sum to {sum(sizes)} columns, but the tensor has "
                         f"{width}")
    return sizes


def _check(ctx, name: str, tensor) -> None:
    if not isinstance(tensor, torch.Tensor) or tensor.dim() != 2 or (tensor.shape[1] > 1 and tensor.stride(1) != 1):
        raise ValueError(f"rank {ctx.cur_rank}: all_to_all_v {name} must be a 2-D tensor with contiguous rows, "
                         f"got {getattr(tensor, 'shape', type(tensor).__name__)}")
    if not ctx.is_symmetric(tensor):
        raise ValueError(f"rank {ctx.cur_rank}: all_to_all_v {name} is not on the symmetric heap; allocate it with the "
                         "context (ctx.zeros, ...) in the same order on every rank")


def all_to_all_v(output_tensor, input_tensor, output_split_sizes, input_split_sizes, ctx, group=None,
                 async_op=False, config=None, workspace=None) -> Workspace:
    """Send input chunk j (``input_split_sizes[j]`` columns) to rank j; receive rank s's into output chunk s
    (``output_split_sizes[s]`` columns); collective over ``group``.

    Parameters
    ----------
    output_tensor, input_tensor : torch.Tensor
        ``(M, sum(output_split_sizes))`` and ``(M, sum(input_split_sizes))``, one dtype, 2-D with contiguous rows,
        on the heap; separate.
    output_split_sizes, input_split_sizes : sequence of int
        One width per rank of the group.
    ctx : iris.Iris
    group, async_op, workspace
        As :func:`iris.ccl.all_to_all`.
    config : Config, optional
        ``block_size_m x block_size_n`` tiles, ``comm_sms``, ``num_warps``.

    Returns
    -------
    Workspace

    Examples
    --------
    >>> ws = iris.ccl.all_to_all_v(out, inp, [2, 6], [4, 4], ctx)      # doctest: +SKIP
    """
    tensors = (output_tensor, input_tensor)
    splits_key = (tuple(output_split_sizes), tuple(input_split_sizes))
    call = call_key(f"all_to_all_v:{splits_key}", tensors, config, async_op, group=group)
    if replay(ctx, workspace, call, tensors):
        _raise_on_mismatch(ctx, workspace)
        return workspace
    config = (config or Config()).with_defaults()
    if config.use_gluon:
        raise ValueError(f"rank {ctx.cur_rank}: all_to_all_v has a Triton kernel only: use use_gluon=False")
    members = kernel_members(ctx, group, "all_to_all_v")
    world = members.size
    _check(ctx, "output", output_tensor)
    _check(ctx, "input", input_tensor)
    if output_tensor.dtype != input_tensor.dtype or output_tensor.shape[0] != input_tensor.shape[0]:
        raise ValueError(f"rank {ctx.cur_rank}: all_to_all_v output {list(output_tensor.shape)} {output_tensor.dtype} "
                         f"and input {list(input_tensor.shape)} {input_tensor.dtype} need one dtype and one row count")
    outs = _splits(ctx, "output_split_sizes", output_split_sizes, world, output_tensor.shape[1])
    ins = _splits(ctx, "input_split_sizes", input_split_sizes, world, input_tensor.shape[1])
    bm, bn = config.block_size_m, config.block_size_n
    M = input_tensor.shape[0]
    # Every rank launches as many programs (program p pairs with program p of the others), and the widths differ
    # between ranks: so as many as may run at once (Config.comm_sms, else the SMs; 2 on the CPU interpreter).
    grid = programs(ctx, config, 1 << 30)
    # The table on the heap (its scratch): a row of 2 world + 1 per program.
    key = ("all_to_all_v", "pull", M, input_tensor.dtype, grid, (bm, bn), members.key)
    workspace = reuse_or_allocate(ctx, workspace, key, grid, SLOTS, (grid * (2 * world + 1), torch.int64), members)
    workspace.status = getattr(workspace, "status", None)
    if workspace.status is None:
        workspace.status = torch.zeros(1, dtype=torch.int32, device=ctx.device)
    offsets = lambda sizes: [sum(sizes[:i]) for i in range(world)]  # noqa: E731
    splits = torch.tensor(offsets(ins) + ins + offsets(outs) + outs, dtype=torch.int64, device=ctx.device)
    launch(workspace, call, tensors, all_to_all_v_kernel, (grid,), ctx.get_device_context(), input_tensor,
           output_tensor, splits, workspace.scratch, workspace.flags, workspace.epochs, workspace.status, M,
           input_tensor.stride(0),
           output_tensor.stride(0), **members.kernel_args(), BLOCK_M=bm, BLOCK_N=bn, WAIT_DONE=not async_op,
           num_warps=config.num_warps)
    if call in workspace.launches:  # on a GPU a replay passes the splits' address: they live as long as the record
        workspace.launches[call].splits = splits
    _raise_on_mismatch(ctx, workspace)
    return workspace


def _raise_on_mismatch(ctx, workspace: Workspace) -> None:
    """On the CPU backend (the kernel has run): a ValueError naming the first sender whose width disagreed."""
    if ctx.backend != "cpu" or not int(workspace.status[0]):
        return
    source = int(workspace.status[0]) - 1
    workspace.status.zero_()
    raise ValueError(f"rank {ctx.cur_rank}: all_to_all_v: output_split_sizes[{source}] differs from the "
                     f"input_split_sizes[{ctx.cur_rank}] of rank {source} of the group: they must agree, as with "
                     "torch.distributed.all_to_all (only the narrower of the two was copied)")
