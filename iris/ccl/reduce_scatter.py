"""reduce_scatter: rank r sums every rank's r-th chunk of the input into the r-th chunk of its output.

Same shape in and out (as upstream Iris). Chunks as :mod:`iris.ccl.chunks` cuts them: rank r owns
``owned_range(n, r, world)``, writes exactly its chunk and leaves every other element of its output as it was.
``out`` may be ``inp`` (in place): no rank reads another rank's chunk of someone else's input.

Two algorithms (``Config.reduce_scatter_variant``; None: the table's or the tuner's choice, else the size rule,
:func:`iris.ccl.rules.choose_scatter_variant`):

* ``two_shot`` (this module's kernel, upstream's name): after one flag exchange, each rank reads its chunk from
  every peer's input and sums it; a second exchange tells the peers that their inputs are free again.
* ``push`` (:mod:`iris.ccl.push_reduce`): each rank writes the chunks its peers own into their inboxes (posted
  stores, no round trip per access), one exchange, then each sums its chunk locally. Its workspace holds two
  copies of the tensor.

The two_shot kernel is also the two_shot all_reduce, and the push kernel the two_shot_push all_reduce: with
``GATHER`` each rank then writes its reduced chunk into every rank's output.

Examples
--------
>>> inp = ctx.randn(1000, dtype=torch.bfloat16); out = ctx.zeros_like(inp)     # doctest: +SKIP
>>> ctx.ccl.reduce_scatter(out, inp)
>>> lo, hi = iris.ccl.owned_range(1000, ctx.cur_rank, ctx.num_ranks)
>>> out[lo:hi]   # the sum over ranks of inp[lo:hi]; out elsewhere untouched
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..language.sync import exchange
from .chunks import ARRIVED, DONE, SLOTS, chunk_size, launch_shape, owned_range
from .config import Config, refuse_gluon
from .fast_path import call_key, launch, replay
from .groups import GroupContext, kernel_members
from .launch import block_size, check_op, check_tensors, hint, overlaps
from .push_reduce import launch_push_reduce, push_workspace
from .rules import choose_scatter_variant
from .tuning import scratch_runner, tuned_config
from .workspace import reuse_or_allocate

__all__ = ["chunk_size", "launch_reduce_chunks", "owned_range", "reduce_scatter"]


@triton.jit
def sum_over_ranks(ctx, ptrs, mask, BLOCK: tl.constexpr, HINT: tl.constexpr):
    """fp32 sum of every rank's copy of ``ptrs``, added in rank order so that every rank gets the same bits."""
    total = tl.zeros([BLOCK], tl.float32)
    for source in tl.static_range(ctx.world_size):
        total += tl.load(ctx.as_remote(ptrs, source, mask, HINT), mask=mask).to(tl.float32)
    return total


