"""Recording one rank's traffic: :func:`record` and :class:`TrafficRecorder`.

On the CPU backend the recorder is an observer of the interpreter (:mod:`iris.interpret.access_events`): it
sees every load, store and atomic of every launch, whichever API made it, and places each lane's address in a
heap by the heap bases (as the race checker does), so the count is exact. It is added on ``__enter__`` and
removed on ``__exit__``, also when the block raises: outside a recording it costs nothing. It runs beside the
race checker: each atomic is performed once, inside both.

On the CUDA backend there is no interpreter to watch: the recorder captures device tracing (``ctx.tracing``:
enabled if it is not, and left enabled; else reset) and reads the events back on exit (:mod:`.from_trace`). It
then counts only the operations of kernels whose device context is initialised with ``tracing=True``, and only
their remote side (see :mod:`.from_trace`), all launches of the block as one. ``record(ctx, source="trace")``
counts that way on the CPU too: what a GPU run of the same kernels would report.

Examples
--------
>>> with iris.instruments.traffic.record(ctx) as rec:            # doctest: +SKIP
...     kernel[(4,)](...)
>>> rec.launches[0].moved("store", heap_rank=1)        # doctest: +SKIP
4096
>>> print(rec.matrix().to_text())                      # doctest: +SKIP   (collective: every rank calls it)
"""

from __future__ import annotations

import numpy as np

from ...interpret import access_events
from .. import operations
from .from_trace import traced_launches
from .launch import LaunchTraffic, kind_index
from .matrix import SOURCES, TrafficMatrix
from .per_operation import TrafficByOperation, per_operation

TRACE_CAPACITY = 1_000_000  # events per rank when the recorder enables tracing itself (upstream's default)


def record(ctx, source: str | None = None) -> TrafficRecorder:
    """A recorder of this rank's traffic in ``ctx``'s heaps, for a ``with`` block (every rank records its own).

    Parameters
    ----------
    ctx : iris.Iris
        The context whose symmetric heaps are watched.
    source : {None, "interpreter", "trace"}
        How to count: None picks ``"interpreter"`` (exact) on the CPU backend and ``"trace"`` on CUDA;
        ``"trace"`` on the CPU shows what a GPU run would report.

    Raises
    ------
    ValueError
        For an unknown source, or ``"interpreter"`` on a backend that runs no interpreter.

    Examples
    --------
    >>> with iris.instruments.traffic.record(ctx) as rec:     # doctest: +SKIP
    ...     all_gather_kernel[(grid,)](...)
    >>> m = rec.matrix()                            # doctest: +SKIP
    """
    return TrafficRecorder(ctx, source)


