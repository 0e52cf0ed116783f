"""The timeline (``%%iris_kernel --trace``, ``%iris timeline``, ``workbench.timeline()``), built from real traces
of a real 3-rank CPU cluster in a real IPython shell: lanes, bars, release -> acquire arrows (and none where
nothing was released), locations named after variables, zoom, the static form and the text, overflow, and
what a user is told when the trace is missing or empty.
"""

from __future__ import annotations

import json
import re

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import workbench
from iris.instruments.tracing.timeline import Timeline
from workbench.report import RankError
from workbench.widgets.timeline import TimelineView, timeline_svg

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_heap_files_left_behind")]

WORLD = 3
# Each rank "computes" a tile, puts it into its right neighbour's inbox, then raises the neighbour's flag with
# a release; each rank polls its own flag with an acquire and reads its inbox. POLL_ONLY polls with
# compare-and-swap and releases nothing (no arrow may appear); STORE_FLAG raises the flag with a plain store.
RING = """
@triton.jit
def ring(context, tile, inbox, ready, rank: tl.constexpr, world: tl.constexpr, MODE: tl.constexpr,
         N: tl.constexpr):
    dctx = DeviceContext.initialize(context, rank, world, tracing=True)
    right = (rank + 1) % world
    offs = tl.arange(0, N)
    phase = dctx.tracing.record_event_start(TraceEvent().compute, rank, tile + offs, 0, 0)
    x = tl.load(tile + offs) + rank
    dctx.tracing.record_event_end(phase)
    dctx.put(tile + offs, inbox + offs, right)
    if MODE == 0:
        dctx.atomic_xchg(ready, 1, right, sem="release", scope="sys")
        while dctx.atomic_cas(ready, 1, 1, rank, sem="acquire", scope="sys") != 1:
            pass
    elif MODE == 1:
        dctx.atomic_cas(ready, 0, 0, right, sem="acquire", scope="sys")
    else:
        dctx.store(ready, 1, right)
    y = dctx.load(inbox + offs, rank)

tile = ctx.full((16,), float(rank), name="tile")
inbox = ctx.zeros(16)                                   # no label: its variable names it, inbox[0]
ready = ctx.zeros(1, dtype=torch.int32, name="flag")  # a label names it: flag[0]
ctx.barrier()
ring[(1,)](ctx.get_device_context(), tile, inbox, ready, rank, world_size, MODE={mode}, N=16)
ctx.barrier()
"""


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "workbench")
    ip.run_line_magic("iris", f"start -n {WORLD} --backend cpu --heap 16MiB --timeout 120")
    yield ip
    workbench.current().stop()


@pytest.fixture
def displayed(monkeypatch):
    shown = []
    monkeypatch.setattr("workbench.magics.display", shown.append)
    return shown


def traced_cell(shell, displayed, body: str, line: str = "") -> TimelineView:
    displayed.clear()
    result = shell.run_cell(f"%%iris_kernel --trace {line}\n{body}", store_history=False)
    assert result.error_in_exec is None, result.error_in_exec
    views = [d for d in displayed if isinstance(d, TimelineView)]
    assert len(views) == 1, displayed
    return views[0]


def test_a_missing_trace_says_how_to_make_one(shell):
    with pytest.raises(RankError, match=r"ranks 0, 1, 2: tracing is not enabled: run a cell with %%iris_kernel "
                                        r"--trace"):
        workbench.timeline()
    with pytest.raises(UsageError, match="--max-events sizes the trace buffers of --trace: add --trace"):
        shell.run_cell_magic("iris_kernel", "--max-events 10", "pass")


