"""What stopping a cluster did: one line when every rank exited cleanly, else concisely what went wrong, per rank.

:meth:`workbench.Workbench.stop` asks every rank's engine to exit (:func:`workbench.engine.exit_cleanly`),
waits for them, and only then lets ipyparallel signal what is left (SIGTERM, then SIGKILL). It describes each
engine with an :class:`EngineStop`; a :class:`StopReport` renders them. Engine logs are read only to explain
a rank that did not stop cleanly, and then only their end: the last traceback's final lines, or the last
lines that are not routine.

Examples
--------
>>> print(StopReport("cpu", [EngineStop("rank 0", final="exit code 0"),
...                          EngineStop("rank 1", final="exit code 0")]))
stopped 2 ranks (cpu backend): each exited with status 0; no process and nothing in /dev/shm left
>>> print(StopReport("cpu", [EngineStop("rank 0", final="exit code 0"),
...                          EngineStop("rank 1", before="SIGKILL", final="SIGKILL")]))
stopped 2 ranks (cpu backend), not cleanly; no process and nothing in /dev/shm left:
  rank 1 had died (SIGKILL) before the stop; its log says nothing more
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass, field

import psutil

LOG_LINES = 6
LOG_LINE_CHARS = 200
# An ipyparallel log line: "2026-01-01 12:00:00.123 [IPEngine.0] message", with " WARNING |" (or ERROR,
# CRITICAL) before the message above INFO.
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ (\[[^\]]+\])( (?:WARNING|ERROR|CRITICAL) \|)?")
# Up to this line an engine is starting up, and its warnings (no CurveZMQ, no debugger...) are routine.
_REGISTERED = "Completed registration"


@dataclass
class EngineStop:
    """How one engine (a rank) ended.

    Attributes
    ----------
    label : str
        ``"rank 2"``, or ``"engine pid 1234"`` for an engine that never became a rank.
    before : str or None
        How it had already ended before the stop (``"SIGSEGV"``...), ``"stuck"`` for a rank the caller knew
        to be stuck in a cell (so it was not asked to exit), or None.
    asked : bool
        Whether it was asked to exit.
    in_time : bool
        Whether it was gone before the stop had to signal it.
    final : str or None
        How it ended: ``"exit code 0"``, ``"SIGKILL"``, ``"left the cluster"`` (an engine on another host),
        or ``"still running"``; None when unknown.
    log : str
        The end of its log, kept only when it did not stop cleanly.
    """

    label: str
    before: str | None = None
    asked: bool = True
    in_time: bool = True
    final: str | None = "exit code 0"
    log: str = ""

    @property
    def problem(self) -> str | None:
        """What went wrong, in words; None when the engine exited with status 0 when asked."""
        ended = self.final or "a status unknown here"
        if self.before == "stuck":
            return f"was stuck in a cell, so it was not asked to exit: it ended with {ended}"
        if self.before is not None:
            return f"had died ({self.before}) before the stop"
        if self.final == "still running":
            return "is still running: it survived SIGTERM and SIGKILL"
        if not self.in_time:
            asked = "in the time it was given after the stop request" if self.asked else "(it was never a rank)"
            return f"did not exit {asked}, so it was signalled: it ended with {ended}"
        if self.final not in ("exit code 0", "left the cluster", None):
            return f"ended with {ended} when asked to stop"
        return None


@dataclass
class StopReport:
    """What :meth:`workbench.Workbench.stop` did; ``str(report)`` is one line when :attr:`ok`.

    Attributes
    ----------
    backend : str
        The ranks' heap backend.
    engines : list of EngineStop
        Every rank's engine (empty when nothing was running).
    controller : str or None
        How the controller ended when that was not with status 0.
    processes_left : list of int
        pids of the cluster's processes (engines, their nannies, the controller) still alive.
    processes_ended : list of int
        pids of the cluster's processes that outlived the stop and that it then ended with SIGKILL (e.g. the
        controller's schedulers when ipyparallel had to SIGKILL the controller itself on busy cores).
    heap_files_left, heap_files_removed : list of str
        This cluster's CPU heap files still in /dev/shm, and stale ones the stop removed.
    """

    backend: str
    engines: list[EngineStop]
    controller: str | None = None
    processes_left: list[int] = field(default_factory=list)
    processes_ended: list[int] = field(default_factory=list)
    heap_files_left: list[str] = field(default_factory=list)
    heap_files_removed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (any(e.problem for e in self.engines) or self.controller or self.processes_left
                    or self.heap_files_left)

    def render(self) -> str:
        if not self.engines:
            return "no ranks were running"
        n = len(self.engines)
        noun = "rank" if all(e.label.startswith("rank ") for e in self.engines) else "engine"  # else a failed start
        what = f"stopped {n} {noun}{'s' if n != 1 else ''} ({self.backend} backend)"
        if self.ok:
            return f"{what}: {'each' if n > 1 else 'it'} exited with status 0; {self._left()}"
        lines = [f"{what}, not cleanly; {self._left()}:"]
        for engine in self.engines:
            if engine.problem:
                lines += _with_log(f"  {engine.label} {engine.problem}", engine.log)
        if self.controller:
            lines.append(f"  the controller ended with {self.controller}")
        if self.processes_left:
            pids = " ".join(map(str, self.processes_left))
            lines.append(f"  processes still running: {pids} (end them with: kill -9 {pids})")
        if self.heap_files_left:
            lines.append(f"  heap files still in /dev/shm: {', '.join(self.heap_files_left)} (their processes "
                         "are alive: end them, and the next heap created removes the files)")
        return "\n".join(lines)

    def _left(self) -> str:
        if self.processes_left or self.heap_files_left:
            return "something was left behind"
        where = " and nothing in /dev/shm" if self.backend == "cpu" else ""
        removed = len(self.heap_files_removed)
        stale = f" (removed {removed} stale heap file{'s' if removed != 1 else ''})" if removed else ""
        ended = len(self.processes_ended)
        killed = f" (ended {ended} that outlived the stop with SIGKILL)" if ended else ""
        return f"no process{where} left{stale}{killed}"

    def __str__(self) -> str:
        return self.render()

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(self.render())


def _with_log(headline: str, log: str) -> list[str]:
    if not log:
        return [headline + "; its log says nothing more"]
    return [headline + "; the end of its log:", *(f"      {line}" for line in log.splitlines())]


def log_excerpt(text: str, lines: int = LOG_LINES) -> str:
    """The end of an engine's log that can explain how it ended: the last traceback's final lines, else the
    last lines that are not routine (ipyparallel's info messages, start-up warnings); "" when none is left.

    Examples
    --------
    >>> print(log_excerpt('''2026-01-01 12:00:00.100 [IPEngine.0] Completed registration with id 0
    ... 2026-01-01 12:00:01.000 [IPEngine.0] Handling apply_request: 1234
    ... Fatal Python error: Segmentation fault'''))
    Fatal Python error: Segmentation fault
    """
    all_lines = text.splitlines()
    registered = [i for i, line in enumerate(all_lines) if _REGISTERED in line]
    kept = [_shorten(line) for line in all_lines[registered[-1] + 1 if registered else 0:] if _relevant(line)]
    tracebacks = [i for i, line in enumerate(kept) if line.rstrip().endswith("Traceback (most recent call last):")]
    if tracebacks:  # what raised and where, not the frames of the engine's start-up code above it
        before, trace = kept[:tracebacks[-1]], kept[tracebacks[-1]:]
        kept = before + (trace if len(trace) <= 4 else [trace[0], "  ...", *trace[-3:]])
    return "\n".join(kept[-lines:])


def _relevant(line: str) -> bool:
    match = _LOG_LINE.match(line)
    return bool(line.strip()) and (match is None or match.group(2) is not None)


def _shorten(line: str) -> str:
    match = _LOG_LINE.match(line)
    if match:  # the date and time say nothing here; the logger's name says who wrote the line
        line = f"{match.group(1)}{match.group(2) or ''}{line[match.end():]}"
    return line if len(line) <= LOG_LINE_CHARS else line[:LOG_LINE_CHARS - 3] + "..."


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie waiting to be reaped counts as gone). Never reaps it:
    ipyparallel's launcher reaps the engines it started, and keeps their exit status."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def end_outliving(pids, seconds: float) -> tuple[list[int], list[int]]:
    """Wait up to ``seconds`` for ``pids`` to exit, SIGKILL those still alive, and wait as long again: a stop
    leaves nothing of its cluster running. Returns ``(ended, left)``: the pids it killed, and any still alive."""
    ended = wait_until_gone(pids, seconds)
    for pid in ended:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return ended, wait_until_gone(ended, seconds)


def wait_until_gone(pids, seconds: float) -> list[int]:
    """Wait up to ``seconds`` for processes ``pids`` to exit; those still alive then."""
    deadline = time.monotonic() + seconds
    alive = [pid for pid in pids if not process_gone(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [pid for pid in alive if not process_gone(pid)]
    return alive
