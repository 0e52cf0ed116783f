"""Device tracing across the workbench's ranks: start a capture on every rank, gather and merge it.

``%%iris_kernel --trace`` calls :func:`start_capture` before its cell and shows :func:`timeline_view` after
it; ``%iris timeline`` shows the last capture again; :func:`merged_trace` gives the merged Chrome trace /
Perfetto JSON (and writes it when asked), the same as ``ctx.tracing.export(..., merge=True)`` writes from a
script, with each location named after the variable holding it.

Examples
--------
>>> start_capture(wb)                                    # doctest: +SKIP
>>> wb.run(cell)                                         # kernels initialised with tracing=True
>>> merged_trace(wb, "trace.json")["metadata"]["total_events"]   # doctest: +SKIP
120
"""

from __future__ import annotations

import json

from iris.instruments.tracing.host import merge_traces

from .report import RankError, ranks_phrase
from .widgets import probes

DEFAULT_MAX_EVENTS = 1_000_000  # upstream's default; 13 fields per event: ~50 MB per rank
CPU_NOTE = ("CPU interpreter: the programs of a launch run one after another and every operation costs what the "
            "interpreter costs, so durations are illustrative; the order of events and who waited on whom are real.")


def start_capture(wb, max_events: int = DEFAULT_MAX_EVENTS, ranks=None) -> None:
    """Enable (or reset) ``ctx.tracing`` on ``ranks`` (default: all), so the next kernels' events are a
    fresh capture. Only kernels whose device context is initialised with ``tracing=True`` record."""
    wb.apply(probes.start_tracing, max_events, ranks=ranks)


def merged_trace(wb, filename: str | None = None, ranks=None) -> dict:
    """Every rank's events on one timeline (:func:`iris.tracing.host.merge_traces`); written to ``filename``
    (open it at https://ui.perfetto.dev) when given.

    Raises
    ------
    RankError
        Naming the ranks where tracing was never enabled, and what to do.
    """
    answers = wb.apply(probes.rank_trace, ranks=ranks)
    missing = [a for a in answers if a["status"] != "ok"]
    if missing:
        raise RankError(f"{ranks_phrase([a['rank'] for a in missing])}: {missing[0]['message']}")
    merged = merge_traces([a["trace"] for a in answers])
    if filename is not None:
        with open(filename, "w") as f:
            json.dump(merged, f)
    return merged


def timeline_view(wb, ranks=None, filename: str | None = None):
    """A :class:`~workbench.widgets.timeline.TimelineView` of the ranks' current capture (also written to
    ``filename`` when given: :func:`merged_trace`)."""
    from iris.instruments.tracing.timeline import Timeline

    from .widgets.timeline import TimelineView

    trace = merged_trace(wb, filename, ranks=ranks)
    note = CPU_NOTE if trace["metadata"].get("backend") == "cpu" else ""
    return TimelineView(Timeline.from_trace(trace), note=note)
