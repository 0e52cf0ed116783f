"""The traffic matrix: the bytes each rank loaded from, stored to and atomically updated at each rank's heap.

For one launch or several, beside the minimum the operation needs, so that a kernel that moves many times
what an all-gather needs shows it before any GPU. Modules, one idea each:

* :mod:`.launch`: :class:`LaunchTraffic`, one rank's launch, and the counting rules (bytes per lane not
  masked off; atomics once per lane performed, a failed compare-and-swap included; accesses outside every heap
  counted apart);
* :mod:`.recorder`: :func:`record` / :class:`TrafficRecorder`: on the CPU backend, exact, from the accesses
  the interpreter reports (it runs beside the race checker, and costs nothing outside a recording); on CUDA,
  from device tracing (only kernels initialised with ``tracing=True``);
* :mod:`.matrix`: :class:`TrafficMatrix`, every rank's traffic, ``bytes[issuing rank, heap rank, kind]``,
  as text and HTML, with :meth:`~TrafficMatrix.with_minimum`; :meth:`TrafficMatrix.from_trace` for a trace;
* :mod:`.from_trace`: how trace events become bytes;
* :mod:`.minimum`: what each collective (all-gather, all-reduce, reduce-scatter, all-to-all, broadcast, reduce,
  gather, scatter) and a send must move;
* :mod:`.per_operation`: a recording's launches grouped by the named operation they ran in (the collectives of a
  training step on the ``iris`` torch.distributed backend, :mod:`iris.instruments.operations`), a matrix each.

This package imports nothing of the workbench, ipyparallel or ipywidgets.

Examples
--------
>>> with iris.instruments.traffic.record(ctx) as rec:                           # doctest: +SKIP   (on every rank)
...     ag_gemm[(grid,)](...)
>>> need = iris.instruments.traffic.minimum.all_gather(X_local.nbytes, ctx.num_ranks)
>>> m = rec.matrix(launch=0).with_minimum(need)                     # doctest: +SKIP   (collective)
>>> print(m.to_text())                                               # doctest: +SKIP
traffic of ag_gemm on 2 ranks: 8.0 KiB crossed ranks, 8.0 KiB needed (1.00× the minimum), ...
"""

from . import minimum
from .launch import KINDS, LaunchTraffic
from .matrix import TrafficMatrix
from .per_operation import OperationTraffic, TrafficByOperation, per_operation
from .recorder import TrafficRecorder, record

__all__ = ["KINDS", "LaunchTraffic", "OperationTraffic", "TrafficByOperation", "TrafficMatrix", "TrafficRecorder",
           "minimum", "per_operation", "record"]
