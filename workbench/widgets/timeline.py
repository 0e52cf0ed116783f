"""TimelineView: when each rank did what, from its device trace: one lane per rank (or per program), bars
coloured by kind, arrows from a release to the access that saw it, zoom and hover details.

The chart is SVG built here (hover a bar for its details: an SVG ``<title>``), so the same picture is the
widget's and the static form's (:mod:`.static`); the per-rank table and the first arrows are printed below
it, and are the view's ``text/plain``. Named operations (the collectives of a training step on the ``iris``
torch.distributed backend, ``all_reduce · DDP bucket 0``) have a lane of their own above each rank's, their bars
labelled where they are wide enough, and a table of their own below. Bars narrower than a pixel that follow each
other in a lane are drawn as one bar that says how many events it stands for, so a trace of 100 000 events stays a
few hundred kilobytes.

Examples
--------
>>> view = TimelineView(Timeline.from_trace(merged))     # doctest: +SKIP
>>> view.zoom(10.0, 25.0)                                 # µs; also the slider under the chart
>>> view.lanes.value = "program"                          # one lane per program instead of per rank
"""

from __future__ import annotations

import html
import math
import uuid

import ipywidgets as widgets

from iris.base.sizes import format_size
from iris.base.tables import html_table
from iris.instruments.tracing.timeline import (
    KIND_ORDER,
    MAX_OPERATIONS_LISTED,
    OPERATION,
    OPERATIONS_TRACK,
    Span,
    Timeline,
    format_time,
)

from .static import StaticForm

COLOURS = {"read": "#4e79a7", "write": "#59a14f", "atomic": "#f28e2b", "compute": "#b07aa1", "wait": "#bab0ac",
           "fetch": "#76b7b2", "other": "#9c755f", OPERATION: "#edc948"}
ARROW_COLOUR = "#c0392b"
WIDTH, LABEL_WIDTH, RIGHT_MARGIN, ROW_HEIGHT, AXIS_HEIGHT = 920, 120, 36, 14, 26  # (the last tick's label fits)
MAX_ROWS_PER_RANK = 6  # overlapping events of one rank stack up to this many rows (the last one takes the rest)
PROGRAM_LANES_UP_TO = 8  # a lane per program by default when no rank has more programs than this
MAX_ARROWS_LISTED = 12


