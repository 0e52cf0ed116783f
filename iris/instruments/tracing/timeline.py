"""A merged trace read as a timeline: spans per rank and program, and the arrows of synchronisation.

:meth:`Timeline.from_trace` takes what ``ctx.tracing.export(..., merge=True)`` writes (or
:func:`~iris.instruments.tracing.host.merge_traces` returns) and gives:

* :class:`Span`: one event, with its kind (:data:`KINDS`), rank, program, times in µs, target rank, the
  location it touched (``flags[2]``) and its payload;
* :class:`Arrow`: a release seen by an acquire. The trace records neither memory orders nor values, so the
  arrow is inferred from what the trace does record: an atomic that writes a location (any atomic but a
  compare-and-swap, which polling loops use) is linked to the access of that location by a program that
  ended a run of such accesses (a polling loop exits when it sees the value) after the write began, the
  latest such write by another program being the source (a program's own write, such as its arrival at a
  barrier before it polls, is not what it waited for; the trace does not tell launches apart, so the same
  program id of an earlier kernel on that rank counts as the same program). One arrow per writer and
  reading program. On GPUs the ranks' clocks agree to within ``clock_offset_error_ns`` (microseconds): the
  rule allows for it.
* :meth:`Timeline.table`: per rank, how many events and how long of each kind, and the time waited on
  locations (the runs above), as rows for a report;
* named operations (:mod:`iris.instruments.operations`: the collectives of a training step on the ``iris``
  torch.distributed backend, ``all_reduce · DDP bucket 0``): spans of kind ``"operation"`` on a track of their own
  per rank (program :data:`OPERATIONS_TRACK`), host time from the call to its return; :meth:`Timeline.operations`
  lists them. They are not events of a kernel: the table counts them apart.

The workbench draws it (``%iris timeline``); from a script, ``print(Timeline.from_trace(t).text())``.

Examples
--------
>>> trace = {"traceEvents": [
...     {"name": "atomic_xchg", "ph": "X", "ts": 1.0, "dur": 0.5, "pid": 0,
...      "args": {"program_id": 0, "target_rank": 1, "heap_offset": 256, "location": "flag[0]", "payload_size": 4}},
...     {"name": "atomic_cas", "ph": "X", "ts": 0.2, "dur": 0.1, "pid": 1,
...      "args": {"program_id": 0, "target_rank": 1, "heap_offset": 256, "location": "flag[0]", "payload_size": 4}},
...     {"name": "atomic_cas", "ph": "X", "ts": 1.7, "dur": 0.1, "pid": 1,
...      "args": {"program_id": 0, "target_rank": 1, "heap_offset": 256, "location": "flag[0]", "payload_size": 4}}],
...     "metadata": {"world_size": 2}}
>>> [(a.source.rank, a.sink.rank, a.sink.start) for a in Timeline.from_trace(trace).arrows]
[(0, 1, 1.7)]
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

# What each event name is, for colours and totals: data read from / written to a heap, atomics, and a
# kernel's own phases (upstream's ids: compute, waiting, fetching).
KINDS = {
    "load": "read", "get": "read",
    "store": "write", "put": "write", "copy": "write",
    "compute": "compute", "reduce": "compute", "wg_gemm": "compute",
    "wait": "wait", "wg_gemm_wait": "wait", "barrier": "wait",
    "fetch": "fetch", "wg_fetch": "fetch", "wg_sdma": "fetch",
}
KIND_ORDER = ("read", "write", "atomic", "compute", "wait", "fetch", "other")
OPERATION = "operation"  # the kind of a named operation's span
OPERATION_CATEGORY = "iris.operation"  # the trace's "cat" of a named operation's span
OPERATIONS_TRACK = -1  # the program id (trace "tid") of a rank's named operations: a track above its programs
MAX_OPERATIONS_LISTED = 40  # named operations a text lists, of every rank
# Atomics that (may) write the location: releases. A compare-and-swap is how polling loops read a flag.
WRITING_ATOMICS = frozenset(f"atomic_{op}" for op in ("add", "sub", "xchg", "xor", "and", "or", "min", "max"))


def format_time(us: float) -> str:
    """µs in the unit that reads best: ``850 ns``, ``12.3 µs``, ``4.56 ms``, ``1.20 s``.

    Examples
    --------
    >>> [format_time(t) for t in (0.85, 12.3456, 4561.0, 1.2e6)]
    ['850 ns', '12.35 µs', '4.561 ms', '1.200 s']
    """
    magnitude = abs(us)
    if magnitude < 1:
        return f"{us * 1000:.0f} ns"
    if magnitude < 1000:
        return f"{us:.2f} µs"
    if magnitude < 1e6:
        return f"{us / 1000:.3f} ms"
    return f"{us / 1e6:.3f} s"


def kind_of(name: str) -> str:
    """The kind of an event name: ``"atomic"`` for every ``atomic_*``, else :data:`KINDS`'s, else ``"other"``."""
    return "atomic" if name.startswith("atomic_") else KINDS.get(name, "other")


