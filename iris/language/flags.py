"""Flags between ranks, on the device: "what I wrote before this has landed in your heap", and the wait for it.

A kernel that sends data to a peer with remote stores tells the peer so by raising a flag in the peer's heap;
the peer spins on its own copy of the flag, then reads the data with plain loads. Three Triton device
functions (``@triton.jit``), each taking the kernel's :class:`iris.DeviceContext`:

* :func:`signal` stores a value into ``to_rank``'s copy of a flag, with **release** semantics (system scope):
  everything the program wrote before, on any rank, is visible to whoever sees the value;
* :func:`arrive` adds 1 to ``to_rank``'s copy of a counter, with release semantics: many senders (programs,
  ranks) count into one counter, and the receiver waits for the total;
* :func:`wait` spins until every element of this rank's flag (a scalar or a block of flags) is at least a
  value, with **acquire** semantics: the program's later loads see what the signallers wrote before.

Flags only grow, so nothing is reset between calls: call ``k`` signals ``k`` (or, for a counter that ``n``
senders count into, waits for ``k * n``). Keep the call number (the *epoch*) on the device, e.g. one int32
per program that the program reads at its start and stores back, plus one, at its end: a CUDA graph that
captured the kernel then counts on every replay, where a number passed from the host would replay the same.

Both sides go through the device context, so a kernel initialised with ``tracing=True`` records each signal
and each poll (the timeline draws an arrow from the signal to the poll that saw it; the trace records no values,
so where several programs poll one flag a poll, an atomic add of 0, can be taken for the write), the race checker
sees a release whose value an acquire reads, and a hang report names the flag a rank waits on. The functions
work with the functional API's kernels too: build a context with ``DeviceContext.initialize``.

On a GPU, a program is many threads: :func:`signal` and :func:`arrive` begin with a barrier of the program's
threads, so that every thread's stores come before the release, and :func:`wait` ends with one, so that no
thread reads the data before the flag was seen. Every program that calls them must therefore reach the call
(do not call them under a condition that differs between the threads of a program; a condition on
``tl.program_id`` or on a scalar is fine). On the CPU interpreter the programs of one launch run one after
another: a program that waits for a *later* program of its own launch never returns; waiting for other ranks
is fine. On a GPU, a program that waits for another program of its own rank needs both resident at once
(grid at most the number of SMs).

To signal or wait on every peer at once, use one lane per rank: ``lane = tl.arange(0, rank_lanes(world))``
(``world`` rounded up to a power of two, as ``tl.arange`` needs), masked with ``lane < world``.

:mod:`iris.language.sync` uses the same protocol inside the collectives, with their flag layout.

Examples
--------
>>> from iris.language.flags import signal, wait
>>> @triton.jit
... def send(context, data, flags, epochs, rank: tl.constexpr, world: tl.constexpr, BLOCK: tl.constexpr):
...     ctx = iris.DeviceContext.initialize(context, rank, world)
...     epoch = tl.load(epochs) + 1                        # this call's number
...     offs = tl.arange(0, BLOCK)
...     peer = (rank + 1) % world
...     ctx.store(data + offs, offs.to(tl.float32) + epoch, peer)   # the message, into the peer's heap
...     signal(ctx, flags + rank, epoch, peer)             # ... then the peer's flag for this rank
...     wait(ctx, flags + (rank + world - 1) % world, epoch)   # the left neighbour's message has landed
...     tl.store(epochs, epoch)
"""

import triton
import triton.language as tl

from .sync import lanes as rank_lanes

__all__ = ["arrive", "rank_lanes", "signal", "wait"]


@triton.jit
def signal(ctx, flag, value, to_rank, mask=None):
    """Store ``value`` into ``to_rank``'s copy of ``flag``, after everything this program wrote before.

    Parameters
    ----------
    ctx : iris.DeviceContext
        The kernel's device context.
    flag : pointer (int32 or int64), or a block of them
        The flag, as an address in this rank's heap.
    value : int, scalar or block
        What to store; the receiver waits until its flag is at least this, so it must grow from call to call.
    to_rank : int, scalar or block
        The rank whose copy is written; a block (one lane per rank) signals several ranks at once.
    mask : block of bool, optional
        Lanes to signal, where ``flag`` or ``to_rank`` is a block.

    Examples
    --------
    >>> signal(ctx, flags + tile, epoch, peer)                      # doctest: +SKIP
    """
    tl.debug_barrier()  # on a GPU: every thread's writes come before the (one-thread) release
    ctx.atomic_xchg(flag, value, to_rank, mask=mask, sem="release", scope="sys")


@triton.jit
def arrive(ctx, counter, to_rank, mask=None):
    """Add 1 to ``to_rank``'s copy of ``counter``, after everything this program wrote before.

    ``n`` senders arriving once per call at a counter make it ``k * n`` after call ``k``: wait for that.

    Examples
    --------
    >>> arrive(ctx, done, dest)                                     # doctest: +SKIP
    >>> wait(ctx, done, epoch * senders)                            # on dest   # doctest: +SKIP
    """
    tl.debug_barrier()  # on a GPU: every thread's writes come before the (one-thread) release
    ctx.atomic_add(counter, 1, to_rank, mask=mask, sem="release", scope="sys")


@triton.jit
def wait(ctx, flag, value, mask=None):
    """Spin until this rank's ``flag`` (every element of a block, where ``mask`` holds) is at least ``value``.

    Parameters
    ----------
    ctx : iris.DeviceContext
        The kernel's device context (the flag is polled in this rank's heap, ``ctx.rank``).
    flag : pointer (int32 or int64), or a block of them
        This rank's flag(s), signalled by peers with :func:`signal` or :func:`arrive`.
    value : int or scalar
        The value to wait for; flags that have gone past it (a later call's signal) count as seen.
    mask : block of bool, optional
        Lanes of a block of flags to wait on; the others are not read.

    Examples
    --------
    >>> wait(ctx, flags + peer_ranks * TILES + tile, epoch, mask=peer_ranks != rank)   # doctest: +SKIP
    """
    # adding 0: an atomic read. The values read are not carried out of the loop: a block carried through a
    # while loop trips triton 3.6's sm_90 layout pass (TritonGPURemoveLayoutConversions)
    while _lowest(ctx.atomic_add(flag, 0, ctx.rank, mask=mask, sem="acquire", scope="sys"), value, mask) < value:
        pass
    tl.debug_barrier()  # on a GPU: no thread of the program reads data before the flag was seen


@triton.jit
def _lowest(seen, value, mask):
    """The least of the flags read (masked-off lanes count as ``value``)."""
    if mask is not None:
        seen = tl.where(mask, seen, value)
    return tl.min(seen + tl.zeros([1], seen.dtype))  # a scalar flag becomes a block of one
