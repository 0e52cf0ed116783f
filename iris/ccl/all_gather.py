"""all_gather: every rank's output is the concatenation, along dim 0, of every rank's input.

As ``torch.distributed.all_gather_into_tensor``: input (M, ...) on each rank, output (world * M, ...),
rank s's input landing in rows ``[s * M, (s + 1) * M)``. The input may be this rank's own slice of the
output (``out[rank * M:(rank + 1) * M]``, in place); no other overlap. Three algorithms,
``Config(all_gather_variant="push" | "pull" | "copy_engines")``:

* ``push`` (small inputs): each rank writes its input into every peer's inbox, one flag exchange, then
  copies the rows into its output locally (:mod:`iris.ccl.inbox`). Lowest latency; the workspace holds
  2 x world x the input.
* ``pull`` (large inputs): one flag exchange, each rank reads every peer's input into its own output
  (reads over the links, local writes, starting with a different peer on every rank), a second exchange
  says that nobody reads the inputs any more. No copy and no scratch: the bandwidth choice of the kernels.
* ``ring`` (upstream's, asked for by name): world - 1 steps, at step s each rank writing the chunk it got at step
  s - 1 (its own input first) into its right neighbour's output and telling it so; each rank writes over one
  link only, at the cost of world - 1 dependent steps. No scratch, and no closing exchange: a rank's output is
  complete once the last chunk came from its left.
* ``copy_engines`` (large inputs, GPUs; ours): no kernel moves the data. Each rank writes its input into every
  peer's output by peer-to-peer memcpys, one peer a step, the ranks kept in step by device barriers
  (:mod:`iris.ccl.copy_engines`). Over long transfers the copy engines outrun the SMs' loads and stores
  (4x H200, 256 MiB: 603 µs against pull's 658), and they take no SM.

Size rule (:func:`choose_gather_variant`; ``all_gather_variant`` None or upstream's "persistent" or "partitioned"):
on GPUs (Triton kernels, not Gluon) copy_engines from ``input bytes >= 4 MiB * (world - 1) ** 2``; else push
while ``input bytes * (world - 1) <= 4 MiB`` (:func:`iris.ccl.inbox.use_inbox`), else pull.

Examples
--------
>>> inp = ctx.full((2, 3), float(ctx.cur_rank)); out = ctx.zeros(2 * ctx.num_ranks, 3)   # doctest: +SKIP
>>> ctx.ccl.all_gather(out, inp)          # out[2 * s:2 * s + 2] == s for every rank s
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..language.sync import exchange, flag_of, signal, wait_for
from .config import Config
from .copy_engines import push_in_step
from .fast_path import call_key, launch, replay
from .flag_slots import ARRIVED, DONE, SLOTS
from .gluon_layouts import flat_layout, warp_threads
from .groups import GroupContext, kernel_members
from .inbox import deliver, inbox_hint, inbox_stride, inbox_workspace, row
from .launch import block_size, cdiv, check_tensors, has_copy_engines, hint, overlaps, programs
from .rules import choose_gather_variant
from .tuning import scratch_runner, tuned_config
from .workspace import Workspace, reuse_or_allocate


@triton.jit
def push_kernel(context, inp, out, inbox, flags, epochs, n, stride, rank: tl.constexpr, world: tl.constexpr,
                rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr,
                BLOCK: tl.constexpr, HINT: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    box = deliver(ctx, inp, inbox, flags, epoch, n, stride, pid, num_programs, BLOCK, HINT)
    for source in tl.static_range(world):
        src = row(ctx, inp, box, stride, source)  # in place, this rank's row copies onto itself
        for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
            offs = block * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out + source * n + offs, tl.load(src + offs, mask=mask), mask=mask)
    tl.store(epochs + pid, epoch)


@triton.jit
def pull_kernel(context, src, src_step, out, flags, epochs, n, rank: tl.constexpr, world: tl.constexpr,
                rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr,
                BLOCK: tl.constexpr, WAIT_DONE: tl.constexpr, HINT: tl.constexpr):
    # Rank s's input is at src + s * src_step: src_step is 0 for a separate input (same offset on every
    # rank), n in place (each rank's input is its own slice of the output, at a different offset).
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    exchange(ctx, flags, ARRIVED, epoch, pid, num_programs)
    for i in tl.static_range(world):
        source = (rank + i) % world  # every rank starts with a different peer
        for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
            offs = block * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            value = tl.load(ctx.as_remote(src + source * src_step + offs, source, mask, HINT), mask=mask)
            tl.store(out + source * n + offs, value, mask=mask)
    if WAIT_DONE:  # nobody reads this rank's input any more
        exchange(ctx, flags, DONE, epoch, pid, num_programs)
    tl.store(epochs + pid, epoch)


@triton.jit
def ring_kernel(context, inp, out, flags, epochs, n, rank: tl.constexpr, world: tl.constexpr,
                rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr, BLOCK: tl.constexpr,
                COPY_OWN: tl.constexpr, HINT: tl.constexpr):
    # Flag slot 0 (from the right neighbour): its output may be written; slot 1 + s (from the left): the chunk of
    # step s has landed here.
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    left: tl.constexpr = (rank + world - 1) % world
    right: tl.constexpr = (rank + 1) % world
    tl.debug_barrier()
    signal(ctx, flag_of(flags, 0, rank, pid, num_programs, world), epoch, left)
    if COPY_OWN:
        for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
            offs = block * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out + rank * n + offs, tl.load(inp + offs, mask=mask), mask=mask)
    wait_for(flag_of(flags, 0, right, pid, num_programs, world), epoch)
    for step in tl.static_range(world - 1):
        chunk: tl.constexpr = (rank + world - step) % world  # own input at step 0, then what came from the left
        if step > 0:
            wait_for(flag_of(flags, step, left, pid, num_programs, world), epoch)
        for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
            offs = block * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            src = inp + offs if step == 0 else out + chunk * n + offs
            tl.store(ctx.as_remote(out + chunk * n + offs, right, mask, HINT), tl.load(src, mask=mask), mask=mask)
        tl.debug_barrier()
        signal(ctx, flag_of(flags, 1 + step, rank, pid, num_programs, world), epoch, right)
    wait_for(flag_of(flags, world - 1, left, pid, num_programs, world), epoch)  # the last chunk has landed
    tl.store(epochs + pid, epoch)


def all_gather(output_tensor, input_tensor, ctx, group=None, async_op=False, config=None,
               workspace=None) -> Workspace:
    """Gather every rank's ``input_tensor`` into ``output_tensor`` (concatenated along dim 0); collective.

    Parameters
    ----------
    output_tensor : torch.Tensor
        Shape ``(world * M, ...)`` (``world``: the group's size), contiguous, on the heap.
    input_tensor : torch.Tensor
        Shape ``(M, ...)``, same dtype, contiguous, on the heap; may be this rank's slice of the output.
    ctx : iris.Iris
    group : torch.distributed.ProcessGroup, optional
        None or ``dist.group.WORLD``: every rank; else the group's members, who alone call: member ``i``'s
        input lands in rows ``[i * M, (i + 1) * M)`` (:mod:`iris.ccl.groups`).
    async_op : bool
        True: return at once; ``wait()`` on the result (a device barrier) before reusing the tensors.
    config : Config, optional
        ``all_gather_variant`` "push", "pull" or "copy_engines" picks the algorithm (anything else: by size);
        ``use_gluon=True`` runs it as Gluon kernels (:mod:`iris.ccl.gluon_all_gather`; not copy_engines).
    workspace : Workspace, optional
        From an earlier call with the same shapes (``ctx.ccl`` keeps one for you).

    Returns
    -------
    Workspace
        Pass it to the next call; it is also the Work handle of an ``async_op=True`` call.

    Examples
    --------
    >>> ws = iris.ccl.all_gather(out, inp, ctx)       # doctest: +SKIP
    """
    tensors = (output_tensor, input_tensor)
    call = call_key("all_gather", tensors, config, async_op, group=group)
    if replay(ctx, workspace, call, tensors):  # the same call as before: checked, planned and compiled
        return workspace
    return _all_gather(output_tensor, input_tensor, ctx, group, async_op, config, workspace, call)


def all_gather_preamble(output_tensor, input_tensor, ctx, group=None, config=None, workspace=None) -> Workspace:
    """The workspace :func:`all_gather` would use for these tensors, allocated now if needed (collective: every
    rank of the group), launching nothing: call it before a CUDA graph capture (upstream Iris's name).

    Examples
    --------
    >>> ws = iris.ccl.all_gather_preamble(out, inp, ctx, config=Config(all_gather_variant="ring"))  # doctest: +SKIP
    >>> ws = iris.ccl.all_gather(out, inp, ctx, config=Config(all_gather_variant="ring"), workspace=ws)
    """
    return _all_gather(output_tensor, input_tensor, ctx, group, False, config, workspace, None, run=False)


def _all_gather(output_tensor, input_tensor, ctx, group, async_op, config, workspace, call, run=True) -> Workspace:
    """:func:`all_gather`'s checks, plan and launch (``run=False``: the plan's workspace, and no launch)."""
    tensors = (output_tensor, input_tensor)
    config = config or Config()
    if config.use_gluon and config.all_gather_variant == "copy_engines":
        raise ValueError(f"rank {ctx.cur_rank}: all_gather with Config(all_gather_variant='copy_engines', "
                         "use_gluon=True): the copy engines run no kernel, Gluon's or Triton's; use "
                         "all_gather_variant='push', 'pull' or None with Gluon, or use_gluon=False")
    if config.use_gluon and config.all_gather_variant == "ring":
        raise ValueError(f"rank {ctx.cur_rank}: all_gather with Config(all_gather_variant='ring', use_gluon=True): "
                         "the ring has a Triton kernel only; use use_gluon=False, or 'push' or 'pull' with Gluon")
    group_of_call = kernel_members(ctx, group, "all_gather")
    check_tensors(ctx, "all_gather", output_tensor, input_tensor)
    world, rank, n = group_of_call.size, group_of_call.rank, input_tensor.numel()
    expected = (world * input_tensor.shape[0], *input_tensor.shape[1:]) if input_tensor.dim() else (world,)
    if tuple(output_tensor.shape) != expected:
        raise ValueError(f"rank {ctx.cur_rank}: all_gather of input {list(input_tensor.shape)} over {world} ranks "
                         f"needs an output of shape {list(expected)}, got {list(output_tensor.shape)}")
    own_slice = output_tensor.data_ptr() + rank * n * output_tensor.element_size()
    if overlaps(output_tensor, input_tensor) and input_tensor.data_ptr() != own_slice:
        raise ValueError(f"rank {ctx.cur_rank}: all_gather input overlaps the output other than as this rank's "
                         f"slice out[{rank} * M:{rank + 1} * M]; use that slice or a separate tensor")
    config = tuned_config(ctx, "all_gather", config, input_tensor, group_of_call,
                          scratch_runner(ctx, all_gather, output_tensor, input_tensor, group=group)).with_defaults()
    block = block_size(ctx, config)
    grid = programs(ctx, config, cdiv(n, block))
    requested = config.all_gather_variant
    if config.use_gluon and requested == "copy_engines":  # a table's choice for Triton calls: Gluon runs a kernel
        requested = None
    variant = choose_gather_variant(requested, n * input_tensor.element_size(), world, has_copy_engines(ctx, config))
    if variant == "copy_engines":
        out, inp, own = output_tensor.view(-1), input_tensor.reshape(-1), slice(rank * n, (rank + 1) * n)
        copy_own = None if input_tensor.data_ptr() == own_slice else (lambda: out[own].copy_(inp))
        key = ("all_gather", variant, n, input_tensor.dtype, 1, None, group_of_call.key)
        if not run:
            return reuse_or_allocate(ctx, workspace, key, 1, 1, members=group_of_call)
        return push_in_step(ctx, group_of_call, workspace, key, copy_own,
                            lambda index, peer: ctx.as_remote(out, peer)[own].copy_(inp))
    key = ("all_gather", variant, n, input_tensor.dtype, grid, block, group_of_call.key)
    if variant == "ring":
        workspace = reuse_or_allocate(ctx, workspace, key, grid, max(world, 2), members=group_of_call)
        if not run:
            return workspace
        launch(workspace, call, tensors, ring_kernel, (grid,), ctx.get_device_context(), input_tensor, output_tensor,
               workspace.flags, workspace.epochs, n, **group_of_call.kernel_args(), BLOCK=block,
               COPY_OWN=input_tensor.data_ptr() != own_slice,
               HINT=hint(*((output_tensor, s * n) for s in range(world))), num_warps=config.num_warps)
        return workspace
    push, pull = push_kernel, pull_kernel
    common = dict(**group_of_call.kernel_args(), BLOCK=block, num_warps=config.num_warps)
    if config.use_gluon:  # the same algorithms and workspaces, as Gluon kernels (defined on first use)
        from .gluon_all_gather import gluon_pull_kernel as pull
        from .gluon_all_gather import gluon_push_kernel as push

        common["LAYOUT"] = flat_layout(input_tensor.element_size(), block, config.num_warps, warp_threads(ctx))
    if variant == "push":
        workspace = inbox_workspace(ctx, workspace, key, grid, input_tensor, group_of_call)
        if not run:
            return workspace
        launch(workspace, call, tensors, push, (grid,), ctx.get_device_context(), input_tensor, output_tensor,
               workspace.scratch, workspace.flags, workspace.epochs, n, inbox_stride(n), HINT=inbox_hint(workspace),
               **common)
        return workspace
    workspace = reuse_or_allocate(ctx, workspace, key, grid, SLOTS, members=group_of_call)
    if not run:
        return workspace
    in_place = input_tensor.data_ptr() == own_slice
    src, src_step = (output_tensor, n) if in_place else (input_tensor, 0)
    launch(workspace, call, tensors, pull, (grid,), ctx.get_device_context(), src, src_step, output_tensor,
           workspace.flags, workspace.epochs, n, WAIT_DONE=not async_op,
           HINT=hint(*((src, s * src_step) for s in range(world))), **common)
    return workspace