@dataclass(frozen=True)
class Span:
    """One event of the trace; ``end == start`` for an instant (an event whose end was never recorded)."""

    rank: int
    program: int
    name: str
    start: float  # µs on the merged timeline
    end: float
    target_rank: int
    location: str | None  # e.g. "flags[2]"; None when the address is in no heap
    heap_offset: int | None
    payload: int  # bytes
    op_index: int = 0
    category: str = ""  # the trace's "cat": OPERATION_CATEGORY for a named operation
    detail: str = ""  # what a named operation carries (a bucket's parameters)

    @property
    def kind(self) -> str:
        return OPERATION if self.category == OPERATION_CATEGORY else kind_of(self.name)

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def lane(self) -> tuple[int, int]:
        return self.rank, self.program

    def describe(self) -> str:
        """One line for a tooltip or a table: what, where, by whom, when."""
        if self.kind == OPERATION:
            detail = f" ({self.detail})" if self.detail else ""
            return (f"rank {self.rank}: {self.name}{detail}, {self.payload} B per rank, at {format_time(self.start)} "
                    f"for {format_time(self.duration)}")
        where = f" {self.location}" if self.location else ""
        target = f" on rank {self.target_rank}" if self.target_rank != self.rank or self.kind != "compute" else ""
        size = f", {self.payload} B" if self.payload else ""
        return (f"rank {self.rank} program {self.program}: {self.name}{where}{target}{size}, at "
                f"{format_time(self.start)} for {format_time(self.duration)}")


@dataclass(frozen=True)
class Arrow:
    """A write (a release) and the access of another program that saw it (the end of its polling loop)."""

    source: Span
    sink: Span
    waited: float  # µs the reading program spent in its run of accesses before it saw the write


