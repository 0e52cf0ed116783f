"""The host side of device tracing: ``ctx.tracing`` (:class:`Tracing`), upstream Iris's API.

``enable`` allocates the trace buffers on this rank's device and writes their addresses into the tracing
slots of the device context (in place: context tensors already handed out see them); ``reset`` starts a new
capture; ``export`` reads the buffers back and writes Chrome trace / Perfetto JSON, per rank and, with
``merge=True``, merged on rank 0 with timestamps aligned across ranks.

Alignment: each rank's device clock is tied to the host's monotonic clock (shared by every process on a
host) at ``enable``: a kernel reads the device clock between two host readings, and the midpoint gives the
offset, to within half the narrowest of a few such brackets (``clock_offset_error_ns`` in the metadata:
microseconds on a GPU). On the CPU backend the device clock *is* the host's monotonic clock: offset 0, exact.

Named operations (:mod:`iris.instruments.operations`: each collective of the ``iris`` torch.distributed backend,
``all_reduce · DDP bucket 0``) that end while tracing is enabled are spans too, on a track of their own per rank
(``tid`` :data:`OPERATIONS_TRACK`, named "operations", category ``iris.operation``): host time, from the call to its
return (on a GPU the kernels it launched may still run after it), so the timeline says which collective of a
training step each kernel's events belong to.

Examples
--------
>>> ctx.tracing.enable(max_events=100_000)                       # doctest: +SKIP
>>> kernel[(4,)](ctx.get_device_context(), ..., rank, world)     # kernels initialised with tracing=True
>>> trace = ctx.tracing.export("trace.json", merge=True)          # trace_rank<r>.json, and trace.json on rank 0
"""

from __future__ import annotations

import json
import time

import torch
import triton
import triton.language as tl

from ...language.trace_events import (
    BUFFERS,
    EVENT_NAMES,
    SLOT_COUNTER,
    SLOT_ENABLED,
    SLOT_FIRST_BUFFER,
    SLOT_MAX_EVENTS,
    SLOT_OP_INDEX_COUNTER,
    TRACING_SLOTS,
)
from ...language.tracing import device_clock
from .. import operations
from .timeline import OPERATION_CATEGORY, OPERATIONS_TRACK, Timeline

SCHEMA_VERSION = "1.1"  # upstream's
CLOCK_PROBES = 5  # brackets tried when tying the device clock to the host's; the narrowest one is kept


@triton.jit
def _read_device_clock(out):
    tl.store(out, device_clock())


