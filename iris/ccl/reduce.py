"""reduce: the root's output becomes the elementwise sum of every rank's input.

As ``torch.distributed.reduce``, in either of upstream Iris's spellings (:mod:`iris.ccl.rooted`): in place,
``reduce(tensor, dst=0)`` (every rank's tensor is its input, the root's receives the sum), or ``reduce(output, input,
root=0)`` (also ``dst=``; only the root's output is written). The root is a rank of the group. Sums are taken in
float32, in rank order, and rounded once to the tensor's dtype (float32, float16, bfloat16; ``op`` SUM). Two
algorithms, ``Config(reduce_variant="push" | "two_shot")``:

* ``push`` (small tensors): every rank writes its input into its row of the root's inbox (posted stores, no wait
  for the root unless it still reads the same half of the double-buffered inbox two calls back) and tells the root,
  which sums the rows locally. About one link trip; the inbox is ``2 x world x`` the tensor on every rank.
* ``two_shot`` (large tensors): one flag exchange, each rank sums its chunk (:mod:`iris.ccl.chunks`) of every rank's
  input (remote reads) and writes the sum into the root's output, a second exchange. Each rank reads ``(world - 1) /
  world`` of the tensor, and the root receives ``(world - 1) / world`` of it: no link carries more.

Size rule (:func:`iris.ccl.rules.choose_reduce_variant`): push while ``nbytes * (world - 1) <= 4 MiB``, else
two_shot. :func:`reduce_preamble` prepares the workspace (upstream's name). Inputs are left intact (in place: the
root's tensor becomes the sum).

Examples
--------
>>> t = ctx.full((1024,), float(ctx.cur_rank + 1))        # doctest: +SKIP
>>> ctx.ccl.reduce(t, dst=0)                               # on rank 0: t == 1 + 2 + ... + world
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..language.sync import announce, await_all, exchange, flag_of, signal
from .chunks import ARRIVED, DONE, SLOTS, chunk_size
from .fast_path import call_key, launch, replay
from .groups import GroupContext, kernel_members
from .inbox import call_half, inbox_numel, inbox_stride
from .launch import block_size, cdiv, check_op, check_tensors, hint, overlaps, programs
from .rooted import hear_from, kernel_for, output_and_input, positional, root_of
from .rules import choose_reduce_variant
from .tuning import scratch_runner, tuned_config
from .workspace import Workspace, reuse_or_allocate


@triton.jit
def reduce_push_kernel(context, inp, out, inbox, flags, epochs, n, stride, root: tl.constexpr, rank: tl.constexpr,
                       world: tl.constexpr, rank_start: tl.constexpr, rank_stride: tl.constexpr,
                       num_ranks: tl.constexpr, BLOCK: tl.constexpr, HINT: tl.constexpr):
    # Inbox row s of this call's half, on the root, holds rank s's input. A rank writes that half again two calls
    # later, after the root said (DONE) it had summed it.
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    box = call_half(inbox, epoch, world, stride)
    if rank != root:
        hear_from(flags, DONE, epoch - 2, pid, num_programs, root, world)  # the root is done with this half
        for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
            offs = block * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            dst = ctx.as_remote(box + rank * stride + offs, root, mask, HINT)
            tl.store(dst, tl.load(inp + offs, mask=mask), mask=mask)
        tl.debug_barrier()  # on a GPU: every thread's stores before the release
    signal(ctx, flag_of(flags, ARRIVED, rank, pid, num_programs, world), epoch, root)
    if rank == root:
        await_all(ctx, flags, ARRIVED, epoch, pid, num_programs)  # every row has landed
        for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
            offs = block * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            total = tl.zeros([BLOCK], tl.float32)
            for source in tl.static_range(world):  # in rank order, as every reduction here
                if source == rank:
                    total += tl.load(inp + offs, mask=mask).to(tl.float32)
                else:
                    total += tl.load(box + source * stride.to(tl.int64) + offs, mask=mask).to(tl.float32)
            tl.store(out + offs, total.to(out.dtype.element_ty), mask=mask)
        announce(ctx, flags, DONE, epoch, pid, num_programs)  # this half may be written again
    tl.store(epochs + pid, epoch)


@triton.jit
def reduce_two_shot_kernel(context, inp, out, flags, epochs, n, chunk, root: tl.constexpr, rank: tl.constexpr,
                           world: tl.constexpr, rank_start: tl.constexpr, rank_stride: tl.constexpr,
                           num_ranks: tl.constexpr, BLOCK: tl.constexpr, WAIT_DONE: tl.constexpr,
                           HINT: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    exchange(ctx, flags, ARRIVED, epoch, pid, num_programs)  # every input is readable, the root's output writable
    end = tl.minimum((rank + 1) * chunk, n)
    for block in range(pid, tl.cdiv(chunk, BLOCK), num_programs):
        offs = rank * chunk + block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < end
        total = tl.zeros([BLOCK], tl.float32)
        for i in tl.static_range(world):  # rank order; the chunk's own element is read before it is written
            total += tl.load(ctx.as_remote(inp + offs, i, mask, HINT), mask=mask).to(tl.float32)
        value = total.to(out.dtype.element_ty)
        if rank == root:
            tl.store(out + offs, value, mask=mask)
        else:
            tl.store(ctx.as_remote(out + offs, root, mask, HINT), value, mask=mask)
    if WAIT_DONE:  # nobody reads an input any more, and the root's output is whole
        exchange(ctx, flags, DONE, epoch, pid, num_programs)
    tl.store(epochs + pid, epoch)


def _plan(ctx, out, inp, dst, root, op, group, config, caller: str):
    """Checks shared by :func:`reduce` and :func:`reduce_preamble`: (config, members, root index, variant, grid,
    block, workspace key, inbox or None)."""
    check_op(ctx, op)
    members = kernel_members(ctx, group, caller)
    root_index = root_of(ctx, caller, members, ("dst", dst), ("root", root))
    check_tensors(ctx, caller, out, inp, reduce=True)
    if overlaps(out, inp) and out.data_ptr() != inp.data_ptr():
        raise ValueError(f"rank {ctx.cur_rank}: {caller} output overlaps its input other than as the same tensor; "
                         "use reduce(tensor) in place or separate tensors")
    n, world = inp.numel(), members.size
    config = tuned_config(ctx, "reduce", config, inp, members,
                          scratch_runner(ctx, reduce, out, inp, dst=dst, root=root, group=group)).with_defaults()
    variant = choose_reduce_variant(config.reduce_variant, n * inp.element_size(), world)
    block = block_size(ctx, config)
    work = n if variant == "push" else chunk_size(n, world)
    grid = programs(ctx, config, cdiv(work, block))
    # push's inbox is its root's (a rank writes a half again once that root said it summed it): a workspace a root
    key = ("reduce", f"push:{root_index}" if variant == "push" else variant, n, inp.dtype, grid, block, members.key)
    inbox = (inbox_numel(n, world), inp.dtype) if variant == "push" else None
    return config, members, root_index, variant, grid, block, key, inbox


def reduce_preamble(*args, ctx=None, dst=None, root=None, op=None, group=None, config=None,
                    workspace=None) -> Workspace:
    """The workspace :func:`reduce` would use for these tensors, allocated now if needed (collective): call it
    before a CUDA graph capture (upstream Iris's name). Same arguments as :func:`reduce`.

    Examples
    --------
    >>> ws = iris.ccl.reduce_preamble(out, inp, ctx=ctx, root=0)      # doctest: +SKIP
    """
    tensors, ctx, root = positional("reduce_preamble", args, ctx, root, None)
    out, inp = output_and_input("reduce_preamble", tensors)
    _, members, _, _, grid, _, key, inbox = _plan(ctx, out, inp, dst, root, op, group, config, "reduce_preamble")
    return reuse_or_allocate(ctx, workspace, key, grid, SLOTS, inbox, members)


def reduce(*args, ctx=None, dst=None, root=None, op=None, group=None, async_op=False, config=None,
           workspace=None) -> Workspace:
    """Sum every rank's input into the root's output; collective over ``group``.

    Parameters
    ----------
    *args
        The tensors, ``(tensor,)`` in place or ``(output, input)`` of one shape (float32, float16 or bfloat16,
        contiguous, on the heap); then, as upstream's function takes them, the context and the root.
    ctx : iris.Iris, optional
        The context, if not given by position.
    dst, root : int, optional
        The root, a rank of the group (two spellings of upstream Iris; give one; default 0).
    op : ReduceOp, optional
        SUM (iris's or torch.distributed's) or None.
    group, async_op, config, workspace
        As :func:`iris.ccl.broadcast`; ``config.reduce_variant`` picks the algorithm (``use_gluon=True``: its
        Gluon twin, :mod:`iris.ccl.gluon_rooted`). With ``async_op=True`` the
        two_shot variant skips its closing exchange: ``wait()`` before reading the root's output or reusing inputs.

    Returns
    -------
    Workspace

    Examples
    --------
    >>> ws = iris.ccl.reduce(out, inp, ctx=ctx, root=0)       # doctest: +SKIP
    """
    tensors, ctx, root = positional("reduce", args, ctx, root, None)
    out, inp = output_and_input("reduce", tensors)
    call = call_key(f"reduce:{dst}:{root}", (out, inp), config, async_op, op, group)
    if replay(ctx, workspace, call, (out, inp)):
        return workspace
    config, members, root_index, variant, grid, block, key, inbox = _plan(ctx, out, inp, dst, root, op, group,
                                                                          config, "reduce")
    workspace = reuse_or_allocate(ctx, workspace, key, grid, SLOTS, inbox, members)
    n, world = inp.numel(), members.size
    common = dict(root=root_index, **members.kernel_args(), BLOCK=block, num_warps=config.num_warps)
    kernel, extra = kernel_for(ctx, config, reduce_push_kernel if variant == "push" else reduce_two_shot_kernel,
                               inp.element_size(), block)
    common.update(extra)
    if variant == "push":
        launch(workspace, call, (out, inp), kernel, (grid,), ctx.get_device_context(), inp, out,
               workspace.scratch, workspace.flags, workspace.epochs, n, inbox_stride(n),
               HINT=hint((workspace.scratch, 0)), **common)
        return workspace
    chunk = chunk_size(n, world)
    launch(workspace, call, (out, inp), kernel, (grid,), ctx.get_device_context(), inp, out,
           workspace.flags, workspace.epochs, n, chunk, WAIT_DONE=not async_op,
           HINT=hint(*((t, r * chunk) for t in (inp, out) for r in range(world))), **common)
    return workspace
