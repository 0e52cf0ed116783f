"""Device-side synchronisation between ranks: monotonic flags on the symmetric heap.

Every collective's workspace holds int32 flags laid out ``[slot, source_rank, program]`` and one call
counter (epoch) per program. Call ``k`` of a program signals by storing ``k`` into a peer's flag (release)
and waits until its own flag reaches ``k`` (acquire). Flags only grow, so nothing is reset between calls
and a fast peer that already signalled call ``k + 1`` never deadlocks a slow one; the epoch lives on the
device, so calls captured in a CUDA graph advance it on every replay.

Program ``p`` of one rank only ever waits for program ``p`` of other ranks (never for another program of
its own launch): programs of one launch run one after another on the CPU interpreter, and on a GPU every
program of a launch must be resident at once (grid at most the SM count).

Examples
--------
>>> epoch = tl.load(epochs + pid) + 1
>>> exchange(ctx, flags, ARRIVED, epoch, pid, tl.num_programs(0))   # every rank's program pid is here
"""

import triton
import triton.language as tl


@triton.jit
def flag_of(flags, slot, source, pid, num_programs, world: tl.constexpr):
    """Address of ``flags[slot, source, pid]`` (in this rank's heap; translate for a peer's copy)."""
    return flags + (slot * world + source) * num_programs + pid


@triton.jit
def signal(ctx, flag, epoch, rank):
    """Store ``epoch`` into ``rank``'s copy of ``flag``, after everything this program wrote before."""
    ctx.atomic_xchg(flag, epoch, rank, sem="release", scope="sys")


@triton.jit
def wait_for(flag, epoch):
    """Spin until this rank's ``flag`` reaches ``epoch``; later loads see what the signaller wrote."""
    while tl.atomic_add(flag, 0, sem="acquire", scope="sys") < epoch:
        pass
    tl.debug_barrier()  # on a GPU: no thread of the program reads data before the flag was seen


@triton.jit
def exchange(ctx, flags, slot, epoch, pid, num_programs):
    """Tell every rank that this rank's program ``pid`` reached ``slot`` of call ``epoch``; wait for theirs."""
    world: tl.constexpr = ctx.world_size
    tl.debug_barrier()  # on a GPU: every thread's writes come before the (one-thread) release
    for i in tl.static_range(world):
        peer = (ctx.rank + i) % world
        signal(ctx, flag_of(flags, slot, ctx.rank, pid, num_programs, world), epoch, peer)
    for source in tl.static_range(world):
        wait_for(flag_of(flags, slot, source, pid, num_programs, world), epoch)
