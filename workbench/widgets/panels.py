"""Pieces the views share: one rank's panel, the picture of a snapshot, the values table, failure messages.

A *snapshot* is what :func:`workbench.widgets.probes.snapshot` returns for one rank: the reduced blocks
(``mean``, ``min``, ``max``), ``block``, ``plane_shape``, ``stats``, the change masks and, for small
tensors, ``values``.

Examples
--------
>>> panel = RankPanel(0)
>>> panel.show(png_bytes, "min 0 max 1 mean 0.5")       # doctest: +SKIP
>>> panel.image.value[:4]                                # doctest: +SKIP
b'\\x89PNG'
"""

from __future__ import annotations

import html
import re

import ipywidgets as widgets
import numpy as np

from iris.base.tables import html_table

from ..report import ranks_phrase
from . import render

# Blocks per side below which a 1-D tensor gets one bar per element instead of a line.
BARS_UP_TO = 64
REDUCTIONS = {"mean": "block mean", "maxabs": "max |x| per block"}


class RankPanel(widgets.VBox):
    """One rank's picture: a title, the image and a caption (stats, or why there is nothing to draw).

    Attributes
    ----------
    rank : int
    title, caption : ipywidgets.HTML
    image : ipywidgets.Image
        PNG bytes in ``image.value`` (empty when the rank has nothing to draw).
    """

    def __init__(self, rank: int, title: str | None = None):
        self.rank = rank
        self.title = widgets.HTML(f"<b>{html.escape(title or f'rank {rank}')}</b>")
        self.image = widgets.Image(format="png", layout=widgets.Layout(width=f"{_width()}px"))
        self.image.alt = title or f"rank {rank}"  # the static form's alt text (see static.static_html)
        self.caption = widgets.HTML(layout=widgets.Layout(max_width=f"{_width()}px"))
        super().__init__([self.title, self.image, self.caption],
                         layout=widgets.Layout(margin="0 8px 8px 0", align_items="flex-start"))
        self.add_class("iris-rank-panel")

    def show(self, png: bytes, caption: str) -> None:
        self.image.value = png
        self.image.layout.display = None
        self.caption.value = caption

    def show_message(self, message: str) -> None:
        """No picture: ``message`` (already HTML) in its place."""
        self.image.value = b""
        self.image.layout.display = "none"
        self.caption.value = f"<span style='color:#b00'>{message}</span>"


def _width() -> int:
    return int(render.FIGSIZE[0] * render.DPI)


def displayed(snapshot: dict, reduction: str) -> np.ndarray:
    """The values drawn for ``snapshot``: block means, or per block the signed value of largest magnitude."""
    if reduction == "maxabs":
        low, high = snapshot["min"], snapshot["max"]
        return np.where(np.abs(high) >= np.abs(low), high, low)
    return snapshot["mean"]


def picture(snapshot: dict, data: np.ndarray, vmin: float, vmax: float, changed: np.ndarray | None) -> bytes:
    """PNG of ``data`` (from :func:`displayed`): heatmap for 2-D, bars for short 1-D, else a line. Untitled: the
    panel's title says whose it is."""
    if data.ndim == 2:
        return render.heatmap(data, vmin, vmax, snapshot["plane_shape"], changed)
    block, length = snapshot["block"][0], snapshot["plane_shape"][0]
    if block == 1 and length <= BARS_UP_TO:
        return render.bars(data, vmin, vmax, changed)
    return render.line(data, vmin, vmax, length, block, changed, band=(snapshot["min"], snapshot["max"]))


def tensor_phrase(snapshots: list[dict]) -> str:
    """``float32[32, 48]``, from the first snapshot that succeeded; ``no tensor`` when none did."""
    ok = [s for s in snapshots if s["status"] == "ok"]
    return f"{ok[0]['dtype']}{list(ok[0]['shape'])}" if ok else "no tensor"


def stats_line(snapshot: dict, what: str = "") -> str:
    """``min -1 · max 2 · mean 0.5`` (of ``what``, e.g. ``"slice 3"``)."""
    s = snapshot["stats"]
    of = f" ({html.escape(what)})" if what else ""
    return f"min {s['min']:.4g} · max {s['max']:.4g} · mean {s['mean']:.4g}{of}"


def change_line(snapshot: dict) -> str:
    """How many blocks changed since the view's previous snapshot, or that this is the first look."""
    mask = snapshot.get("changed")
    if mask is None:
        return "first look: nothing to compare with yet"
    count = int(mask.sum())
    if count == 0:
        return "unchanged since the last look"
    unit = "element" if all(b == 1 for b in snapshot["block"]) else "block"
    return f"<span style='color:#c00'>{count} of {mask.size} {unit}s changed</span>"


def failures(snapshots: list[dict]) -> str:
    """Ranks whose snapshot failed, grouped by message: ``no variable 'x' on ranks 0, 1``; empty if none."""
    by_message: dict[str, list[int]] = {}
    for s in snapshots:
        if s["status"] != "ok":
            # iris's messages start with "rank N: "; without it, equal failures of several ranks group.
            by_message.setdefault(re.sub(r"^rank \d+: ", "", s["message"]), []).append(s["rank"])
    return "; ".join(f"{message} on {ranks_phrase(ranks)}" for message, ranks in by_message.items())


def index_labels(shape: tuple) -> list[str]:
    """Element labels in flattened order: ``['0', '1']`` for 1-D, ``['0,0', '0,1', ...]`` above."""
    if len(shape) <= 1:
        return [str(i) for i in range(max(1, int(np.prod(shape))))]
    return [",".join(map(str, idx)) for idx in np.ndindex(*shape)]


def values_table(snapshots: list[dict], mark_changes: bool, labels: dict[int, str] | None = None) -> str:
    """HTML table of small tensors' values: a row per rank, a column per element; changed cells red."""
    rows = [s for s in snapshots if s["status"] == "ok" and "values" in s]
    if not rows:
        return ""
    body = []
    for s in rows:
        marks = s.get("values_changed") if mark_changes else None
        cells = [(f"{v:.4g}", _cell_style(marks is not None and marks[i])) for i, v in enumerate(s["values"])]
        body.append([html.escape((labels or {}).get(s["rank"], f"rank {s['rank']}")), *cells])
    # The header's cells get the values' border, in no colour: a right-aligned index then ends where its values do.
    head = [(html.escape(label), UNSEEN_BORDER) for label in ["", *index_labels(rows[0]["shape"])]]
    return html_table(head, body, css_class="iris-values")


UNSEEN_BORDER = "border:1px solid transparent"


def _cell_style(changed: bool) -> str:
    return "border:1px solid #ddd" + (";background:#f88" if changed else "")
