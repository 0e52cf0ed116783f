"""Per-piece arrival flags between ranks: "piece ``slot`` of this call has landed in your buffers".

The chunked reductions push each finished piece of a product into a peer's heap with the copy engines, on a
second stream, and the peer adds it in as soon as it has landed, piece by piece, instead of after a barrier
for all of them. Three one-program kernels carry that:

* :meth:`PieceSignals.begin` counts the call on the device (the epoch);
* :meth:`PieceSignals.signal` (queued after a piece's copy, on the same stream) stores the epoch into the
  peer's flag ``[slot, this rank]`` with release semantics, system scope;
* :meth:`PieceSignals.wait` spins until every peer's flag ``[slot, peer]`` holds the epoch (acquire): the work
  queued after it sees the pieces.

Flags only grow (:mod:`iris.ccl.sync`), so nothing is reset between calls, and the epoch lives on the device,
so a call captured in a CUDA graph counts on every replay. A flag of call ``k + 1`` can only be stored once
the call's opening device barrier has passed on every rank, i.e. after every rank consumed call ``k``'s
pieces. Repeated launches skip Triton's Python launcher (:mod:`iris.ccl.fast_path`).

Examples
--------
>>> signals = PieceSignals(ctx, ("matmul_all_reduce", shapes), slots=8)       # doctest: +SKIP
>>> signals.begin()                      # on the compute stream, before the copy stream forks   # doctest: +SKIP
>>> signals.signal(slot=0, peer=1)       # on the copy stream, after piece 0's copy to rank 1     # doctest: +SKIP
>>> signals.wait(slot=0)                 # on the compute stream: every peer's piece 0 has landed  # doctest: +SKIP
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..ccl.fast_path import launch, replay
from ..ccl.sync import flag_of, lanes, signal
from ..ccl.workspace import Workspace
from ..device import DeviceContext


@triton.jit
def begin_kernel(epochs):
    tl.store(epochs, tl.load(epochs) + 1)


@triton.jit
def signal_kernel(context, flags, epochs, slot, peer, rank: tl.constexpr, world: tl.constexpr):
    ctx = DeviceContext.initialize(context, rank, world)
    signal(ctx, flag_of(flags, slot, rank, 0, 1, world), tl.load(epochs), peer)


@triton.jit
def wait_kernel(flags, epochs, first_slot, slots, rank: tl.constexpr, world: tl.constexpr):
    epoch = tl.load(epochs)
    lane = tl.arange(0, lanes(world))
    peer = (lane < world) & (lane != rank)
    sources = tl.where(peer, lane, rank)  # spare lanes and this rank's own lane read a valid flag, unused
    for slot in range(first_slot, first_slot + slots):
        flags_of_slot = flag_of(flags, slot, sources, 0, 1, world)
        while tl.min(tl.where(peer, tl.atomic_add(flags_of_slot, 0, mask=peer, sem="acquire", scope="sys"), epoch),
                     axis=0) < epoch:
            pass
    tl.debug_barrier()  # on a GPU: no thread of the program reads data before every flag was seen


class PieceSignals:
    """The flags of one op and shapes: ``slots`` pieces per call, from every rank to every rank.

    Allocating them is collective (every rank, same arguments), as any heap allocation.

    Parameters
    ----------
    ctx : iris.Iris
        The context.
    key : tuple
        What the flags are for (the op's workspace key); names the heap allocation.
    slots : int
        Pieces a rank may signal to each peer per call.
    """

    def __init__(self, ctx, key: tuple, slots: int):
        self.ctx, self.slots = ctx, slots
        self.state = Workspace.allocate(ctx, ("ops", str(key[0]), "signals", slots), programs=1, slots=slots)

    def begin(self) -> None:
        """Count a new call (before any signal or wait of it, in stream order)."""
        self._launch(("begin",), begin_kernel, self.state.epochs)

    def signal(self, slot: int, peer: int) -> None:
        """Tell ``peer`` that piece ``slot`` has landed (after the work queued before, in stream order)."""
        ctx = self.ctx
        self._launch(("signal", slot, peer), signal_kernel, ctx.get_device_context(), self.state.flags,
                     self.state.epochs, slot, peer, rank=ctx.cur_rank, world=ctx.num_ranks)

    def wait(self, slot: int, count: int = 1) -> None:
        """Make the work queued after this wait for pieces ``slot .. slot + count - 1`` of every peer."""
        ctx = self.ctx
        self._launch(("wait", slot, count), wait_kernel, self.state.flags, self.state.epochs, slot, count,
                     rank=ctx.cur_rank, world=ctx.num_ranks)

    def _launch(self, key, kernel, *args, **constexprs) -> None:
        if not replay(self.ctx, self.state, key, ()):
            launch(self.state, key, (), kernel, (1,), *args, num_warps=1, **constexprs)
