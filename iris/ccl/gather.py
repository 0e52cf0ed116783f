"""gather: the root's output becomes every rank's input, concatenated along dim 0.

As ``torch.distributed.gather`` into one tensor (upstream Iris's form): every rank's input is ``(M, ...)``, the
root's output ``(world * M, ...)`` with rank i's input in rows ``[i * M, (i + 1) * M)``; the other ranks' outputs
are not written. ``dst`` is a rank of the group. Two algorithms, broadcast's ``Config(broadcast_variant=...)``:

* ``push``: one kernel. The root tells every rank it arrived (its output may be overwritten); each rank writes its
  input straight into its rows of the root's output and tells the root, which waits for all. One link round trip,
  no scratch.
* ``copy_engines`` (GPUs, large inputs): every rank copies its input into the root's output by a peer-to-peer
  memcpy between two device barriers.

The root's input may be its own rows of its output (in place); no other overlap.

Examples
--------
>>> inp = ctx.full((2, 3), float(ctx.cur_rank)); out = ctx.zeros(2 * ctx.num_ranks, 3)   # doctest: +SKIP
>>> ctx.ccl.gather(out, inp, dst=0)          # on rank 0: out[2 s:2 s + 2] == s for every rank s
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..language.sync import announce, await_all, flag_of, signal
from .fast_path import call_key, launch, replay
from .flag_slots import ARRIVED, DONE, SLOTS
from .groups import GroupContext, kernel_members
from .launch import block_size, cdiv, check_tensors, hint, programs
from .rooted import check_pieces, hear_from, kernel_for, root_of, rooted_copy_engines, rooted_variant
from .tuning import scratch_runner, tuned_config
from .workspace import Workspace, reuse_or_allocate


@triton.jit
def to_root_kernel(context, inp, out, flags, epochs, n, root: tl.constexpr, rank: tl.constexpr, world: tl.constexpr,
                   rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr,
                   BLOCK: tl.constexpr, COPY_OWN: tl.constexpr, HINT: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    if rank == root:
        announce(ctx, flags, ARRIVED, epoch, pid, num_programs)  # the root's output may be overwritten
    else:
        hear_from(flags, ARRIVED, epoch, pid, num_programs, root, world)
    if rank != root or COPY_OWN:
        for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
            offs = block * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            value = tl.load(inp + offs, mask=mask)
            if rank == root:
                tl.store(out + rank * n + offs, value, mask=mask)
            else:
                tl.store(ctx.as_remote(out + rank * n + offs, root, mask, HINT), value, mask=mask)
    tl.debug_barrier()  # on a GPU: every thread's stores before the release
    signal(ctx, flag_of(flags, DONE, rank, pid, num_programs, world), epoch, root)
    if rank == root:
        await_all(ctx, flags, DONE, epoch, pid, num_programs)  # every rank's rows have landed
    tl.store(epochs + pid, epoch)


def gather(output_tensor, input_tensor, ctx, dst=0, group=None, async_op=False, config=None,
           workspace=None) -> Workspace:
    """Concatenate every rank's ``input_tensor`` along dim 0 into the root's ``output_tensor``; collective.

    Parameters
    ----------
    output_tensor : torch.Tensor
        ``(world * M, ...)`` (``world``: the group's size), contiguous, on the heap; written on the root only.
    input_tensor : torch.Tensor
        ``(M, ...)``, same dtype, contiguous, on the heap; on the root it may be its own rows of the output.
    ctx : iris.Iris
    dst : int
        The root: a rank of the group.
    group, async_op, config, workspace
        As :func:`iris.ccl.broadcast`.

    Returns
    -------
    Workspace

    Examples
    --------
    >>> ws = iris.ccl.gather(out, inp, ctx, dst=0)     # doctest: +SKIP
    """
    out, inp = output_tensor, input_tensor
    call = call_key(f"gather:{dst}", (out, inp), config, async_op, group=group)
    if replay(ctx, workspace, call, (out, inp)):
        return workspace
    members = kernel_members(ctx, group, "gather")
    root = root_of(ctx, "gather", members, ("dst", dst))
    check_tensors(ctx, "gather", out, inp)
    world, n = members.size, inp.numel()
    in_place = check_pieces(ctx, "gather", out, inp, members)
    config = tuned_config(ctx, "gather", config, inp, members,
                          scratch_runner(ctx, gather, out, inp, dst=dst, group=group)).with_defaults()
    variant = rooted_variant(ctx, config, "gather", n * inp.element_size(), world)
    if variant == "copy_engines":
        def copies():
            rows = (out if members.rank == root else ctx.as_remote(out, members.ranks[root])).view(world, -1)
            if rows[members.rank].data_ptr() != inp.data_ptr():
                rows[members.rank].copy_(inp.view(-1))

        key = ("gather", variant, n, inp.dtype, 1, None, members.key)
        return rooted_copy_engines(ctx, members, workspace, key, copies)
    block = block_size(ctx, config)
    grid = programs(ctx, config, cdiv(n, block))
    key = ("gather", "push", n, inp.dtype, grid, block, members.key)
    workspace = reuse_or_allocate(ctx, workspace, key, grid, SLOTS, members=members)
    kernel, extra = kernel_for(ctx, config, to_root_kernel, inp.element_size(), block)
    launch(workspace, call, (out, inp), kernel, (grid,), ctx.get_device_context(), inp, out,
           workspace.flags, workspace.epochs, n, root=root, **members.kernel_args(), BLOCK=block,
           COPY_OWN=not in_place, HINT=hint(*((out, r * n) for r in range(world))),
           num_warps=config.num_warps, **extra)
    return workspace
