"""TrafficView: the traffic matrix of a cell under one header (its headline, how it was counted), as heat maps
(issuing rank x heap, per kind, and what crossed from rank to rank) above its tables
(:meth:`iris.traffic.TrafficMatrix.tables_html`).

A cell whose launches ran in named operations (the collectives of a training step on the ``iris``
torch.distributed backend: ``all_reduce · DDP bucket 0``) gets :class:`OperationsTrafficView` instead: a table of
every operation (what it moved across ranks against its minimum, from which rank to which, what it carries), and the
heat maps of the operation chosen in it (or of the whole cell).

The heat maps are SVG built here, so the same picture is the widget's and the static form's (:mod:`.static`);
hover a cell for its bytes (and, with a minimum, moved / needed). Each panel is an SVG of its own, so that a
column too narrow for all four puts the rest on the next line. The view's ``text/plain`` is the matrix as text.

Examples
--------
>>> view = TrafficView(matrix.with_minimum(iris.traffic.minimum.all_gather(nbytes, 2)))   # doctest: +SKIP
>>> print(view.summary())                                                                   # doctest: +SKIP
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import numpy as np

from iris.base.sizes import format_size
from iris.instruments.traffic import KINDS, TrafficByOperation, TrafficMatrix
from iris.instruments.traffic.matrix import SOURCES

from .static import StaticForm

COLOURS = {"load": (78, 121, 167), "store": (89, 161, 79), "atomic": (242, 142, 43), "crossed ranks": (192, 57, 43)}
PANEL_SIDE = 180  # pixels of a panel's grid, whatever the number of ranks
LABEL = 48  # room for the row labels ("rank 12")
TOP = 50  # the title, what rows and columns are, the column labels


class TrafficView(StaticForm, widgets.VBox):
    """A :class:`~iris.traffic.TrafficMatrix` as heat maps and a table.

    Parameters
    ----------
    matrix : iris.traffic.TrafficMatrix
    note : str
        A line under the header (e.g. that CUDA counts come from tracing).

    Attributes
    ----------
    matrix : iris.traffic.TrafficMatrix
    header : ipywidgets.HTML
        The headline (the view's one title), how the bytes were counted, the note.
    chart : ipywidgets.HTML
        The heat maps (an SVG per panel).
    table : ipywidgets.HTML
        The matrix's HTML tables.
    """

    def __init__(self, matrix: TrafficMatrix, note: str = ""):
        self.matrix = matrix
        self.note = note
        lines = "".join(f"<div style='font-size:12px;color:#555'>{html.escape(line)}</div>"
                        for line in (SOURCES[matrix.source], note) if line)
        self.header = widgets.HTML(f"<b>{html.escape(matrix.headline())}</b>{lines}")
        self.chart = widgets.HTML(heat_maps_html(matrix))
        self.table = widgets.HTML(matrix.tables_html())
        super().__init__([self.header, self.chart, self.table])
        self.add_class("iris-traffic-view")

    def summary(self) -> str:
        """The matrix as text (:meth:`iris.traffic.TrafficMatrix.to_text`), after the note."""
        return (f"{self.note}\n" if self.note else "") + self.matrix.to_text()


class OperationsTrafficView(StaticForm, widgets.VBox):
    """The traffic of a cell per named operation: a table of every operation (its row says what crossed from which
    rank to which, against its minimum), then the heat maps and tables of the one chosen (or of the whole cell).

    Parameters
    ----------
    operations : iris.instruments.traffic.TrafficByOperation
    whole : iris.instruments.traffic.TrafficMatrix
        Every launch of the cell, summed: the first choice.
    note : str
        A line under the header.

    Attributes
    ----------
    operations : iris.instruments.traffic.TrafficByOperation
    choice : ipywidgets.Dropdown
        The whole cell (None) or an operation's number in the table; its maps and tables are drawn below.
    chosen : ipywidgets.HTML
        The chosen matrix's headline, heat maps and tables.

    Examples
    --------
    >>> view = OperationsTrafficView(rec_per_operation, whole_matrix)              # doctest: +SKIP
    >>> view.choice.value = 1                                                     # the maps of operation 1
    """

    def __init__(self, operations: TrafficByOperation, whole: TrafficMatrix, note: str = ""):
        self.operations, self.whole, self.note = operations, whole, note
        lines = "".join(f"<div style='font-size:12px;color:#555'>{html.escape(line)}</div>"
                        for line in (SOURCES[operations.source], note) if line)
        self.header = widgets.HTML(f"<b>{html.escape(operations.headline())}</b>{lines}")
        self.table = widgets.HTML(operations.table_html())
        options = [("the whole cell", None)] + [(f"{i}. {entry.label}", i) for i, entry in enumerate(operations)]
        first = next((i for i, entry in enumerate(operations) if entry.operation is not None), None)
        self.choice = widgets.Dropdown(options=options, value=first, description="show",
                                       layout=widgets.Layout(width="auto", max_width="100%"))
        self.chosen = widgets.HTML()
        super().__init__([self.header, self.table, self.choice, self.chosen])
        self.add_class("iris-traffic-view")
        self.redraw()
        self.choice.observe(lambda _: (self.redraw(), self.update_displays()), "value")

    @property
    def matrix(self) -> TrafficMatrix:
        """The matrix drawn now: the chosen operation's, or the whole cell's."""
        chosen = self.choice.value
        return self.whole if chosen is None else self.operations[chosen].matrix

    def redraw(self) -> None:
        """Draw the chosen matrix: its headline, its heat maps, its tables."""
        matrix = self.matrix
        self.chosen.value = (f"<div style='margin-top:6px'><b>{html.escape(matrix.headline())}</b></div>"
                             f"{heat_maps_html(matrix)}{matrix.tables_html()}")

    def summary(self) -> str:
        """Every operation's row as text (:meth:`~iris.instruments.traffic.TrafficByOperation.text`)."""
        return (f"{self.note}\n" if self.note else "") + self.operations.text()


def heat_maps_html(matrix: TrafficMatrix) -> str:
    """One heat map per kind (rows: issuing rank, columns: heap) and one of what crossed from rank to rank, each
    an SVG shaded against its own largest cell, side by side in a box that wraps them to the column's width.

    Examples
    --------
    >>> from iris.traffic import LaunchTraffic
    >>> heat_maps_html(TrafficMatrix.from_launches([[LaunchTraffic.empty("k", 0, 1)]])).count("<svg")
    4
    """
    panels = [(kind, matrix.bytes[..., k], "issuing rank", "heap") for k, kind in enumerate(KINDS)]
    panels.append(("crossed ranks", matrix.crossing(), "from", "to"))
    return ("<div style='display:flex;flex-flow:row wrap;max-width:100%'>"
            + "".join(_panel_svg(matrix, *panel) for panel in panels) + "</div>")


def _panel_svg(matrix: TrafficMatrix, title: str, values: np.ndarray, rows: str, columns: str) -> str:
    """One heat map: its title and what its rows and columns are, the ranks' labels, a cell per pair."""
    world = matrix.world
    cell = PANEL_SIDE / world
    left = LABEL  # the grid's left edge: the row labels end there
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{LABEL + PANEL_SIDE + 16}' "
             f"height='{TOP + PANEL_SIDE + 8}' font-size='10' font-family='sans-serif'>"
             f"<text x='{left}' y='12' font-weight='bold'>{html.escape(title)}</text>"
             f"<text x='{left}' y='26' fill='#555'>rows: {rows} · columns: {columns}</text>"]
    if cell >= 12:
        parts += [f"<text x='{left + (j + 0.5) * cell:.1f}' y='{TOP - 4}' text-anchor='middle'>{j}</text>"
                  for j in range(world)]
    biggest = max(int(values.max(initial=0)), 1)
    red, green, blue = COLOURS[title]
    for i in range(world):
        y = TOP + i * cell
        if cell >= 12:
            parts.append(f"<text x='{left - 4}' y='{y + cell / 2 + 3:.1f}' text-anchor='end'>rank {i}</text>")
        for j in range(world):
            value = int(values[i, j])
            alpha = 0.08 + 0.85 * value / biggest if value else 0.0
            tip = _tip(matrix, title, i, j, value)
            parts.append(f"<rect x='{left + j * cell:.1f}' y='{y:.1f}' width='{cell:.1f}' height='{cell:.1f}' "
                         f"fill='rgba({red},{green},{blue},{alpha:.2f})' stroke='#ddd' stroke-width='0.5'>"
                         f"<title>{html.escape(tip)}</title></rect>")
            if cell >= 44 and value:
                parts.append(f"<text x='{left + (j + 0.5) * cell:.1f}' y='{y + cell / 2 + 3:.1f}' "
                             f"text-anchor='middle'>{html.escape(format_size(value))}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _tip(matrix: TrafficMatrix, title: str, i: int, j: int, value: int) -> str:
    if title != "crossed ranks":
        return f"rank {i}: {title} {format_size(value)} at rank {j}'s heap"
    if i == j:
        return f"rank {i} to itself: nothing crosses"
    tip = f"rank {i} → rank {j}: {format_size(value)}"
    if matrix.minimum is not None and np.ndim(matrix.minimum) == 2:
        tip += f" moved, {format_size(int(matrix.minimum[i, j]))} needed"
    return tip
