"""BufferView: one tensor on every rank, side by side, on one colour scale, with what changed marked.

Examples
--------
>>> view = BufferView(workbench.current(), "x")     # doctest: +SKIP
>>> view                                            # doctest: +SKIP
>>> [p.rank for p in view.panels.children]          # doctest: +SKIP
[0, 1, 2, 3]
"""

from __future__ import annotations

import html
import uuid

import ipywidgets as widgets

from ..report import WorkbenchError
from . import panels, probes, render
from .static import StaticForm


class BufferView(StaticForm, widgets.VBox):
    """Every rank's copy of ``name`` (a variable, or an expression such as ``"x[0]"``) as a picture.

    Each rank reduces its tensor before sending it (blocks of at most ``max_side`` per side, see
    :mod:`workbench.widgets.reduce`): heatmap for 2-D, line (bars when short) for 1-D, a slice slider above
    2-D. Tensors of at most 64 elements also get a table of their values. With ``diff`` on, blocks (or
    table cells) that changed since the view last looked are red; :meth:`refresh` looks again, and
    ``%%iris_kernel --show NAME`` calls it after the cell, so red is what the cell changed.

    Parameters
    ----------
    wb : workbench.Workbench
    name : str
    ranks : list of int, optional
        Default: every rank.
    max_side : int
        Blocks per side at most (pixels of detail).
    reduction : {"mean", "maxabs"}
        What a block shows: its mean, or its value of largest magnitude (with its sign).

    Raises
    ------
    WorkbenchError
        When no rank has a tensor ``name``, naming what each rank has instead.

    Examples
    --------
    >>> view = BufferView(wb, "x", reduction="maxabs")      # doctest: +SKIP
    >>> wb.run("x[:10] = 0"); view.refresh()                 # doctest: +SKIP
    >>> view.panels.children[0].caption.value                # doctest: +SKIP
    '... 1 of 256 blocks changed ...'
    """

    def __init__(self, wb, name: str, *, ranks=None, max_side: int = 256, reduction: str = "mean"):
        if reduction not in panels.REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(panels.REDUCTIONS)}, got {reduction!r}")
        self.wb, self.name, self.ranks, self.max_side = wb, name, ranks, max_side
        self.token = f"buffer-view-{uuid.uuid4().hex}"  # this view's previous snapshot on each engine
        self.snapshots: list[dict] = []
        self.header = widgets.HTML()
        self.reduction = widgets.ToggleButtons(
            options=[(label, key) for key, label in panels.REDUCTIONS.items()], value=reduction,
            style={"button_width": "150px"})
        self.diff = widgets.ToggleButton(value=True, description="diff", icon="check",
                                         tooltip="paint red what changed since this view last looked")
        self.slice = widgets.IntSlider(min=0, max=0, description="slice", continuous_update=False,
                                       layout=widgets.Layout(display="none"))
        self.panels = widgets.Box(layout=widgets.Layout(flex_flow="row wrap"))
        self.table = widgets.HTML()
        super().__init__([self.header, widgets.HBox([self.reduction, self.diff, self.slice]), self.panels,
                          self.table])
        self.add_class("iris-buffer-view")
        self.refresh(strict=True)
        self.reduction.observe(lambda _: self.draw(), "value")
        self.diff.observe(lambda _: self.draw(), "value")
        self.slice.observe(lambda _: self.refresh(), "value")

    def refresh(self, strict: bool = False) -> None:
        """Take a new snapshot on every rank and redraw; changes are against the previous snapshot.

        With ``strict``, a name no rank has is a :class:`WorkbenchError`; otherwise the view says so.
        """
        self.snapshots = self.wb.apply(probes.snapshot, self.name, self.token, self.max_side, self.slice.value,
                                       ranks=self.ranks)
        if strict and not any(s["status"] == "ok" for s in self.snapshots):
            raise WorkbenchError(f"cannot show {self.name!r}: {panels.failures(self.snapshots)}. Create it in "
                                 "a %%iris_kernel cell first (e.g. x = ctx.zeros(1024)), or check the spelling.")
        slices = max((s["slices"] for s in self.snapshots if s["status"] == "ok"), default=1)
        self.slice.max = max(0, slices - 1)
        self.slice.layout.display = None if slices > 1 else "none"
        self.draw()

    def draw(self) -> None:
        """Redraw from the snapshots held (reduction or diff toggled: no round trip to the ranks)."""
        ok = [s for s in self.snapshots if s["status"] == "ok"]
        data = {s["rank"]: panels.displayed(s, self.reduction.value) for s in ok}
        vmin, vmax = render.scale(list(data.values()))
        self.header.value = self._header(ok, vmin, vmax)
        self._ensure_panels([s["rank"] for s in self.snapshots])
        where = f"slice {self.slice.value}" if self.slice.max > 0 else ""
        for panel, snapshot in zip(self.panels.children, self.snapshots, strict=True):
            if snapshot["status"] != "ok":
                panel.show_message(html.escape(snapshot["message"]))
                continue
            changed = snapshot["changed"] if self.diff.value else None
            png = panels.picture(snapshot, data[snapshot["rank"]], vmin, vmax, changed)
            caption = panels.stats_line(snapshot, where)
            panel.show(png, caption + ("<br>" + panels.change_line(snapshot) if self.diff.value else ""))
        self.table.value = panels.values_table(self.snapshots, self.diff.value)

    def summary(self) -> str:
        """``BufferView of 'x' on 2 ranks, float32[32, 48]``: the view's ``text/plain``."""
        count = len(self.snapshots)
        return (f"BufferView of {self.name!r} on {count} rank{'s' * (count != 1)}, "
                f"{panels.tensor_phrase(self.snapshots)}")

    def _ensure_panels(self, ranks: list[int]) -> None:
        if [p.rank for p in self.panels.children] != ranks:
            self.panels.children = [panels.RankPanel(rank) for rank in ranks]

    def _header(self, ok: list[dict], vmin: float, vmax: float) -> str:
        name = html.escape(self.name)
        missing = panels.failures(self.snapshots)
        if not ok:
            return f"<b>{name}</b>: <span style='color:#b00'>{html.escape(missing)}</span>"
        first = ok[0]
        shape = " × ".join(map(str, first["shape"])) or "scalar"
        block = " × ".join(map(str, first["block"]))
        what = "|x| of complex values, " if first["complex"] else ""
        detail = ("every element" if all(b == 1 for b in first["block"])
                  else f"blocks of {block} ({panels.REDUCTIONS[self.reduction.value]})")
        text = (f"<b>{name}</b> {first['dtype']} [{shape}] · {what}{detail} · "
                f"colour scale {vmin:.4g} … {vmax:.4g}")
        if missing:
            text += f"<br><span style='color:#b00'>{html.escape(missing)}</span>"
        return text
