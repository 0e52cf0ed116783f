"""The hang report: where every rank of a cell that timed out was, asked before the ranks are interrupted.

Each unfinished rank's engine answers from a thread of its own (:mod:`workbench.whereabouts`): the kernel, the
source line it runs and, when it polls memory, the allocation and element it polls (named after the rank's
variable, as the heap inspector names it), the value it reads there now and, where the loop condition says,
the value it waits for. Ranks that finished are named as finished. The report renders as a text table (for
scripts, logs and error messages) and an HTML table (notebooks, also where widgets do not render).

Examples
--------
>>> report = HangReport([RankPlace(0, "finished", detail="ok"),
...                      RankPlace(1, "polling", kernel="wait_flag", kernel_line="cell line 7",
...                                kernel_source="while tl.load(flags + 2, volatile=True) != 1:",
...                                polls="flags[2]", reads="0", awaits="1")])
>>> print(report.render())
Where the ranks were:
rank  state     kernel     at           polls     reads  waits for
   0  finished  -          -            -         -      -
   1  polling   wait_flag  cell line 7  flags[2]  0      1
rank 1 waits in wait_flag for flags[2] to be 1; it reads 0.
  rank 1, cell line 7: while tl.load(flags + 2, volatile=True) != 1:
"""

from __future__ import annotations

import html
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field

from iris.base.tables import html_table

from . import whereabouts

ASK_SECONDS = 3.0
SOURCE_CHARS = 100


def new_channel() -> str:
    """A fresh private channel name for one cluster's answering threads (see :func:`whereabouts.address`)."""
    return f"{whereabouts.CHANNEL_PREFIX}-{secrets.token_hex(8)}"


@dataclass
class RankPlace:
    """Where one rank was.

    Attributes
    ----------
    state : str
        ``finished`` (``detail``: its status), ``polling``, ``kernel``, ``host``, ``idle`` (it finished
        between the timeout and the question), ``unknown`` (no answer: ``detail`` says why).
    kernel, function : str or None
        The launched kernel and, when different, the device function it is in.
    kernel_line, kernel_source : str or None
        ``"cell line 7"`` (or ``file.py:7``) and the text of that line (for a polling loop, its header).
    line, source : str or None
        The cell's own line (host code), and its text.
    polls, reads, awaits : str or None
        The polled location (``flags[2]``, ``"flags[2] of rank 0"`` on another rank's heap), the value there
        now and the value the loop waits for (``"1"``, ``"!= 0"``).
    flags : list of dict or str
        GPU ranks: the heap's small allocations (``name``, ``dtype``, ``values``), or why they could not be read.
    """

    rank: int
    state: str
    detail: str | None = None
    kernel: str | None = None
    function: str | None = None
    kernel_line: str | None = None
    kernel_source: str | None = None
    line: str | None = None
    source: str | None = None
    inside: str | None = None
    program: tuple | None = None
    polls: str | None = None
    access_kind: str | None = None
    reads: str | None = None
    awaits: str | None = None
    flags: list | str | None = None

    @classmethod
    def from_answer(cls, rank: int, answer: dict) -> RankPlace:
        """From an engine's answer (:meth:`whereabouts.Whereabouts.where`)."""
        place = cls(rank, answer.get("state", "unknown"), detail=answer.get("detail"),
                    kernel=answer.get("kernel"), kernel_line=answer.get("kernel_line"),
                    kernel_source=answer.get("kernel_source"), line=answer.get("line"),
                    source=answer.get("source"), inside=answer.get("inside"), awaits=answer.get("awaits"),
                    flags=answer.get("flags"))
        if answer.get("function") not in (None, place.kernel):
            place.function = answer["function"]
        if answer.get("program") is not None:
            place.program = tuple(answer["program"])
        access = answer.get("access")
        if access is not None and place.state == "kernel":  # not a polling loop, but what it last read helps
            place.detail = f"last read {access.get('location')}: {_value(access.get('value', '?'))}"
        if access is not None and place.state == "polling":
            place.polls = access.get("location")
            if access.get("heap_rank") not in (None, rank):
                place.polls += f" of rank {access['heap_rank']}"
            place.access_kind = access.get("kind")
            if "value" in access:
                place.reads = _value(access["value"])
        if place.state == "kernel" and answer.get("kernel_running") is False:
            place.state = "host"
        if answer.get("kernel_running") is not None and place.kernel is not None:
            place.detail = place.detail or ("last kernel still running" if answer["kernel_running"]
                                            else "last kernel finished")
        return place

    @property
    def at(self) -> str:
        if self.state in ("polling", "kernel") and self.kernel_line:
            return self.kernel_line
        return self.line or "-"

    @property
    def state_label(self) -> str:
        if self.state == "finished" and self.detail and self.detail.startswith("died"):
            return self.detail
        if self.state == "finished":
            return f"finished ({self.detail})" if self.detail not in (None, "ok") else "finished"
        if self.state == "idle":
            return "finished (just now)"
        if self.state == "host" and self.inside:
            return f"host code (in {self.inside})"
        if self.state == "host":
            return "host code"
        if self.state == "unknown":
            return "no answer"
        return self.state

    @property
    def kernel_label(self) -> str:
        if self.kernel is None:
            return "-"
        label = self.kernel + (f" > {self.function}" if self.function else "")
        return label if self.state in ("polling", "kernel") else f"last: {label}"

    def sentence(self) -> str | None:
        """``rank 1 waits in wait_flag for flags[2] to be 1; it reads 0.``, for a polling rank."""
        if self.state != "polling" or self.polls is None:
            return None
        target = f" to be {self.awaits}" if self.awaits else " to change"
        target = target.replace("to be !=", "to be other than")
        reads = f"; it reads {self.reads}" if self.reads is not None else ""
        return f"rank {self.rank} waits in {self.kernel_label} for {self.polls}{target}{reads}."


