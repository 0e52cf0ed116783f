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
from .session import current, start
from .shutdown import StopReport
from .views import bench, heap, remote, show, step, sweep, timeline, topology, traffic


def load_ipython_extension(ipython) -> None:
    """``%load_ext workbench``: register the ``%iris`` and ``%%iris_kernel`` magics."""
    from .magics import IrisMagics

    ipython.register_magics(IrisMagics)


__all__ = [
    "CellReport", "RankError", "RankResult", "StopReport", "Workbench", "WorkbenchError",
    "bench", "current", "heap", "load_ipython_extension", "remote", "show", "start", "step", "sweep", "timeline",
    "topology", "traffic",
]
