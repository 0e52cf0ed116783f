"""The traffic matrix across the workbench's ranks: record a cell's launches on every rank, gather, show.

``%%iris_kernel --traffic [LABEL]`` calls :func:`start_recording` before its cell and shows :func:`cell_view`
after it; ``%iris traffic [--launch K] [--need BYTES] [--label TEXT]`` and ``workbench.traffic(need=None, launch=None,
label="")`` show the last recording again (:func:`last_view`). On the CPU backend the count is exact (every access the
interpreter makes); on CUDA it comes from device tracing, so only kernels initialised with ``tracing=True``
count, and the view says so (:mod:`iris.traffic`).

A cell whose launches ran in named operations (a training step on the ``iris`` torch.distributed backend: each
collective named by the backend, and by :func:`iris.distributed.name_collectives` what it carries) is shown per
operation (:class:`~workbench.widgets.traffic_view.OperationsTrafficView`: one row per operation, its bytes against
its minimum, and the maps of the one chosen); ``%iris traffic --operation K`` and ``workbench.traffic(operation=K)``
show operation K's matrix alone (K: its number in the table, or its label).

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

from iris.instruments.traffic import TrafficByOperation, TrafficMatrix, per_operation

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


def last_matrix(need=None, launch: int | None = None, label: str = "", operation=None) -> TrafficMatrix:
    """The :class:`~iris.traffic.TrafficMatrix` of the last recording: launch ``launch`` of every rank (None: all
    of the cell's launches), or the named operation ``operation`` (its number in :func:`last_per_operation`, or its
    label; beside its minimum where one is known), with ``need`` (bytes, or a ``(world, world)`` matrix from
    :mod:`iris.traffic.minimum`) beside it, and ``label`` (e.g. which variant of the kernel ran) in its headline.

    Raises
    ------
    RankError
        When nothing was recorded yet, a rank did not make launch ``launch``, or there is no such operation.
    """
    if operation is not None:
        if launch is not None:
            raise RankError("traffic: give a launch or an operation, not both")
        try:
            matrix = last_per_operation()[operation].matrix
        except (IndexError, KeyError) as exc:
            raise RankError(f"no operation {operation!r} in the last --traffic cell: {exc}") from None
        matrix = replace(matrix, label=label) if label else matrix
        return matrix if need is None else matrix.with_minimum(need)
    if _last is None:
        raise RankError("no traffic recorded yet: run a cell with %%iris_kernel --traffic first")
    try:
        matrix = TrafficMatrix.from_launches(_last["launches"], launch=launch, source=_last["source"])
    except IndexError as exc:
        raise RankError(str(exc)) from None
    matrix = replace(matrix, label=label)
    return matrix if need is None else matrix.with_minimum(need)


def last_per_operation() -> TrafficByOperation:
    """The last recording per named operation (:func:`iris.instruments.traffic.per_operation`): one entry per
    collective the cell's training step ran, each beside its minimum where one is known.

    Raises
    ------
    RankError
        When nothing was recorded yet.
    """
    if _last is None:
        raise RankError("no traffic recorded yet: run a cell with %%iris_kernel --traffic first")
    return per_operation(_last["launches"], _last["source"])


def last_view(need=None, launch: int | None = None, label: str = "", operation=None):
    """The view of the last recording: per named operation (an
    :class:`~workbench.widgets.traffic_view.OperationsTrafficView`) when its launches ran in some and nothing else is
    asked, else a :class:`~workbench.widgets.traffic_view.TrafficView` of :func:`last_matrix`."""
    from .widgets.traffic_view import OperationsTrafficView, TrafficView

    if need is None and launch is None and operation is None:
        by_operation = last_per_operation()
        by_operation.label = label
        if by_operation.named():
            return OperationsTrafficView(by_operation, last_matrix(label=label), note=_note())
    return TrafficView(last_matrix(need, launch, label, operation), note=_note())


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
