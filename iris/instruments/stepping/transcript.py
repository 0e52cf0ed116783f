"""A stepped run as a numbered table: the steps' rank, line, operation, target, and the values before and after.

What a stepper view shows, readable where widgets are not (an export, the documentation site, a terminal).

Examples
--------
>>> step = Step(0, 1, {"kind": "store", "label": "iris.store", "kernel": "send", "line": 7, "source": "...",
...                    "program": [0, 0, 0], "targets": [{"rank": 0, "name": "inbox", "first": [0], "count": 4}],
...                    "before": [0.0], "value": [1.0], "lanes": 4, "dtype": "fp32"}, before=[0.0], after=[1.0])
>>> print(Transcript([step]).text().splitlines()[2])
|    0 |    1 | 7    | iris.store (store) | inbox[0..] of rank 0 (4) | 1                 | 0      | 1     |
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from iris.base.tables import html_table

SHOWN = 4  # values per cell of the table


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
        targets = ", ".join(f"{t['name']}{_index(t)} of rank {t['rank']}" + (f" ({t['count']})" if t["count"] > 1
                                                                             else "") for t in op["targets"])
        operands = " / ".join(_values(op[name]) for name in ("compare", "value") if name in op) or "-"
        targets = targets or "every rank" if op["kind"] == "host barrier" else targets
        return [str(self.index), str(self.rank), str(op["line"]), f"{op['label']} ({op['kind']})", targets,
                operands, _values(self.before), _values(self.after)]


HEADER = ["step", "rank", "line", "operation", "target", "writes / compares", "before", "after"]


class Transcript:
    """The steps of a run, in order; ``str()`` is a Markdown table, :meth:`html` the same as HTML."""

    def __init__(self, steps: list[Step] | None = None):
        self.steps: list[Step] = list(steps or [])

    def append(self, step: Step) -> None:
        self.steps.append(step)

    def __len__(self) -> int:
        return len(self.steps)

    def rows(self) -> list[list[str]]:
        return [step.cells() for step in self.steps]

    def text(self) -> str:
        """A Markdown table, columns padded to line up in a terminal."""
        rows = [HEADER, *self.rows()]
        widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
        lines = ["| " + " | ".join(cell.ljust(w) if i > 1 else cell.rjust(w) for i, (cell, w) in
                                   enumerate(zip(row, widths, strict=True))) + " |" for row in rows]
        lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text() if self.steps else "(no step taken)"

    def html(self) -> str:
        """The table as HTML, each value under its header wherever it is shown (:func:`iris.base.tables.html_table`):
        numbers right, words left; a table wider than its column scrolls in a box of its own."""
        rows = [[html.escape(cell) for cell in row] for row in self.rows()]
        return html_table([html.escape(h) for h in HEADER], rows, align="rrrlllll", css_class="iris-step-transcript",
                          row_labels=False)


def _index(target: dict) -> str:
    first = target.get("first")
    if not first:
        return ""
    return "[" + ", ".join(map(str, first)) + ("..]" if target["count"] > 1 else "]")


def _values(values) -> str:
    if values is None:
        return "-"
    shown = ", ".join(_number(v) for v in values[:SHOWN])
    return shown + (", ..." if len(values) > SHOWN else "")


def _number(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)