class TrafficRecorder:
    """This rank's traffic, one :class:`~iris.instruments.traffic.launch.LaunchTraffic` per launch while recording.

    Attributes
    ----------
    launches : list of LaunchTraffic
        In launch order (on CUDA: one, for every traced launch of the block).
    source : str
        How the bytes were counted: ``"interpreter"`` (exact) or ``"trace"``.
    dropped_events : int
        On CUDA, the events the trace buffers had no room for (their bytes are missing); 0 on the CPU.
    """

    def __init__(self, ctx, source: str | None = None):
        self.ctx = ctx
        self.rank, self.world = ctx.cur_rank, ctx.num_ranks
        self.source = source or ("interpreter" if ctx.backend == "cpu" else "trace")
        if self.source not in SOURCES:
            raise ValueError(f"rank {self.rank}: traffic source {self.source!r}: use 'interpreter' or 'trace'")
        if self.source == "interpreter" and ctx.backend != "cpu":
            raise ValueError(f"rank {self.rank}: traffic source 'interpreter' needs the CPU backend (this context's "
                             f"is {ctx.backend}): on GPUs the count comes from tracing, source='trace' (the default)")
        self.launches: list[LaunchTraffic] = []
        self.recording = False
        self.dropped_events = 0
        bases = np.array(ctx.heap.bases, dtype=np.uint64)
        self._order = np.argsort(bases)
        self._sorted_bases = bases[self._order]
        self._heap_size = np.uint64(ctx.heap.size)
        self._current: LaunchTraffic | None = None

    # -- recording ----------------------------------------------------------------------------------------
    def start(self) -> TrafficRecorder:
        """Start counting (forgetting what an earlier recording counted); :meth:`stop` ends it."""
        self.launches = []
        if self.source == "interpreter":
            access_events.add_observer(self)
        elif self.ctx.tracing.enabled:
            self.ctx.tracing.reset()
        else:
            self.ctx.tracing.enable(max_events=TRACE_CAPACITY)
        self.recording = True
        return self

    def stop(self) -> None:
        """Stop counting; on CUDA, read the captured events (nothing happens when not recording)."""
        if not self.recording:
            return
        self.recording = False
        if self.source == "interpreter":
            access_events.remove_observer(self)
            self._current = None
        else:
            trace = self.ctx.tracing.trace()
            self.launches = [traced_launches(trace["traceEvents"], self.world)[self.rank]]
            self.dropped_events = trace["metadata"]["dropped_events"]

    def __enter__(self) -> TrafficRecorder:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- results ------------------------------------------------------------------------------------------
    def matrix(self, launch: int | None = None) -> TrafficMatrix:
        """Every rank's traffic as one :class:`TrafficMatrix` (COLLECTIVE: every rank calls it, after recording).

        Parameters
        ----------
        launch : int, optional
            The launch (0 for each rank's first); None sums every launch of the recording.

        Examples
        --------
        >>> rec.matrix(launch=0).total("store", remote_only=True)     # doctest: +SKIP
        8192
        """
        if self.recording:
            raise RuntimeError(f"rank {self.rank}: traffic matrix asked while still recording: leave the "
                               "`with iris.instruments.traffic.record(ctx)` block (or call stop()) first")
        everyone = self.ctx.group.all_gather_object(self.launches)
        return TrafficMatrix.from_launches(everyone, launch=launch, source=self.source)

    def per_operation(self) -> TrafficByOperation:
        """Every rank's traffic per named operation (COLLECTIVE: every rank calls it, after recording): one
        matrix per collective of a training step, each beside its minimum where :mod:`.minimum` has one.

        Examples
        --------
        >>> with iris.instruments.traffic.record(ctx) as rec:                 # doctest: +SKIP
        ...     loss.backward()                                              # DDP's bucketed all-reduces
        >>> print(rec.per_operation().text())                               # doctest: +SKIP
        """
        if self.recording:
            raise RuntimeError(f"rank {self.rank}: traffic per operation asked while still recording: leave the "
                               "`with iris.instruments.traffic.record(ctx)` block (or call stop()) first")
        everyone = self.ctx.group.all_gather_object(self.launches)
        return per_operation(everyone, self.source)

    # -- observer of the interpreter (iris.interpret.access_events) -----------------------------------------
    def launch_started(self, kernel: str) -> None:
        # The named operation running now (a collective of the iris backend): what per_operation groups by.
        self._current = LaunchTraffic.empty(kernel, self.rank, self.world, operations.current())
        self.launches.append(self._current)

    def launch_finished(self) -> None:
        self._current = None

    def program_started(self, program_id, grid) -> None:
        pass  # bytes are counted per launch, whichever program moved them

    def access(self, kind: str, addresses, mask, itemsize: int) -> None:
        self._count(kind, addresses, mask, itemsize)

    def atomic(self, kind: str, addresses, mask, itemsize: int, sem: str, perform):
        result, _ = perform()  # every lane performed counts, whether it wrote or not (see .launch)
        self._count("atomic", addresses, mask, itemsize, op=kind)
        return result

    def _count(self, kind, addresses, mask, itemsize, op=None) -> None:
        launch = self._current
        wanted = addresses[mask]
        if launch is None or wanted.size == 0:
            return
        index = np.searchsorted(self._sorted_bases, wanted, side="right") - 1
        offsets = wanted - self._sorted_bases[index]  # below every base: wraps around to a huge offset
        inside = (index >= 0) & (offsets < self._heap_size)
        outside = wanted.size - int(inside.sum())
        if outside:
            launch.outside[kind_index(kind)] += outside * itemsize
        if outside == wanted.size:
            return
        lanes = np.bincount(self._order[index[inside]], minlength=self.world)
        for heap_rank in np.flatnonzero(lanes):
            launch.add(kind, int(heap_rank), int(lanes[heap_rank]) * itemsize, op=op)
