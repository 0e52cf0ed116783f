"""all_to_all: column chunk j of every rank's input goes to rank j.

As upstream Iris: input and output are both (M, N * world). Rank r's input columns ``[j * N, (j + 1) * N)``
land in rank j's output columns ``[r * N, (r + 1) * N)``. Two algorithms, ``Config(all_to_all_variant="push" |
"pull" | "copy_engines")``, the first two moving tiles of ``Config.block_size_m`` x ``block_size_n``, every rank
starting with a different peer:

* ``pull`` (upstream's): one flag exchange, each rank reads its column chunk from every peer's input, a second
  exchange says that nobody reads the inputs any more. Remote loads wait a link round trip each.
* ``push`` (small inputs): each rank writes chunk j of its input into rank j's inbox as posted stores, one flag
  exchange, then copies the chunks into its output locally (:mod:`iris.ccl.inbox`, as all_gather's push). The
  workspace holds 2 x the input per rank.
* ``copy_engines`` (large inputs, GPUs; ours): no kernel moves the data. Each rank writes chunk j of its input into
  rank j's output by a 2-D peer-to-peer memcpy, one peer a step, the ranks kept in step by device barriers
  (:mod:`iris.ccl.copy_engines`, as all_gather's).

Size rule (:func:`iris.ccl.rules.choose_all_to_all_variant`): on GPUs (Triton, not Gluon) copy_engines where a
peer's chunk is large (all_gather's rule); else push while the bytes a rank writes into its peers' inboxes are at
most 4 MiB; else pull. The output must be a tensor separate from the input.

Examples
--------
>>> inp = ctx.randn(8, 4 * ctx.num_ranks); out = ctx.zeros_like(inp)     # doctest: +SKIP
>>> ctx.ccl.all_to_all(out, inp)    # out[:, 4 * s:4 * s + 4] == rank s's inp[:, 4 * r:4 * r + 4]  # doctest: +SKIP
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..language.sync import exchange
from .config import Config
from .copy_engines import push_in_step
from .fast_path import call_key, launch, replay
from .flag_slots import ARRIVED, DONE, SLOTS
from .gluon_layouts import tile_layout, warp_threads
from .groups import GroupContext, kernel_members
from .inbox import DELIVERED, call_half, inbox_numel, inbox_stride
from .launch import cdiv, check_tensors, has_copy_engines, overlaps, programs
from .rules import choose_all_to_all_variant
from .tuning import scratch_runner, tuned_config
from .workspace import Workspace, reuse_or_allocate


@triton.jit
def tile_of(tile, tiles_n, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rows, columns and bounds mask of tile ``tile`` (row-major, ``tiles_n`` tiles a row) of an M x N chunk."""
    rows = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    return rows, cols, (rows < M)[:, None] & (cols < N)[None, :]


@triton.jit
def remote(ctx, ptrs, peer, mask, WIDE: tl.constexpr):
    """``peer``'s address of a tile's ``ptrs``; with ``WIDE`` (rows of 16 aligned contiguous elements) hinted so
    that the remote access may be vectorised."""
    if WIDE:
        return ctx.as_remote(ptrs, peer, mask, (1, 16))
    return ctx.as_remote(ptrs, peer, mask)


