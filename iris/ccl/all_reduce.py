"""all_reduce: every rank's output becomes the elementwise sum of every rank's input.

Six algorithms, all over flat blocks of the flattened tensors, summing in float32:

* ``one_shot``: each rank writes its input into every peer's inbox, one flag exchange, then sums the
  inboxes locally (:mod:`iris.ccl.inbox`). (world - 1) x the data written per rank, as posted stores, and a
  single exchange: lowest latency, the choice for small tensors; its workspace holds 2 x world x the tensor.
* ``two_shot``: reduce_scatter then all_gather: rank r reads every rank's r-th chunk, sums it, and writes
  the sum into every rank's output. Each rank moves 2 (world - 1) / world x the data: the bandwidth choice.
* ``two_shot_push``: as two_shot, but each rank writes the chunks its peers own into their inboxes instead of
  reading them (:mod:`iris.ccl.push_reduce`): every remote access is a posted store. Its workspace holds
  2 x the tensor.
* ``ring``: the classic ring (world - 1 reduce-scatter steps then world - 1 all-gather steps, each only to
  the right neighbour), partial sums in a heap scratch buffer. As much data as two_shot but 2 (world - 1)
  dependent steps: for rings of links; on a fully connected NVLink/NVSwitch machine two_shot is never
  slower. Partial sums are rounded to the tensor's dtype between steps (as NCCL's ring does).
* ``atomic``: each rank atomically adds its input (as float32) into every rank's float32 accumulator, then
  each converts its accumulator into its output and zeroes it. One flag exchange; the accumulators are
  double-buffered by call parity, so a call never waits for peers to finish reading. Remote float atomics
  are slower than loads and stores: there for comparison and upstream parity.
* ``spinlock``: as atomic, but each rank adds its tile into a peer's accumulator with plain loads and stores
  under that peer's lock for the tile (compare-and-swap, acquire; exchange back, release): upstream's
  "atomic add by a lock per tile". Tiles are ``block_size_m x block_size_n`` elements (upstream's tile,
  flattened), one lock each; a workspace holds locks for the tiles it was prepared for, and a call that
  needs more is refused ("Lock array too small"), as upstream: prepare it with the smallest tiles you use.

Size rule (``Config(all_reduce_variant=None)`` where no table row or tuning chose, :func:`choose_variant`):
one_shot while ``nbytes * (world - 1) ** 2`` is at most 4 MiB (4 MiB on 2 ranks, 455 KiB on 4), else
two_shot_push.

Every algorithm ends (``async_op=False``) with the ranks knowing that no peer still reads their input or
writes their output, so both may be reused at once in stream order (one_shot needs no exchange for that:
no peer ever touches them). ``out`` may be ``inp`` for one_shot, two_shot and atomic (every input element
is read before anyone writes that element of an output); ring needs separate tensors. Inputs are left intact.

Examples
--------
>>> inp = ctx.randn(4096, dtype=torch.bfloat16); out = ctx.zeros_like(inp)        # doctest: +SKIP
>>> ws = ctx.ccl.all_reduce(out, inp)                       # out = sum over ranks of inp
>>> ws = ctx.ccl.all_reduce(out, inp, workspace=ws)         # repeated: no allocation, graph-capturable
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..language.sync import exchange, flag_of, signal, wait_for
from .chunks import SLOTS as TWO_SHOT_SLOTS
from .chunks import chunk_size, launch_shape
from .config import MIN_BLOCK, Config, refuse_gluon
from .fast_path import call_key, launch, replay
from .groups import GroupContext, Members, kernel_members
from .inbox import deliver, inbox_hint, inbox_stride, inbox_workspace, row
from .launch import block_size, cdiv, check_op, check_tensors, hint, overlaps, programs
from .push_reduce import launch_push_reduce, push_workspace
from .reduce_scatter import launch_reduce_chunks
from .rules import choose_variant
from .tuning import scratch_runner, tuned_config
from .workspace import Workspace, reuse_or_allocate

IN_PLACE_VARIANTS = ("one_shot", "two_shot", "two_shot_push", "atomic", "spinlock")
ADDED = tl.constexpr(0)  # atomic's flag slot


# ---------------------------------------------------------------------------------------------- one_shot

@triton.jit
def one_shot_kernel(context, inp, out, inbox, flags, epochs, n, stride, rank: tl.constexpr, world: tl.constexpr,
                    rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr,
                    BLOCK: tl.constexpr, HINT: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    box = deliver(ctx, inp, inbox, flags, epoch, n, stride, pid, num_programs, BLOCK, HINT)
    for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        total = tl.zeros([BLOCK], tl.float32)
        for source in tl.static_range(world):  # in rank order, so that every rank gets the same bits
            total += tl.load(row(ctx, inp, box, stride, source) + offs, mask=mask).to(tl.float32)
        tl.store(out + offs, total.to(out.dtype.element_ty), mask=mask)
    tl.store(epochs + pid, epoch)


# ---------------------------------------------------------------------------------------------- ring
# Flag slot t (0 <= t < 2 (world - 1)) of rank r is set by its left neighbour: slot 0 when its input is
# ready, slot t when it has finished step t - 1. Slot 2 (world - 1) is set by the right neighbour when it
# has finished reading this rank's buffers.

@triton.jit
def ring_step(ctx, src, partial, out, n, chunk, pid, num_programs, step: tl.constexpr, BLOCK: tl.constexpr,
              HINT: tl.constexpr):
    """Step ``step`` of the ring over this program's blocks of one chunk."""
    rank: tl.constexpr = ctx.rank
    world: tl.constexpr = ctx.world_size
    left: tl.constexpr = (rank + world - 1) % world
    if step < world - 1:  # reduce-scatter: own input + left's partial sum of chunk (rank - step - 1)
        index = (rank + 2 * world - step - 1) % world
    else:  # all-gather: copy left's finished chunk (rank - (step - world + 1))
        index = (rank + 2 * world - (step - world + 1)) % world
    for block in range(pid, tl.cdiv(chunk, BLOCK), num_programs):
        offs = index * chunk + block * BLOCK + tl.arange(0, BLOCK)
        mask = (offs < (index + 1) * chunk) & (offs < n)
        if step < world - 1:
            left_sum = src if step == 0 else partial  # step 0 reads left's input itself
            value = tl.load(ctx.as_remote(left_sum + offs, left, mask, HINT), mask=mask).to(tl.float32)
            value = (value + tl.load(src + offs, mask=mask).to(tl.float32)).to(out.dtype.element_ty)
            if step == world - 2:  # the chunk is complete: it goes straight to the output
                tl.store(out + offs, value, mask=mask)
            else:
                tl.store(partial + offs, value, mask=mask)
        else:
            tl.store(out + offs, tl.load(ctx.as_remote(out + offs, left, mask, HINT), mask=mask), mask=mask)


