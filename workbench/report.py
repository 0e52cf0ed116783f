"""What a cell did on each rank, rendered compactly: one table, each distinct error once.

Examples
--------
>>> report = CellReport({0: RankResult(0, "ok", 0.012), 1: RankResult(1, "died", detail="SIGSEGV")})
>>> print(report.render())
rank  status        time in the cell
   0  ok                     12.0 ms
   1  died SIGSEGV                 -
"""

from __future__ import annotations

from dataclasses import dataclass, field

STATUSES = ("ok", "error", "interrupted", "unresponsive", "died")


@dataclass
class RankResult:
    """One rank's outcome.

    Attributes
    ----------
    status : str
        ``ok``, ``error`` (the cell raised), ``interrupted`` (SIGINT after a timeout or Ctrl-C),
        ``unresponsive`` (did not stop on SIGINT: the cluster was restarted) or ``died``.
    seconds : float or None
        Time the cell ran on the rank (None when the rank did not report).
    error : dict or None
        ``{"type", "message", "traceback"}`` with the traceback at the cell's line numbers.
    detail : str or None
        For ``died``, how: e.g. ``"SIGSEGV"``, ``"exit code 1"``.
    stdout, stderr : str
        Everything the rank printed during the cell.
    """

    rank: int
    status: str
    seconds: float | None = None
    error: dict | None = None
    detail: str | None = None
    stdout: str = ""
    stderr: str = ""

    @property
    def label(self) -> str:
        return f"{self.status} {self.detail}" if self.detail else self.status


@dataclass
class CellReport:
    """Every selected rank's :class:`RankResult`, plus notes on what the workbench did (interrupts, restarts).

    ``hang`` is the :class:`workbench.hang_report.HangReport` of a cell that timed out (or was stopped with
    Ctrl-C): where each rank that had not finished was, asked before it was interrupted.
    ``ok`` is True when every rank finished without error. :meth:`raise_on_failure` turns a failure into a
    :class:`RankError` for scripts; notebooks just display the report.
    """

    results: dict[int, RankResult]
    notes: list[str] = field(default_factory=list)
    hang: object | None = None  # a HangReport (workbench.hang_report imports this module, not the reverse)

    @property
    def ok(self) -> bool:
        return all(r.status == "ok" for r in self.results.values())

    def ranks_with(self, status: str) -> list[int]:
        """The ranks whose status is ``status``, in rank order."""
        return sorted(r for r, res in self.results.items() if res.status == status)

    def render(self, time_label: str = "time in the cell") -> str:
        """The table, the hang report if any, each distinct error once with the ranks it happened on, the notes.
        ``time_label`` heads the time column (a stepped cell's time is mostly the wait for its steps: it says so)."""
        lines = [_table(self.results.values(), time_label)]
        if self.hang is not None:
            lines.append(f"\n{self.hang.render()}")
        for ranks, error in _distinct_errors(self.results.values()):
            lines.append(f"\n{error['type']} on {ranks_phrase(ranks)}:\n{error['traceback'].rstrip()}")
        lines += [f"\n{note}" for note in self.notes]
        return "\n".join(lines)

    def raise_on_failure(self) -> CellReport:
        """Return self when every rank succeeded, else raise :class:`RankError` carrying this report."""
        if not self.ok:
            raise RankError(self.render(), report=self)
        return self

    def __str__(self) -> str:
        return self.render()

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(self.render())


class WorkbenchError(RuntimeError):
    """What went wrong and what to do, shown by IPython as the message alone: a traceback of the
    notebook-side code would say nothing about the ranks."""

    def _render_traceback_(self) -> list[str]:
        first, *rest = str(self).splitlines() or [""]
        return [f"{type(self).__name__}: {first}", *rest]


class RankError(WorkbenchError):
    """A cell or an expression failed on one or more ranks; the message names them and shows the errors."""

    def __init__(self, message: str, report: CellReport | None = None):
        super().__init__(message)
        self.report = report


def _table(results, time_label: str = "time in the cell") -> str:
    rows = [("rank", "status", time_label)]  # "time" alone: of what? (a newcomer asked)
    for r in sorted(results, key=lambda res: res.rank):
        rows.append((str(r.rank), r.label, _duration(r.seconds)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        f"{row[0]:>{max(widths[0], 4)}}  {row[1]:<{widths[1]}}  {row[2]:>{widths[2]}}" for row in rows
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _distinct_errors(results) -> list[tuple[list[int], dict]]:
    groups: dict[str, tuple[list[int], dict]] = {}
    for r in sorted(results, key=lambda res: res.rank):
        if r.error is not None:
            groups.setdefault(r.error["traceback"], ([], r.error))[0].append(r.rank)
    return list(groups.values())


def ranks_phrase(ranks) -> str:
    """``[2]`` -> ``'rank 2'``, ``[0, 3]`` -> ``'ranks 0, 3'``."""
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def render_summaries(name: str, summaries: dict[int, str]) -> str:
    """``name`` on every rank, one line each; ranks showing the same thing are merged.

    This is what ``%%iris_kernel --show NAME`` prints until the widgets replace it (see
    :func:`workbench.magics.show_variables`, the one place that calls it).
    """
    merged: dict[str, list[int]] = {}
    for rank in sorted(summaries):
        merged.setdefault(summaries[rank], []).append(rank)
    lines = [f"{name}:"]
    lines += [f"  {ranks_phrase(ranks)}: {summary}" for summary, ranks in merged.items()]
    return "\n".join(lines)
