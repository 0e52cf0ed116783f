"""The views of the current workbench, one function each: every rank's buffer, the heap, ``as_remote``, the
timeline, the bench view, the traffic matrix, the topology (each a widget with a static twin; ``workbench.views``
functions are re-exported as ``workbench.show``, ``workbench.heap``...).

Examples
--------
>>> workbench.show("x")                          # doctest: +SKIP
"""

from __future__ import annotations

from .session import current
from .stepping import start_stepping
from .traffic_capture import last_view as _traffic_view


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


def sweep(collective: str = "all_reduce", sizes=None, dtype="bfloat16", peers: bool = True, *,
          timeout: float | None = None):
    """One collective of ``ctx.ccl`` over sizes at this world size, beside its peers (NCCL; for all_reduce on GPUs
    also NCCL's symmetric kernels and torch symmetric memory's): a
    :class:`~workbench.widgets.sweep_view.SweepView` (per size what ran and what chose it, µs, bus GB/s against the
    link; static form included). See :func:`workbench.bench_view.sweep` and :func:`iris.perf.sweep`.

    Examples
    --------
    >>> workbench.sweep("all_reduce", sizes=[8 << 10, 1 << 20, 64 << 20])     # doctest: +SKIP
    """
    from .bench_view import sweep as sweep_on_ranks

    return sweep_on_ranks(collective, sizes, dtype, peers, timeout=timeout)


def traffic(need=None, launch=None, label="", operation=None):
    """The bytes each rank loaded from, stored to and atomically updated at each rank's heap in the last
    ``%%iris_kernel --traffic`` cell: a :class:`~workbench.widgets.traffic_view.TrafficView` (heat maps and table),
    or, for a cell whose launches ran in named operations (a training step on the ``iris`` backend), an
    :class:`~workbench.widgets.traffic_view.OperationsTrafficView` (a row per operation, the maps of the one chosen).

    ``need``: what the operation must move across ranks, bytes or a matrix of :mod:`iris.traffic.minimum`, shown
    beside what moved; ``launch``: one launch (0: each rank's first), default all of the cell's; ``label``: what
    to call it in the title, beside the kernel's name (which variant ran, when one kernel has several);
    ``operation``: one named operation alone (its number in the table, or its label), beside its minimum.

    Examples
    --------
    >>> workbench.traffic(need=iris.traffic.minimum.all_gather(X_local.nbytes, 2), launch=0)   # doctest: +SKIP
    >>> workbench.traffic(need=need, launch=0, label="one_shot")                                 # doctest: +SKIP
    >>> workbench.traffic(operation="all_reduce · DDP bucket 1").matrix.ratio()                 # doctest: +SKIP
    1.0
    """
    return _traffic_view(need, launch, label, operation)


def step(code: str, order=None, race=None, hold: bool = False):
    """Run ``code`` on every CPU rank, each held before every access to a symmetric heap, as ``%%iris_kernel --step``
    does: a :class:`~workbench.stepping.SteppedRun` (displayed, the stepper view), every rank held at its first
    access. ``order``: a saved order (file), an :class:`~iris.instruments.stepping.Order` or a list of ranks, whose
    steps are taken at once. ``race``: a race the checker found (``cell_races(wb).races[0]``), made to happen: its
    reading access before its write (:func:`iris.instruments.stepping.make_it_happen`), and what it read printed;
    with ``hold``, the run stops just before the first of the two accesses instead (what is held where printed), to
    be walked in the view or finished with ``run.replay_race(race)``. The transcript marks the race's two steps.

    Examples
    --------
    >>> run = workbench.step(MESSAGE_PASSING)              # doctest: +SKIP
    >>> run.step(1); run.step(0); run.run_to_end()         # doctest: +SKIP
    >>> print(run.transcript)                              # doctest: +SKIP
    >>> run = workbench.step("shift_and_sum(barrier=False)", race=race)   # doctest: +SKIP
    >>> walk = workbench.step("shift_and_sum(barrier=False)", race=race, hold=True)   # doctest: +SKIP
    """
    run = start_stepping(current(), code)
    if order is not None:
        run.replay(order)
    if race is not None:
        print(run.hold_at_race(race) if hold else run.replay_race(race))
    return run


def topology():
    """Who reaches whom among the ranks: a :class:`~workbench.widgets.topology_view.TopologyView` of
    ``ctx.topology`` (rank x rank matrix coloured by link, ranks by host, the summary line; static form included).

    Examples
    --------
    >>> workbench.topology()                         # doctest: +SKIP
    """
    from .widgets import TopologyView

    return TopologyView(current().pull("ctx.topology", ranks=[0])[0])