@dataclass
class HangReport:
    """Where each rank of a cell was when it timed out (:class:`RankPlace` per rank, in rank order)."""

    places: list[RankPlace]
    notes: list[str] = field(default_factory=list)

    def rank(self, rank: int) -> RankPlace:
        """The :class:`RankPlace` of ``rank``."""
        return next(p for p in self.places if p.rank == rank)

    def rows(self) -> list[tuple[str, ...]]:
        rows = [("rank", "state", "kernel", "at", "polls", "reads", "waits for")]
        for p in self.places:
            rows.append((str(p.rank), p.state_label, p.kernel_label, p.at, p.polls or "-", p.reads or "-",
                         p.awaits or "-"))
        return rows

    def details(self) -> list[str]:
        """The lines under the table: who waits for what, each unfinished rank's source line, GPU flags, notes."""
        lines = [s for s in (p.sentence() for p in self.places) if s]
        for p in self.places:
            if p.state in ("polling", "kernel") and p.kernel_source:
                lines.append(f"  rank {p.rank}, {p.kernel_line}: {_short(p.kernel_source)}")
                if p.line:
                    lines.append(f"    launched from {p.line}: {_short(p.source)}")
            elif p.state == "host" and p.source:
                lines.append(f"  rank {p.rank}, {p.line}: {_short(p.source)}")
            if p.state == "unknown" and p.detail:
                lines.append(f"  rank {p.rank}: {p.detail}")
            elif p.detail and p.state not in ("finished", "unknown"):
                lines.append(f"  rank {p.rank}: {p.detail}")
            if isinstance(p.flags, str):
                lines.append(f"  rank {p.rank} flags: {p.flags}")
            elif p.flags:
                shown = "; ".join(f"{f['name']} = {_values(f['values'])}" for f in p.flags)
                lines.append(f"  rank {p.rank} flags: {shown}")
        return lines + self.notes

    def render(self) -> str:
        """The text form: a title, the table, then :meth:`details`."""
        rows = self.rows()
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        table = []
        for row in rows:
            cells = [f"{row[0]:>{max(widths[0], 4)}}"] + [f"{c:<{w}}" for c, w in zip(row[1:], widths[1:],
                                                                                     strict=True)]
            table.append("  ".join(cells).rstrip())
        return "\n".join(["Where the ranks were:", *table, *self.details()])

    def _repr_html_(self) -> str:
        head, *body = self.rows()
        cells = [[f"<code>{html.escape(c)}</code>" if i in (3, 4) else html.escape(c) for i, c in enumerate(row)]
                 for row in body]
        details = "".join(f"<li>{html.escape(line.strip())}</li>" for line in self.details())
        return ("<div class='iris-hang-report'><b>Where the ranks were</b>"
                + html_table([html.escape(c) for c in head], cells, align="l" * len(head), css_class="iris-hang-table",
                             row_labels=False)
                + (f"<ul>{details}</ul>" if details else "") + "</div>")

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(self.render())

    def __str__(self) -> str:
        return self.render()


def ask(wb, pending, finished: dict[int, str], seconds: float = ASK_SECONDS) -> HangReport:
    """Ask the ranks in ``pending`` where they are (all at once, for at most ``seconds``); ``finished`` maps the
    other ranks of the cell to their status. Never raises for a rank that cannot answer: its row says why."""
    channel = getattr(wb, "hang_channel", None)
    answers: dict[int, RankPlace] = {}
    threads = []
    here = socket.gethostname()
    for rank in sorted(pending):
        host = wb.rank_info[rank]["host"] if rank < len(wb.rank_info) else here
        if channel is None or not whereabouts.available():
            answers[rank] = RankPlace(rank, "unknown", detail="no hang report channel on this platform")
        elif host != here:
            answers[rank] = RankPlace(rank, "unknown", detail=f"runs on host {host}: it cannot be asked from "
                                                              f"{here}, where the notebook runs")
        else:
            thread = threading.Thread(target=_ask_one, args=(channel, rank, seconds, answers), daemon=True)
            thread.start()
            threads.append(thread)
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    places = [RankPlace(rank, "finished", detail=status) for rank, status in finished.items()]
    for rank in sorted(pending):
        places.append(answers.get(rank) or RankPlace(rank, "unknown", detail=f"did not answer within {seconds:g} s"))
    return HangReport(sorted(places, key=lambda p: p.rank))


def _ask_one(channel: str, rank: int, seconds: float, answers: dict) -> None:
    try:
        answers[rank] = RankPlace.from_answer(rank, whereabouts.ask(channel, rank, seconds))
    except TimeoutError:
        answers[rank] = RankPlace(rank, "unknown", detail=f"did not answer within {seconds:g} s (its main thread "
                                                          "holds Python's lock, in C code)")
    except (OSError, ValueError) as exc:
        answers[rank] = RankPlace(rank, "unknown", detail=f"could not be asked: {exc}")


def display_hang(report) -> None:
    """Display ``report.hang`` (a :class:`workbench.report.CellReport`'s hang report), if any, in the notebook:
    an HTML table with the text form as its ``text/plain`` fallback. The ``%%iris_kernel`` magic calls it
    before raising the cell's error."""
    hang = getattr(report, "hang", None)
    if hang is None:
        return
    from IPython.display import display

    display(hang)


def _value(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _values(values, most: int = 16) -> str:
    if isinstance(values, list) and len(values) > most:
        return "[" + ", ".join(map(_value, values[:most])) + ", ...]"
    if isinstance(values, list):
        return "[" + ", ".join(map(_value, values)) + "]"
    return _value(values)


def _short(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= SOURCE_CHARS else text[:SOURCE_CHARS - 3] + "..."
