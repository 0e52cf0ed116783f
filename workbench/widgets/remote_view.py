"""RemoteView: rank R's copy of a tensor as every rank reaches it through ``ctx.as_remote``, beside R's own.

Examples
--------
>>> view = RemoteView(workbench.current(), "x", rank=1)     # doctest: +SKIP
>>> view.rows[0]["translated"] == view.rows[0]["remote_address"]   # doctest: +SKIP
True
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from iris.base.tables import html_table

from ..report import WorkbenchError
from . import panels, probes, reduce, render
from .static import StaticForm


class RemoteView(StaticForm, widgets.VBox):
    """For every rank r: its ``heap_bases`` row, the tensor's offset, the translated address of its copy on
    rank R (``heap_bases[R] + offset``, computed on r), ``ctx.as_remote(x, R).data_ptr()``, and the values
    read through that view, beside rank R's own values: the same memory, so they are marked equal.

    Parameters
    ----------
    wb : workbench.Workbench
    name : str
        A variable (or expression) naming a tensor on the symmetric heap.
    rank : int
        The rank R whose copy is read.
    max_side : int
        Blocks per side at most, as for :class:`~workbench.widgets.BufferView`.

    Attributes
    ----------
    own : dict
        Rank R's snapshot of its own tensor.
    rows : list of dict
        Each rank's :func:`~workbench.widgets.probes.remote_snapshot`, plus ``equal`` (bool: its read matches
        R's own values) when it succeeded.

    Examples
    --------
    >>> view = RemoteView(wb, "x", rank=1)                  # doctest: +SKIP
    >>> [row["equal"] for row in view.rows]                 # doctest: +SKIP
    [True, True]
    """

    def __init__(self, wb, name: str, rank: int, *, max_side: int = 256):
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < wb.world_size:
            raise ValueError(f"rank must be one of 0..{wb.world_size - 1}, got {rank!r}")
        self.wb, self.name, self.rank, self.max_side = wb, name, rank, max_side
        self.own: dict = {}
        self.rows: list[dict] = []
        self.header = widgets.HTML()
        self.addresses = widgets.HTML()
        self.slice = widgets.IntSlider(min=0, max=0, description="slice", continuous_update=False,
                                       layout=widgets.Layout(display="none"))
        self.panels = widgets.Box(layout=widgets.Layout(flex_flow="row wrap"))
        self.table = widgets.HTML()
        super().__init__([self.header, self.addresses, self.slice, self.panels, self.table])
        self.add_class("iris-remote-view")
        self.refresh(strict=True)
        self.slice.observe(lambda _: self.refresh(), "value")

    def refresh(self, strict: bool = False) -> None:
        """Read again: rank R's own copy, then every rank's read through ``as_remote``; redraw.

        With ``strict``, a name rank R lacks, or that no rank can read remotely, is a :class:`WorkbenchError`.
        """
        index = self.slice.value
        self.own = self.wb.apply(probes.snapshot, self.name, None, self.max_side, index, ranks=[self.rank])[0]
        self.rows = self.wb.apply(probes.remote_snapshot, self.name, self.rank, self.max_side, index)
        readable = [row for row in self.rows if row["status"] == "ok"]
        if strict and self.own["status"] != "ok":
            raise WorkbenchError(f"cannot show rank {self.rank}'s {self.name!r}: {panels.failures([self.own])}. "
                                 "Create it on every rank with ctx (e.g. x = ctx.zeros(1024)) in a %%iris_kernel "
                                 "cell.")
        if strict and not readable:
            raise WorkbenchError(f"no rank can read rank {self.rank}'s {self.name!r} through as_remote: "
                                 f"{panels.failures(self.rows)}")
        for row in readable:
            row["equal"] = self.own["status"] == "ok" and _same_values(self.own, row)
        slices = self.own.get("slices", 1)
        self.slice.max = max(0, slices - 1)
        self.slice.layout.display = None if slices > 1 else "none"
        self._draw()

    def summary(self) -> str:
        """``RemoteView of rank 1's 'x' through as_remote on 2 ranks, float32[40]``: the ``text/plain``."""
        return (f"RemoteView of rank {self.rank}'s {self.name!r} through as_remote on {len(self.rows)} ranks, "
                f"{panels.tensor_phrase([self.own])}")

    def _draw(self) -> None:
        name, r = html.escape(self.name), self.rank
        self.header.value = (f"<b>{name}</b> on rank {r}, read by every rank through "
                             f"<code>ctx.as_remote({name}, {r})</code>, beside rank {r}'s own copy")
        self.addresses.value = address_table(self.rows, r, self.name)
        pictures = ([self.own] if self.own["status"] == "ok" else []) + [
            row for row in self.rows if row["status"] == "ok"]
        vmin, vmax = render.scale([s["mean"] for s in pictures])
        titles = [f"rank {r}'s own {self.name}"] + [f"rank {row['rank']}: as_remote({self.name}, {r})"
                                                   for row in self.rows]
        snapshots = [self.own, *self.rows]
        if len(self.panels.children) != len(snapshots):
            self.panels.children = [panels.RankPanel(s["rank"], title)
                                    for s, title in zip(snapshots, titles, strict=True)]
        for panel, snapshot in zip(self.panels.children, snapshots, strict=True):
            if snapshot["status"] != "ok":
                panel.show_message(html.escape(snapshot["message"]))
                continue
            png = panels.picture(snapshot, snapshot["mean"], vmin, vmax, None)
            caption = panels.stats_line(snapshot)
            if snapshot is not self.own:
                caption += "<br>" + _equality_mark(snapshot["equal"], r)
            panel.show(png, caption)
        labels = {r: f"rank {r} (own)"}
        self.table.value = panels.values_table([self.own], False, labels) + panels.values_table(
            [row for row in self.rows if row["status"] == "ok"], False,
            {row["rank"]: f"rank {row['rank']} via as_remote" for row in self.rows})