@triton.jit
def ring_kernel(context, inp, out, partial, flags, epochs, n, chunk, rank: tl.constexpr, world: tl.constexpr,
                rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr,
                BLOCK: tl.constexpr, WAIT_DONE: tl.constexpr, HINT: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    left: tl.constexpr = (rank + world - 1) % world
    right: tl.constexpr = (rank + 1) % world
    steps: tl.constexpr = 2 * (world - 1)
    for step in tl.static_range(steps):
        tl.debug_barrier()  # on a GPU: the whole previous step before the (one-thread) release
        signal(ctx, flag_of(flags, step, rank, pid, num_programs, world), epoch, right)
        wait_for(flag_of(flags, step, left, pid, num_programs, world), epoch)
        ring_step(ctx, inp, partial, out, n, chunk, pid, num_programs, step, BLOCK, HINT)
    if WAIT_DONE:  # the right neighbour no longer reads this rank's buffers
        tl.debug_barrier()
        signal(ctx, flag_of(flags, steps, rank, pid, num_programs, world), epoch, left)
        wait_for(flag_of(flags, steps, right, pid, num_programs, world), epoch)
    tl.store(epochs + pid, epoch)


# ---------------------------------------------------------------------------------------------- atomic

@triton.jit
def atomic_kernel(context, inp, out, accumulators, flags, epochs, n, rank: tl.constexpr, world: tl.constexpr,
                  rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr,
                  BLOCK: tl.constexpr, HINT: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    # Call k uses accumulator k % 2, zeroed by its owner at call k - 2, before this rank's call k - 1 ended.
    acc = accumulators + (epoch % 2) * n
    for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        value = tl.load(inp + offs, mask=mask).to(tl.float32)
        for i in tl.static_range(world):
            peer = (rank + i) % world
            tl.atomic_add(ctx.as_remote(acc + offs, peer, mask, HINT), value, mask=mask, sem="relaxed",
                          scope="sys")
    exchange(ctx, flags, ADDED, epoch, pid, num_programs)
    take_sums(acc, out, n, pid, num_programs, BLOCK)
    tl.store(epochs + pid, epoch)


@triton.jit
def take_sums(acc, out, n, pid, num_programs, BLOCK: tl.constexpr):
    """Once every rank's program ``pid`` has added its blocks (the flags exchanged): this rank's float32 sums of
    those blocks into ``out``, the accumulator zeroed for the call after next."""
    for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        # Read the sums through an acquire atomic, not a plain load: on 2xH200 plain loads of the accumulator
        # (even uncached, .cg) after the flags still missed some of the peers' NVLink adds, while an atomic
        # read saw them all (measured 2026-11-21, tests/gpu/test_ccl_cuda.py).
        zeros = tl.zeros([BLOCK], tl.float32)
        total = tl.atomic_add(acc + offs, zeros, mask=mask, sem="acquire", scope="sys")
        tl.store(out + offs, total.to(out.dtype.element_ty), mask=mask)
        tl.store(acc + offs, zeros, mask=mask)


# ---------------------------------------------------------------------------------------------- spinlock

@triton.jit
def spinlock_kernel(context, inp, out, accumulators, locks, flags, epochs, n, rank: tl.constexpr,
                    world: tl.constexpr, rank_start: tl.constexpr, rank_stride: tl.constexpr,
                    num_ranks: tl.constexpr, TILE: tl.constexpr, HINT: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    acc = accumulators + (epoch % 2) * n  # double-buffered by call parity, as atomic's
    for tile in range(pid, tl.cdiv(n, TILE), num_programs):
        offs = tile * TILE + tl.arange(0, TILE)
        mask = offs < n
        value = tl.load(inp + offs, mask=mask).to(tl.float32)
        for i in tl.static_range(world):
            peer = (rank + i) % world  # each rank starts at another peer's lock
            lock = ctx.as_remote(locks + tile, peer)
            while tl.atomic_cas(lock, 0, 1, sem="acquire", scope="sys") != 0:
                pass
            tl.debug_barrier()  # on a GPU: no thread reads the tile before the lock is held
            sums = ctx.as_remote(acc + offs, peer, mask, HINT)
            tl.store(sums, tl.load(sums, mask=mask) + value, mask=mask)
            tl.debug_barrier()  # on a GPU: every thread's store comes before the release
            tl.atomic_xchg(lock, 0, sem="release", scope="sys")
    exchange(ctx, flags, ADDED, epoch, pid, num_programs)
    take_sums(acc, out, n, pid, num_programs, TILE)  # the tiles every rank's program pid added: by tile, not BLOCK
    tl.store(epochs + pid, epoch)


# ---------------------------------------------------------------------------------------------- host side

def all_reduce_preamble(output_tensor, input_tensor, ctx, config=None, workspace=None, group=None) -> Workspace:
    """The workspace an all_reduce of these tensors over ``group`` (None: every rank) needs: ``workspace`` if it
    fits, else a new one (collective; :meth:`Workspace.allocate` says who must call).

    Examples
    --------
    >>> ws = iris.ccl.all_reduce_preamble(out, inp, ctx)    # doctest: +SKIP
    """
    group_of_call = group if isinstance(group, Members) else kernel_members(ctx, group, "all_reduce")
    config = tuned_config(ctx, "all_reduce", config, input_tensor, group_of_call,
                          scratch_runner(ctx, all_reduce, output_tensor, input_tensor, group=group)).with_defaults()
    return prepared_workspace(output_tensor, input_tensor, ctx, config, workspace, group_of_call)


def prepared_workspace(output_tensor, input_tensor, ctx, config: Config, workspace, group_of_call) -> Workspace:
    """:func:`all_reduce_preamble`'s workspace for a config already chosen (tuned) and the call's members."""
    n, world = input_tensor.numel(), group_of_call.size
    variant = config.all_reduce_variant or choose_variant(n * input_tensor.element_size(), world)
    block = block_size(ctx, config)
    if variant in ("two_shot", "two_shot_push"):
        grid = launch_shape(ctx, input_tensor, config, world)
    elif variant == "ring":
        grid = programs(ctx, config, cdiv(chunk_size(n, world), block))
    elif variant == "spinlock":
        # Every program the backend keeps resident, whatever the tiles: the flags are laid out by program, so a
        # workspace prepared for other tiles still fits the grid, and only its count of locks can fall short.
        grid = programs(ctx, config, n)
    else:
        grid = programs(ctx, config, cdiv(n, block))
    key = ("all_reduce", variant, n, input_tensor.dtype, grid, block, group_of_call.key)
    if variant == "one_shot":
        return inbox_workspace(ctx, workspace, key, grid, input_tensor, group_of_call)
    if variant == "two_shot":
        return reuse_or_allocate(ctx, workspace, key, grid, TWO_SHOT_SLOTS, members=group_of_call)
    if variant == "two_shot_push":
        return push_workspace(ctx, workspace, key, input_tensor, group_of_call)
    if variant == "ring":  # scratch: partial sums
        return reuse_or_allocate(ctx, workspace, key, grid, 2 * world - 1, (n, input_tensor.dtype), group_of_call)
    if variant == "spinlock":  # two accumulators, then one lock per tile (int32 over float32's 4 bytes)
        return reuse_or_allocate(ctx, workspace, key, grid, 1, (2 * n + spinlock_tiles(n, config), torch.float32),
                                 group_of_call)
    # atomic: two accumulators
    return reuse_or_allocate(ctx, workspace, key, grid, 1, (2 * n, torch.float32), group_of_call)


def spinlock_tile(config: Config) -> int:
    """Elements of one tile (one lock) of the spinlock variant: upstream's ``block_size_m x block_size_n``
    tile, flattened."""
    config = config.with_defaults()
    return config.block_size_m * config.block_size_n


def spinlock_tiles(n: int, config: Config) -> int:
    """Tiles (one lock each) of the spinlock variant over ``n`` elements."""
    return cdiv(n, spinlock_tile(config))


def spinlock_locks(ctx, workspace: Workspace, n: int, config: Config) -> torch.Tensor:
    """The workspace's locks (after its two accumulators), refused where this call's tiles outnumber them: a
    workspace prepared for larger tiles (upstream's check and words)."""
    locks = workspace.scratch[2 * n:].view(torch.int32)
    tiles = spinlock_tiles(n, config)
    if locks.numel() < tiles:
        raise ValueError(f"rank {ctx.cur_rank}: Lock array too small: have {locks.numel()} but need {tiles} (tiles of "
                         f"block_size_m x block_size_n = {config.block_size_m} x {config.block_size_n} elements). "
                         "Prepare the workspace (all_reduce_preamble) with the smallest block sizes you intend to "
                         "use, or pass no workspace")
    return locks


def all_reduce(output_tensor, input_tensor, ctx, op=None, group=None, async_op=False, config=None,
               workspace=None) -> Workspace:
    """Sum ``input_tensor`` over all ranks into ``output_tensor``; collective (every rank calls it).

    Parameters
    ----------
    output_tensor, input_tensor : torch.Tensor
        Same shape, float32/float16/bfloat16, contiguous, on the heap (``ctx.zeros`` etc.). The same tensor
        for every variant but ring.
    ctx : iris.Iris
    op : ReduceOp or None
        Only SUM (None means SUM).
    group : torch.distributed.ProcessGroup, optional
        None or ``dist.group.WORLD``: every rank; else the sum is over the group's members, who alone call
        (consecutive or strided ranks, :mod:`iris.ccl.groups`). Each group keeps its own workspace.
    async_op : bool
        False: in stream order after the call, the output is complete and both tensors reusable. True:
        skip the final flag exchange (two_shot, two_shot_push and ring have one); ``workspace.wait()`` (a device
        barrier) completes the call and must come before the tensors or the workspace are used again.
    config : Config, optional
        ``all_reduce_variant`` picks the algorithm (None: by size, see :func:`choose_variant`).
    workspace : Workspace, optional
        Returned by an earlier call with the same shape, dtype and config: reused without allocating.

    Returns
    -------
    Workspace
        Pass it back next time; its ``wait()`` completes an ``async_op=True`` call.

    Examples
    --------
    >>> ws = iris.ccl.all_reduce(out, inp, ctx, config=Config(all_reduce_variant="ring"))  # doctest: +SKIP
    """
    tensors = (output_tensor, input_tensor)
    call = call_key("all_reduce", tensors, config, async_op, op, group)
    if replay(ctx, workspace, call, tensors):  # the same call as before: checked, planned and compiled
        return workspace
    config = config or Config()
    check_op(ctx, op)
    refuse_gluon(ctx, config, "all_reduce")
    group_of_call = kernel_members(ctx, group, "all_reduce")
    check_tensors(ctx, "all_reduce", output_tensor, input_tensor, reduce=True)
    config = tuned_config(ctx, "all_reduce", config, input_tensor, group_of_call,
                          scratch_runner(ctx, all_reduce, output_tensor, input_tensor, group=group)).with_defaults()
    workspace = prepared_workspace(output_tensor, input_tensor, ctx, config, workspace, group_of_call)
    variant = workspace.key[1]
    if overlaps(output_tensor, input_tensor) and (
            variant not in IN_PLACE_VARIANTS or output_tensor.data_ptr() != input_tensor.data_ptr()):
        raise ValueError(f"rank {ctx.cur_rank}: all_reduce variant {variant!r} needs an output separate from the "
                         f"input; only {IN_PLACE_VARIANTS} run in place (output is input)")
    n, world = input_tensor.numel(), group_of_call.size
    grid, block, wait_done = (workspace.programs,), workspace.key[5], not async_op
    common = dict(**group_of_call.kernel_args(), BLOCK=block, num_warps=config.num_warps)
    recorded = (workspace, call, tensors)
    if variant == "one_shot":
        launch(*recorded, one_shot_kernel, grid, ctx.get_device_context(), input_tensor, output_tensor,
               workspace.scratch, workspace.flags, workspace.epochs, n, inbox_stride(n),
               HINT=inbox_hint(workspace), **common)
    elif variant == "two_shot":
        launch_reduce_chunks(ctx, output_tensor, input_tensor, workspace, config, group_of_call, gather=True,
                             wait_done=wait_done, call=call)
    elif variant == "two_shot_push":
        launch_push_reduce(ctx, output_tensor, input_tensor, workspace, config, group_of_call, gather=True,
                           wait_done=wait_done, call=call)
    elif variant == "ring":
        if world == 1:
            output_tensor.copy_(input_tensor)  # a ring of one has no steps
            return workspace
        launch(*recorded, ring_kernel, grid, ctx.get_device_context(), input_tensor, output_tensor,
               workspace.scratch, workspace.flags, workspace.epochs, n, chunk_size(n, world), WAIT_DONE=wait_done,
               HINT=hint((input_tensor, 0), (output_tensor, 0), (workspace.scratch, 0)), **common)
    elif variant == "spinlock":
        tile = spinlock_tile(config)
        launch(*recorded, spinlock_kernel, grid, ctx.get_device_context(), input_tensor, output_tensor,
               workspace.scratch, spinlock_locks(ctx, workspace, n, config), workspace.flags, workspace.epochs, n,
               TILE=tile, HINT=hint((workspace.scratch, 0), (workspace.scratch, n)) if tile >= MIN_BLOCK else None,
               **group_of_call.kernel_args(), num_warps=config.num_warps)
    else:
        launch(*recorded, atomic_kernel, grid, ctx.get_device_context(), input_tensor, output_tensor,
               workspace.scratch, workspace.flags, workspace.epochs, n,
               HINT=hint((workspace.scratch, 0), (workspace.scratch, n)), **common)
    return workspace
