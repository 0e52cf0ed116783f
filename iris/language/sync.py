"""Device-side synchronisation between ranks: monotonic flags on the symmetric heap.

Every collective's workspace holds int32 flags laid out ``[slot, source_rank, program]`` and one call
counter (epoch) per program. Call ``k`` of a program signals by storing ``k`` into a peer's flag (release)
and waits until its own flag reaches ``k`` (acquire). Flags only grow, so nothing is reset between calls
and a fast peer that already signalled call ``k + 1`` never deadlocks a slow one; the epoch lives on the
device, so calls captured in a CUDA graph advance it on every replay.

Program ``p`` of one rank only ever waits for program ``p`` of other ranks (never for another program of
its own launch): programs of one launch run one after another on the CPU interpreter, and on a GPU every
program of a launch must be resident at once (grid at most the SM count).

What orders the data is the release of every signal against the acquire of the wait that sees it. To show that
the race checker (:mod:`iris.instruments.checking`) holds every protocol built on these flags to that,
:func:`relaxed_signals` weakens the releases to relaxed under the CPU interpreter: the same collectives then race,
and the checker names the data each one moves.

Examples
--------
>>> epoch = tl.load(epochs + pid) + 1
>>> exchange(ctx, flags, ARRIVED, epoch, pid, tl.num_programs(0))   # every rank's program pid is here
"""

import contextlib
import os

import triton
import triton.language as tl

SIGNAL_SEM = tl.constexpr("release")  # what signals release with; relaxed_signals() weakens it


@contextlib.contextmanager
def relaxed_signals():
    """Within the block, every signal of these flags is relaxed instead of release (CPU interpreter only): the
    collectives' protocols without the ordering they rest on, for the race checker to find (tests and lesson 08).

    Raises
    ------
    RuntimeError
        Outside the interpreter: compiled kernels keep the semantics they were compiled with.

    Examples
    --------
    >>> with relaxed_signals():                             # doctest: +SKIP
    ...     ctx.ccl.broadcast(t, src=0)                     # ctx.races() names t
    """
    global SIGNAL_SEM
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("relaxed_signals() weakens flag signals under the CPU interpreter only (TRITON_INTERPRET=1, "
                           "the cpu backend): a compiled kernel keeps the release it was compiled with")
    SIGNAL_SEM = tl.constexpr("relaxed")
    try:
        yield
    finally:
        SIGNAL_SEM = tl.constexpr("release")


@triton.jit
def flag_of(flags, slot, source, pid, num_programs, world: tl.constexpr):
    """Address of ``flags[slot, source, pid]`` (in this rank's heap; translate for a peer's copy)."""
    return flags + (slot * world + source) * num_programs + pid


@triton.jit
def signal(ctx, flag, epoch, rank):
    """Store ``epoch`` into ``rank``'s copy of ``flag``, after everything this program wrote before."""
    ctx.atomic_xchg(flag, epoch, rank, sem=SIGNAL_SEM, scope="sys")


@triton.jit
def wait_for(flag, epoch):
    """Spin until this rank's ``flag`` reaches ``epoch``; later loads see what the signaller wrote."""
    while tl.atomic_add(flag, 0, sem="acquire", scope="sys") < epoch:
        pass
    tl.debug_barrier()  # on a GPU: no thread of the program reads data before the flag was seen


@triton.constexpr_function
def lanes(world):
    """Lanes of a block with one lane per rank: ``world`` rounded up to a power of two (``tl.arange``'s rule)."""
    return triton.next_power_of_2(world)


@triton.jit
def announce(ctx, flags, slot, epoch, pid, num_programs):
    """Tell every rank (this one too) that this rank's program ``pid`` reached ``slot`` of call ``epoch``: the
    first half of :func:`exchange`, alone where only some ranks wait (a broadcast's root tells its leaves).

    One lane per rank: the signals go out as one block of release atomics, so it costs one link trip whatever the
    world size (one ``atomic_xchg`` per peer in sequence costs one each: a release waits for the previous one to
    land). Spare lanes (world rounded up to a power of two) signal nothing.
    """
    world: tl.constexpr = ctx.world_size
    lane = tl.arange(0, lanes(world))
    live = lane < world
    ranks = tl.where(live, lane, ctx.rank)  # spare lanes name this rank, so every address stays valid
    tl.debug_barrier()  # on a GPU: every thread's writes come before the releases
    mine = flag_of(flags, slot, ctx.rank, pid, num_programs, world) + tl.zeros_like(lane)
    ctx.atomic_xchg(mine, epoch, ranks, mask=live, sem=SIGNAL_SEM, scope="sys")


@triton.jit
def await_all(ctx, flags, slot, epoch, pid, num_programs):
    """Wait until every rank (this one too) told this rank that its program ``pid`` reached ``slot`` of call
    ``epoch``: the second half of :func:`exchange`, alone where one rank waits for all (a gather's root).

    The flags are polled as one block of acquire fetch-and-add(0) atomics; spare lanes poll this rank's own flag.
    """
    world: tl.constexpr = ctx.world_size
    lane = tl.arange(0, lanes(world))
    ranks = tl.where(lane < world, lane, ctx.rank)
    theirs = flag_of(flags, slot, ranks, pid, num_programs, world)
    while tl.min(tl.atomic_add(theirs, 0, sem="acquire", scope="sys"), axis=0) < epoch:
        pass
    tl.debug_barrier()  # on a GPU: no thread of the program reads data before every flag was seen


@triton.jit
def exchange(ctx, flags, slot, epoch, pid, num_programs):
    """Tell every rank that this rank's program ``pid`` reached ``slot`` of call ``epoch``; wait for theirs.

    :func:`announce` then :func:`await_all`: one link round trip whatever the world size.
    """
    announce(ctx, flags, slot, epoch, pid, num_programs)
    await_all(ctx, flags, slot, epoch, pid, num_programs)
