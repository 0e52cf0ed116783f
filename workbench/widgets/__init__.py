"""Widgets that show what every rank holds: :class:`BufferView`, :class:`HeapInspector`, :class:`RemoteView`; when
each did what: :class:`TimelineView`; what the kernels moved: :class:`TrafficView`; who reaches whom:
:class:`TopologyView`; and how fast, against the GPU's roofs: :class:`BenchView`, and one collective over sizes
beside torch.distributed's: :class:`SweepView`; a stepped run, its ranks held between two steps: :class:`StepperView`.

Each rank reduces its data before sending it (:mod:`.reduce`, called through :mod:`.probes`), so the
notebook receives a few hundred kB per rank whatever the tensor's size; :mod:`.render` draws the PNGs,
:mod:`.registry` keeps the views ``%%iris_kernel --show NAME`` refreshes in place, and :mod:`.static` gives
every view's output a static form (its pictures and tables) for where no widget manager runs.

The engines import :mod:`.probes` (and :mod:`.reduce`) to answer the views; this package's ``__init__``
loads the widget classes only when asked, so engines never import ipywidgets or matplotlib.

Examples
--------
>>> workbench.show("x")                 # doctest: +SKIP
>>> workbench.heap()                    # doctest: +SKIP
>>> workbench.remote("x", rank=1)       # doctest: +SKIP
"""

from __future__ import annotations

import importlib

_CLASSES = {"BufferView": ".buffer_view", "HeapInspector": ".heap_inspector", "RemoteView": ".remote_view",
            "TimelineView": ".timeline", "TrafficView": ".traffic_view", "BenchView": ".roofline_view",
            "TopologyView": ".topology_view", "SweepView": ".sweep_view", "StepperView": ".stepper_view"}


def __getattr__(name: str):
    if name in _CLASSES:
        return getattr(importlib.import_module(_CLASSES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_CLASSES)
