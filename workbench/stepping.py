"""A cell stepped on CPU ranks: every rank held before each access to a symmetric heap, let go as the notebook asks.

``%%iris_kernel --step`` (or :func:`workbench.step`) sends the cell to every rank with the rank's gate on
(:func:`iris.instruments.stepping.stepped`) and returns at once, every rank held before its first heap access: the
notebook stays free, so the stepper view's buttons (or the methods below) take the steps. The coordinator listens
on a socket in the cluster's own folder, which only its user can open. Once every rank has ended, the cell's
report (output, errors) is collected as for any cell. A run stopped part way (:meth:`SteppedRun.stop`, a new
stepped cell, the cluster's stop) leaves no rank held: each held rank's kernel ends with ``SteppingStopped``.

Examples
--------
>>> run = workbench.step(MESSAGE_PASSING)           # doctest: +SKIP
>>> run.step(1); run.step(0)                        # doctest: +SKIP
>>> run.run_to_end()                                # doctest: +SKIP
>>> print(run.transcript)                           # doctest: +SKIP
>>> run.order.save("message.order.json")            # doctest: +SKIP
"""

from __future__ import annotations

import socket
import time

import torch

from iris.instruments.stepping import ON_A_GPU, Coordinator, Order, SteppingError, hold_before_race, make_it_happen

from . import engine, execution
from .cluster import Workbench, cell_filename
from .report import CellReport, WorkbenchError

START_SECONDS = 120.0  # until every rank is held before its first access (imports, allocations, host code)
STOP_SECONDS = 30.0  # for the ranks of a stopped run to end their cell

_active: SteppedRun | None = None  # one stepped run per notebook: a new one stops the previous