def _same_values(own: dict, read: dict) -> bool:
    keys = ("mean", "min", "max", "values") if "values" in own else ("mean", "min", "max")
    if own["mean"].shape != read["mean"].shape:
        return False
    # one key at a time: "values" is flat while the block statistics keep the tensor's shape
    return not any(reduce.changed(own, read, (key,)).any() for key in keys)


def _equality_mark(equal: bool, rank: int) -> str:
    if equal:
        return f"<span style='color:#080'>✓ equal to rank {rank}'s own values: the same memory</span>"
    return (f"<span style='color:#c00'>✗ differs from rank {rank}'s own values (was it written between the "
            "two reads?)</span>")


def address_table(rows: list[dict], target: int, name: str) -> str:
    """HTML table, a row per rank: heap_bases (column R highlighted), offset, translated address,
    ``as_remote`` data_ptr and whether they agree."""
    ok = [row for row in rows if row["status"] == "ok"]
    if not ok:
        return f"<span style='color:#b00'>{html.escape(panels.failures(rows))}</span>"
    world = len(ok[0]["bases"])

    def marked(b: int, cell: str):  # the column of the rank read, highlighted
        return (cell, "background:#ffd") if b == target else cell

    head = ["", *(marked(b, f"heap_bases[{b}]") for b in range(world)),
            f"offset = {html.escape(name)}.data_ptr() − heap_bases[rank]", f"heap_bases[{target}] + offset",
            f"as_remote(…, {target}).data_ptr()", ""]
    lines = []
    for row in rows:
        if row["status"] != "ok":
            lines.append([f"rank {row['rank']}", (html.escape(row["message"]), "color:#b00;white-space:normal")])
            continue
        bases = [marked(b, f"<code>{base:#x}</code>") for b, base in enumerate(row["bases"])]
        agree = "✓" if row["translated"] == row["remote_address"] else "✗"
        lines.append([f"rank {row['rank']}", *bases, f"<code>{row['offset']:#x}</code>",
                      f"<code>{row['translated']:#x}</code>", f"<code>{row['remote_address']:#x}</code>", agree])
    return (html_table(head, lines, css_class="iris-remote-addresses")
            + "<small>each rank maps every heap at its own addresses, so the rows differ; the offset is the same on "
            f"every rank, and base + offset lands on the same bytes of rank {target}'s heap</small>")
