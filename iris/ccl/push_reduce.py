"""Reduce-scatter by posted writes: every rank writes the chunk each peer owns into that peer's inbox, and each
owner sums its chunk locally. With ``GATHER`` the owner then writes its sum into every rank's output: the
``two_shot_push`` all_reduce.

The two_shot kernel (:mod:`iris.ccl.reduce_scatter`) reads the peers' chunks, and a remote load waits a link round
trip for its data. Here every remote access is a posted store, as in one_shot's inboxes (:mod:`iris.ccl.inbox`),
while each rank still moves only ``2 (world - 1) / world`` of the tensor (one_shot moves ``world - 1`` times it).
Measured on 4x H200 (2026-11-28, bf16, benchmarks/RESULTS.md): all_reduce at 4 MiB 25.1 µs against two_shot's 27.2,
at 16 MiB 78.7 against 88.9; reduce_scatter at 256 KiB 5.0 µs against 8.2. From 64 MiB two_shot's reduce_scatter is
faster again (167.8 against 207.1 µs): the size rules switch there (:mod:`iris.ccl.rules`).

Chunks are reduce_scatter's (:mod:`iris.ccl.chunks`): rank r owns elements
``[r * chunk, min((r + 1) * chunk, n))``. The inbox is ``[2, world, chunk]`` elements, double-buffered by call
parity: row s of this call's half holds rank s's copy of this rank's chunk. Rank r writes call k's half of a
peer's inbox again only at call k + 2, after it saw that peer's signal of call k + 1, which the peer sends once
its call k, and so its reading of that half, has ended (the kernels of one workspace run in stream order).

Flag exchanges: one after the writes (``ARRIVED``); with ``GATHER`` a second after the sums were written into
every output (``DONE``, skipped with ``async_op=True``: ``Work.wait()`` then completes the call). No peer reads
a rank's input, so reduce_scatter needs nothing more, and its output and input may be reused when the kernel
ends. ``out`` may be ``inp``: a rank reads every chunk of its input it sends before its first signal, and peers
write its output only after that signal.

Examples
--------
>>> ctx.ccl.reduce_scatter(out, inp, config=Config(reduce_scatter_variant="push"))       # doctest: +SKIP
>>> ctx.ccl.all_reduce(out, inp, config=Config(all_reduce_variant="two_shot_push"))       # doctest: +SKIP
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..language.sync import exchange
from .chunks import ARRIVED, DONE, SLOTS, chunk_size
from .config import Config
from .fast_path import launch
from .groups import GroupContext
from .inbox import call_half
from .launch import block_size, hint
from .workspace import Workspace, reuse_or_allocate

__all__ = ["SLOTS", "launch_push_reduce", "push_workspace"]


@triton.jit
def push_reduce_kernel(context, inp, out, inbox, flags, epochs, n, chunk, rank: tl.constexpr, world: tl.constexpr,
                       rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr,
                       BLOCK: tl.constexpr, GATHER: tl.constexpr, WAIT_DONE: tl.constexpr, HINT: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    box = call_half(inbox, epoch, world, chunk)
    blocks = tl.cdiv(chunk, BLOCK)
    for block in range(pid, blocks, num_programs):
        within = block * BLOCK + tl.arange(0, BLOCK)
        for i in tl.static_range(1, world):
            owner = (rank + i) % world  # everyone starts with a different peer
            offs = owner * chunk + within
            mask = (within < chunk) & (offs < n)
            value = tl.load(inp + offs, mask=mask)
            tl.store(ctx.as_remote(box + rank * chunk + within, owner, mask, HINT), value, mask=mask)
    exchange(ctx, flags, ARRIVED, epoch, pid, num_programs)
    for block in range(pid, blocks, num_programs):
        within = block * BLOCK + tl.arange(0, BLOCK)
        offs = rank * chunk + within
        mask = (within < chunk) & (offs < n)
        total = tl.zeros([BLOCK], tl.float32)
        for source in tl.static_range(world):  # in rank order, so that every rank gets the same bits
            if source == rank:
                total += tl.load(inp + offs, mask=mask).to(tl.float32)
            else:
                total += tl.load(box + source * chunk + within, mask=mask).to(tl.float32)
        total = total.to(out.dtype.element_ty)
        if GATHER:
            for i in tl.static_range(world):
                peer = (rank + i) % world
                tl.store(ctx.as_remote(out + offs, peer, mask, HINT), total, mask=mask)
        else:
            tl.store(out + offs, total, mask=mask)
    if GATHER and WAIT_DONE:
        exchange(ctx, flags, DONE, epoch, pid, num_programs)
    tl.store(epochs + pid, epoch)


def push_workspace(ctx, workspace, key: tuple, inp, members) -> Workspace:
    """``workspace`` if made for ``key`` (whose fifth field is the programs of the launch), else a new one: two flag
    slots and the ``[2, world, chunk]`` inbox (collective; :class:`iris.ccl.groups.Members` says who takes part)."""
    inbox = 2 * members.size * chunk_size(inp.numel(), members.size)
    return reuse_or_allocate(ctx, workspace, key, key[4], SLOTS, (inbox, inp.dtype), members)


def launch_push_reduce(ctx, out, inp, workspace: Workspace, config: Config, members, gather: bool, wait_done: bool,
                       call=None) -> None:
    """Launch :func:`push_reduce_kernel` over ``workspace.programs`` programs, recorded under ``call`` for
    :func:`iris.ccl.fast_path.replay`."""
    chunk = chunk_size(inp.numel(), members.size)
    launch(workspace, call, (out, inp), push_reduce_kernel, (workspace.programs,), ctx.get_device_context(), inp,
           out, workspace.scratch, workspace.flags, workspace.epochs, inp.numel(), chunk, **members.kernel_args(),
           BLOCK=block_size(ctx, config), GATHER=gather, WAIT_DONE=wait_done,
           HINT=hint((inp, 0), (out, 0), (workspace.scratch, 0)), num_warps=config.num_warps)