@triton.jit
def reduce_chunk_kernel(context, inp, out, flags, epochs, n, chunk, rank: tl.constexpr, world: tl.constexpr,
                        rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr,
                        BLOCK: tl.constexpr,
                        GATHER: tl.constexpr, WAIT_DONE: tl.constexpr, HINT: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    exchange(ctx, flags, ARRIVED, epoch, pid, num_programs)
    start = rank * chunk
    end = tl.minimum(start + chunk, n)
    for block in range(pid, tl.cdiv(chunk, BLOCK), num_programs):
        offs = start + block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < end
        total = sum_over_ranks(ctx, inp + offs, mask, BLOCK, HINT).to(out.dtype.element_ty)
        if GATHER:
            for i in tl.static_range(world):
                peer = (rank + i) % world  # everyone starts with a different peer
                tl.store(ctx.as_remote(out + offs, peer, mask, HINT), total, mask=mask)
        else:
            tl.store(out + offs, total, mask=mask)
    if WAIT_DONE:
        exchange(ctx, flags, DONE, epoch, pid, num_programs)
    tl.store(epochs + pid, epoch)


def launch_reduce_chunks(ctx, out, inp, workspace, config: Config, members, gather: bool, wait_done: bool,
                         call=None) -> None:
    """Launch the kernel over ``workspace.programs`` programs (see :func:`launch_shape`) for the ranks of
    ``members`` (:class:`iris.ccl.groups.Members`), recorded under ``call`` (a
    :func:`~iris.ccl.fast_path.call_key`) for :func:`iris.ccl.fast_path.replay`."""
    chunk = chunk_size(inp.numel(), members.size)
    launch(workspace, call, (out, inp), reduce_chunk_kernel, (workspace.programs,),
           ctx.get_device_context(), inp, out, workspace.flags, workspace.epochs, inp.numel(), chunk,
           **members.kernel_args(), BLOCK=block_size(ctx, config), GATHER=gather, WAIT_DONE=wait_done,
           HINT=hint((inp, 0), (out, 0)), num_warps=config.num_warps)


def reduce_scatter(output_tensor, input_tensor, ctx, op=None, group=None, async_op=False, config=None,
                   workspace=None):
    """Sum every rank's ``input_tensor`` and keep this rank's chunk of the sum in ``output_tensor``; collective.

    Parameters
    ----------
    output_tensor, input_tensor : torch.Tensor
        Same shape, float32/float16/bfloat16, contiguous, on the heap; may be the same tensor.
    ctx : iris.Iris
    op : ReduceOp or None
        Only SUM.
    group : torch.distributed.ProcessGroup, optional
        None or ``dist.group.WORLD``: every rank; else the group's members, who alone call; chunks are then
        the group's (member ``i`` of the group owns chunk ``i``, :func:`owned_range` with the group's size).
    async_op : bool
        False: on return (in stream order) the output is complete and the input reusable. True: returns a
        :class:`~iris.ccl.workspace.Work`; call ``wait()`` first.
    config : Config, optional
    workspace : Workspace, optional
        From an earlier call with the same shapes (``ctx.ccl`` keeps one for you).

    Returns
    -------
    Workspace
        Pass it to the next call; it is also the Work handle of an ``async_op=True`` call.

    Examples
    --------
    >>> ws = iris.ccl.reduce_scatter(out, inp, ctx)       # doctest: +SKIP
    """
    tensors = (output_tensor, input_tensor)
    call = call_key("reduce_scatter", tensors, config, async_op, op, group)
    if replay(ctx, workspace, call, tensors):  # the same call as before: checked, planned and compiled
        return workspace
    config = config or Config()
    check_op(ctx, op)
    refuse_gluon(ctx, config, "reduce_scatter")
    group_of_call = kernel_members(ctx, group, "reduce_scatter")
    check_tensors(ctx, "reduce_scatter", output_tensor, input_tensor, reduce=True)
    if overlaps(output_tensor, input_tensor) and output_tensor.data_ptr() != input_tensor.data_ptr():
        raise ValueError(f"rank {ctx.cur_rank}: reduce_scatter output partly overlaps the input; use the same "
                         "tensor (in place) or separate ones")
    config = tuned_config(ctx, "reduce_scatter", config, input_tensor, group_of_call,
                          scratch_runner(ctx, reduce_scatter, output_tensor, input_tensor, group=group)).with_defaults()
    variant = choose_scatter_variant(config.reduce_scatter_variant, input_tensor.numel() * input_tensor.element_size(),
                                     group_of_call.size)
    key = ("reduce_scatter", variant, input_tensor.numel(), input_tensor.dtype,
           launch_shape(ctx, input_tensor, config, group_of_call.size), block_size(ctx, config), group_of_call.key)
    if variant == "push":
        workspace = push_workspace(ctx, workspace, key, input_tensor, group_of_call)
        launch_push_reduce(ctx, output_tensor, input_tensor, workspace, config, group_of_call, gather=False,
                           wait_done=False, call=call)
        return workspace
    workspace = reuse_or_allocate(ctx, workspace, key, key[4], SLOTS, members=group_of_call)
    launch_reduce_chunks(ctx, output_tensor, input_tensor, workspace, config, group_of_call, gather=False,
                         wait_done=not async_op, call=call)
    return workspace
