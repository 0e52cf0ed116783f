"""Device-side tracing: :class:`DeviceTracing`, which records events from inside kernels into the trace buffers.

A traced context (``DeviceContext.initialize(..., tracing=True)``, ``IrisDeviceCtx.initialize(...,
tracing=True)``) records every remote operation and atomic by itself; a kernel marks its own phases with
:meth:`DeviceTracing.record_event_start` / :meth:`DeviceTracing.record_event_end`. ``tracing`` is a
constexpr: a context initialised without it holds no tracing code at all.

Recording: one atomic add on the rank's event counter gives each event its slot; a slot at or past
``max_events`` is not written (masked stores), but the counter still counts it, so the host reports how
many events were dropped. The clock is the GPU's global nanosecond timer (on the CPU interpreter, the
host's monotonic clock: :mod:`iris.interpret.clock`).

Examples
--------
>>> @triton.jit
... def gemm_tile(context, rank: tl.constexpr, world: tl.constexpr):
...     ctx = iris.DeviceContext.initialize(context, rank, world, tracing=True)
...     tile = ctx.tracing.record_event_start(TraceEvent().compute, rank, context, tl.program_id(0), 0)
...     ...                                                   # the phase being timed
...     ctx.tracing.record_event_end(tile)                    # doctest: +SKIP
"""

import triton
import triton.language as tl
from triton.language.core import _aggregate as aggregate

from ..interpret.clock import GLOBALTIMER_ASM, SMID_ASM
from .trace_events import (
    BUFFER_INDEX,
    SLOT_COUNTER,
    SLOT_ENABLED,
    SLOT_FIRST_BUFFER,
    SLOT_MAX_EVENTS,
    SLOT_OP_INDEX_COUNTER,
)

_GLOBALTIMER_ASM = tl.constexpr(GLOBALTIMER_ASM)
_SMID_ASM = tl.constexpr(SMID_ASM)
_ENABLED = tl.constexpr(SLOT_ENABLED)
_MAX_EVENTS = tl.constexpr(SLOT_MAX_EVENTS)
_COUNTER = tl.constexpr(SLOT_COUNTER)
_OP_INDEX_COUNTER = tl.constexpr(SLOT_OP_INDEX_COUNTER)
_BUFFER = {name: tl.constexpr(SLOT_FIRST_BUFFER + index) for name, index in BUFFER_INDEX.items()}
_EVENT_ID, _PID, _PID_M, _PID_N = _BUFFER["event_id"], _BUFFER["pid"], _BUFFER["pid_m"], _BUFFER["pid_n"]
_CUR_RANK, _TARGET_RANK, _XCC_ID, _CU_ID = (_BUFFER["cur_rank"], _BUFFER["target_rank"], _BUFFER["xcc_id"],
                                            _BUFFER["cu_id"])
_TIMESTAMP, _ADDRESS, _END, _OP_INDEX = (_BUFFER["timestamp"], _BUFFER["address"], _BUFFER["duration_cycles"],
                                         _BUFFER["op_index"])
_PAYLOAD_SIZE = _BUFFER["payload_size"]


@triton.jit
def device_clock():
    """Nanoseconds of the GPU's global timer (``%globaltimer``), as int64; on the CPU, ``time.monotonic_ns()``."""
    return tl.inline_asm_elementwise(_GLOBALTIMER_ASM, "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def device_sm_id():
    """The streaming multiprocessor running this program (``%smid``); 0 on the CPU."""
    return tl.inline_asm_elementwise(_SMID_ASM, "=r", [], dtype=tl.int32, is_pure=True, pack=1)


@triton.constexpr_function
def _element_bytes(dtype):
    # Bytes per lane of what `address` points to; 0 when it is not a pointer (then there is no payload).
    return dtype.element_ty.primitive_bitwidth // 8 if dtype.is_ptr() else 0


@triton.constexpr_function
def _lanes(block_type):
    return block_type.numel if block_type.is_block() else 1


@triton.constexpr_function
def _is_block(block_type):
    return block_type.is_block()


@triton.jit
def _linear_program_id():
    # Upstream records tl.program_id(0), the same on its 1-D grids; on a 2-D or 3-D grid that would give
    # programs (0, 0) and (0, 1) one id, and one lane on the timeline. Row-major over the grid instead.
    return tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))


@triton.jit
def _buffer(slots, index: tl.constexpr, dtype: tl.constexpr):
    return tl.load(slots + index).to(tl.pointer_type(dtype))


