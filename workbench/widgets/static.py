"""The static form of a view: what an output shows where no widget manager draws the live widget.

A view has three forms (:meth:`StaticForm._repr_mimebundle_`): the widget
(``application/vnd.jupyter.widget-view+json``), static HTML and a one-line ``text/plain``. Displayed, it
makes two outputs (:meth:`StaticForm._ipython_display_`): the static HTML on its own (its *twin*, in a
``div`` of classes ``iris-static`` and the view's display id), then the widget with its ``text/plain``.
Where the widget is drawn (JupyterLab, Notebook and VS Code with a kernel, or a page whose widget script
loaded) the view hides its twin: it carries a hidden ``HTML`` child holding a ``<style>`` rule for the
twin's class, and a rule applies to the whole page once the widget is on it. Where it is not drawn
(nbconvert's HTML opened offline, even with the widget state that ``nbconvert --execute`` stores; GitHub;
nbviewer; the documentation site; JupyterLab opening an untrusted notebook) nothing hides the twin, and the
widget's output shows at most its one line. One picture per view, everywhere.

When the ranks are stopped (``%iris stop``, every lesson's last cell), :func:`replace_live_views` replaces each live
view by its twin: the twin gets the view's last state, the widget's output becomes an empty widget reference (which
JupyterLab hides, as it hides a closed widget's), and the widgets are closed. A notebook saved then and reopened,
with no kernel holding the widgets' models, shows the twins, and no "model not found" under them.

The HTML is built from the widget's own children, so nothing is drawn twice: the values of its ``HTML``
widgets (headers, captions, tables, heap bars) and its images as base64 PNGs, laid out as the boxes lay them
out. Controls (toggles, sliders, dropdowns) are left out: without a kernel they do nothing. No part is wider
than the box it is in (``max-width:100%``): a flex column sizes its items to their content, so a wide table
would otherwise widen every box around it past the page's column, where its own box should scroll it.

Examples
--------
>>> import ipywidgets as widgets
>>> static_html(widgets.HBox([widgets.HTML("<b>x</b>"), widgets.IntSlider()]))
'<div style="max-width:100%;display:flex;flex-flow:row wrap"><div style="max-width:100%"><b>x</b></div></div>'
"""

from __future__ import annotations

import base64
import html
import uuid
import weakref

import ipywidgets as widgets
from IPython.display import display, update_display

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# Layout traits that shape the static form as they shape the widget (trait name -> CSS property).
LAYOUT_CSS = {"margin": "margin", "width": "width", "max_width": "max-width", "flex_flow": "flex-flow",
              "grid_template_columns": "grid-template-columns", "grid_gap": "gap", "padding": "padding",
              "border": "border", "min_width": "min-width"}
FIT = "max-width:100%"  # every part of the static form: never wider than its box (see the module's docstring)
# What a widget's output becomes once its view is replaced by its twin: a reference to no model, which JupyterLab's
# widget renderer hides (as it does a closed widget's output), and a one-line text elsewhere.
NO_MODEL = {"model_id": "", "version_major": 2, "version_minor": 0}

_displayed: weakref.WeakSet = weakref.WeakSet()  # the views displayed with their twins, until replaced by them


class StaticForm:
    """Mixin for a view (an ipywidgets box): displayed, it makes its static twin and its widget (see the
    module's docstring), and :meth:`update_displays` redraws the twin after
    :mod:`~workbench.widgets.registry` refreshed the view.

    A view defines :meth:`summary`, its ``text/plain``, and may define :meth:`twin_text`, a longer text for the
    twin (what an export to text keeps). Put the mixin before the widget class:
    ``class BufferView(StaticForm, widgets.VBox)``.

    Examples
    --------
    >>> view = workbench.show("x")                           # doctest: +SKIP
    >>> sorted(view._repr_mimebundle_())                      # doctest: +SKIP
    ['application/vnd.jupyter.widget-view+json', 'text/html', 'text/plain']
    >>> view._repr_mimebundle_()["text/plain"]                # doctest: +SKIP
    "BufferView of 'x' on 2 ranks, float32[1024]"
    """

    display_id: str | None = None  # set once the view is displayed; also the class of its twin

    def summary(self) -> str:
        """One line saying what the view shows (its ``text/plain``)."""
        raise NotImplementedError

    def twin_text(self) -> str | None:
        """The twin's ``text/plain``, where a view has more to say as text than its one line (None: nothing)."""
        return None

    def _repr_mimebundle_(self, **kwargs) -> dict:
        bundle = super()._repr_mimebundle_(**kwargs)
        return {**bundle, "text/plain": self.summary(), "text/html": static_html(self)}

    def _ipython_display_(self) -> None:
        # Every display (display(view), a view as a cell's last value) makes the twin under the view's
        # display id, so that update_displays reaches each twin; the widget's output needs no update (its
        # model changes and every view of it redraws).
        if self.display_id is None:
            self.display_id = f"iris-view-{uuid.uuid4().hex}"
            self.children = (*self.children, twin_hider(self.display_id))
        bundle = self._repr_mimebundle_()
        display(static_twin(bundle["text/html"], self.display_id, self.twin_text()), raw=True,
                display_id=self.display_id)
        display({WIDGET_VIEW: bundle[WIDGET_VIEW], "text/plain": bundle["text/plain"]}, raw=True,
                display_id=f"{self.display_id}-widget")
        _displayed.add(self)

    def replace_by_twin(self) -> None:
        """Leave the twin in the view's place, as of now (see the module's docstring): its outputs get the static
        form, the widget's outputs no model, and the widgets are closed. Nothing for a view never displayed."""
        if self.display_id is None or getattr(self, "comm", None) is None:
            return
        self.update_displays()
        update_display({WIDGET_VIEW: NO_MODEL, "text/plain": self.summary()}, raw=True,
                       display_id=f"{self.display_id}-widget")
        _close_all(self)
        _displayed.discard(self)

    def update_displays(self) -> None:
        """Send the twins of this view its current static HTML, so that what a saved notebook shows
        without a widget manager follows the widget; nothing when the view was never displayed on its own."""
        if self.display_id is not None:
            update_display(static_twin(static_html(self), self.display_id, self.twin_text()), raw=True,
                           display_id=self.display_id)