class TimelineView(StaticForm, widgets.VBox):
    """A :class:`~iris.tracing.timeline.Timeline` drawn per rank, with a zoom slider (µs), a choice of lanes
    (per rank or per program) and arrows on or off; below it, per rank, what the time went to.

    Parameters
    ----------
    timeline : iris.tracing.timeline.Timeline
    note : str
        A line under the header (e.g. that CPU timings are illustrative).

    Attributes
    ----------
    chart : ipywidgets.HTML
        The SVG for the current window and lanes.
    window : ipywidgets.FloatRangeSlider
        The time window shown, µs from the first event.
    lanes : ipywidgets.ToggleButtons
        ``"rank"`` or ``"program"``.
    """

    def __init__(self, timeline: Timeline, note: str = ""):
        self.timeline = timeline
        self.note = note
        self.marker_id = f"iris-arrow-{uuid.uuid4().hex[:8]}"  # SVG ids are page-global
        begin, end = timeline.start, max(timeline.end, timeline.start + 1e-3)
        self.header = widgets.HTML(self._header())
        self.window = widgets.FloatRangeSlider(value=(begin, end), min=begin, max=end, step=(end - begin) / 1000,
                                               description="µs", readout_format=".3f", continuous_update=False,
                                               layout=widgets.Layout(width=f"{WIDTH}px", max_width="100%"))
        few = all(len(timeline.programs(r)) <= PROGRAM_LANES_UP_TO for r in range(timeline.world_size))
        self.lanes = widgets.ToggleButtons(options=[("lane per rank", "rank"), ("lane per program", "program")],
                                           value="program" if few else "rank", style={"button_width": "150px"})
        self.show_arrows = widgets.Checkbox(value=True, description="release → acquire arrows", indent=False)
        self.chart = widgets.HTML()
        self.table = widgets.HTML(self._table())
        super().__init__([self.header, self.chart, self.window, widgets.HBox([self.lanes, self.show_arrows]),
                          self.table])
        self.add_class("iris-timeline")
        self.redraw()
        for control in (self.window, self.lanes, self.show_arrows):
            control.observe(lambda _: self.redraw(), "value")

    def summary(self) -> str:
        """The timeline as text: per rank, events, busy and waited time by kind; then the first arrows."""
        return self.timeline.text()

    def zoom(self, start: float, end: float) -> None:
        """Show µs ``start`` to ``end`` (clipped to the trace)."""
        self.window.value = (max(start, self.window.min), min(end, self.window.max))

    def redraw(self) -> None:
        """Draw the chart for the current window, lanes and arrows setting."""
        self.chart.value = timeline_svg(self.timeline, self.window.value, self.lanes.value, self.show_arrows.value,
                                        self.marker_id)

    def _header(self) -> str:
        t = self.timeline
        dropped = sum(t.dropped.values())
        lost = (f" · <b style='color:#c0392b'>{dropped} events dropped</b> (buffers full: enable with a larger "
                "max_events)" if dropped else "")
        note = f"<div style='font-size:12px;color:#555'>{html.escape(self.note)}</div>" if self.note else ""
        named = len(t.operations())
        events = len(t.spans) - named
        ops = f" · {named} named operations (host time: from the call to its return)" if named else ""
        if named and not events:  # a training step: the collectives ran, but their kernels record no events
            ops += ("; their kernels record no events (only kernels whose device context is initialised with "
                    "tracing=True do)")
        return (f"<b>timeline</b>: {events} events on {t.world_size} ranks over {format_time(t.end - t.start)} · "
                f"{len(t.arrows)} release → acquire arrows{ops}{lost}{note}{_legend()}")

    def _table(self) -> str:
        head = ["rank", "events", "programs", "first … last", "busy", "waited", *KIND_ORDER, "named operations"]
        rows = []
        for row in self.timeline.table():
            span = (f"{format_time(row['first'])} … {format_time(row['last'])}" if row["first"] is not None else "–")
            kinds = [f"{v['count']} · {format_time(v['time'])}" if v["count"] else "" for v in row["kinds"].values()]
            named = row["operations"]
            rows.append([str(row["rank"]), str(row["events"]), str(row["programs"]), span, format_time(row["busy"]),
                         format_time(row["waited"]), *kinds,
                         f"{named['count']} · {format_time(named['time'])}" if named["count"] else ""])
        arrows = "".join(f"<li>{html.escape(a.source.describe())} → seen by {html.escape(a.sink.describe())}"
                         f" after {format_time(a.waited)} of polling</li>"
                         for a in self.timeline.arrows[:MAX_ARROWS_LISTED])
        more = len(self.timeline.arrows) - MAX_ARROWS_LISTED
        arrows += f"<li>… {more} more</li>" if more > 0 else ""
        return (html_table(head, rows, css_class="iris-timeline-table")
                + "<small>per kind: events · summed µs; busy: time covered by any event; waited: polling that "
                "ended by seeing a release</small>" + (f"<ul style='font-size:12px'>{arrows}</ul>" if arrows else "")
                + _operations_table(self.timeline))


def _operations_table(timeline: Timeline) -> str:
    """The named operations (every rank's, by start), at most :data:`MAX_OPERATIONS_LISTED`: what the lanes' bars
    say, readable where the chart's tooltips are not."""
    named = timeline.operations()
    if not named:
        return ""
    rows = [[str(s.rank), html.escape(s.name), format_time(s.start), format_time(s.duration), format_size(s.payload),
             html.escape(s.detail)] for s in named[:MAX_OPERATIONS_LISTED]]
    more = len(named) - MAX_OPERATIONS_LISTED
    if more > 0:
        rows.append(["", f"… {more} more"])
    return html_table(["rank", "named operation", "at", "for", "per rank", "carries"], rows, align="rlrrrl",
                      wrap=(5,), caption="named operations", css_class="iris-timeline-operations")


