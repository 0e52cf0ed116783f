"""Running a cell on ranks without ever freezing the notebook.

ipyparallel's own ``%px`` waits forever for a cell that never ends (ipyparallel issue 435). Here each
rank's cell is an asynchronous request; the notebook polls them, printing each rank's output as it
arrives with a ``[rank r]`` prefix and watching the engine processes, until every rank has finished,
died, or the timeout (or Ctrl-C) comes. Ranks still running are then asked where they are (the hang report,
:mod:`workbench.hang_report`) and sent SIGINT; ranks that do not stop within the grace period get the cluster
restarted, and the report says that state was lost.

Examples
--------
>>> report = run_cell(wb, "x = 1\\n", "<iris-cell-0123abcd>", ranks=[0, 1], timeout=30)   # doctest: +SKIP
>>> report.ok                                                                            # doctest: +SKIP
True
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from concurrent import futures

from . import engine, hang_report
from .report import CellReport, RankError, RankResult, ranks_phrase

POLL_SECONDS = 0.05
OUTPUT_SECONDS = 2.0
# How long to wait for the exit status of an engine that ipyparallel says died (Workbench.exit_status).
EXIT_STATUS_SECONDS = 10.0


def run_cell(wb, source: str, filename: str, ranks: list[int], timeout: float) -> CellReport:
    """Run ``source`` (registered as ``filename``) on ``ranks`` of workbench ``wb``; see the module doc."""
    pending = {rank: wb.view(rank).apply_async(engine.run_cell, source, filename) for rank in ranks}
    return collect_cell(wb, pending, timeout)


def collect_cell(wb, pending: dict, timeout: float) -> CellReport:
    """The report of a cell already sent to the ranks (rank -> its request), printing their output as it comes;
    ranks still running after ``timeout`` seconds are handled as :func:`run_cell` says."""
    output = _RankOutput(pending)
    results: dict[int, RankResult] = {}
    notes = []
    ctrl_c = False
    with _noticing_ctrl_c() as pressed:
        try:
            _collect(wb, pending, results, output, time.monotonic() + timeout, pressed)
        except KeyboardInterrupt:
            ctrl_c = True
    frozen = {rank: how for rank in pending if (how := wb.frozen(rank)) is not None}
    hang = _where_they_are(wb, pending, results, frozen) if pending else None
    for rank in frozen:
        del pending[rank]
        results[rank] = _end_frozen(wb, rank, frozen[rank])
    if ctrl_c:
        notes.append(f"Ctrl-C: {_stopped(pending, frozen)}; the heaps are untouched.")
    elif pending or frozen:
        notes.append(f"{ranks_phrase([*pending, *frozen])} did not finish within {timeout:g} s: "
                     f"{_stopped(pending, frozen)}; use --timeout S for longer cells.")
    if pending:
        _interrupt(wb, pending, results, output, notes)
    output.flush(final=True)
    dead = [(rank, results[rank].detail) for rank in sorted(results) if results[rank].status == "died"]
    if dead:
        wb.broken = "; ".join(f"rank {rank} died ({how})" for rank, how in dead)
        notes.append(f"{wb.broken}. The other ranks cannot reach it any more: run %iris restart "
                     "(or Workbench.restart()); every rank's state will be lost.")
    for rank, result in results.items():
        result.stdout, result.stderr = output.text(rank)
    return CellReport(results, notes, hang=hang)


def _where_they_are(wb, pending, results, frozen: dict[int, str]):
    """The hang report, asked before the interrupt moves the ranks (after Ctrl-C too: a cell is stopped by
    hand mostly because it hangs). Another Ctrl-C skips it; a failure of the report is a note in it. Ranks
    in ``frozen`` (rank -> how) are not asked: a stopped process cannot answer, and waiting for it only
    delays the report."""
    finished = {rank: results[rank].label for rank in results}
    try:
        hang = hang_report.ask(wb, [rank for rank in pending if rank not in frozen], finished)
    except KeyboardInterrupt:
        return None
    except Exception as exc:  # the interrupt must happen whatever the report does
        hang = hang_report.HangReport([], notes=[f"the hang report failed: {type(exc).__name__}: {exc}"])
    hang.places = sorted(hang.places + [hang_report.RankPlace(rank, "unknown", detail=f"{how}: it cannot answer")
                                        for rank, how in frozen.items()], key=lambda place: place.rank)
    return hang


def _end_frozen(wb, rank: int, how: str) -> RankResult:
    """End ``rank``, whose process is stopped (``how``): SIGINT would wait in its queue until someone
    continues it, so it is killed at once instead of after the interrupt grace. It is then dead, and the
    cell's notes say to restart."""
    return RankResult(rank, "died", detail=f"{how}; ended with {wb.kill(rank)}")


def _interrupt(wb, pending, results, output, notes) -> None:
    try:
        wb.interrupt(list(pending))
        _collect(wb, pending, results, output, time.monotonic() + wb.interrupt_grace)
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: stop waiting for the interrupt and restart
    if not pending:
        return
    for rank in pending:
        results[rank] = RankResult(rank, "unresponsive")
    output.flush(final=True)
    stubborn = sorted(pending)
    pending.clear()
    notes.append(f"{ranks_phrase(stubborn)} did not stop within {wb.interrupt_grace:g} s of SIGINT "
                 "(code that does not return to Python, like a collective waiting for an absent rank or a "
                 "GPU kernel, ignores it), so the cluster was restarted: every rank's variables, heap "
                 "tensors and kernels were lost.")
    wb.restart(stuck=stubborn)


