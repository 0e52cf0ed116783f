"""The race checker in the workbench: turn it on for a cell, gather every rank's races after it, show them.

``%iris start ... --check races`` checks every cell; ``%%iris_kernel --check races`` turns the checker on
(on every rank, from then on) and shows the cell's races even when there are none. A race is found by the
rank whose access came second, so every rank is asked; the result is a :class:`RaceReport`, an HTML table
in a notebook and a text table elsewhere.

Examples
--------
>>> start_checking(wb)                                  # doctest: +SKIP
>>> wb.run(cell)                                        # doctest: +SKIP
>>> print(cell_races(wb).text())                        # doctest: +SKIP
no races
"""

from __future__ import annotations

import html

from iris.instruments.checking import races_html_table, races_text_table

from .report import ranks_phrase
from .widgets import probes


class RaceReport:
    """The races a cell ran into, from every rank; displays as an HTML table, prints as a text table.

    Attributes
    ----------
    races : list of iris.Race
        In rank order, each rank's in the order found.
    """

    def __init__(self, races: list):
        self.races = races

    def __bool__(self) -> bool:
        return bool(self.races)

    def _header(self) -> str:
        if not self.races:
            return "race check: no races in this cell"
        ranks = sorted({r.second.rank for r in self.races})
        count = f"{len(self.races)} race{'s' * (len(self.races) != 1)}"
        return (f"race check: {count}, found by {ranks_phrase(ranks)}: each pair of accesses below touched one "
                "element with no happens-before between them (no barrier, no release seen by an acquire)")

    def text(self) -> str:
        """A header line, then :func:`iris.checking.races_text_table` (nothing more when there are none)."""
        return self._header() if not self.races else f"{self._header()}\n{races_text_table(self.races)}"

    def _repr_mimebundle_(self, **kwargs) -> dict:
        body = races_html_table(self.races) if self.races else ""
        style = "color:#c0392b" if self.races else "color:#2e7d32"
        header = f"<b style='{style}'>{html.escape(self._header())}</b>"
        return {"text/plain": self.text(), "text/html": f"<div class='iris-races'>{header}{body}</div>"}


def start_checking(wb) -> None:
    """Turn the race checker on, on every rank (it is collective), from now on."""
    wb.apply(probes.start_race_check)


def cell_races(wb) -> RaceReport:
    """Every rank's races since the last call (all ranks, even after a ``--ranks`` cell: they are all idle)."""
    answers = wb.apply(probes.take_races)
    return RaceReport([race for answer in answers if answer["status"] == "ok" for race in answer["races"]])