def test_traced_cell_shows_every_rank_and_the_release_each_neighbour_saw(shell, displayed):
    view = traced_cell(shell, displayed, RING.format(mode=0))
    timeline = view.timeline
    assert timeline.world_size == WORLD and {s.rank for s in timeline.spans} == set(range(WORLD))
    for rank in range(WORLD):
        names = [s.name for s in timeline.spans if s.rank == rank]
        assert names[:3] == ["compute", "put", "atomic_xchg"] and names[-1] == "load", names
        assert set(names[3:-1]) == {"atomic_cas"}, names  # the polling loop
    put = next(s for s in timeline.spans if s.name == "put" and s.rank == 1)
    assert (put.target_rank, put.location, put.payload) == (2, "inbox[0]", 64)
    arrows = sorted((a.source.rank, a.sink.rank, a.source.name, a.sink.name, a.sink.location)
                    for a in timeline.arrows)
    assert arrows == [(r, (r + 1) % WORLD, "atomic_xchg", "atomic_cas", "flag[0]") for r in range(WORLD)]
    for arrow in timeline.arrows:  # the poll that saw the release is the last one of its loop
        polls = [s for s in timeline.spans if s.rank == arrow.sink.rank and s.name == "atomic_cas"]
        assert arrow.sink is polls[-1] and arrow.sink.end >= arrow.source.start
    # Lanes per program (one program per rank here), one labelled lane each, every arrow drawn.
    assert view.lanes.value == "program"
    svg = view.chart.value
    assert [f"rank {r} · pid 0" in svg for r in range(WORLD)] == [True] * WORLD
    assert svg.count(f"marker-end='url(#{view.marker_id})'") == WORLD
    # The static form (nbconvert, GitHub) holds the same SVG and the per-rank table; text/plain says it in words.
    bundle = view._repr_mimebundle_()
    assert svg in bundle["text/html"] and "iris-timeline-table" in bundle["text/html"]
    text = bundle["text/plain"]
    assert text.startswith(f"timeline of {len(timeline.spans)} events on {WORLD} ranks")
    assert all(re.search(rf"^rank {r}: \d+ events in 1 programs", text, re.M) for r in range(WORLD))
    assert "atomic_xchg flag[0] on rank 1" in text and "seen by rank 1 program 0: atomic_cas flag[0]" in text
    assert "illustrative" in bundle["text/html"]  # the CPU note


def test_zoom_lanes_and_the_saved_trace(shell, displayed, tmp_path):
    view = traced_cell(shell, displayed, RING.format(mode=0))
    whole = view.chart.value.count("<rect")
    first = min(view.timeline.spans, key=lambda s: s.start)
    view.zoom(first.start, first.end)
    assert view.chart.value.count("<rect") < whole
    view.lanes.value = "rank"
    assert "rank 0 · pid" not in view.chart.value and "rank 2</text>" in view.chart.value
    view.show_arrows.value = False
    assert "marker-end" not in view.chart.value
    path = tmp_path / "ring.json"
    shell.run_line_magic("iris", f"timeline --save {path}")
    saved = json.loads(path.read_text())
    timed = [e for e in saved["traceEvents"] if e["ph"] in ("X", "i")]
    assert len(timed) == len(view.timeline.spans) and min(e["ts"] for e in timed) == 0
    assert {e["args"]["location"] for e in timed if e["name"] == "put"} == {"inbox[0]"}
    assert Timeline.from_trace(saved).text() == view.timeline.text()  # what a script gets from the file
    flows = [e for e in saved["traceEvents"] if e["ph"] in ("s", "f")]  # Perfetto draws the arrows too
    assert sorted(e["ph"] for e in flows) == ["f"] * WORLD + ["s"] * WORLD
    for e in flows:  # each inside a slice of its own track, so that Perfetto binds it
        assert any(t["pid"] == e["pid"] and t["tid"] == e["tid"] and t["ts"] <= e["ts"] <= t["ts"] + t["dur"]
                   for t in timed), e


def test_polls_and_plain_stores_draw_no_arrow(shell, displayed):
    for mode in (1, 2):  # compare-and-swap polls only; a flag raised by a plain store (no release)
        view = traced_cell(shell, displayed, RING.format(mode=mode))
        assert view.timeline.arrows == [], mode
        assert "marker-end" not in view.chart.value


def test_untraced_kernels_give_an_empty_timeline_that_says_why(shell, displayed):
    view = traced_cell(shell, displayed, "x = ctx.zeros(4)\nctx.barrier()")
    assert view.timeline.spans == []
    assert "initialise the device context with tracing=True" in view.chart.value


