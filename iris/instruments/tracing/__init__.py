"""Device tracing with upstream Iris's API: what every remote operation and atomic did, and when.

* :mod:`iris.language.trace_events`: the one description of an event (ids, names, buffers, device-context
  slots), and :class:`TraceEvent`; :mod:`iris.language.tracing`: :class:`DeviceTracing`, ``ctx.tracing`` in
  kernels (``record_event_start/end``): the device side, a layer below;
* :mod:`.host`: :class:`Tracing`, ``ctx.tracing`` on the host (``enable``, ``reset``, ``export``), and
  :func:`~.host.merge_traces`;
* :mod:`.timeline`: a merged trace read as spans per rank and program, release -> acquire arrows and a per-rank
  table (what the workbench's timeline draws).

Examples
--------
>>> ctx.tracing.enable()                                           # doctest: +SKIP
>>> # in a kernel: ctx = DeviceContext.initialize(context, rank, world, tracing=True)
>>> ctx.tracing.export("trace.json", merge=True)                   # doctest: +SKIP
"""

from ...language.trace_events import EVENT_NAMES, TraceEvent
from ...language.tracing import DeviceTracing
from .host import Tracing

__all__ = ["EVENT_NAMES", "DeviceTracing", "TraceEvent", "Tracing"]