class Tracing:
    """Device-side event tracing for one :class:`iris.Iris` context: ``ctx.tracing``.

    Attributes
    ----------
    enabled : bool
    max_events : int
        Capacity of this rank's buffers; events past it are dropped and counted.
    trace_buffers : dict of str to torch.Tensor
        One buffer per field of :data:`iris.language.trace_events.BUFFERS`, on this rank's device.
    """

    def __init__(self, iris_ctx):
        self.iris = iris_ctx
        self.enabled = False
        self.max_events = 0
        self.trace_buffers: dict[str, torch.Tensor] = {}
        self.trace_counter = None
        self.op_index_counter = None
        self.clock_offset_ns = 0
        self.clock_offset_error_ns = 0
        self.operations: list[tuple] = []  # (Operation, start ns, end ns) on the host's clock, since enable/reset
        self.dropped_operations = 0  # operations past max_events (kept as the device events are: up to max_events)

    def enable(self, max_events: int = 1_000_000) -> None:
        """Allocate buffers for ``max_events`` events on this rank's device and point the device context at them.

        Kernels record only when initialised with ``tracing=True``. Calling it again reallocates (and resets).

        Examples
        --------
        >>> ctx.tracing.enable(max_events=10_000)   # doctest: +SKIP
        """
        if max_events < 1:
            raise ValueError(f"rank {self.iris.cur_rank}: tracing.enable needs max_events >= 1, got {max_events}")
        device = self.iris.get_device()
        self.max_events = int(max_events)
        self.trace_buffers = {name: torch.zeros(self.max_events, dtype=dtype, device=device)
                              for name, dtype in BUFFERS}
        self.trace_counter = torch.zeros(1, dtype=torch.int32, device=device)
        self.op_index_counter = torch.zeros(1, dtype=torch.int32, device=device)
        self._point_context_at_buffers()
        self.clock_offset_ns, self.clock_offset_error_ns = self._tie_clock_to_host()
        self.operations, self.dropped_operations = [], 0
        operations.add_listener(self)  # held weakly: a context that is gone stops listening
        self.enabled = True
        self.iris.info(f"device tracing enabled, up to {self.max_events} events")

    def reset(self) -> None:
        """Start a new capture: zero the event and operation counters (the buffers stay).

        Examples
        --------
        >>> ctx.tracing.reset()   # doctest: +SKIP
        """
        self._require_enabled("reset")
        self.trace_counter.zero_()
        self.op_index_counter.zero_()
        self.operations, self.dropped_operations = [], 0

    def operation_finished(self, operation, start_ns: int, end_ns: int) -> None:
        """A named operation ended (:func:`iris.instruments.operations.add_listener`): kept for the trace."""
        if not self.enabled:
            return
        if len(self.operations) < self.max_events:
            self.operations.append((operation, start_ns, end_ns))
        else:
            self.dropped_operations += 1

    def recorded(self) -> int:
        """Events recorded so far, dropped ones included (what kernels counted)."""
        self._require_enabled("recorded")
        return int(self.trace_counter.item())

    def dropped(self) -> int:
        """Events not stored because the buffers were full (``recorded() - max_events`` when positive)."""
        return max(0, self.recorded() - self.max_events)

    def trace(self, unlabelled: dict[int, str] | None = None) -> dict:
        """This rank's events as :meth:`export` writes them, without writing a file.

        ``unlabelled`` names allocations without a ``name=`` label, by offset (the workbench passes the
        variables holding them): see :meth:`iris.heap.HeapLocation.named`.

        Examples
        --------
        >>> [e["name"] for e in ctx.tracing.trace()["traceEvents"]][:2]   # doctest: +SKIP
        ['put', 'atomic_add']
        """
        self._require_enabled("trace")
        recorded = self.recorded()
        stored = min(recorded, self.max_events)
        return {
            "traceEvents": self._trace_events(stored, unlabelled or {}),
            "displayTimeUnit": "ns",
            "metadata": {**self._metadata(), "rank": self.iris.cur_rank, "num_events": stored,
                         "dropped_events": max(0, recorded - self.max_events),
                         "dropped_operations": self.dropped_operations,
                         "clock_offset_ns": self.clock_offset_ns, "clock_offset_error_ns": self.clock_offset_error_ns},
        }

    def export(self, filename: str = "trace.json", merge: bool = False) -> dict:
        """Write this rank's events as Chrome trace / Perfetto JSON to ``<name>_rank<r>.json`` and return them.

        With ``merge=True`` (collective: every rank calls it) rank 0 also writes ``filename`` with every rank's
        events, timestamps aligned (see the module's note on alignment and :func:`merge_traces`), and returns
        that; the other ranks return ``{}``, as upstream's. Open the files at https://ui.perfetto.dev.

        ``ts`` and ``dur`` are microseconds, as the Chrome trace format defines them (to the nanosecond:
        three decimals), so Perfetto shows true durations; upstream writes raw clock values there. ``tid`` is
        the program id (a track per program, named by ``thread_name`` records), where upstream's is the
        compute unit: several programs run on one unit at once, and their events would overlap on one track
        without nesting, which Perfetto cannot draw; the unit stays in ``args["cu_id"]``. The merged trace
        also holds flow events (``ph`` ``"s"``/``"f"``) for the release -> acquire arrows of
        :class:`~iris.instruments.tracing.timeline.Timeline`, which Perfetto draws as arrows too. Each
        event's ``args`` also name what it touched: ``heap_offset`` and ``location`` (``flags[2]``, from the
        allocations' ``name=`` labels; see :meth:`iris.heap.SymmetricHeap.locate`).

        Examples
        --------
        >>> ctx.tracing.export("trace.json")["metadata"]["dropped_events"]   # doctest: +SKIP
        0
        """
        self._require_enabled("export")
        per_rank = self.trace()
        rank_file = _rank_filename(filename, self.iris.cur_rank)
        _write(rank_file, per_rank)
        self.iris.info(f"wrote {per_rank['metadata']['num_events']} trace events to {rank_file}")
        if not merge:
            return per_rank
        everyone = self.iris.group.all_gather_object(per_rank)
        if self.iris.cur_rank != 0:
            return {}
        merged = merge_traces(everyone)
        _write(filename, merged)
        self.iris.info(f"wrote {merged['metadata']['total_events']} merged trace events to {filename}")
        return merged

    # -- helpers ------------------------------------------------------------------------------------
    def _point_context_at_buffers(self) -> None:
        """Write max_events and the counters' and buffers' addresses into the device context's tracing slots."""
        slots = [0] * TRACING_SLOTS
        slots[SLOT_ENABLED], slots[SLOT_MAX_EVENTS] = 1, self.max_events
        slots[SLOT_COUNTER] = self.trace_counter.data_ptr()
        slots[SLOT_OP_INDEX_COUNTER] = self.op_index_counter.data_ptr()
        for index, (name, _) in enumerate(BUFFERS):
            slots[SLOT_FIRST_BUFFER + index] = self.trace_buffers[name].data_ptr()
        first = 2 + self.iris.num_ranks
        self.iris.get_device_context()[first:first + TRACING_SLOTS] = torch.tensor(slots, dtype=torch.int64)

    def _require_enabled(self, what: str) -> None:
        if not self.enabled:
            raise RuntimeError(f"rank {self.iris.cur_rank}: tracing.{what} before tracing.enable(); call "
                               "ctx.tracing.enable(max_events=...) first")

    def _metadata(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "world_size": self.iris.num_ranks, "max_events": self.max_events,
                "time_unit": "us (GPU: %globaltimer; CPU interpreter: host monotonic clock)",
                "backend": self.iris.backend}

    def _tie_clock_to_host(self) -> tuple[int, int]:
        """(offset, error) in ns such that host monotonic time = device clock + offset, within error."""
        if self.iris.backend == "cpu":
            return 0, 0  # the interpreter's device clock is the host's monotonic clock
        out = torch.zeros(1, dtype=torch.int64, device=self.iris.get_device())
        brackets = []
        for _ in range(CLOCK_PROBES):  # the first launch compiles; later ones give narrow brackets
            before = time.monotonic_ns()
            _read_device_clock[(1,)](out)
            device = int(out.item())  # .item() waits for the kernel
            after = time.monotonic_ns()
            brackets.append((after - before, (before + after) // 2 - device))
        width, offset = min(brackets)
        return offset, (width + 1) // 2

    def _trace_events(self, count: int, unlabelled: dict[int, str]) -> list[dict]:
        """This rank's first ``count`` events in upstream's JSON form (times in µs), then the names of the process
        (the rank) and of its tracks (the programs)."""
        rank = self.iris.cur_rank
        column = {name: buffer[:count].cpu().tolist() for name, buffer in self.trace_buffers.items()}
        locations = {}  # address -> HeapLocation; polling loops repeat a few addresses many times
        events = []
        for i in range(count):
            start, end, address = column["timestamp"][i], column["duration_cycles"][i], column["address"][i]
            if address not in locations:
                locations[address] = self.iris.heap.locate(address)
            where = locations[address]
            event = {
                "name": EVENT_NAMES.get(column["event_id"][i], f"unknown_{column['event_id'][i]}"),
                "cat": "iris", "ts": ns_to_us(start), "pid": column["cur_rank"][i], "tid": column["pid"][i],
                "args": {"program_id": column["pid"][i], "pid_m": column["pid_m"][i], "pid_n": column["pid_n"][i],
                         "target_rank": column["target_rank"][i], "address": hex(address),
                         "xcc_id": column["xcc_id"][i], "cu_id": column["cu_id"][i],
                         "op_index": column["op_index"][i], "payload_size": column["payload_size"][i],
                         "heap_offset": where.offset if where else None,
                         "location": where.named(unlabelled.get(where.allocation_offset)) if where else None},
            }
            event.update({"ph": "X", "dur": ns_to_us(end - start)} if end > 0 else {"ph": "i", "s": "t"})
            events.append(event)
        events += self._operation_events()
        events.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"Rank {rank}"}})
        events += [{"name": "thread_name", "ph": "M", "pid": rank, "tid": program,
                    "args": {"name": f"program {program}"}} for program in sorted(set(column["pid"]))]
        if self.operations:
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": OPERATIONS_TRACK,
                           "args": {"name": "operations"}})
        return events

    def _operation_events(self) -> list[dict]:
        """The named operations heard since enable/reset, as spans on this rank's operations track, their times on
        the device clock as the kernels' events are (host time minus the clock offset)."""
        rank = self.iris.cur_rank
        return [{"name": op.label, "cat": OPERATION_CATEGORY, "ph": "X", "ts": ns_to_us(start - self.clock_offset_ns),
                 "dur": ns_to_us(end - start), "pid": rank, "tid": OPERATIONS_TRACK,
                 "args": {"program_id": OPERATIONS_TRACK, "target_rank": rank, "payload_size": op.nbytes,
                          "operation": op.name, "about": op.about, "detail": op.detail, "ranks": list(op.ranks),
                          "root": op.root, "number": op.number}}
                for op, start, end in self.operations]


