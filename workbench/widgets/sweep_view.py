"""SweepView: what :func:`iris.perf.sweep` measured, drawn: a header, a table (per size: what ``ctx.ccl`` ran and
what chose it, its time and bus bandwidth against the peer link's ceiling, torch.distributed's time beside it) and
two panels, time against size and bus bandwidth against size with the link's ceiling. All in the static form too.

Examples
--------
>>> view = workbench.sweep("all_reduce")                           # doctest: +SKIP
>>> view.report.points[0].source                                   # doctest: +SKIP
'the H200 SXM table (2 ranks, its 8 KiB row)'
"""

from __future__ import annotations

import html
import io

import ipywidgets as widgets
from matplotlib.figure import Figure

from iris.base.tables import html_table
from iris.perf.sweep import format_cell

from .roofline_view import COLOURS, DPI
from .static import StaticForm


class SweepView(StaticForm, widgets.VBox):
    """A :class:`iris.perf.SweepReport` as a header, a table and a picture.

    Examples
    --------
    >>> SweepView(report).summary().splitlines()[0]                # doctest: +SKIP
    'all_reduce, bfloat16, 2 ranks (NVIDIA H200), CUDA-graph replays, slowest rank; ...'
    """

    def __init__(self, report):
        self.report = report
        # 945 pixels wide: scaled down where the column is narrower (the static form too), never cut off
        picture = widgets.Image(value=draw(report), format="png", layout=widgets.Layout(max_width="100%"))
        picture.alt = alt_text(report)
        super().__init__([widgets.HTML(f"<b>sweep</b>: {html.escape(report.headline())}"),
                          widgets.HTML(table(report)), picture])
        self.add_class("iris-sweep-view")

    def summary(self) -> str:
        """The report as text: the headline and one line per size."""
        return str(self.report)


def table(report) -> str:
    """The report's rows as an HTML table: figures right, words left; what ran and what chose it may wrap."""
    rows = report.rows()
    heads = list(rows[0]) if rows else []
    align = "".join("r" if isinstance(rows[0][h], float) else "l" for h in heads)
    wrap = tuple(i for i, h in enumerate(heads) if h in ("ran", "chosen by"))
    cells = [[html.escape(format_cell(h, row[h])) for h in heads] for row in rows]
    return html_table([html.escape(h) for h in heads], cells, align=align, wrap=wrap, css_class="iris-sweep-table")


def alt_text(report) -> str:
    return "; ".join(f"{row['size']}: iris {row['iris µs']:.1f} µs" for row in report.rows())


def draw(report) -> bytes:
    """PNG: µs per call against size (iris and each peer), and iris's bus GB/s against size beside the link's
    ceiling (where the GPU's spec sheet is known)."""
    sizes = [point.nbytes for point in report.points]
    figure = Figure(figsize=(10.5, 3.6), dpi=DPI)
    times = figure.add_axes((0.07, 0.15, 0.38, 0.72))
    times.plot(sizes, [p.us for p in report.points], "o-", color=COLOURS[0], label="iris")
    for point, x in zip(report.points, sizes, strict=True):
        times.annotate(point.ran.get("variant", ""), (x, point.us), fontsize=7, xytext=(2, 4),
                       textcoords="offset points")
    peers = sorted({peer for point in report.points for peer in point.peers_us})
    for i, peer in enumerate(peers, start=1):
        times.plot(sizes, [p.peers_us.get(peer) for p in report.points], "s--", color=COLOURS[i], label=peer)
    times.set(xscale="log", yscale="log", xlabel="bytes per call", ylabel="µs per call (slowest rank)",
              title=f"{report.collective} on {report.world} ranks")
    times.legend(fontsize=8)
    bandwidth = figure.add_axes((0.57, 0.15, 0.38, 0.72))
    bandwidth.plot(sizes, [report.bus_gbs(p.us, p.nbytes) for p in report.points], "o-", color=COLOURS[0],
                   label="iris bus GB/s")
    if report.link_gbs:
        bandwidth.axhline(report.link_gbs, color="grey", linestyle="--", label=f"{report.link} (spec)")
    bandwidth.set(xscale="log", xlabel="bytes per call", ylabel="GB/s", title="bus bandwidth")
    bandwidth.legend(fontsize=8)
    if not report.meaningful:
        figure.suptitle("CPU interpreter: these times mean nothing for speed", fontsize=9, color="#a33")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()
