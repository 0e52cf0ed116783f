"""Flags and inboxes for the Gluon collectives: :func:`announce`, :func:`await_all`, :func:`exchange`, :func:`signal`,
:func:`wait_for` and :func:`deliver`, the Gluon twins of :mod:`iris.language.sync`'s and :func:`iris.ccl.inbox.deliver`.

Why twins: those build their blocks with ``tl.arange``, which Gluon refuses without a layout ("arange() missing
1 required positional argument: 'layout'"). The protocol is theirs, unchanged: the same flags
``[slot, member, program]`` (:func:`iris.language.sync.flag_of`), the same call counters, the same double-buffered
inbox rows (:func:`iris.ccl.inbox.row` is shared as is), so a workspace serves Triton and Gluon calls alike.

Examples
--------
>>> epoch = gl.load(epochs + pid) + 1                                               # doctest: +SKIP
>>> exchange(ctx, flags, ARRIVED, epoch, pid, gl.num_programs(0), LAYOUT)   # every member's program pid is here
"""

import math

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ..language import sync
from ..language.gluon import cta_barrier
from ..language.sync import flag_of, lanes
from .inbox import DELIVERED


@gluon.constexpr_function
def lane_layout(layout):
    """A 1-D layout over the threads and warps of ``layout`` (a ``gl.BlockedLayout`` of any rank), one element
    per thread: the lanes of :func:`exchange` take the warp shape of the kernel's own blocks.

    Why not ``gl.CoalescedLayout()``: triton 3.6's ``GluonInferCoalescedEncodingsPass`` aborts on the lanes'
    reduction ("parent layout must have at least rank >= 2").
    """
    return gl.BlockedLayout([1], [math.prod(layout.threads_per_warp)], [math.prod(layout.warps_per_cta)], [0])


@gluon.jit
def announce(ctx, flags, slot, epoch, pid, num_programs, LAYOUT: gl.constexpr):
    """Tell every member of ``ctx``'s group (this one too) that this program ``pid`` reached ``slot`` of call
    ``epoch``: one lane per member (:func:`iris.language.sync.announce`). ``ctx`` is the kernel's
    :class:`iris.ccl.groups.GroupContext`; ``LAYOUT`` the kernel's blocked layout (:func:`lane_layout`)."""
    world: gl.constexpr = ctx.world_size
    lane = gl.arange(0, lanes(world), layout=lane_layout(LAYOUT))
    live = lane < world
    members = gl.where(live, lane, ctx.rank)  # spare lanes name this member, so every address stays valid
    cta_barrier()  # every thread's writes come before the releases
    mine = flag_of(flags, slot, ctx.rank, pid, num_programs, world) + gl.zeros_like(lane)
    # Gluon's atomics take no scalar value for a block of pointers: one per lane, here and below
    ctx.atomic_xchg(mine, epoch + gl.zeros_like(lane), members, mask=live, sem=sync.SIGNAL_SEM, scope="sys")


@gluon.jit
def await_all(ctx, flags, slot, epoch, pid, num_programs, LAYOUT: gl.constexpr):
    """Wait until every member told this one that its program ``pid`` reached ``slot`` of call ``epoch``
    (:func:`iris.language.sync.await_all`)."""
    world: gl.constexpr = ctx.world_size
    lane = gl.arange(0, lanes(world), layout=lane_layout(LAYOUT))
    members = gl.where(lane < world, lane, ctx.rank)
    theirs = flag_of(flags, slot, members, pid, num_programs, world)
    while gl.min(gl.atomic_add(theirs, gl.zeros_like(lane), sem="acquire", scope="sys"), axis=0) < epoch:
        pass
    cta_barrier()  # no thread of the program reads data before every flag was seen


@gluon.jit
def exchange(ctx, flags, slot, epoch, pid, num_programs, LAYOUT: gl.constexpr):
    """Tell every member that this program ``pid`` reached ``slot`` of call ``epoch``; wait for theirs: one link
    round trip whatever the group's size (:func:`iris.language.sync.exchange`)."""
    announce(ctx, flags, slot, epoch, pid, num_programs, LAYOUT)
    await_all(ctx, flags, slot, epoch, pid, num_programs, LAYOUT)


@gluon.jit
def signal(ctx, flag, epoch, member):
    """Store ``epoch`` into ``member``'s copy of ``flag`` after every thread's writes
    (:func:`iris.language.sync.signal`)."""
    cta_barrier()
    ctx.atomic_xchg(flag, epoch, member, sem=sync.SIGNAL_SEM, scope="sys")


@gluon.jit
def wait_for(flag, epoch):
    """Spin until this rank's ``flag`` reaches ``epoch`` (:func:`iris.language.sync.wait_for`)."""
    while gl.atomic_add(flag, 0, sem="acquire", scope="sys") < epoch:
        pass
    cta_barrier()


@gluon.jit
def deliver(ctx, inp, inbox, flags, epoch, n, stride, pid, num_programs, BLOCK: gl.constexpr,
            HINT: gl.constexpr, LAYOUT: gl.constexpr):
    """Write this program's blocks of ``inp`` into this member's row of every peer's inbox, then wait until
    every peer's rows have come; returns this call's half of the local inbox (see
    :func:`iris.ccl.inbox.deliver`). Blocks of ``BLOCK`` elements in ``LAYOUT``."""
    rank: gl.constexpr = ctx.rank
    world: gl.constexpr = ctx.world_size
    box = inbox + gl.multiple_of((epoch % 2).to(gl.int64) * world * stride, 16)  # 64-bit: big inboxes
    for block in range(pid, gl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + gl.arange(0, BLOCK, layout=LAYOUT)
        mask = offs < n
        value = gl.load(inp + offs, mask=mask)
        for i in gl.static_range(1, world):
            peer = (rank + i) % world  # everyone starts with a different peer
            gl.store(ctx.as_remote(box + rank * stride + offs, peer, mask, HINT), value, mask=mask)
    exchange(ctx, flags, DELIVERED, epoch, pid, num_programs, LAYOUT)
    return box