def ns_to_us(ns: int) -> float:
    """Nanoseconds as the Chrome trace format's microseconds, kept to the nanosecond."""
    return round(ns / 1000, 3)


def _rank_filename(filename: str, rank: int) -> str:
    """``trace.json`` -> ``trace_rank<r>.json`` (upstream's naming); a name without ``.json`` gets the suffix."""
    stem = filename[:-len(".json")] if filename.endswith(".json") else filename
    return f"{stem}_rank{rank}.json"


def merge_traces(per_rank: list[dict]) -> dict:
    """Every rank's trace (each as :meth:`Tracing.trace` returns it) on one timeline: each rank's events
    shifted onto the host's monotonic clock by its clock offset, then the earliest event at 0.

    ``metadata["timestamp_offset_ns"]`` is the host monotonic time of ``ts`` 0.

    Examples
    --------
    >>> merged = merge_traces(wb.apply(lambda: ctx.tracing.trace()))   # doctest: +SKIP
    """
    events = []
    for part in per_rank:
        shift = ns_to_us(part["metadata"]["clock_offset_ns"])
        for event in part["traceEvents"]:
            events.append(event if event["ph"] == "M" else {**event, "ts": event["ts"] + shift})
    timed = [e["ts"] for e in events if e["ph"] != "M"]
    origin = min(timed, default=0)
    for event in events:
        if event["ph"] != "M":
            event["ts"] = round(event["ts"] - origin, 3)
    first = per_rank[0]["metadata"]
    merged = {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "metadata": {key: first[key] for key in ("schema_version", "world_size", "max_events", "time_unit", "backend")}
        | {"total_events": len(timed), "timestamp_offset_ns": round(origin * 1000),
           "aligned": "device clocks tied to the host's monotonic clock at enable; earliest event at 0",
           "dropped_events": {p["metadata"]["rank"]: p["metadata"]["dropped_events"] for p in per_rank},
           "clock_offset_error_ns": max(p["metadata"]["clock_offset_error_ns"] for p in per_rank)},
    }
    merged["traceEvents"] += Timeline.from_trace(merged).flow_events()
    return merged


def _write(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
