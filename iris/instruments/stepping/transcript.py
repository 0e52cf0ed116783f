"""A stepped run as a numbered table: the steps' rank, line, operation, target, and the values before and after.

What a stepper view shows, readable where widgets are not (an export, the documentation site, a terminal). A target
is written as the stepper view writes it (:func:`element_phrase`: ``mailbox[0..7] of rank 1``). A run that makes a
race of the checker's happen (:mod:`.race_replay`) marks the race's two steps: a last column, ``race``, says which
step each one races with, and the HTML shades both rows.

Examples
--------
>>> step = Step(0, 1, {"kind": "store", "label": "iris.store", "kernel": "send", "line": 7, "source": "...",
...                    "program": [0, 0, 0], "targets": [{"rank": 0, "name": "inbox", "first": [0], "count": 4,
...                    "nbytes": 16, "dtype": "float32"}], "before": [0.0], "value": [1.0], "lanes": 4,
...                    "dtype": "fp32"}, before=[0.0], after=[1.0])
>>> print(Transcript([step]).text().splitlines()[2])
|    0 |    1 | 7    | iris.store (store) | inbox[0..3] of rank 0 | 1                 | 0      | 1     |
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from iris.base.tables import html_table

SHOWN = 4  # values per cell of the table
RACING = "background:#ffd9d9"  # the rows of a race's two steps


def element_phrase(target: dict) -> str:
    """The elements an operation touches, as every view of a stepped run writes them: ``mailbox[0..3] of rank 1``,
    ``flag[0] of rank 1``, ``tile[2, 0] and 15 more of rank 0``.

    Examples
    --------
    >>> element_phrase({"name": "mailbox", "rank": 1, "first": [0], "count": 4, "shape": [4], "nbytes": 16,
    ...                 "dtype": "float32"})
    'mailbox[0..3] of rank 1'
    >>> element_phrase({"name": "flag", "rank": 1, "first": [0], "count": 1, "nbytes": 4, "dtype": "int32"})
    'flag[0] of rank 1'
    """
    first, count = list(target.get("first") or []), target["count"]
    name, where = target["name"], f" of rank {target['rank']}"
    if not first:
        return name + where
    if len(first) == 1 and count > 1 and target.get("nbytes") == count * _itemsize(target):  # one run of elements
        return f"{name}[{first[0]}..{first[0] + count - 1}]{where}"
    more = f" and {count - 1} more" if count > 1 else ""
    return f"{name}[{', '.join(map(str, first))}]{more}{where}"


def _itemsize(target: dict) -> int | None:
    import torch

    return getattr(torch, target["dtype"]).itemsize if "dtype" in target else None


@dataclass
class Step:
    """Step ``index`` of a run: ``rank`` made ``operation`` (as its gate described it when held); ``before`` and
    ``after``: the first elements' values just before and after it."""

    index: int
    rank: int
    operation: dict
    before: list | None = None
    after: list | None = None

    def cells(self) -> list[str]:
        op = self.operation
        targets = ", ".join(element_phrase(t) for t in op["targets"])
        operands = " / ".join(_values(op[name]) for name in ("compare", "value") if name in op) or "-"
        targets = targets or "every rank" if op["kind"] == "host barrier" else targets
        within = f" in {op['within']}" if op.get("within") else ""  # a collective of a training step
        return [str(self.index), str(self.rank), str(op["line"]), f"{op['label']} ({op['kind']}){within}", targets,
                operands, _values(self.before), _values(self.after)]

    def is_access(self, access, heap_rank: int) -> bool:
        """Whether this step is ``access`` (an :class:`iris.Access` of a race: rank, line, kind) on ``heap_rank``'s
        heap."""
        op = self.operation
        return (self.rank == access.rank and op["line"] == access.line and op["kind"] == access.kind
                and any(t["rank"] == heap_rank for t in op["targets"]))


HEADER = ["step", "rank", "line", "operation", "target", "writes / compares", "before", "after"]
RACE_COLUMN = "race"


class Transcript:
    """The steps of a run, in order; ``str()`` is a Markdown table, :meth:`html` the same as HTML.

    Attributes
    ----------
    race : iris.Race or None
        A race whose two steps are marked (set by :func:`~.race_replay.make_it_happen`): the first step of each of
        its accesses, once taken.
    """

    def __init__(self, steps: list[Step] | None = None):
        self.steps: list[Step] = list(steps or [])
        self.race = None

    def append(self, step: Step) -> None:
        self.steps.append(step)

    def __len__(self) -> int:
        return len(self.steps)

    def step_of(self, access, heap_rank: int) -> Step | None:
        """The first step that is ``access`` on ``heap_rank``'s heap (:meth:`Step.is_access`), None if none was
        taken."""
        return next((step for step in self.steps if step.is_access(access, heap_rank)), None)

    def racing(self) -> dict[int, str]:
        """The marks of :attr:`race`'s steps taken so far, by step index: ``"with step 7"`` (``"its other access:
        not taken yet"`` while only one is)."""
        if self.race is None:
            return {}
        found = [self.step_of(access, self.race.heap_rank) for access in (self.race.first, self.race.second)]
        taken = [step for step in found if step is not None]
        if len(taken) == 2 and taken[0] is taken[1]:
            return {taken[0].index: "both accesses"}
        if len(taken) == 2:
            return {taken[0].index: f"with step {taken[1].index}", taken[1].index: f"with step {taken[0].index}"}
        return {step.index: "its other access: not taken yet" for step in taken}

    def header(self) -> list[str]:
        return HEADER + ([RACE_COLUMN] if self.racing() else [])

    def rows(self) -> list[list[str]]:
        marks = self.racing()
        rows = [step.cells() for step in self.steps]
        if marks:
            rows = [row + [marks.get(step.index, "")] for row, step in zip(rows, self.steps, strict=True)]
        return rows

    def text(self) -> str:
        """A Markdown table, columns padded to line up in a terminal."""
        rows = [self.header(), *self.rows()]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["| " + " | ".join(cell.ljust(w) if i > 1 else cell.rjust(w) for i, (cell, w) in
                                   enumerate(zip(row, widths, strict=True))) + " |" for row in rows]
        lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text() if self.steps else "(no step taken)"

    def html(self) -> str:
        """The table as HTML, each value under its header wherever it is shown (:func:`iris.base.tables.html_table`):
        numbers right, words left; a table wider than its column scrolls in a box of its own. A race's two rows are
        shaded."""
        marks = self.racing()
        rows = []
        for step, row in zip(self.steps, self.rows(), strict=True):
            cells = [html.escape(cell) for cell in row]
            rows.append([(cell, RACING) for cell in cells] if step.index in marks else cells)
        header = self.header()
        return html_table([html.escape(h) for h in header], rows, align="rrrlllll" + "l" * (len(header) - 8),
                          css_class="iris-step-transcript", row_labels=False)


def _values(values) -> str:
    if values is None:
        return "-"
    shown = ", ".join(_number(v) for v in values[:SHOWN])
    return shown + (", ..." if len(values) > SHOWN else "")


def _number(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)