@dataclass
class Timeline:
    """Spans and arrows of a merged trace. Build it with :meth:`from_trace`.

    Attributes
    ----------
    spans : list of Span
        Sorted by start time.
    arrows : list of Arrow
    world_size : int
    dropped : dict of int to int
        Events each rank could not store (its buffers were full).
    """

    spans: list[Span]
    arrows: list[Arrow]
    world_size: int
    dropped: dict[int, int] = field(default_factory=dict)
    backend: str = ""

    @classmethod
    def from_trace(cls, trace: dict) -> Timeline:
        """Read a merged trace (``traceEvents`` with ``ts``/``dur`` in µs, ``pid`` = rank).

        Examples
        --------
        >>> Timeline.from_trace({"traceEvents": [], "metadata": {"world_size": 2}}).spans
        []
        """
        spans = []
        for e in trace["traceEvents"]:
            if e.get("ph") not in ("X", "i"):
                continue
            args = e.get("args", {})
            spans.append(Span(rank=int(e["pid"]), program=int(args.get("program_id", 0)), name=e["name"],
                              start=float(e["ts"]), end=float(e["ts"]) + float(e.get("dur", 0.0)),
                              target_rank=int(args.get("target_rank", e["pid"])), location=args.get("location"),
                              heap_offset=args.get("heap_offset"), payload=int(args.get("payload_size", 0)),
                              op_index=int(args.get("op_index", 0)), category=e.get("cat", ""),
                              detail=args.get("detail", "")))
        spans.sort(key=lambda s: (s.start, s.rank, s.program, s.op_index))
        metadata = trace.get("metadata", {})
        world = int(metadata.get("world_size", 1 + max((s.rank for s in spans), default=0)))
        dropped = {int(rank): int(n) for rank, n in metadata.get("dropped_events", {}).items()}
        tolerance = metadata.get("clock_offset_error_ns", 0) / 1000
        return cls(spans, _arrows(spans, tolerance), world, dropped, metadata.get("backend", ""))

    @property
    def start(self) -> float:
        return min((s.start for s in self.spans), default=0.0)

    @property
    def end(self) -> float:
        return max((s.end for s in self.spans), default=0.0)

    def programs(self, rank: int) -> list[int]:
        """The program ids that recorded events on ``rank``, sorted."""
        return sorted({s.program for s in self.spans if s.rank == rank})

    def operations(self, rank: int | None = None) -> list[Span]:
        """The named operations' spans (of ``rank``, or of every rank), by start time.

        Examples
        --------
        >>> [s.name for s in Timeline.from_trace(merged).operations(rank=0)]     # doctest: +SKIP
        ['broadcast', 'all_reduce · DDP bucket 0', 'all_reduce · DDP bucket 1']
        """
        return [s for s in self.spans if s.kind == OPERATION and (rank is None or s.rank == rank)]

    def table(self) -> list[dict]:
        """Per rank: ``events``, ``programs``, ``first``/``last`` (µs), ``busy`` (µs covered by any event),
        per kind its ``count`` and ``time`` (summed µs), ``waited`` (µs in runs ended by an arrow), ``dropped``, and
        ``operations`` (the named operations' count and summed µs, apart: they are not kernels' events)."""
        rows = []
        waited = defaultdict(float)
        for arrow in self.arrows:
            waited[arrow.sink.rank] += arrow.waited
        for rank in range(self.world_size):
            named = self.operations(rank)
            mine = [s for s in self.spans if s.rank == rank and s.kind != OPERATION]
            kinds = {kind: {"count": 0, "time": 0.0} for kind in KIND_ORDER}
            for s in mine:
                kinds[s.kind]["count"] += 1
                kinds[s.kind]["time"] += s.duration
            rows.append({"rank": rank, "events": len(mine), "programs": len({s.program for s in mine}),
                         "first": min((s.start for s in mine), default=None),
                         "last": max((s.end for s in mine), default=None), "busy": _covered(mine),
                         "kinds": kinds, "waited": waited[rank], "dropped": self.dropped.get(rank, 0),
                         "operations": {"count": len(named), "time": sum(s.duration for s in named)}})
        return rows

    def flow_events(self) -> list[dict]:
        """The arrows as Chrome trace flow events (``ph`` ``"s"`` then ``"f"``, bound to the enclosing slices
        of the source's and the sink's tracks), so Perfetto draws them as the timeline does.

        Examples
        --------
        >>> [e["ph"] for e in Timeline.from_trace(trace).flow_events()]      # doctest: +SKIP
        ['s', 'f']
        """
        events = []
        for number, arrow in enumerate(self.arrows):
            for phase, span in (("s", arrow.source), ("f", arrow.sink)):
                # Inside the slice (its middle), so that the flow binds to it whatever the rounding of ts.
                event = {"name": "release -> acquire", "cat": "iris.sync", "ph": phase, "id": number,
                         "pid": span.rank, "tid": span.program, "ts": round((span.start + span.end) / 2, 3)}
                events.append(event | ({"bp": "e"} if phase == "f" else {}))
        return events

    def text(self) -> str:
        """:meth:`table` as plain text, one line per rank, then the arrows (at most 20)."""
        named = len(self.operations())
        ops = f" and {named} named operations" if named else ""
        lines = [f"timeline of {len(self.spans) - named} events{ops} on {self.world_size} ranks over "
                 f"{format_time(self.end - self.start)}, {len(self.arrows)} release -> acquire arrows"]
        for row in self.table():
            kinds = ", ".join(f"{k} {v['count']} ({format_time(v['time'])})" for k, v in row["kinds"].items()
                              if v["count"])
            dropped = f", {row['dropped']} dropped" if row["dropped"] else ""
            named = row["operations"]
            ops = f"; {named['count']} named operations ({format_time(named['time'])})" if named["count"] else ""
            lines.append(f"rank {row['rank']}: {row['events']} events in {row['programs']} programs, busy "
                         f"{format_time(row['busy'])}, waited {format_time(row['waited'])}; "
                         f"{kinds or 'no events'}{dropped}{ops}")
        for span in self.operations()[:MAX_OPERATIONS_LISTED]:
            lines.append(f"  {span.describe()}")
        if len(self.operations()) > MAX_OPERATIONS_LISTED:
            lines.append(f"  ... {len(self.operations()) - MAX_OPERATIONS_LISTED} more named operations")
        for arrow in self.arrows[:20]:
            lines.append(f"  {arrow.source.describe()}  ->  seen by {arrow.sink.describe()} after "
                         f"{format_time(arrow.waited)} of polling")
        if len(self.arrows) > 20:
            lines.append(f"  ... {len(self.arrows) - 20} more arrows")
        return "\n".join(lines)


