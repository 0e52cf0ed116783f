"""The static form of a view: what an output shows where no widget manager draws the live widget.

A view's output holds three forms (:meth:`StaticForm._repr_mimebundle_`): the widget
(``application/vnd.jupyter.widget-view+json``), static HTML and a one-line ``text/plain``. A frontend shows
the first form it can: JupyterLab and Notebook with a kernel, the widget; nbconvert's HTML, nbviewer and
GitHub, the HTML (nbconvert skips the widget when the notebook holds no widget state for it, and the
headless main job stores none: see :mod:`workbench.tutorials`); so do JupyterLab opening an untrusted
notebook (its widget renderer is not "safe") and VS Code without the widget manager.

The HTML is built from the widget's own children, so nothing is drawn twice: the values of its ``HTML``
widgets (headers, captions, tables, heap bars) and its images as base64 PNGs, laid out as the boxes lay them
out. Controls (toggles, sliders, dropdowns) are left out: without a kernel they do nothing.

Examples
--------
>>> import ipywidgets as widgets
>>> static_html(widgets.VBox([widgets.HTML("<b>x</b>"), widgets.IntSlider()]))
'<div style="display:flex;flex-direction:column;align-items:flex-start"><div><b>x</b></div></div>'
"""

from __future__ import annotations

import base64
import html
import uuid

import ipywidgets as widgets
from IPython.display import display, update_display

# Layout traits that shape the static form as they shape the widget (trait name -> CSS property).
LAYOUT_CSS = {"margin": "margin", "width": "width", "max_width": "max-width", "flex_flow": "flex-flow"}


class StaticForm:
    """Mixin for a view (an ipywidgets box): its output carries a static form beside the widget, and
    :meth:`update_displays` redraws that form after :mod:`~workbench.widgets.registry` refreshed the view.

    A view defines :meth:`summary`, its ``text/plain``. Put the mixin before the widget class:
    ``class BufferView(StaticForm, widgets.VBox)``.

    Examples
    --------
    >>> view = workbench.show("x")                           # doctest: +SKIP
    >>> sorted(view._repr_mimebundle_())                      # doctest: +SKIP
    ['application/vnd.jupyter.widget-view+json', 'text/html', 'text/plain']
    >>> view._repr_mimebundle_()["text/plain"]                # doctest: +SKIP
    "BufferView of 'x' on 2 ranks, float32[1024]"
    """

    display_id: str | None = None  # set once the view is displayed

    def summary(self) -> str:
        """One line saying what the view shows (its ``text/plain``)."""
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs) -> dict:
        bundle = super()._repr_mimebundle_(**kwargs)
        return {**bundle, "text/plain": self.summary(), "text/html": static_html(self)}

    def _ipython_display_(self) -> None:
        # Every display (display(view), a view as a cell's last value) goes out under the view's display id,
        # so that update_displays can reach each output that shows it.
        self.display_id = self.display_id or f"iris-view-{uuid.uuid4().hex}"
        display(self._repr_mimebundle_(), raw=True, display_id=self.display_id)

    def update_displays(self) -> None:
        """Send the outputs showing this view its current bundle, so that their static form (what a saved
        notebook keeps) follows the widget; nothing when the view was never displayed on its own.

        JupyterLab answers by drawing a fresh view of the same widget model in place of the old one: the
        view's settings live in the model, so they stay. Hence :mod:`~workbench.widgets.registry` calls this
        after a cell refreshed the view, not on every toggle or slider move.
        """
        if self.display_id is not None:
            update_display(self._repr_mimebundle_(), raw=True, display_id=self.display_id)


def static_html(widget: widgets.Widget) -> str:
    """HTML standing for ``widget`` and its children: ``HTML`` widgets' values, images inlined as base64,
    boxes as flex boxes (with the widget's CSS classes and main layout traits); hidden widgets and controls
    give nothing. An image's alt text is its ``alt`` attribute, a plain Python attribute: ipywidgets'
    Image has none, and its ``tooltip`` breaks the image's view in the browser (ipywidgets 8 then reads a
    ``description`` that an Image lacks).

    Examples
    --------
    >>> image = widgets.Image(value=b"PNG...", format="png")
    >>> image.alt = "rank 0"
    >>> static_html(image)
    '<img src="data:image/png;base64,UE5HLi4u" alt="rank 0">'
    """
    if not isinstance(widget, widgets.DOMWidget) or widget.layout.display == "none":
        return ""
    if isinstance(widget, widgets.Image):
        if not widget.value:
            return ""
        data = base64.b64encode(widget.value).decode("ascii")
        return (f'<img src="data:image/{widget.format};base64,{data}" alt="{html.escape(getattr(widget, "alt", ""))}"'
                f'{_style(widget, ())}>')
    if isinstance(widget, widgets.HTML):
        return f"<div{_classes(widget)}{_style(widget, ())}>{widget.value}</div>" if widget.value else ""
    if isinstance(widget, widgets.Box):
        flex = (("display:flex", "flex-direction:column", "align-items:flex-start")
                if isinstance(widget, widgets.VBox) else ("display:flex", "flex-flow:row wrap"))
        inner = "".join(static_html(child) for child in widget.children)
        return f"<div{_classes(widget)}{_style(widget, flex)}>{inner}</div>" if inner else ""
    return ""


def _classes(widget: widgets.DOMWidget) -> str:
    return f' class="{html.escape(" ".join(widget._dom_classes))}"' if widget._dom_classes else ""


def _style(widget: widgets.DOMWidget, base: tuple[str, ...]) -> str:
    """``base`` then the widget's own layout (``LAYOUT_CSS``), which wins, as a style attribute."""
    rules = list(base) + [f"{css}:{getattr(widget.layout, trait)}" for trait, css in LAYOUT_CSS.items()
                          if getattr(widget.layout, trait)]
    return f' style="{html.escape(";".join(rules))}"' if rules else ""