@triton.jit
def all_to_all_kernel(context, inp, out, flags, epochs, M, N, stride_m, rank: tl.constexpr, world: tl.constexpr,
                      rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WAIT_DONE: tl.constexpr, WIDE: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    exchange(ctx, flags, ARRIVED, epoch, pid, num_programs)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for i in tl.static_range(world):
        source = (rank + i) % world
        for tile in range(pid, tl.cdiv(M, BLOCK_M) * tiles_n, num_programs):
            rows, cols, mask = tile_of(tile, tiles_n, M, N, BLOCK_M, BLOCK_N)
            src = inp + rows[:, None] * stride_m + (rank * N + cols)[None, :]
            value = tl.load(remote(ctx, src, source, mask, WIDE), mask=mask)
            tl.store(out + rows[:, None] * stride_m + (source * N + cols)[None, :], value, mask=mask)
    if WAIT_DONE:  # nobody reads this rank's input any more
        exchange(ctx, flags, DONE, epoch, pid, num_programs)
    tl.store(epochs + pid, epoch)


@triton.jit
def push_all_to_all_kernel(context, inp, out, inbox, flags, epochs, M, N, stride_m, stride,
                           rank: tl.constexpr, world: tl.constexpr, rank_start: tl.constexpr,
                           rank_stride: tl.constexpr, num_ranks: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, WIDE: tl.constexpr):
    # Inbox row s (``stride`` elements) of this call's half holds rank s's chunk for this rank, M x N row-major.
    # Program p writes and later reads the same tiles on every rank, so waiting for program p of the others suffices.
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    box = call_half(inbox, epoch, world, stride)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    for tile in range(pid, tiles, num_programs):
        rows, cols, mask = tile_of(tile, tiles_n, M, N, BLOCK_M, BLOCK_N)
        for i in tl.static_range(1, world):
            peer = (rank + i) % world  # everyone starts with a different peer
            value = tl.load(inp + rows[:, None] * stride_m + (peer * N + cols)[None, :], mask=mask)
            dst = box + rank * stride + rows[:, None] * N + cols[None, :]
            tl.store(remote(ctx, dst, peer, mask, WIDE), value, mask=mask)
    exchange(ctx, flags, DELIVERED, epoch, pid, num_programs)
    for tile in range(pid, tiles, num_programs):
        rows, cols, mask = tile_of(tile, tiles_n, M, N, BLOCK_M, BLOCK_N)
        for source in tl.static_range(world):
            if source == rank:
                src = inp + rows[:, None] * stride_m + (rank * N + cols)[None, :]
            else:
                src = box + source * stride + rows[:, None] * N + cols[None, :]
            tl.store(out + rows[:, None] * stride_m + (source * N + cols)[None, :], tl.load(src, mask=mask),
                     mask=mask)
    tl.store(epochs + pid, epoch)


def all_to_all(output_tensor, input_tensor, ctx, group=None, async_op=False, config=None,
               workspace=None) -> Workspace:
    """Send column chunk j of ``input_tensor`` to rank j, receiving rank s's chunk into columns s; collective.

    Parameters
    ----------
    output_tensor, input_tensor : torch.Tensor
        Both (M, N * world) (``world``: the group's size), same dtype, contiguous, on the heap, separate.
    ctx : iris.Iris
    group : torch.distributed.ProcessGroup, optional
        None or ``dist.group.WORLD``: every rank; else the group's members, who alone call: column chunk ``j``
        goes to member ``j`` of the group (:mod:`iris.ccl.groups`).
    async_op : bool
        True: return at once; ``wait()`` on the result (a device barrier) before reusing the tensors.
    config : Config, optional
        ``all_to_all_variant`` "push", "pull" or "copy_engines" picks the algorithm (None: by measurement or size);
        ``block_size_m`` x ``block_size_n`` is the tile one program moves per step; ``use_gluon=True`` runs pull
        as a Gluon kernel (:mod:`iris.ccl.gluon_all_to_all`).
    workspace : Workspace, optional
        From an earlier call with the same shapes (``ctx.ccl`` keeps one for you).

    Returns
    -------
    Workspace
        Pass it to the next call; it is also the Work handle of an ``async_op=True`` call.

    Examples
    --------
    >>> ws = iris.ccl.all_to_all(out, inp, ctx)       # doctest: +SKIP
    """
    tensors = (output_tensor, input_tensor)
    call = call_key("all_to_all", tensors, config, async_op, group=group)
    if replay(ctx, workspace, call, tensors):  # the same call as before: checked, planned and compiled
        return workspace
    config = config or Config()
    if config.use_gluon and config.all_to_all_variant in ("push", "copy_engines"):
        raise ValueError(f"rank {ctx.cur_rank}: all_to_all with Config(all_to_all_variant="
                         f"{config.all_to_all_variant!r}, use_gluon=True): the Gluon kernel pulls; use "
                         f"all_to_all_variant='pull' or None with Gluon, or use_gluon=False for "
                         f"{config.all_to_all_variant}")
    group_of_call = kernel_members(ctx, group, "all_to_all")
    check_tensors(ctx, "all_to_all", output_tensor, input_tensor)
    world, rank = group_of_call.size, ctx.cur_rank
    if input_tensor.dim() != 2 or input_tensor.shape[1] % world or output_tensor.shape != input_tensor.shape:
        raise ValueError(f"rank {rank}: all_to_all over {world} ranks needs input and output of one shape "
                         f"(M, N * {world}), got input {list(input_tensor.shape)} and output "
                         f"{list(output_tensor.shape)}")
    if overlaps(output_tensor, input_tensor):
        raise ValueError(f"rank {rank}: all_to_all output overlaps the input: peers still read the input while "
                         "the output is written; use a separate tensor")
    config = tuned_config(ctx, "all_to_all", config, input_tensor, group_of_call,
                          scratch_runner(ctx, all_to_all, output_tensor, input_tensor, group=group)).with_defaults()
    M, N = input_tensor.shape[0], input_tensor.shape[1] // world
    bm, bn = config.block_size_m, config.block_size_n
    grid = programs(ctx, config, cdiv(M, bm) * cdiv(N, bn))
    nbytes = input_tensor.numel() * input_tensor.element_size()
    variant = choose_all_to_all_variant(config.all_to_all_variant, nbytes, world, config.use_gluon,
                                        has_copy_engines(ctx, config))
    if variant == "copy_engines":
        me = group_of_call.rank
        mine = slice(me * N, (me + 1) * N)
        key = ("all_to_all", variant, input_tensor.numel(), input_tensor.dtype, 1, None, group_of_call.key)
        return push_in_step(ctx, group_of_call, workspace, key,
                            lambda: ctx.heap.copy_2d(output_tensor[:, mine], input_tensor[:, mine]),
                            lambda index, peer: ctx.heap.copy_2d(ctx.as_remote(output_tensor, peer)[:, mine],
                                                                 input_tensor[:, index * N:(index + 1) * N]))
    key = ("all_to_all", variant, input_tensor.numel(), input_tensor.dtype, grid, (bm, bn), group_of_call.key)
    row_bytes, col_bytes = input_tensor.stride(0) * input_tensor.element_size(), N * input_tensor.element_size()
    aligned = input_tensor.data_ptr() % 16 == 0 and row_bytes % 16 == 0 and col_bytes % 16 == 0 and bn >= 16
    common = dict(**group_of_call.kernel_args(), BLOCK_M=bm, BLOCK_N=bn, num_warps=config.num_warps)
    if variant == "push":
        stride = inbox_stride(M * N)
        inbox = (inbox_numel(M * N, world), input_tensor.dtype)
        workspace = reuse_or_allocate(ctx, workspace, key, grid, 1, inbox, group_of_call)
        # Wide remote stores need the inbox 16-byte aligned as well as the input's rows and chunks.
        wide = aligned and workspace.scratch.data_ptr() % 16 == 0
        launch(workspace, call, tensors, push_all_to_all_kernel, (grid,), ctx.get_device_context(), input_tensor,
               output_tensor, workspace.scratch, workspace.flags, workspace.epochs, M, N, input_tensor.stride(0),
               stride, WIDE=wide, **common)
        return workspace
    workspace = reuse_or_allocate(ctx, workspace, key, grid, SLOTS, members=group_of_call)
    kernel = all_to_all_kernel
    if config.use_gluon:  # the same algorithm and workspace, as a Gluon kernel (defined on first use)
        from .gluon_all_to_all import gluon_all_to_all_kernel as kernel

        common["LAYOUT"] = tile_layout(input_tensor.element_size(), bm, bn, config.num_warps, warp_threads(ctx))
    launch(workspace, call, tensors, kernel, (grid,), ctx.get_device_context(), input_tensor, output_tensor,
           workspace.flags, workspace.epochs, M, N, input_tensor.stride(0), WAIT_DONE=not async_op, WIDE=aligned,
           **common)
    return workspace