def _covered(spans: list[Span]) -> float:
    """µs covered by the union of the spans (overlapping programs count once)."""
    total, reach = 0.0, None
    for s in sorted(spans, key=lambda s: s.start):
        if reach is None or s.start > reach:
            total += s.end - s.start
            reach = s.end
        elif s.end > reach:
            total += s.end - reach
            reach = s.end
    return total


def _location_key(span: Span):
    # Whose copy and where: the heap offset is the same on every rank, the target rank tells the copies apart.
    return (span.target_rank, span.heap_offset) if span.heap_offset is not None else None


def _arrows(spans: list[Span], tolerance: float = 0.0) -> list[Arrow]:
    """Release -> acquire arrows (see the module's docstring for the rule); ``tolerance``: µs by which the
    ranks' clocks may disagree."""
    writers = defaultdict(list)  # location -> writing atomics, by start time
    for s in spans:
        if s.name in WRITING_ATOMICS and _location_key(s) is not None:
            writers[_location_key(s)].append(s)
    if not writers:
        return []
    starts = {key: [w.start for w in ws] for key, ws in writers.items()}
    by_lane = defaultdict(list)
    for s in spans:
        by_lane[s.lane].append(s)
    arrows, linked = [], set()
    for lane, events in by_lane.items():
        for run in _runs(events):
            key = _location_key(run[0])
            sink = run[-1]
            if key not in writers:
                continue
            candidates = writers[key]
            # Writes begun by the time the sink ended (give or take how well the ranks' clocks are aligned) ...
            i = bisect.bisect_right(starts[key], sink.end + tolerance)
            while i > 0 and candidates[i - 1].lane == lane:  # ... but not its own program's (a barrier's arrival)
                i -= 1
            if i == 0:
                continue
            source = candidates[i - 1]
            if (id(source), lane) in linked:  # a later run of the same program saw nothing new
                continue
            linked.add((id(source), lane))
            arrows.append(Arrow(source, sink, waited=sink.end - run[0].start))
    arrows.sort(key=lambda a: a.sink.end)
    return arrows


def _runs(events: list[Span]) -> list[list[Span]]:
    """One program's events split into runs of consecutive accesses to one heap location."""
    runs: list[list[Span]] = []
    for s in events:
        key = _location_key(s)
        if runs and key is not None and _location_key(runs[-1][-1]) == key:
            runs[-1].append(s)
        else:
            runs.append([s])
    return [run for run in runs if _location_key(run[0]) is not None]
