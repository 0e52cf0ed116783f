"""The traffic matrix across the workbench's ranks: record a cell's launches on every rank, gather, show.

``%%iris_kernel --traffic [LABEL]`` calls :func:`start_recording` before its cell and shows :func:`cell_view`
after it; ``%iris traffic [--launch K] [--need BYTES] [--label TEXT]`` and ``workbench.traffic(need=None, launch=None,
label="")`` show the last recording again (:func:`last_view`). On the CPU backend the count is exact (every access the
interpreter makes); on CUDA it comes from device tracing, so only kernels initialised with ``tracing=True``
count, and the view says so (:mod:`iris.traffic`).

Each rank answers its own launches (:mod:`.widgets.probes`); the matrix is put together here, in the notebook,
so no collective runs on the ranks and a cell of some ranks (``--ranks``) shows what those ranks moved.

Examples
--------
>>> start_recording(wb)                                   # doctest: +SKIP
>>> wb.run(cell)                                          # doctest: +SKIP
>>> cell_view(wb).matrix.total(remote_only=True)          # doctest: +SKIP
8192
"""

from __future__ import annotations

from dataclasses import replace

from iris.instruments.traffic import TrafficMatrix

from .report import RankError, ranks_phrase
from .widgets import probes

_last: dict | None = None  # the last recording: every rank's launches and how they were counted


def start_recording(wb, ranks=None) -> None:
    """Record the traffic of every later launch on ``ranks`` (default: all), until :func:`stop_recording`."""
    wb.apply(probes.start_traffic, ranks=ranks)


def stop_recording(wb, ranks=None) -> None:
    """End the recording on ``ranks`` and keep every rank's launches for :func:`last_view` (ranks that recorded
    nothing count as having made no launch)."""
    global _last
    answers = wb.apply(probes.stop_traffic, ranks=ranks)
    per_rank = [[] for _ in range(wb.world_size)]
    for answer in answers:
        per_rank[answer["rank"]] = answer["launches"]
    recorded = [a for a in answers if a["status"] == "ok"]
    _last = {"launches": per_rank, "source": recorded[0]["source"] if recorded else "interpreter",
             "dropped_events": sum(a.get("dropped_events", 0) for a in recorded),
             "ranks": [a["rank"] for a in recorded]}


def last_matrix(need=None, launch: int | None = None, label: str = "") -> TrafficMatrix:
    """The :class:`~iris.traffic.TrafficMatrix` of the last recording: launch ``launch`` of every rank (None: all
    of the cell's launches), with ``need`` (bytes, or a ``(world, world)`` matrix from
    :mod:`iris.traffic.minimum`) beside it, and ``label`` (e.g. which variant of the kernel ran) in its headline.

    Raises
    ------
    RankError
        When nothing was recorded yet, or a rank did not make launch ``launch``.
    """
    if _last is None:
        raise RankError("no traffic recorded yet: run a cell with %%iris_kernel --traffic first")
    try:
        matrix = TrafficMatrix.from_launches(_last["launches"], launch=launch, source=_last["source"])
    except IndexError as exc:
        raise RankError(str(exc)) from None
    matrix = replace(matrix, label=label)
    return matrix if need is None else matrix.with_minimum(need)


def last_view(need=None, launch: int | None = None, label: str = ""):
    """A :class:`~workbench.widgets.traffic_view.TrafficView` of :func:`last_matrix`."""
    from .widgets.traffic_view import TrafficView

    return TrafficView(last_matrix(need, launch, label), note=_note())


def cell_view(wb, ranks=None, need=None, launch: int | None = None, label: str = ""):
    """End the cell's recording (:func:`stop_recording`) and return its view (:func:`last_view`)."""
    stop_recording(wb, ranks=ranks)
    return last_view(need, launch, label)


def _note() -> str:
    """What the view must add to how the matrix says it was counted (its source): lost events, missing ranks."""
    notes = []
    if _last["dropped_events"]:
        notes.append(f"{_last['dropped_events']} trace events were dropped (buffers full): their bytes are missing.")
    if 0 < len(_last["ranks"]) < len(_last["launches"]):
        notes.append(f"recorded on {ranks_phrase(_last['ranks'])} only (the cell's --ranks).")
    return " ".join(notes)
