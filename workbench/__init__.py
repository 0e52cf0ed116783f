"""workbench: a cluster of iris ranks in a Jupyter notebook, and the ``%iris`` / ``%%iris_kernel`` magics.

Examples
--------
In a notebook::

    %load_ext workbench
    %iris start -n 4 --backend cpu --heap 64MiB

    %%iris_kernel --timeout 30
    x = ctx.full((4,), float(rank))
    print(rank, x)

From Python:

>>> wb = workbench.start(n=2, backend="cpu", heap_size="16MiB")     # doctest: +SKIP
>>> wb.pull("rank")                                                  # doctest: +SKIP
[0, 1]

Kernels defined in a cell are compiled by every rank: each engine JITs them itself. On a GPU the
engines share Triton's cache directory (``TRITON_CACHE_DIR``, inherited from the notebook, by default
``~/.triton/cache``) and cell source is registered under a name derived from its text, so the first rank
to compile a kernel writes the binary and the others load it from the cache instead of compiling again;
they still pay Triton's per-process launch preparation. On the CPU the interpreter compiles nothing.

Collective calls (allocating on the heap, ``ctx.barrier()``) wait for every rank: in a cell run on some
ranks only (``--ranks``) they wait until the timeout, and a rank blocked in one ignores SIGINT, so the
cluster is restarted.
"""

from __future__ import annotations

from .cluster import Workbench
from .report import CellReport, RankError, RankResult, WorkbenchError
from .shutdown import StopReport
from .traffic_capture import last_view as _traffic_view

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


def show(name: str, **options):
    """Every rank's copy of tensor ``name`` side by side: a :class:`~workbench.widgets.BufferView`.

    ``name`` may also be an expression (``"x[0]"``); ``options`` go to the view (``max_side``,
    ``reduction="maxabs"``, ``ranks``). ``%%iris_kernel --show NAME`` refreshes the view after its cell.

    Examples
    --------
    >>> workbench.show("x")                          # doctest: +SKIP
    """
    from .widgets import BufferView, registry

    return registry.track(("show", name), BufferView(current(), name, **options))


def heap():
    """Every rank's symmetric heap, allocations named after variables: a
    :class:`~workbench.widgets.HeapInspector`.

    Examples
    --------
    >>> workbench.heap()                             # doctest: +SKIP
    """
    from .widgets import HeapInspector, registry

    return registry.track(("heap",), HeapInspector(current()))


def remote(name: str, rank: int, **options):
    """Rank ``rank``'s copy of ``name`` read by every rank through ``ctx.as_remote``, with the addresses:
    a :class:`~workbench.widgets.RemoteView`.

    Examples
    --------
    >>> workbench.remote("x", rank=1)                # doctest: +SKIP
    """
    from .widgets import RemoteView, registry

    return registry.track(("remote", name, rank), RemoteView(current(), name, rank, **options))


def timeline(ranks=None):
    """When each rank did what in the last traced cell: a :class:`~workbench.widgets.timeline.TimelineView`
    (one lane per rank or program, bars by kind, release -> acquire arrows, zoom, hover details).

    Trace a cell with ``%%iris_kernel --trace`` (its kernels initialise their device context with
    ``tracing=True``); ``workbench.tracing.merged_trace(wb, "trace.json")`` writes the same events for Perfetto.

    Examples
    --------
    >>> workbench.timeline()                         # doctest: +SKIP
    """
    from .tracing import timeline_view

    return timeline_view(current(), ranks=ranks)


def bench(candidates, flops=None, bytes=None, peer_bytes=None, **options):  # noqa: A002
    """Time callables on every rank in step and show how far each is from the GPU: a
    :class:`~workbench.widgets.roofline_view.BenchView` (table, roofline, times; static form included).

    ``candidates`` maps a label to an expression each rank evaluates to a zero-argument callable; ``flops``,
    ``bytes`` and ``peer_bytes`` are one call's work. See :func:`workbench.bench_view.bench` and
    :func:`iris.perf.compare`.

    Examples
    --------
    >>> workbench.bench({"iris": "lambda: ctx.ccl.all_reduce(out, inp)", "NCCL": "nccl_all_reduce"},
    ...                 bytes=2 * inp.nbytes)                                # doctest: +SKIP
    """
    from .bench_view import bench as bench_on_ranks

    return bench_on_ranks(candidates, flops, bytes, peer_bytes, **options)


def traffic(need=None, launch=None):
    """The bytes each rank loaded from, stored to and atomically updated at each rank's heap in the last
    ``%%iris_kernel --traffic`` cell: a :class:`~workbench.widgets.traffic_view.TrafficView` (heat maps and table).

    ``need``: what the operation must move across ranks, bytes or a matrix of :mod:`iris.traffic.minimum`, shown
    beside what moved; ``launch``: one launch (0: each rank's first), default all of the cell's.

    Examples
    --------
    >>> workbench.traffic(need=iris.traffic.minimum.all_gather(X_local.nbytes, 2), launch=0)   # doctest: +SKIP
    """
    return _traffic_view(need, launch)


def topology():
    """Who reaches whom among the ranks: a :class:`~workbench.widgets.topology_view.TopologyView` of
    ``ctx.topology`` (rank x rank matrix coloured by link, ranks by host, the summary line; static form included).

    Examples
    --------
    >>> workbench.topology()                         # doctest: +SKIP
    """
    from .widgets import TopologyView

    return TopologyView(current().pull("ctx.topology", ranks=[0])[0])


def load_ipython_extension(ipython) -> None:
    """``%load_ext workbench``: register the ``%iris`` and ``%%iris_kernel`` magics."""
    from .magics import IrisMagics

    ipython.register_magics(IrisMagics)


__all__ = [
    "CellReport", "RankError", "RankResult", "StopReport", "Workbench", "WorkbenchError",
    "bench", "current", "heap", "load_ipython_extension", "remote", "show", "start", "timeline", "topology",
    "traffic",
]