def _legend() -> str:
    items = "".join(f"<span style='display:inline-block;width:10px;height:10px;background:{COLOURS[k]};"
                    f"margin:0 3px 0 10px'></span>{k}" for k in (*KIND_ORDER, OPERATION))
    return (f"<div style='font-size:12px'>{items}<span style='color:{ARROW_COLOUR};margin-left:12px'>→ release "
            "seen by an acquire</span></div>")


def _lanes(timeline: Timeline, spans: list[Span], mode: str) -> tuple[list[str], dict[int, int]]:
    """Lane labels, and each span's row (by ``id``): per program, or per rank with overlapping spans
    stacked into up to :data:`MAX_ROWS_PER_RANK` rows."""
    labels, row_of = [], {}
    for rank in range(timeline.world_size):
        mine = [s for s in spans if s.rank == rank]
        if mode == "program":
            for program in timeline.programs(rank):
                for s in mine:
                    if s.program == program:
                        row_of[id(s)] = len(labels)
                labels.append(f"rank {rank} · " + ("operations" if program == OPERATIONS_TRACK else f"pid {program}"))
            continue
        named = [s for s in mine if s.kind == OPERATION]
        if named:  # one lane of their own, above the rank's events: they follow each other, never overlap
            for s in named:
                row_of[id(s)] = len(labels)
            labels.append(f"rank {rank} · operations")
            mine = [s for s in mine if s.kind != OPERATION]
        ends: list[float] = []  # per stacked row, where its last span ends
        first = len(labels)
        for s in mine:
            row = next((i for i, end in enumerate(ends) if s.start >= end), None)
            if row is None:
                row = len(ends) if len(ends) < MAX_ROWS_PER_RANK else len(ends) - 1
                if row == len(ends):
                    ends.append(s.end)
            ends[row] = max(ends[row], s.end)
            row_of[id(s)] = first + row
        labels += [f"rank {rank}"] + [""] * (max(len(ends), 1) - 1)
    return labels, row_of


def _ticks(start: float, end: float) -> list[float]:
    """About six round tick values between ``start`` and ``end``."""
    raw = (end - start) / 6
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(start / step) * step
    return [first + i * step for i in range(int((end - first) / step) + 1)]


def timeline_svg(timeline: Timeline, window: tuple[float, float], mode: str = "rank", arrows: bool = True,
                 marker_id: str = "iris-arrow") -> str:
    """The chart of ``timeline`` between µs ``window`` as an SVG element.

    Examples
    --------
    >>> timeline_svg(Timeline.from_trace({"traceEvents": [], "metadata": {"world_size": 1}}), (0, 1))[:4]
    '<svg'
    """
    start, end = window
    end = max(end, start + 1e-3)
    visible = [s for s in timeline.spans if s.end >= start and s.start <= end]
    labels, row_of = _lanes(timeline, visible, mode)
    plot = WIDTH - LABEL_WIDTH - RIGHT_MARGIN
    height = AXIS_HEIGHT + ROW_HEIGHT * max(len(labels), 1) + 4

    def x(t: float) -> float:
        return LABEL_WIDTH + plot * (min(max(t, start), end) - start) / (end - start)

    def y(row: int) -> float:
        return AXIS_HEIGHT + ROW_HEIGHT * row

    # Drawn WIDTH wide, and scaled down (text too) where the column is narrower: the view never spills over.
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}' viewBox='0 0 {WIDTH} "
             f"{height}' style='max-width:100%;height:auto' font-size='10' font-family='sans-serif'>",
             f"<defs><marker id='{marker_id}' viewBox='0 0 8 8' refX='7' refY='4' markerWidth='6' markerHeight='6' "
             f"orient='auto'><path d='M0,0 L8,4 L0,8 z' fill='{ARROW_COLOUR}'/></marker></defs>"]
    for i, label in enumerate(labels):
        shade = "#f7f7f7" if i % 2 == 0 else "#ffffff"
        parts.append(f"<rect x='{LABEL_WIDTH}' y='{y(i)}' width='{plot}' height='{ROW_HEIGHT}' fill='{shade}'/>")
        if label:
            parts.append(f"<text x='4' y='{y(i) + ROW_HEIGHT - 3}'>{html.escape(label)}</text>")
            parts.append(f"<line x1='0' x2='{WIDTH}' y1='{y(i)}' y2='{y(i)}' stroke='#ccc' stroke-width='0.5'/>")
    for tick in _ticks(start, end):
        parts.append(f"<line x1='{x(tick):.1f}' x2='{x(tick):.1f}' y1='{AXIS_HEIGHT - 4}' y2='{height}' "
                     "stroke='#ddd' stroke-width='0.5'/>")
        parts.append(f"<text x='{x(tick):.1f}' y='{AXIS_HEIGHT - 8}' text-anchor='middle'>{format_time(tick)}</text>")
    for row, bar in _bars(visible, row_of, x):
        parts.append(bar_svg(bar, y(row), x))
    if arrows:
        for arrow in timeline.arrows:
            if id(arrow.source) in row_of and id(arrow.sink) in row_of:
                x1, y1 = x(arrow.source.end), y(row_of[id(arrow.source)]) + ROW_HEIGHT / 2
                x2, y2 = x(arrow.sink.end), y(row_of[id(arrow.sink)]) + ROW_HEIGHT / 2
                tip = html.escape(f"{arrow.source.describe()} → seen by {arrow.sink.describe()}")
                parts.append(f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' stroke='{ARROW_COLOUR}' "
                             f"stroke-width='1.2' marker-end='url(#{marker_id})'><title>{tip}</title></line>")
    if not timeline.spans:
        parts.append(f"<text x='{LABEL_WIDTH + 8}' y='{AXIS_HEIGHT + 11}'>no events: initialise the device context "
                     "with tracing=True in the kernels (DeviceContext.initialize(context, rank, world, tracing=True) "
                     "or IrisDeviceCtx.initialize(context, tracing=True))</text>")
    parts.append("</svg>")
    return "".join(parts)


