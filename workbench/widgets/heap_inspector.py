"""HeapInspector: every rank's symmetric heap as a bar of allocations, named after the variables using them.

Examples
--------
>>> inspector = HeapInspector(workbench.current())     # doctest: +SKIP
>>> inspector.select.value = "x"                       # opens x's BufferView below the bars
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from iris.base.sizes import format_size
from iris.base.tables import html_table

from ..report import ranks_phrase
from . import probes
from .static import StaticForm

# One colour per allocation (by its offset, the same on every rank), so a tensor looks alike in every bar.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
FREE_COLOUR = "#eeeeee"
ZOOM_BELOW = 0.25


class HeapInspector(StaticForm, widgets.VBox):
    """Per rank: the heap as a horizontal bar (offsets and sizes to scale, free space grey), usage figures,
    and a table of allocations with dtype, shape, size, ``name=`` label and the variables referring to them.

    Choosing a variable in :attr:`select` opens its :class:`~workbench.widgets.BufferView` in :attr:`opened`.

    Parameters
    ----------
    wb : workbench.Workbench

    Examples
    --------
    >>> inspector = HeapInspector(wb)                      # doctest: +SKIP
    >>> inspector.maps[0]["allocations"][0]["names"]       # doctest: +SKIP
    ['x']
    """

    def __init__(self, wb):
        self.wb = wb
        self.maps: list[dict] = []
        self.header = widgets.HTML()
        self.bars = widgets.VBox()
        self.table = widgets.HTML()
        self.select = widgets.Dropdown(description="open", options=[("(choose a tensor)", None)],
                                       layout=widgets.Layout(width="480px"))
        self.opened = widgets.VBox()
        self.buffer_view = None
        self._updating = False
        super().__init__([self.header, self.bars, self.table, self.select, self.opened])
        self.add_class("iris-heap-inspector")
        self.refresh()
        self.select.observe(self._on_select, "value")

    def refresh(self) -> None:
        """Ask every rank for its heap again and redraw (the open BufferView too)."""
        self.maps = self.wb.apply(probes.heap_map)
        size = self.maps[0]["size"]
        self.header.value = (f"<b>symmetric heap</b>: {len(self.maps)} ranks × {format_size(size)}; a tensor has "
                             "the same offset on every rank")
        self.bars.children = [widgets.HTML(heap_bar(m)) for m in self.maps]
        rows = merge_allocations(self.maps)
        self.table.value = allocation_table(rows)
        options = [("(choose a tensor)", None)] + [
            (f"{name} · {row['dtype']}{list(row['shape'])} · {format_size(row['nbytes'])}", name)
            for row in rows for name in row["all_names"]
        ]
        chosen = self.select.value
        # New options reset the value: keep the open view (and its diff snapshot) when its name remains.
        self._updating = True
        try:
            self.select.options = options
            self.select.value = chosen if chosen in [value for _, value in options] else None
        finally:
            self._updating = False
        if self.select.value != chosen:
            self.open_view(self.select.value)
        elif self.buffer_view is not None:
            self.buffer_view.refresh()

    def summary(self) -> str:
        """``HeapInspector of 2 heaps of 64.0 MiB, 3 live tensors each``: the view's ``text/plain``."""
        return (f"HeapInspector of {len(self.maps)} heaps of {format_size(self.maps[0]['size'])}, "
                f"{len(self.maps[0]['allocations'])} live tensors each")

    def _on_select(self, change) -> None:
        if not self._updating:
            self.open_view(change["new"])

    def open_view(self, name: str | None) -> None:
        """Show ``name``'s BufferView below the heap (None closes it)."""
        from . import registry
        from .buffer_view import BufferView

        self.buffer_view = BufferView(self.wb, name) if name is not None else None
        if self.buffer_view is not None:
            registry.track(("heap", "open"), self.buffer_view)  # --show NAME refreshes it too
        self.opened.children = [self.buffer_view] if self.buffer_view is not None else []


