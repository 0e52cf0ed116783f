"""What the race checker reports: :class:`Race` (two accesses not ordered by happens-before), its
:class:`Access` es, the :class:`RaceWarning`, and tables of races as text or HTML.

Examples
--------
>>> first = Access(rank=0, program_id=(0, 0, 0), kind="store", file="kernels.py", line=12, kernel="produce")
>>> second = Access(rank=1, program_id=(0, 0, 0), kind="load", file="kernels.py", line=20, kernel="consume")
>>> print(Race("consume", "mailbox", 4096, 5, (5,), 1, first, second))   # doctest: +ELLIPSIS
race on mailbox[5] (rank 1's heap): store at kernels.py:12 (rank 0, program (0, 0, 0), kernel produce) and ...
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass

from ...base.tables import html_table


class RaceWarning(UserWarning):
    """A data race found by ``iris.iris(..., check="races")``; issued once per pair of source lines."""


@dataclass(frozen=True)
class Access:
    """One side of a race.

    Attributes
    ----------
    rank : int
        The rank whose kernel made the access.
    program_id : tuple of int
        ``(x, y, z)`` of the program that made it.
    kind : str
        ``"load"``, ``"store"``, or the atomic (``"atomic_add"``, ``"atomic_cas"``...).
    file, line : str, int
        The kernel source line (the innermost ``@triton.jit``/``@gluon.jit`` function of the user's, not iris's
        device API that it called).
    kernel : str
        The kernel launched.
    operation : str
        The named operation the launch ran in (:attr:`iris.instruments.operations.Operation.label`: a collective of
        the ``iris`` torch.distributed backend, ``all_reduce · DDP bucket 0``), "" outside every one.
    """

    rank: int
    program_id: tuple
    kind: str
    file: str
    line: int
    kernel: str
    operation: str = ""

    @property
    def location(self) -> str:
        """``file:line``, the file without its directory."""
        return f"{os.path.basename(self.file)}:{self.line}"

    def __str__(self) -> str:
        within = f", in {self.operation}" if self.operation else ""
        return (f"{self.kind} at {self.location} (rank {self.rank}, program {tuple(self.program_id)}, "
                f"kernel {self.kernel}{within})")


@dataclass(frozen=True)
class Race:
    """Two accesses to one element, at least one a plain (non-atomic) write or a write against a plain access,
    with no happens-before between them: no program order, host barrier, device barrier, launch order on one
    rank, or release atomic observed by an acquire atomic.

    Attributes
    ----------
    kernel : str
        The kernel that made the second access (the one that found the race).
    allocation : str
        The allocation's ``name=`` label, else ``alloc@<offset>`` (as :class:`iris.heap.HeapLocation` names it).
    offset : int
        Byte offset of the allocation in the heap (the same on every rank), or of the element when it lies in no
        live allocation.
    element : int
        Flat index of the element in the allocation.
    index : tuple of int
        The element's index in the allocation's shape (``(row, column)`` for a matrix).
    heap_rank : int
        Whose heap the element is in.
    first, second : Access
        The earlier and the later access, in the order the checker saw them.

    Examples
    --------
    >>> for race in ctx.races():                  # doctest: +SKIP
    ...     print(race)
    ...     print(race.allocation, race.element, race.first.line, race.second.line)
    """

    kernel: str
    allocation: str
    offset: int
    element: int
    index: tuple
    heap_rank: int
    first: Access
    second: Access

    @property
    def accesses(self) -> tuple[Access, Access]:
        return self.first, self.second

    @property
    def element_name(self) -> str:
        """``name[i, j]``: the allocation and the element's index in its shape."""
        return f"{self.allocation}[{', '.join(map(str, self.index))}]"

    def __str__(self) -> str:
        return (f"race on {self.element_name} (rank {self.heap_rank}'s heap): {self.first} and {self.second} "
                "are not ordered")


COLUMNS = ("kernel", "element", "heap of", "first access", "second access")


def _row(race: Race) -> tuple[str, ...]:
    return (race.kernel, race.element_name, f"rank {race.heap_rank}", str(race.first), str(race.second))


def races_text_table(races) -> str:
    """A plain-text table of races, one per line, with a header; ``"no races"`` for none.

    Examples
    --------
    >>> print(races_text_table([]))
    no races
    """
    if not races:
        return "no races"
    rows = [COLUMNS] + [_row(race) for race in races]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def races_html_table(races) -> str:
    """An HTML ``<table>`` of races (escaped), or a ``<p>`` saying there are none. The kernel, the element and
    whose heap stay on one line; the accesses wrap between their phrases (:func:`_access_html`).

    Examples
    --------
    >>> races_html_table([])
    '<p>no races</p>'
    """
    if not races:
        return "<p>no races</p>"
    rows = [[html.escape(race.kernel), html.escape(race.element_name), html.escape(f"rank {race.heap_rank}"),
             _access_html(race.first), _access_html(race.second)] for race in races]
    return html_table([html.escape(column) for column in COLUMNS], rows, align="lllll", wrap=(3, 4),
                      css_class="iris-races", row_labels=False)


def _unbroken(phrase: str) -> str:
    """A phrase a narrow column wraps around, never through (escaped)."""
    return f'<span style="white-space:nowrap">{html.escape(phrase)}</span>'


def _access_html(access: Access) -> str:
    """An access as its text says it, in phrases that each stay on one line: ``store at kernels.py:12``,
    ``(rank 0,``, ``program (0, 0, 0),``, ``kernel produce)`` (``kernel one_shot_kernel,``, ``in all_reduce · DDP
    bucket 0)`` within a named operation)."""
    phrases = (f"{access.kind} at {access.location}", f"(rank {access.rank},",
               f"program {tuple(access.program_id)},", f"kernel {access.kernel}{',' if access.operation else ')'}")
    phrases += (f"in {access.operation})",) if access.operation else ()
    return " ".join(map(_unbroken, phrases))