def replace_live_views() -> int:
    """Replace every live view displayed with its twin (:meth:`StaticForm.replace_by_twin`): what ``%iris stop``
    does once the ranks are gone, so that a notebook saved afterwards reopens without the widgets' errors. The
    number of views replaced."""
    views = [view for view in list(_displayed) if getattr(view, "comm", None) is not None]
    for view in views:
        view.replace_by_twin()
    return len(views)


def _close_all(widget: widgets.Widget) -> None:
    """Close ``widget`` and every widget under it (a box's close leaves its children open)."""
    for child in getattr(widget, "children", ()):
        _close_all(child)
    widget.close()


def static_twin(static: str, twin_class: str, text: str | None = None) -> dict:
    """The output bundle of a view's twin: its static HTML in a ``div`` that :func:`twin_hider` can hide, and
    ``text`` as its ``text/plain`` when given.

    Examples
    --------
    >>> static_twin("<b>x</b>", "iris-view-1")
    {'text/html': '<div class="iris-static iris-view-1"><b>x</b></div>'}
    """
    bundle = {"text/html": f'<div class="iris-static {twin_class}">{static}</div>'}
    if text is not None:
        bundle["text/plain"] = text
    return bundle


def twin_hider(twin_class: str) -> widgets.HTML:
    """A hidden ``HTML`` widget whose ``<style>`` hides the twin of class ``twin_class`` and, in JupyterLab
    and nbconvert's pages, the output row around it (so no empty row is left): drawn only where the widget
    is, it hides the twin exactly where the widget stands in for it. A ``<style>`` applies while it is in
    the page, shown or not; ipywidgets sets an ``HTML`` widget's value unsanitized (its kernel is trusted).

    Examples
    --------
    >>> twin_hider("iris-view-1").value
    '<style>.iris-view-1, .jp-OutputArea-child:has(.iris-view-1) { display: none !important; }</style>'
    """
    rule = f".{twin_class}, .jp-OutputArea-child:has(.{twin_class}) {{ display: none !important; }}"
    return widgets.HTML(f"<style>{rule}</style>", layout=widgets.Layout(display="none"))


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
    '<img src="data:image/png;base64,UE5HLi4u" alt="rank 0" style="max-width:100%">'
    """
    if not isinstance(widget, widgets.DOMWidget) or widget.layout.display == "none":
        return ""
    if isinstance(widget, widgets.Image):
        if not widget.value:
            return ""
        data = base64.b64encode(widget.value).decode("ascii")
        return (f'<img src="data:image/{widget.format};base64,{data}" alt="{html.escape(getattr(widget, "alt", ""))}"'
                f'{_style(widget, (FIT,))}>')
    if isinstance(widget, widgets.HTML):
        return f"<div{_classes(widget)}{_style(widget, (FIT,))}>{widget.value}</div>" if widget.value else ""
    if isinstance(widget, widgets.Box):
        if isinstance(widget, widgets.GridBox):
            flex = (FIT, "display:grid")
        elif isinstance(widget, widgets.VBox):
            flex = (FIT, "display:flex", "flex-direction:column", "align-items:flex-start")
        else:
            flex = (FIT, "display:flex", "flex-flow:row wrap")
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
