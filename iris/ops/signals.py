"""Per-piece arrival flags between ranks: "piece ``slot`` of this call has landed in your buffers".

The chunked path pushes each finished piece into a peer's heap with the copy engines, on a second stream, and
the peer starts the work that reads it as soon as it has landed, piece by piece, instead of after a barrier for
all of them. A flag ``[slot, source]`` on each rank's heap carries that, once per call:

* :meth:`PieceSignals.signal` (queued after a piece's copy, on the same stream) sets the peer's flag
  ``[slot, this rank]`` to 1, after the copy is visible. On GPUs the stream's front end stores it
  (:meth:`iris.heap.SymmetricHeap.store_flag`), taking no SM: it lands as soon as the copy ends, while the next
  piece's GEMM holds every SM. A kernel would wait for a free SM, i.e. for that GEMM's end, and hold up the
  copies queued behind it. On the CPU backend a one-program kernel stores it (release, system scope).
* :meth:`PieceSignals.wait` (a one-program kernel) spins until every peer's flag ``[slot, peer]`` is 1
  (acquire): the work queued after it sees the pieces. Then it sets them back to 0: a flag is consumed by the
  call it was sent to.

Why the reset is safe: a call's opening device barrier comes, in this rank's stream order, after its last
call's waits (each call ends by joining its streams), and a peer signals only after passing that barrier. So
a flag is back to 0 before the next signal to it can be stored. A captured CUDA graph replays the same stores
and waits, which is why the flags hold 1 or 0 and no call count (a stream store writes a fixed value).

The opening barrier stays a kernel: a stream wait (``cuStreamWaitValue32``) on the copy stream in its place,
"every peer is done with the last call", let the first GEMM start at once but made matmul_reduce_scatter at
8192^3 17% slower and matmul_all_gather at (8192, 28672, 8192) 13-15% slower (2xH100, 2026-11-26, two runs), for a
reason not found; the stores alone slowed no op beyond the run-to-run noise.

A call whose queueing stopped half-way (an exception, an interrupted cell) may leave flags set that no wait
consumed; the next call would take them for its own pieces. So :meth:`PieceSignals.call` marks the flags
unusable until a call has queued all its signals and waits, and a later call refuses them with a clear error.

Examples
--------
>>> signals = PieceSignals(ctx, ("matmul_all_reduce", shapes), slots=8)       # doctest: +SKIP
>>> with signals.call():                 # doctest: +SKIP
...     signals.signal(slot=0, peer=1)   # on the copy stream, after piece 0's copy to rank 1
...     signals.wait(slot=0)             # on the compute stream: every peer's piece 0 has landed
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from ..ccl.fast_path import launch, replay
from ..ccl.workspace import Workspace
from ..language.core import DeviceContext
from ..language.sync import flag_of, lanes, signal

LANDED = tl.constexpr(1)  # a flag's value once its piece has landed; 0 once the call it was sent to has seen it


@triton.jit
def signal_kernel(context, flags, slot, peer, rank: tl.constexpr, world: tl.constexpr):
    ctx = DeviceContext.initialize(context, rank, world)
    signal(ctx, flag_of(flags, slot, rank, 0, 1, world), LANDED, peer)


@triton.jit
def wait_kernel(flags, first_slot, slots, rank: tl.constexpr, world: tl.constexpr):
    lane = tl.arange(0, lanes(world))
    peer = (lane < world) & (lane != rank)
    sources = tl.where(peer, lane, rank)  # spare lanes and this rank's own lane read a valid flag, unused
    for slot in range(first_slot, first_slot + slots):
        flags_of_slot = flag_of(flags, slot, sources, 0, 1, world)
        while tl.min(tl.where(peer, tl.atomic_add(flags_of_slot, 0, mask=peer, sem="acquire", scope="sys"), LANDED),
                     axis=0) < LANDED:
            pass
        tl.store(flags_of_slot, 0, mask=peer)  # consumed: the next call's signal finds it clear
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

    Attributes
    ----------
    flags : torch.Tensor
        int32 ``[slots, world, 1]`` on the heap: ``flags[slot, source]`` is 1 while ``source``'s piece ``slot``
        has landed here and this rank's wait for it has not run.
    """

    def __init__(self, ctx, key: tuple, slots: int):
        self.ctx, self.slots, self.op = ctx, slots, key[0]
        self.state = Workspace.allocate(ctx, ("ops", str(key[0]), "signals", slots), programs=1, slots=slots)
        self.flags = self.state.flags
        self._interrupted = False

    def check_usable(self) -> None:
        """Raise when an earlier call stopped half-way through queueing (see the module's docstring): its flags
        may hold pieces no call consumed. Replaying a captured call must check this too."""
        if self._interrupted:
            raise RuntimeError(
                f"rank {self.ctx.cur_rank}: an earlier call of {self.op} stopped (an exception or an interrupt) while "
                "it queued its pieces, so its arrival flags may hold pieces that no call consumed, and a new call "
                "would read them as its own. Call ctx.ops.release_workspaces() on every rank (or pass a new "
                "workspace on every rank), once every rank's earlier call has ended")

    @contextlib.contextmanager
    def call(self):
        """Queue one call's signals and waits inside this block; a block left by an exception leaves the flags
        unusable, and :meth:`check_usable` (which this calls first) raises from then on."""
        self.check_usable()
        capturing = self.ctx.backend == "cuda" and torch.cuda.is_current_stream_capturing()
        self._interrupted = not capturing  # a failed capture ran nothing
        yield self
        self._interrupted = False

    def signal(self, slot: int, peer: int) -> None:
        """Tell ``peer`` that piece ``slot`` has landed (after the work queued before, in stream order)."""
        ctx = self.ctx
        if ctx.backend == "cuda":
            ctx.heap.store_flag(ctx.as_remote(self.flags, peer)[slot, ctx.cur_rank], LANDED.value)
            return
        self._launch(("signal", slot, peer), signal_kernel, ctx.get_device_context(), self.flags, slot, peer,
                     rank=ctx.cur_rank, world=ctx.num_ranks)

    def wait(self, slot: int, count: int = 1) -> None:
        """Make the work queued after this wait for pieces ``slot .. slot + count - 1`` of every peer."""
        ctx = self.ctx
        self._launch(("wait", slot, count), wait_kernel, self.flags, slot, count, rank=ctx.cur_rank,
                     world=ctx.num_ranks)

    def _launch(self, key, kernel, *args, **constexprs) -> None:
        if not replay(self.ctx, self.state, key, ()):
            launch(self.state, key, (), kernel, (1,), *args, num_warps=1, **constexprs)