def merge_allocations(maps: list[dict]) -> list[dict]:
    """Allocations of every rank merged by offset (they are symmetric), each with ``names`` per rank and
    ``all_names`` (every name, first seen first)."""
    rows: dict[int, dict] = {}
    for m in maps:
        for a in m["allocations"]:
            row = rows.setdefault(a["offset"], {**a, "names": {}, "all_names": []})
            row["names"][m["rank"]] = a["names"]
            row["all_names"] += [n for n in a["names"] if n not in row["all_names"]]
    return [rows[offset] for offset in sorted(rows)]


def _label(allocation: dict) -> str:
    names = ", ".join(allocation["names"])
    label = allocation["label"]
    return names or (f"name={label!r}" if label else "(no variable)")


def heap_bar(heap: dict) -> str:
    """One rank's heap as HTML: its usage line and a bar with a box per allocation (hover for details);
    when the allocations fill less than :data:`ZOOM_BELOW` of the heap, a second bar shows the start of the
    heap, up to just past the last allocation, enlarged (the whole-heap bar would show slivers)."""
    size = heap["size"]
    live = sum(a["nbytes"] for a in heap["allocations"])
    usage = (f"rank {heap['rank']}: {format_size(heap['used'])} used of {format_size(size)} "
             f"({format_size(live)} in {len(heap['allocations'])} live tensors) · {format_size(heap['free'])} free "
             f"· largest free block {format_size(heap['largest_free'])} · "
             f"fragmentation {100 * heap['fragmentation']:.0f}%")
    parts = [f"<div style='font-size:12px'>{usage}</div>", _bar(heap["allocations"], size, "iris-heap-bar")]
    end = max((a["offset"] + a["nbytes"] for a in heap["allocations"]), default=0)
    if 0 < end < ZOOM_BELOW * size:
        span = min(size, int(end * 1.25))
        parts += [f"<div style='font-size:11px;color:#555'>offsets 0 … {format_size(span)}, enlarged:</div>",
                  _bar(heap["allocations"], span, "iris-heap-zoom")]
    return f"<div class='iris-heap-rank' style='margin:4px 0'>{''.join(parts)}</div>"


def _bar(allocations: list[dict], span: int, css_class: str) -> str:
    """A bar for heap offsets [0, span): free space grey, each allocation a coloured box to scale."""
    boxes = []
    for a in allocations:
        text = html.escape(_label(a))
        tip = html.escape(f"{_label(a)}: {a['dtype']}{list(a['shape'])}, {format_size(a['nbytes'])} "
                          f"at offset {a['offset']:#x}")
        colour = PALETTE[(a["offset"] // 256) % len(PALETTE)]
        boxes.append(
            f"<div class='iris-heap-allocation' title='{tip}' style='position:absolute;top:0;bottom:0;"
            f"left:{100 * a['offset'] / span:.4f}%;width:{100 * a['nbytes'] / span:.4f}%;min-width:2px;"
            f"background:{colour};color:white;font-size:11px;overflow:hidden;white-space:nowrap;"
            f"text-overflow:ellipsis;border-right:1px solid white'>{text}</div>"
        )
    return (f"<div class='{css_class}' style='position:relative;height:22px;background:{FREE_COLOUR};"
            f"border:1px solid #999;margin-bottom:2px'>{''.join(boxes)}</div>")


def allocation_table(rows: list[dict]) -> str:
    """HTML table: offset, size, dtype, shape, label and the variables on each rank (merged when equal)."""
    if not rows:
        return "<i>no tensors on the heap</i>"
    lines = []
    for row in rows:
        by_names: dict[tuple, list[int]] = {}
        for rank, names in sorted(row["names"].items()):
            by_names.setdefault(tuple(names), []).append(rank)
        variables = "; ".join(f"{', '.join(names) or '(none)'} on {ranks_phrase(ranks)}"
                              for names, ranks in by_names.items())
        lines.append([f"{row['offset']:#x}", format_size(row["nbytes"]), row["dtype"], str(list(row["shape"])),
                      html.escape(row["label"] or ""), html.escape(variables)])
    return (html_table(["offset", "size", "dtype", "shape", "name=", "variables"], lines, align="rrllll", wrap=(5,),
                       css_class="iris-heap-table", row_labels=False)
            + "<small>used includes tensors no rank references any more, released at the next allocation, and "
            "alignment padding</small>")