def test_overflow_is_reported(shell, displayed):
    many = """
@triton.jit
def hammer(context, counters, rank: tl.constexpr, world: tl.constexpr, STEPS: tl.constexpr):
    dctx = DeviceContext.initialize(context, rank, world, tracing=True)
    for i in range(STEPS):
        dctx.atomic_add(counters + tl.program_id(0), 1, (rank + 1) % world, sem="relaxed")

counters = ctx.zeros(4, dtype=torch.int32, name="counters")
ctx.barrier()
hammer[(4,)](ctx.get_device_context(), counters, rank, world_size, STEPS=25)
ctx.barrier()
"""
    view = traced_cell(shell, displayed, many, "--max-events 60")
    assert view.timeline.dropped == {r: 4 * 25 - 60 for r in range(WORLD)}
    assert len(view.timeline.spans) == WORLD * 60
    assert "120 events dropped" in view.header.value and "rank 2: 60 events in 3 programs" in view.summary()
    assert view.summary().count(", 40 dropped") == WORLD
    assert workbench.current().pull("ctx.tracing.max_events") == [60] * WORLD  # --max-events sizes the buffers


def test_many_events_stay_a_small_picture():
    """Bars narrower than a pixel that follow each other in a lane merge into one bar that says how many."""
    events = [{"name": "atomic_add", "ph": "X", "ts": i * 0.01, "dur": 0.005, "pid": i % 2,
               "args": {"program_id": 0, "target_rank": 1 - i % 2, "heap_offset": 0, "location": "c[0]",
                        "payload_size": 4}} for i in range(20_000)]
    timeline = Timeline.from_trace({"traceEvents": events, "metadata": {"world_size": 2}})
    svg = timeline_svg(timeline, (timeline.start, timeline.end), "rank")
    assert svg.count("<rect") < 2_000 and len(svg) < 500_000
    assert re.search(r"\d+ × atomic_add on rank 0 program 0", svg)
    assert timeline_svg(timeline, (0, 1e-3)).startswith("<svg")  # a window holding (almost) nothing still draws


def _event(name, ts, rank, program, target=0, dur=0.5):
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": rank,
            "args": {"program_id": program, "target_rank": target, "heap_offset": 256, "location": "flags[0]",
                     "payload_size": 4}}


def test_arrow_rule_on_its_edge_cases():
    def arrows(events, **metadata):
        timeline = Timeline.from_trace({"traceEvents": events, "metadata": {"world_size": 2, **metadata}})
        return [(a.source.start, a.sink.start) for a in timeline.arrows]

    # A release polled by another program of the same rank: an arrow; by the same program id (the trace does
    # not tell launches apart), none.
    assert arrows([_event("atomic_add", 1, 0, 0), _event("atomic_cas", 5, 0, 1)]) == [(1, 5)]
    assert arrows([_event("atomic_add", 1, 0, 0), _event("atomic_cas", 5, 0, 0)]) == []
    # A barrier's arrival (add, then polls of the same counter): the sink's own add is not its source, the
    # peer's is; and the peer's polls saw this rank's add.
    barrier = [_event("atomic_add", 1, 0, 0), _event("atomic_cas", 2, 0, 0), _event("atomic_cas", 4, 0, 0),
               _event("atomic_add", 3, 1, 0), _event("atomic_cas", 3.6, 1, 0)]
    assert sorted(arrows(barrier)) == [(1, 3.6), (3, 4)]
    # A write that began after the poll ended saw nothing, unless the clocks may disagree by that much.
    late = [_event("atomic_cas", 1, 1, 0), _event("atomic_xchg", 1.6, 0, 0)]
    assert arrows(late) == [] and arrows(late, clock_offset_error_ns=200) == [(1.6, 1)]
    # Reads by the writer's own run, compare-and-swap "writers" and plain stores draw nothing.
    assert arrows([_event("atomic_cas", 1, 0, 0), _event("atomic_cas", 2, 1, 0), _event("store", 3, 0, 0),
                   _event("load", 4, 1, 0)]) == []
