"""Kernels that synchronise through :mod:`iris.flags`, for tests/test_flags.py (run on the CPU by
tests/rank_cases_flags.py, compiled for sm_90 by tests/flags_sm90.py).

Both send data with remote stores into a buffer chosen by the call's parity (call ``k + 2`` may only overwrite
what a peer read in call ``k`` once the peer has signalled call ``k + 1``, which it does after reading), and
keep their call numbers on the device, one per program.
"""

import triton
import triton.language as tl

from iris import DeviceContext
from iris.language.flags import arrive, rank_lanes, signal, wait


@triton.jit
def all_gather_sum(context, inp, inbox, out, flags, epochs, rank: tl.constexpr, world: tl.constexpr,
                   BLOCK: tl.constexpr, WAIT: tl.constexpr):
    """``out`` = the sum over ranks of ``inp``: program ``p`` stores its block into every peer's inbox row for
    this rank, raises the peers' flag ``[rank, p]`` (one lane per peer), waits for its own flags ``[peer, p]``
    (a block of flags), and sums in rank order. ``WAIT=False`` leaves the wait out: a race."""
    ctx = DeviceContext.initialize(context, rank, world)
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    n = programs * BLOCK
    mine = tl.load(inp + offs)
    box = inbox + (epoch % 2) * world * n  # inbox: [parity, source rank, n]
    for peer in tl.static_range(world):
        if peer != rank:
            ctx.store(box + rank * n + offs, mine, peer)
    lanes = tl.arange(0, rank_lanes(world))
    peers = (lanes < world) & (lanes != rank)
    targets = tl.where(peers, lanes, rank)
    signal(ctx, flags + rank * programs + pid + tl.zeros_like(lanes), epoch, targets, mask=peers)
    if WAIT:
        wait(ctx, flags + targets * programs + pid, epoch, mask=peers)
    total = tl.zeros([BLOCK], tl.float32)
    for source in tl.static_range(world):
        if source == rank:
            total += mine
        else:
            total += tl.load(box + source * n + offs)
    tl.store(out + offs, total)
    tl.store(epochs + pid, epoch)


@triton.jit
def send_and_arrive(context, inp, inbox, done, epochs, rank: tl.constexpr, world: tl.constexpr,
                    BLOCK: tl.constexpr):
    """Program ``p`` stores its block into every rank's inbox (its own included) and arrives at every rank's
    ``done`` counter once."""
    ctx = DeviceContext.initialize(context, rank, world)
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    epoch = tl.load(epochs + pid) + 1
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    n = programs * BLOCK
    box = inbox + (epoch % 2) * world * n
    mine = tl.load(inp + offs)
    for dest in tl.static_range(world):
        ctx.store(box + rank * n + offs, mine, dest)
        arrive(ctx, done, dest)
    tl.store(epochs + pid, epoch)


@triton.jit
def wait_and_sum(context, inbox, out, done, epochs, senders, rank: tl.constexpr, world: tl.constexpr,
                 N: tl.constexpr):
    """One program: wait until ``done`` counts every sender of this call (a scalar flag), then sum the inbox."""
    ctx = DeviceContext.initialize(context, rank, world)
    epoch = tl.load(epochs) + 1
    wait(ctx, done, epoch * senders)
    box = inbox + (epoch % 2) * world * N
    offs = tl.arange(0, N)
    total = tl.zeros([N], tl.float32)
    for source in tl.static_range(world):
        total += tl.load(box + source * N + offs)
    tl.store(out + offs, total)
    tl.store(epochs, epoch)
