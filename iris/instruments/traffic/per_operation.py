"""The traffic of a recording per named operation: one matrix per collective of a training step.

A DDP step launches one all-reduce kernel per gradient bucket, an FSDP step an all-gather and a reduce-scatter per
sharded module; summed, their matrices say how much the step moved, not what moved it. Each launch carries the named
operation it ran in (:mod:`iris.instruments.operations`, set by the ``iris`` torch.distributed backend), so the
launches group by operation: the k-th operation of one label on each rank is one entry (every rank of a collective
calls it in the same order), its matrix the sum of its launches on every rank, beside what the operation must move
(:func:`.minimum.of_operation`) where that is known. Launches outside every named operation are entries of their
own, one per launch, named after their kernel.

Examples
--------
>>> from iris.instruments.operations import Operation
>>> from iris.instruments.traffic.launch import LaunchTraffic
>>> op = Operation("all_gather_into_tensor", "FSDP block", nbytes=64, ranks=(0, 1))
>>> a, b = LaunchTraffic.empty("gather", 0, 2, op), LaunchTraffic.empty("gather", 1, 2, op)
>>> a.add("store", 1, 64); b.add("store", 0, 64)
>>> found = per_operation([[a], [b]])
>>> found[0].label, found[0].matrix.ratio()
('all_gather_into_tensor · FSDP block', 1.0)
>>> found["all_gather_into_tensor · FSDP block"] is found[0]
True
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace

import numpy as np

from ...base.sizes import format_size
from ...base.tables import html_table
from .matrix import SOURCES, TrafficMatrix, _text_table
from .minimum import of_operation

SHORT_CELL = 32  # characters of a pairs cell kept on one line ("0→1 12.5 KiB, 1→0 12.5 KiB")
HEAD = ("#", "operation", "kernels", "per rank", "crossed ranks", "needed", "× minimum", "from → to")


@dataclass
class OperationTraffic:
    """One named operation's traffic on every rank.

    Attributes
    ----------
    operation : iris.instruments.operations.Operation or None
        As the first rank that ran it named it (None: a launch outside every named operation).
    matrix : TrafficMatrix
        Its launches on every rank, summed, labelled with the operation, beside its minimum where one is known.
    """

    operation: object
    matrix: TrafficMatrix

    @property
    def label(self) -> str:
        """The operation's label (``all_reduce · DDP bucket 0``), or the kernel's name for a launch outside one."""
        return self.operation.label if self.operation is not None else self.matrix.kernel

    def row(self) -> list[str]:
        """The cells of this entry in the tables (:data:`HEAD` after the first)."""
        m = self.matrix
        moved = m.crossing()
        pairs = ", ".join(f"{a}→{b} {format_size(int(moved[a, b]))}" for a, b in zip(*np.nonzero(moved), strict=True))
        ratio = m.ratio()
        return [self.label, m.kernel, format_size(self.operation.nbytes) if self.operation else "–",
                format_size(int(moved.sum())), format_size(m.needed()) if m.minimum is not None else "–",
                "–" if ratio is None else ("∞" if ratio == float("inf") else f"{ratio:.2f}"), pairs or "nothing"]


class TrafficByOperation:
    """The entries of a recording (:class:`OperationTraffic`), in the order the operations ran; indexed by position
    or by label (the first entry of that label). ``str()``/:meth:`text` and :meth:`html` are one table of them.

    Attributes
    ----------
    entries : list of OperationTraffic
    source : str
        How the bytes were counted (:data:`~iris.instruments.traffic.matrix.SOURCES`).
    world : int
    """

    def __init__(self, entries: list[OperationTraffic], source: str, world: int, label: str = ""):
        self.entries, self.source, self.world = entries, source, world
        self.label = label  # what the recording is called (``--traffic DDP``), in the headline

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    def __getitem__(self, key) -> OperationTraffic:
        if isinstance(key, str):
            for entry in self.entries:
                if entry.label == key:
                    return entry
            known = ", ".join(dict.fromkeys(e.label for e in self.entries)) or "none"
            raise KeyError(f"no operation labelled {key!r} in this recording; its operations: {known}")
        return self.entries[key]

    def named(self) -> list[OperationTraffic]:
        """The entries of named operations (launches outside every one left out)."""
        return [entry for entry in self.entries if entry.operation is not None]

    def headline(self) -> str:
        crossed = sum(int(e.matrix.crossing().sum()) for e in self.entries)
        of = f" of {self.label}" if self.label else ""
        return (f"traffic per operation{of} on {self.world} ranks: {len(self.named())} named operations, "
                f"{len(self.entries) - len(self.named())} other launches, {format_size(crossed)} crossed ranks")

    def rows(self) -> list[list[str]]:
        """One row per entry: its number, then :meth:`OperationTraffic.row`."""
        return [[str(i), *entry.row()] for i, entry in enumerate(self.entries)]

    def text(self) -> str:
        """The table as plain text, then what each operation carries (its detail: a bucket's parameters).

        Examples
        --------
        >>> print(rec.per_operation().text())                       # doctest: +SKIP
        """
        lines = [self.headline(), f"({SOURCES[self.source]})", "", _text_table(list(HEAD), self.rows())]
        carried = [f"  {i}. {e.label}: {e.operation.detail}" for i, e in enumerate(self.entries)
                   if e.operation is not None and e.operation.detail]
        if carried:
            lines += ["", "what they carry:", *carried]
        return "\n".join(lines)

    __str__ = text

    def table_html(self) -> str:
        """The table alone, as HTML, then what each operation carries (a list under it: parameter names are long): a
        view with a header of its own shows it under that."""
        rows = []
        for row in self.rows():
            # The pairs wrap between each other, never inside one ("0→1 4.2 KiB" stays whole); a short list (two
            # ranks' pairs) stays on one line, as every short cell of our tables does.
            pairs = ", ".join(f"<span style='white-space:nowrap'>{html.escape(pair)}</span>"
                              for pair in row[-1].split(", "))
            if len(row[-1]) <= SHORT_CELL:
                pairs = f"<span style='white-space:nowrap'>{html.escape(row[-1])}</span>"
            rows.append([*(html.escape(cell) for cell in row[:-1]), pairs])
        table = html_table([html.escape(h) for h in HEAD], rows, align="rllrrrrl", wrap=(7,),
                           css_class="iris-traffic-operations", row_labels=False)
        carried = "".join(f"<li value='{i}'><b>{html.escape(e.label)}</b>: {html.escape(e.operation.detail)}</li>"
                          for i, e in enumerate(self.entries) if e.operation is not None and e.operation.detail)
        if carried:
            table += (f"<div style='font-size:12px'>what they carry:<ol style='margin:2px 0;padding-left:24px'>"
                      f"{carried}</ol></div>")
        return table

    def html(self) -> str:
        """The headline, how the bytes were counted, then :meth:`table_html`."""
        return (f"<div class='iris-traffic-operations'><b>{html.escape(self.headline())}</b>"
                f"<div style='font-size:12px;color:#555'>{html.escape(SOURCES[self.source])}</div>"
                f"{self.table_html()}</div>")

    def _repr_mimebundle_(self, **kwargs) -> dict:
        return {"text/plain": self.text(), "text/html": self.html()}


def per_operation(per_rank: list, source: str = "interpreter") -> TrafficByOperation:
    """Every rank's launches (``per_rank[r]``: rank r's, in launch order) grouped by named operation (see the
    module's docstring).

    Examples
    --------
    >>> per_operation([[], []]).headline()
    'traffic per operation on 2 ranks: 0 named operations, 0 other launches, 0 B crossed ranks'
    """
    world = len(per_rank)
    groups: dict[tuple, list[list]] = {}  # key -> each rank's launches of it
    first: dict[tuple, object] = {}
    for rank, launches in enumerate(per_rank):
        occurrence: dict[tuple, dict] = {}  # (label) -> {operation number on this rank: its occurrence}
        for launch in launches:
            op = launch.operation
            if op is None:  # a launch of its own, the k-th of its kernel on this rank
                seen = occurrence.setdefault(("launch", launch.kernel), {})
                key = ("launch", launch.kernel, len(seen))
                seen[len(seen)] = None
            else:
                seen = occurrence.setdefault(("operation", op.label), {})
                key = ("operation", op.label, seen.setdefault(op.number, len(seen)))
            groups.setdefault(key, [[] for _ in range(world)])[rank].append(launch)
            first.setdefault(key, op)
    entries = []
    for key, launches in groups.items():
        op = first[key]
        matrix = TrafficMatrix.from_launches(launches, source=source)
        if op is not None:
            matrix = replace(matrix, label=op.label)
            need = of_operation(op, world)
            matrix = matrix if need is None else matrix.with_minimum(need)
        entries.append(OperationTraffic(op, matrix))
    return TrafficByOperation(entries, source, world)
