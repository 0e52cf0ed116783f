"""The notebook's current workbench: the cluster that ``%iris start`` or :func:`start` made last.

One per notebook kernel. The views (:mod:`workbench.views`) and the magics ask for it with :func:`current`.

Examples
--------
>>> wb = workbench.start(n=2, backend="cpu")      # doctest: +SKIP
>>> workbench.current() is wb                     # doctest: +SKIP
True
"""

from __future__ import annotations

from .cluster import Workbench
from .report import WorkbenchError

_current: Workbench | None = None


def start(n: int = 4, backend: str = "auto", heap_size: int | str = "64MiB", **options) -> Workbench:
    """Start ``n`` ranks and make them the current workbench (stopping the previous one, which is reported only
    when it did not stop cleanly).

    Parameters
    ----------
    n, backend, heap_size
        See :class:`Workbench`; ``options`` are its other keyword arguments (``engines``, ``timeout``...).

    Examples
    --------
    >>> wb = workbench.start(n=4, backend="cpu")      # doctest: +SKIP
    """
    global _current
    if _current is not None and _current.running:
        report = _current.stop()
        if not report.ok:
            print(f"the previous ranks: {report}")
    _current = Workbench(n=n, backend=backend, heap_size=heap_size, **options).start()
    return _current


def current() -> Workbench:
    """The workbench started last; a :class:`WorkbenchError` saying how to start one if there is none."""
    if _current is None:
        raise WorkbenchError("no workbench yet: start one with %iris start -n N or workbench.start(n=N)")
    return _current