@aggregate
class DeviceTracing:
    """The tracing half of a device context: ``ctx.tracing`` in kernels.

    Holds the context tensor and where its tracing slots start; the buffers' addresses are read from the
    slots when an event is recorded (uniform loads that stay in cache).
    """

    enabled: tl.constexpr
    context: tl.tensor
    slots: tl.tensor

    @triton.constexpr_function
    def __init__(self, enabled, context, slots):
        self.enabled = tl.constexpr(enabled)
        self.context = context
        self.slots = slots

    @triton.jit
    def record_event_start(self, event_id: tl.constexpr, target_rank, address, pid_m, pid_n, mask=None):
        """Record the start of an event (upstream's signature); returns the handle for :meth:`record_event_end`.

        Nothing at all in a kernel whose context was initialised with ``tracing=False`` (the handle is then the
        constant 0): its slots are not there to write to.

        Parameters
        ----------
        event_id : constexpr int
            A :class:`~iris.language.trace_events.TraceEvent` id, e.g. ``TraceEvent().compute``.
        target_rank : int or scalar tensor
            The rank the event concerns.
        address : pointer, block of pointers or integer tensor
            Recorded as the lowest address of the block. Its element size times the active lanes
            (``mask``'s, else all) is the event's payload in bytes.
        pid_m, pid_n : int or scalar tensor
            The tile this program works on, for the trace viewer.
        mask : block of bool, optional

        Returns
        -------
        scalar int32 tensor
            The event's slot; at or past ``max_events`` it was dropped (and counted) and ending it does nothing.

        Examples
        --------
        >>> h = ctx.tracing.record_event_start(TraceEvent().wait, peer, flag, pid_m, pid_n)   # doctest: +SKIP
        """
        handle = 0
        # Why compiled out: with tracing off, ``slots`` is the context tensor itself (initialize_tracing), whose
        # heap bases the recording below would take for buffer addresses and write to.
        if self.enabled:
            handle = self._record_start(event_id, target_rank, address, pid_m, pid_n, mask)
        return handle

    @triton.jit
    def _record_start(self, event_id: tl.constexpr, target_rank, address, pid_m, pid_n, mask=None):
        start = device_clock()
        # A kernel compiled with tracing=True may run while ctx.tracing is not enabled (upstream allows it):
        # then the counter's address is 0, so nothing at all may be touched.
        live = tl.load(self.slots + _ENABLED) != 0
        slot = tl.atomic_add(tl.load(self.slots + _COUNTER).to(tl.pointer_type(tl.int32)), 1, sem="relaxed",
                             mask=live)
        kept = live & (slot < tl.load(self.slots + _MAX_EVENTS))
        op_index = tl.atomic_add(tl.load(self.slots + _OP_INDEX_COUNTER).to(tl.pointer_type(tl.int32)), 1,
                                 sem="relaxed", mask=kept)
        lanes = _lanes(address.type)
        if mask is not None:
            lanes = tl.sum(mask.to(tl.int32))
        first = address.to(tl.int64)
        if _is_block(address.type):
            first = tl.min(first)
        tl.store(_buffer(self.slots, _EVENT_ID, tl.int32) + slot, event_id, mask=kept)
        tl.store(_buffer(self.slots, _PID, tl.int32) + slot, _linear_program_id(), mask=kept)
        tl.store(_buffer(self.slots, _PID_M, tl.int32) + slot, pid_m, mask=kept)
        tl.store(_buffer(self.slots, _PID_N, tl.int32) + slot, pid_n, mask=kept)
        tl.store(_buffer(self.slots, _CUR_RANK, tl.int32) + slot, tl.load(self.context).to(tl.int32), mask=kept)
        tl.store(_buffer(self.slots, _TARGET_RANK, tl.int32) + slot, target_rank, mask=kept)
        tl.store(_buffer(self.slots, _XCC_ID, tl.int32) + slot, 0, mask=kept)  # NVIDIA GPUs have no XCDs
        tl.store(_buffer(self.slots, _CU_ID, tl.int32) + slot, device_sm_id(), mask=kept)
        tl.store(_buffer(self.slots, _TIMESTAMP, tl.int64) + slot, start, mask=kept)
        tl.store(_buffer(self.slots, _ADDRESS, tl.int64) + slot, first, mask=kept)
        tl.store(_buffer(self.slots, _END, tl.int64) + slot, 0, mask=kept)
        tl.store(_buffer(self.slots, _OP_INDEX, tl.int32) + slot, op_index, mask=kept)
        tl.store(_buffer(self.slots, _PAYLOAD_SIZE, tl.int32) + slot, lanes * _element_bytes(address.dtype),
                 mask=kept)
        return slot

    @triton.jit
    def op_start(self, event_id: tl.constexpr, target_rank, address, mask=None):
        """:meth:`record_event_start` for one of iris's own operations, with the program ids as the tile, when
        tracing is compiled in; nothing at all when it is not (the handle is then the constant 0)."""
        handle = 0
        if self.enabled:
            handle = self._record_start(event_id, target_rank, address, tl.program_id(0), tl.program_id(1), mask)
        return handle

    @triton.jit
    def op_end(self, handle):
        """:meth:`record_event_end` when tracing is compiled in; nothing when it is not."""
        if self.enabled:
            self._record_end(handle)

    @triton.jit
    def record_event_end(self, handle):
        """Record the end of the event ``handle`` (from :meth:`record_event_start`); a dropped event stays dropped.

        Examples
        --------
        >>> ctx.tracing.record_event_end(h)   # doctest: +SKIP
        """
        if self.enabled:  # compiled out with tracing off, as record_event_start is
            self._record_end(handle)

    @triton.jit
    def _record_end(self, handle):
        end = device_clock()
        kept = (tl.load(self.slots + _ENABLED) != 0) & (handle < tl.load(self.slots + _MAX_EVENTS))
        tl.store(_buffer(self.slots, _END, tl.int64) + handle, end, mask=kept)


@triton.jit
def initialize_tracing(context_tensor, num_ranks, tracing: tl.constexpr):
    """The :class:`DeviceTracing` of ``context_tensor`` (``tracing`` off: one that nothing ever calls)."""
    slots = context_tensor + 2 + num_ranks if tracing else context_tensor
    return DeviceTracing(tracing, context_tensor, slots)