@contextlib.contextmanager
def _noticing_ctrl_c():
    """An event set by every SIGINT (Ctrl-C, a notebook's interrupt) while the body runs, beside the handler before.

    Python raises KeyboardInterrupt wherever the main thread is when the signal comes; where that is a finalizer or a
    callback whose errors are printed and dropped (a ``__del__``, a future's done-callback), the interrupt is lost,
    and the cell then waited out its whole timeout (seen under load in CI). The event is not lost: the collecting
    loop raises KeyboardInterrupt itself when it finds it set. In a thread other than the main one nothing is
    installed (only the main thread may set handlers) and the event stays unset.
    """
    pressed = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return
    previous = signal.getsignal(signal.SIGINT)

    def noticed(signum, frame):
        if previous == signal.SIG_IGN:  # ignored before: still ignored
            return
        pressed.set()
        if callable(previous):
            previous(signum, frame)
        else:  # the default (or a handler set outside Python): Python's own, KeyboardInterrupt
            signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, noticed)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


def _collect(wb, pending: dict, results: dict, output, until: float, pressed=None) -> None:
    """Move ranks from ``pending`` to ``results`` as they finish or die, until none is left or ``until``; a SIGINT
    noticed in ``pressed`` (:func:`_noticing_ctrl_c`) raises KeyboardInterrupt here even if it was lost elsewhere."""
    while pending:
        if pressed is not None and pressed.is_set():
            raise KeyboardInterrupt
        left = until - time.monotonic()
        if left <= 0:
            return
        futures.wait(list(pending.values()), min(POLL_SECONDS, left), return_when=futures.FIRST_COMPLETED)
        output.flush()
        for rank, request in list(pending.items()):
            if request.done():
                results[rank] = _result_of(wb, rank, request)
            else:
                how = wb.exit_status(rank)
                if how is None:
                    continue
                results[rank] = RankResult(rank, "died", detail=how)
            del pending[rank]


def _result_of(wb, rank: int, request) -> RankResult:
    # The result and the output travel on different sockets: the output may still be on its way.
    request.wait_for_output(OUTPUT_SECONDS)
    try:
        outcome = request.get(0)
    except Exception as exc:  # the engine itself failed: it died, or the result could not be sent back
        # ipyparallel raises EngineError itself, or (a task stranded on a dead engine) a RemoteError naming it
        engine_died = "EngineError" in (type(exc).__name__, getattr(exc, "ename", None))
        frozen = wb.frozen(rank)
        if engine_died and frozen is not None:  # the controller gave up on its heartbeat: it never exits itself
            return _end_frozen(wb, rank, frozen)
        how = wb.exit_status(rank, wait=EXIT_STATUS_SECONDS if engine_died else 0.0)
        if how is not None or engine_died:
            return RankResult(rank, "died", detail=how or "engine unregistered")
        message = _remote_message(exc)
        return RankResult(rank, "error", error={"type": type(exc).__name__, "message": message,
                                                "traceback": message + "\n"})
    return RankResult(rank, outcome["status"], seconds=outcome["seconds"], error=outcome["error"])


class _RankOutput:
    """Prints what each rank writes, line by line with a ``[rank r]`` prefix, as it arrives."""

    def __init__(self, requests: dict):
        self.requests = dict(requests)
        self.printed = {(rank, stream): 0 for rank in requests for stream in ("stdout", "stderr")}

    def text(self, rank: int) -> tuple[str, str]:
        request = self.requests[rank]
        return request.stdout or "", request.stderr or ""

    def flush(self, final: bool = False) -> None:
        for (rank, stream), done in self.printed.items():
            text = getattr(self.requests[rank], stream) or ""
            end = len(text) if final else text.rfind("\n", done) + 1
            if end <= done:
                continue
            target = sys.stdout if stream == "stdout" else sys.stderr
            for line in text[done:end].splitlines():
                print(f"[rank {rank}] {line}", file=target)
            self.printed[(rank, stream)] = end


def gather(requests: dict, deadline: float, what: str, key_name: str = "rank", on_each=None) -> dict:
    """Key (a rank or an engine id) -> result of each asynchronous request; raise :class:`RankError` naming
    the keys that failed, or that did not answer by ``deadline``."""
    results, failures = {}, {}
    for key, request in requests.items():
        try:
            results[key] = request.get(max(0.1, deadline - time.monotonic()))
        except Exception as exc:
            failures[key] = exc
        if on_each is not None:
            on_each(key)
    if failures:
        detail = "\n".join(f"  {key_name} {key}: {_remote_message(exc)}" for key, exc in failures.items())
        raise RankError(f"{what} failed on {len(failures)} of {len(requests)}:\n{detail}")
    return results


def call_each(wb, ranks: list[int], function, *args) -> list:
    """``function(*args)`` on each of ``ranks`` at once; results in rank order, errors naming the ranks."""
    requests = {rank: wb.view(rank).apply_async(function, *args) for rank in ranks}
    results = gather(requests, time.monotonic() + wb.timeout, what=f"{function.__name__}{args!r} (ranks)")
    return [results[rank] for rank in ranks]


def _remote_message(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if hasattr(exc, "ename"):  # an ipyparallel RemoteError: the engine's exception type and message
        return f"{exc.ename}: {exc.evalue}"
    return f"{type(exc).__name__}: {exc}"


def _were(ranks) -> str:
    return "was" if len(ranks) == 1 else "were"


def _stopped(interrupted, frozen) -> str:
    """``"ranks 0, 2 were interrupted (SIGINT) and frozen rank 1 was ended (SIGKILL)"``."""
    parts = [f"{ranks_phrase(interrupted)} {_were(interrupted)} interrupted (SIGINT)"] if interrupted else []
    if frozen:
        parts.append(f"frozen {ranks_phrase(frozen)} {_were(frozen)} ended (SIGKILL)")
    return " and ".join(parts)
