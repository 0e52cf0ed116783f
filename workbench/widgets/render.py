"""Pictures of reduced tensors, as PNG bytes for ``ipywidgets.Image``.

Figures are drawn with matplotlib's Agg canvas directly, not pyplot: no global figure list to leak, and the
notebook's inline backend never shows a stray copy. Every panel of a view gets the same ``vmin``/``vmax``,
so one colour (or height) means one value on every rank. Blocks that changed since the view's previous
snapshot are painted over in red. A picture has no title: the panel it is shown in has one
(:class:`~workbench.widgets.panels.RankPanel`), and a title inside it too would say the same thing twice.

A picture always says something: a bar's value is drawn as a line across its top, so a bar of 0 still shows (a
buffer of zeros is a row of flat marks on the 0 line, clear of the frame, on an axis from 0 to 1); element indices
on the x axis are whole numbers.

Examples
--------
>>> import numpy as np
>>> png = heatmap(np.eye(4, dtype=np.float32), vmin=0.0, vmax=1.0, extent=(4, 4))
>>> png[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, MaxNLocator

FIGSIZE = (3.2, 2.6)  # inches at DPI: 256 x 208 pixels
DPI = 80
CHANGED_RGBA = (1.0, 0.0, 0.0, 0.6)
COLORMAP = "viridis"


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _figure(colorbar: bool = False):
    """A figure with fixed axes positions: matplotlib's constrained layout would double the drawing time,
    and every panel has the same size anyway. With ``colorbar``, the axes leave room for one (``figure.cax``)."""
    figure = Figure(figsize=FIGSIZE, dpi=DPI)
    axes = figure.add_axes((0.14, 0.1, 0.64 if colorbar else 0.82, 0.84))
    if colorbar:
        figure.cax = figure.add_axes((0.83, 0.1, 0.04, 0.84))
        figure.cax.tick_params(labelsize=7)
    axes.tick_params(labelsize=7)
    return figure, axes


def heatmap(data: np.ndarray, vmin: float, vmax: float, extent: tuple[int, int],
            changed: np.ndarray | None = None) -> bytes:
    """A 2-D array as an image whose axes count the tensor's rows and columns (``extent``: its shape).

    Parameters
    ----------
    data : (R, C) array
        One value per block.
    vmin, vmax : float
        The colour scale shared by every panel of the view.
    changed : (R, C) bool array, optional
        Blocks to paint red.
    """
    figure, axes = _figure(colorbar=True)
    rows, cols = extent
    image = axes.imshow(data, cmap=COLORMAP, vmin=vmin, vmax=vmax, extent=(0, cols, rows, 0),
                        interpolation="nearest", aspect="auto")
    if changed is not None and changed.any():
        overlay = np.zeros((*changed.shape, 4), dtype=np.float32)
        overlay[changed] = CHANGED_RGBA
        axes.imshow(overlay, extent=(0, cols, rows, 0), interpolation="nearest", aspect="auto")
    figure.colorbar(image, cax=figure.cax)
    return _png(figure)


def line(data: np.ndarray, vmin: float, vmax: float, length: int, block: int, changed: np.ndarray | None = None,
         band: tuple[np.ndarray, np.ndarray] | None = None) -> bytes:
    """A 1-D array as a line over element indices (block ``i`` starts at element ``i * block``); ``band``
    (block min and max) is shaded when blocks hold several elements, so spikes stay visible."""
    figure, axes = _figure()
    x = np.arange(len(data)) * block
    if band is not None and block > 1:
        axes.fill_between(x, band[0], band[1], color="tab:blue", alpha=0.25, linewidth=0, step="post")
    axes.plot(x, data, color="tab:blue", linewidth=1, drawstyle="steps-post" if block > 1 else "default")
    if changed is not None and changed.any():
        axes.plot(x[changed], data[changed], "o", color="red", markersize=3, label="changed")
    axes.xaxis.set_major_formatter(EngFormatter())  # element 16M reads "16M", not an offset "1e7" off-axis
    _limits(axes, vmin, vmax, length)
    return _png(figure)


def bars(data: np.ndarray, vmin: float, vmax: float, changed: np.ndarray | None = None) -> bytes:
    """A short 1-D array as one bar per element, its value a line across the bar's top (a bar of 0 is a flat mark
    on the 0 line, not nothing); changed elements red."""
    figure, axes = _figure()
    x = np.arange(len(data))
    colours = np.where(changed, "red", "tab:blue") if changed is not None else np.full(len(data), "tab:blue")
    axes.bar(x, data, color=colours, width=0.8)
    axes.hlines(data, x - 0.4, x + 0.4, colors=colours, linewidth=3)
    axes.axhline(0.0, color="0.6", linewidth=0.6, zorder=0)
    _limits(axes, min(vmin, 0.0), max(vmax, 0.0), len(data))
    return _png(figure)


def _limits(axes, vmin: float, vmax: float, length: int) -> None:
    """The y range, padded so that a line at either end stands clear of the frame; the x range over the elements,
    ticks at whole elements."""
    if vmin == vmax:
        vmin, vmax = (0.0, 1.0) if vmin == 0 else (vmin - abs(vmin) / 2, vmax + abs(vmax) / 2)
    pad = 0.08 * (vmax - vmin)
    axes.set_ylim(vmin - pad, vmax + pad)
    axes.set_xlim(-0.6 if length <= 64 else 0, length - (0.4 if length <= 64 else 0))
    axes.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def scale(arrays: list[np.ndarray]) -> tuple[float, float]:
    """The (vmin, vmax) covering every finite value of ``arrays``; (0, 1) when there is none or every value is 0,
    and a unit range around another constant, so that a constant tensor still draws."""
    finite = [a[np.isfinite(a)] for a in arrays]
    finite = [a for a in finite if a.size]
    if not finite:
        return 0.0, 1.0
    low, high = float(min(a.min() for a in finite)), float(max(a.max() for a in finite))
    if low == high:
        return (0.0, 1.0) if low == 0 else (low - 0.5, high + 0.5)
    return low, high