class SteppedRun:
    """One stepped cell (see the module docstring); :func:`start_stepping` makes it.

    Attributes
    ----------
    coordinator : iris.instruments.stepping.Coordinator
        Holds the ranks; its ``ranks`` say where each is.
    report : CellReport or None
        The cell's report once every rank has ended.
    order_file : str or None
        The file of the last order replayed from a file (``--replay FILE``, ``order=FILE``): what the stepper view's
        order-file box shows.
    """

    def __init__(self, wb: Workbench, source: str):
        self.wb, self.source = wb, source
        self.report: CellReport | None = None
        self.order_file: str | None = None
        self._view = None  # the stepper view, made when the run is first displayed
        self.coordinator = Coordinator(wb.world_size, folder=wb.cluster_dir)
        wb.before_stop.append(self.stop)
        wb.held_by = "a stepped cell"
        filename = cell_filename(source)
        self._pending = {rank: wb.view(rank).apply_async(engine.run_stepped_cell, source, filename,
                                                         self.coordinator.address)
                         for rank in range(wb.world_size)}
        self._settle(START_SECONDS)

    # -- where the ranks are ---------------------------------------------------------------------------------
    @property
    def ranks(self):
        """Each rank's :class:`iris.instruments.stepping.RankState` (state, operation held before, steps taken)."""
        return self.coordinator.ranks

    @property
    def order(self) -> Order:
        """The steps taken so far, to save (``run.order.save(path)``) and replay."""
        return self.coordinator.order

    @property
    def transcript(self):
        """The numbered table of steps (``print(run.transcript)``; ``run.transcript.html()``)."""
        return self.coordinator.transcript

    @property
    def done(self) -> bool:
        return self.report is not None

    def waiting_on(self, rank: int) -> str | None:
        """What ``rank`` waits for when it keeps polling the same values, and who could release it."""
        return self.coordinator.waiting_on(rank)

    def summary(self) -> str:
        """Where every rank is, a line each (the text a terminal or an export shows)."""
        lines = []
        for state in self.ranks:
            waiting = self.waiting_on(state.rank)
            lines.append(f"rank {state.rank}: {self.coordinator.describe(state)}"
                         + (f" [{waiting}]" if waiting else ""))
        if self.done:
            lines.append(f"the cell has ended on every rank after {len(self.order)} steps")
        return "\n".join(lines)

    def values(self, name: str, rank: int) -> torch.Tensor:
        """``rank``'s copy of the heap allocation called ``name`` (as the gates call it), read now."""
        for state in self.ranks:
            for allocation in ((state.operation or {}).get("allocations") or []):
                if allocation["name"] == name:
                    data = self.coordinator.read(rank, allocation["offset"], allocation["nbytes"])
                    dtype = getattr(torch, allocation["dtype"])
                    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(allocation["shape"]).clone()
        raise WorkbenchError(f"no allocation called {name!r} is known to the held ranks: the names are those of the "
                             "variables holding heap tensors, or their name= labels")

    def __repr__(self) -> str:
        return f"{self.summary()}\n\n{self.transcript}"

    # -- display -----------------------------------------------------------------------------------------------
    @property
    def view(self):
        """The stepper view of this run (:class:`~workbench.widgets.stepper_view.StepperView`), made once: what
        displaying the run shows, redrawn after every step taken from Python too."""
        if self._view is None:
            from .widgets.stepper_view import StepperView

            # The view reads a kernel's source from linecache, under the file name the ranks gave it.
            engine.register_source(self.source, cell_filename(self.source))
            self._view = StepperView(self)
        return self._view

    def _ipython_display_(self) -> None:
        self.view._ipython_display_()

    def _redraw(self) -> None:
        if self._view is not None:
            self._view.redraw()

    # -- stepping ----------------------------------------------------------------------------------------------
    def step(self, rank: int):
        """``rank`` takes its next step; the step, as the transcript has it."""
        return self._after(self.coordinator.step(self._rank(rank)))

    def step_each(self):
        """Every held rank takes one step, in rank order."""
        return self._after(self.coordinator.step_each())

    def run(self, rank: int, until_rank: int | None = None, until_line: int | None = None) -> int:
        """Step ``rank`` until it is held before an access to ``until_rank``'s heap, or at cell line ``until_line``;
        the number of steps taken."""
        return self._after(self.coordinator.run(self._rank(rank), until_rank=until_rank, until_line=until_line))

    def run_to_operation(self, label: str | None = None) -> int:
        """Step the ranks in turn until each is held in the named operation whose label holds ``label`` (a training
        step's ``"DDP bucket 1"``; without ``label``: the next one, a collective at a time), or has ended; the number
        of steps taken."""
        return self._after(self.coordinator.run_to_operation(label))

    def run_to_end(self) -> int:
        """Step the ranks in turn until every one has ended; the number of steps taken."""
        return self._after(self.coordinator.run_to_end())

    def run_first(self, ranks) -> int:
        """Step the ranks to their end, the first of ``ranks`` that can go each time (a rank waiting on a flag nobody
        changed gives way); the number of steps taken. The steps are recorded: save the order to replay them."""
        return self._after(self.coordinator.run_first(list(ranks)))

    def replay_race(self, race) -> str:
        """Make ``race`` (an :class:`iris.Race` of the race checker's) happen, stepping to the end: its reading
        access before its write (:func:`iris.instruments.stepping.make_it_happen`); what was read, in a sentence."""
        return self._after(make_it_happen(self.coordinator, race))

    def hold_at_race(self, race) -> str:
        """Step as :meth:`replay_race` would, and stop where the race's access that goes first (the other way round
        from the checker's run) is about to be taken: its rank's next step takes it. To walk the race by hand (the
        stepper view's buttons), or to go on with :meth:`replay_race`. Where each rank is held, in a sentence; the
        transcript marks the race's two steps as they are taken."""
        return self._after(hold_before_race(self.coordinator, race))

    def replay(self, order) -> None:
        """Take the steps of ``order`` (an :class:`~iris.instruments.stepping.Order`, a saved file, or a list of
        ranks); raises ``OrderDiverged`` naming the step that no longer fits."""
        if not isinstance(order, Order):
            if not isinstance(order, list):
                self.order_file = str(order)
            order = Order.parse(order) if isinstance(order, list) else Order.load(order)
        self._after(self.coordinator.replay(order))

    def stop(self, reason: str = "stopped from the notebook") -> CellReport:
        """End the run now: every held rank's kernel ends with ``SteppingStopped``; the cell's report."""
        if not self.done:
            self.coordinator.stop(reason)
            self._finish(STOP_SECONDS)
            self._redraw()
        return self.report

    # -- inside ------------------------------------------------------------------------------------------------
    def _rank(self, rank: int) -> int:
        if not 0 <= rank < self.wb.world_size:
            raise WorkbenchError(f"there is no rank {rank}: the ranks are 0..{self.wb.world_size - 1}")
        return rank

    def _after(self, result):
        """Once every rank has ended, collect the cell's report (and free the socket)."""
        if self.coordinator.done and not self.done:
            self._finish(STOP_SECONDS)
        self._redraw()
        return result

    def _settle(self, timeout: float) -> None:
        """Wait until every rank is held, in a barrier or ended; a rank whose cell ended without a word from its
        gate (it failed before the gate started) ends the run, saying why."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.coordinator.wait_until_held(timeout=0.1)
                break
            except SteppingError:
                failed = [rank for rank, request in self._pending.items()
                          if request.done() and self.ranks[rank].state == "connecting"]
                if failed or time.monotonic() > deadline:
                    self.stop("the cell could not start on every rank")
                    why = "; ".join(f"rank {r}: {self.report.results[r].label}" for r in failed) or "a timeout"
                    raise WorkbenchError(f"the stepped cell did not start on every rank ({why}): {self.summary()}"
                                         ) from None
        if self.coordinator.done:
            self._finish(STOP_SECONDS)
            idle = self.coordinator.nothing_to_step
            if len(idle) == self.wb.world_size:
                print("the cell never reached an access to a symmetric heap on any rank: nothing to step (it ran "
                      "to its end)")

    def _finish(self, timeout: float) -> None:
        global _active
        self.report = execution.collect_cell(self.wb, self._pending, timeout)
        self.wb.held_by = None
        self.coordinator.close()
        if self.stop in self.wb.before_stop:
            self.wb.before_stop.remove(self.stop)
        if _active is self:
            _active = None


def start_stepping(wb: Workbench, code: str, *, line_offset: int = 0) -> SteppedRun:
    """Send ``code`` to every rank of ``wb``, stepped; return once every rank is held (see the module docstring).

    Raises :class:`WorkbenchError` on GPU ranks (a kernel there cannot be paused) and for ranks on other hosts (the
    coordinator's socket is on this machine); a stepped run still going is stopped first.
    """
    global _active
    if _active is not None and not _active.done:
        print("the stepped run still going was stopped: one stepped cell at a time")
        _active.stop("a new stepped cell started")
    wb._check_usable()
    gpu = [r for r, info in enumerate(wb.rank_info) if info["backend"] != "cpu"]
    if gpu:
        raise WorkbenchError(f"--step: ranks {gpu} run on GPUs: {ON_A_GPU}")
    here = socket.gethostname()
    elsewhere = [r for r, info in enumerate(wb.rank_info) if info["host"] != here]
    if elsewhere or wb.cluster_dir is None:
        raise WorkbenchError(f"--step needs every rank on this machine (a local cluster); ranks {elsewhere} are not")
    source = "\n" * line_offset + code
    _active = SteppedRun(wb, source)
    return _active
