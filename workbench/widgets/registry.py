"""The live views, by what they show, so a cell refreshes them in place instead of adding outputs.

A view is a widget: refreshing it changes its model, and every output showing that model redraws. So
``%%iris_kernel --show NAME`` (:func:`after_cell`) refreshes the live views of NAME and displays nothing
when one of them sits in another cell's output. It displays a view only when NAME has none, or when its
views were all shown by this very cell: re-running a cell clears its outputs, so those views were no
longer on the page; the refreshed view is displayed again (its diff marks then show what the re-run changed).
A refreshed view also sends its outputs its new static form (:meth:`~.static.StaticForm.update_displays`).

A newer view of the same thing replaces the older one here; the older one stays as it was drawn.

Examples
--------
>>> view = track(("show", "x"), BufferView(wb, "x"))       # doctest: +SKIP
>>> after_cell(wb, ["x"])                                  # refreshes view, displays nothing  # doctest: +SKIP
"""

from __future__ import annotations

from IPython import get_ipython
from IPython.display import display

from ..report import WorkbenchError

_views: dict[tuple, tuple[object, str | None]] = {}  # key -> (newest view of it, id of the cell showing it)


def current_cell() -> str | None:
    """The id of the notebook cell being run (JupyterLab and Notebook 7 send it), else None."""
    kernel = getattr(get_ipython(), "kernel", None)
    parent = kernel.get_parent("shell") if kernel is not None else None
    return (parent or {}).get("metadata", {}).get("cellId")


def track(key: tuple, view):
    """Remember ``view``, about to be shown by the running cell, as the live view for ``key`` (e.g.
    ``("show", "x")``, ``("remote", "x", 1)``); return it."""
    _views[key] = (view, current_cell())
    return view


def is_live(view) -> bool:
    """False once the widget was closed (``Widget.close()`` drops its comm)."""
    return getattr(view, "comm", None) is not None


def views_of(name: str) -> list[tuple[tuple, object, str | None]]:
    """(key, view, cell id) of the live views showing variable ``name``; closed ones are forgotten."""
    for key in [k for k, (view, _) in _views.items() if not is_live(view)]:
        del _views[key]
    return [(key, view, cell) for key, (view, cell) in _views.items() if getattr(view, "name", None) == name]


def after_cell(wb, names) -> None:
    """Refresh the live views of each of ``names``; display a BufferView where no view of it is on the page
    (a name no rank holds as a tensor is skipped: the printed summary already says what it is)."""
    from .buffer_view import BufferView

    cell = current_cell()
    for name in names:
        live = views_of(name)
        for _, view, _ in live:
            view.wb = wb  # the workbench may have been started anew since the view was made
            view.refresh()
            view.update_displays()  # its outputs' static form (what a saved notebook keeps) follows
        if any(shown_in is None or shown_in != cell for _, _, shown_in in live):
            continue  # on the page in another cell (or, outside a notebook, wherever it was shown)
        buffer_views = [(key, view) for key, view, _ in live if isinstance(view, BufferView)]
        if buffer_views:
            key, view = buffer_views[0]
        else:
            try:
                key, view = ("show", name), BufferView(wb, name)
            except WorkbenchError:
                continue
        display(track(key, view))