def _bars(spans: list[Span], row_of: dict[int, int], x) -> list[tuple[int, list[Span]]]:
    """Per row, runs of spans of one name that are less than a pixel apart, drawn as one bar each."""
    rows: dict[int, list[list[Span]]] = {}
    for s in sorted(spans, key=lambda s: s.start):
        row = row_of[id(s)]
        runs = rows.setdefault(row, [])
        last = runs[-1] if runs else None
        if last and last[-1].name == s.name and x(s.start) - x(max(e.end for e in last)) < 1.0 and \
                x(s.end) - x(last[0].start) < 3.0:
            last.append(s)
        else:
            runs.append([s])
    return [(row, run) for row, runs in rows.items() for run in runs]


def bar_svg(run: list[Span], top: float, x) -> str:
    """One bar (an SVG rect, at least a pixel wide) for a run of spans, with its details as a tooltip;
    ``x`` maps µs to pixels."""
    first = run[0]
    begin, finish = first.start, max(s.end for s in run)
    left, right = x(begin), x(finish)
    if len(run) == 1:
        tip = first.describe()
    else:
        places = sorted({s.location for s in run if s.location})
        tip = (f"{len(run)} × {first.name} on rank {first.rank} program {first.program}, at {format_time(begin)} for "
               f"{format_time(finish - begin)}"
               + (f", {', '.join(places[:4])}{' …' if len(places) > 4 else ''}" if places else ""))
    bar = (f"<rect x='{left:.1f}' y='{top + 2}' width='{max(right - left, 1.0):.1f}' height='{ROW_HEIGHT - 4}' "
           f"fill='{COLOURS[first.kind]}'><title>{html.escape(tip)}</title></rect>")
    fits = int((right - left - 4) / 5.5)  # characters of 10 px sans-serif that fit in the bar
    if first.kind == OPERATION and len(run) == 1 and fits >= 4:  # a named operation says its name where it can
        name = first.name if len(first.name) <= fits else first.name[:fits - 1] + "…"
        bar += (f"<text x='{left + 2:.1f}' y='{top + ROW_HEIGHT - 4}' font-size='9'>{html.escape(name)}"
                f"<title>{html.escape(tip)}</title></text>")
    return bar
