"""The trace event layout, in one place: event ids and names, the trace buffers and the device-context slots.

Device code (:mod:`iris.language.tracing`) writes events with these ids into these buffers, whose addresses
the host (:mod:`iris.instruments.tracing.host`) puts into these slots of ``ctx.get_device_context()``; the host reads
the buffers back and names events with :data:`EVENT_NAMES`. Ids, buffer order and slots are upstream
Iris's, so kernels written for upstream decode the context tensor alike.

Event id ranges (upstream's): 0-1023 iris operations, 1024-2047 user data movement, 2048-3071 user
compute, 3072-4095 synchronisation.

Examples
--------
>>> EVENT_NAMES[EVENT_IDS["put"]]
'put'
>>> [name for name, _ in BUFFERS][:3]
['event_id', 'pid', 'pid_m']
"""

import torch
import triton
import triton.language as tl
from triton.language.core import _aggregate as aggregate

EVENT_IDS = {
    "load": 0, "store": 1, "get": 2, "put": 3, "copy": 4,
    "atomic_add": 5, "atomic_sub": 6, "atomic_cas": 7, "atomic_xchg": 8, "atomic_xor": 9,
    "atomic_and": 10, "atomic_or": 11, "atomic_min": 12, "atomic_max": 13,
    "wg_fetch": 14, "wg_gemm": 15, "wg_gemm_wait": 16, "wg_sdma": 17,  # upstream's workgroup phases
    "fetch": 1024, "compute": 2048, "reduce": 2049, "wait": 3072, "barrier": 3073,
}
EVENT_NAMES = {event_id: name for name, event_id in EVENT_IDS.items()}

# The per-event buffers (structure of arrays), in the order of their addresses in the context tensor.
# "duration_cycles" is upstream's name; it holds the end timestamp (0: the event has no end, an instant).
BUFFERS = (
    ("event_id", torch.int32), ("pid", torch.int32), ("pid_m", torch.int32), ("pid_n", torch.int32),
    ("cur_rank", torch.int32), ("target_rank", torch.int32), ("xcc_id", torch.int32), ("cu_id", torch.int32),
    ("timestamp", torch.int64), ("address", torch.int64), ("duration_cycles", torch.int64),
    ("op_index", torch.int32), ("payload_size", torch.int32),
)
BUFFER_INDEX = {name: i for i, (name, _) in enumerate(BUFFERS)}

# The tracing slots that follow the heap bases in the device context: [enabled, max_events, event counter,
# op-index counter, one address per buffer]. Zero when tracing is off, so max_events = 0 stops every write.
SLOT_ENABLED, SLOT_MAX_EVENTS, SLOT_COUNTER, SLOT_OP_INDEX_COUNTER, SLOT_FIRST_BUFFER = 0, 1, 2, 3, 4
TRACING_SLOTS = SLOT_FIRST_BUFFER + len(BUFFERS)  # 17, upstream's count


def _trace_event_fields(cls):
    # TraceEvent's constexpr fields, one per EVENT_IDS entry, declared from the table instead of by hand.
    cls.__annotations__ = {name: tl.constexpr for name in EVENT_IDS}
    return cls


@aggregate
@_trace_event_fields
class TraceEvent:
    """Event ids for ``record_event_start`` in kernels, upstream's ``iris.TraceEvent``: ``TraceEvent().put``.

    One constexpr attribute per name of :data:`EVENT_IDS`: the iris operations (``load`` ... ``atomic_max``)
    that traced contexts record by themselves, and the ids for a kernel's own phases (``compute``,
    ``wait``, ``fetch``, ``reduce``, ``barrier``, ``wg_gemm``...).

    Examples
    --------
    >>> @triton.jit
    ... def k(context, rank: tl.constexpr, world: tl.constexpr):
    ...     ctx = iris.DeviceContext.initialize(context, rank, world, tracing=True)
    ...     h = ctx.tracing.record_event_start(TraceEvent().compute, rank, context, tl.program_id(0), 0)
    ...     ctx.tracing.record_event_end(h)                            # doctest: +SKIP
    """

    @triton.constexpr_function
    def __init__(self):
        for name in EVENT_IDS:  # (not .items(): Triton's cache-key walk refuses a bound method)
            setattr(self, name, tl.constexpr(EVENT_IDS[name]))
