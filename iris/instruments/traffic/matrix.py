"""Every rank's traffic at every heap: :class:`TrafficMatrix`, and the minimum an operation needs beside it.

``bytes[i, j, k]``: the bytes rank ``i`` moved at rank ``j``'s heap, of kind ``KINDS[k]`` (load, store,
atomic; see :mod:`.launch` for what counts). What crossed from rank ``a`` to rank ``b`` (:meth:`crossing`) is
what ``a`` stored or atomically updated at ``b``'s heap plus what ``b`` loaded from ``a``'s: the direction the
data went, whoever issued the access. A minimum (:mod:`.minimum`) is in the same terms, so the table can say
how many times the bytes the operation needs a kernel moved.

Examples
--------
>>> from iris.instruments.traffic.launch import LaunchTraffic
>>> a, b = LaunchTraffic.empty("k", 0, 2), LaunchTraffic.empty("k", 1, 2)
>>> a.add("store", 1, 256); b.add("load", 0, 256)
>>> m = TrafficMatrix.from_launches([[a], [b]]).with_minimum(256)
>>> m.crossing().tolist(), m.ratio()
([[0, 512], [0, 0]], 2.0)
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field, replace

import numpy as np

from ...base.sizes import format_size
from ...base.tables import html_table
from .from_trace import traced_launches
from .launch import KINDS, LaunchTraffic, kind_index

SOURCES = {
    "interpreter": "counted by the CPU interpreter: exact, every access of every launch",
    "trace": "counted from device tracing: only operations of kernels initialised with tracing=True, the side "
             "of each that crosses ranks (see iris.instruments.traffic.from_trace)",
}


@dataclass
class TrafficMatrix:
    """Bytes every rank moved at every rank's heap, per kind, for one launch or several.

    Attributes
    ----------
    bytes : numpy.ndarray
        int64 ``(world, world, 3)``: ``[issuing rank, heap rank, kind]``, kinds as :data:`KINDS`.
    operations : numpy.ndarray
        int64 ``(world, world, 3)``: memory operations, same indices.
    outside : numpy.ndarray
        int64 ``(world, 3)``: bytes each rank moved outside every heap, per kind.
    atomic_ops : dict of str to numpy.ndarray
        Per atomic operation, ``(world, world)`` bytes.
    kernel : str
        The kernel (or kernels) counted.
    source : str
        ``"interpreter"`` or ``"trace"`` (:data:`SOURCES`).
    minimum : None, int or numpy.ndarray
        What the operation needs: a total, or ``(world, world)`` bytes that must cross from each rank to each
        other (:mod:`iris.instruments.traffic.minimum`); set with :meth:`with_minimum`.
    label : str
        What the caller calls what was counted, said in the headline beside the kernel: which variant of a
        kernel that has several (``"one_shot"``), which step of a lesson.
    """

    bytes: np.ndarray
    operations: np.ndarray
    outside: np.ndarray
    atomic_ops: dict = field(default_factory=dict)
    kernel: str = ""
    source: str = "interpreter"
    minimum: object = None
    label: str = ""

    # -- building ----------------------------------------------------------------------------------------
    @classmethod
    def from_launches(cls, per_rank: list[list[LaunchTraffic]], launch: int | None = None,
                      source: str = "interpreter") -> TrafficMatrix:
        """The matrix of every rank's recorded launches (``per_rank[r]``: rank r's, in launch order).

        ``launch`` picks each rank's K-th launch; None sums them all. A clear error names the ranks that
        recorded fewer launches than asked.
        """
        world = len(per_rank)
        if launch is None:
            chosen = [_sum_launches(launches, rank, world) for rank, launches in enumerate(per_rank)]
        else:
            short = [rank for rank, launches in enumerate(per_rank) if not -len(launches) <= launch < len(launches)]
            if short:
                counts = ", ".join(f"rank {r}: {len(per_rank[r])}" for r in short)
                raise IndexError(f"no launch {launch} on every rank (launches recorded: {counts}); pick a launch "
                                 "that every rank made, or launch=None for all of them")
            chosen = [launches[launch] for launches in per_rank]
        ops = {}
        for traffic in chosen:
            for name, counts in traffic.atomic_ops.items():
                ops.setdefault(name, np.zeros((world, world), dtype=np.int64))[traffic.rank] += counts
        names = list(dict.fromkeys(t.kernel for t in chosen if t.kernel))
        return cls(np.stack([t.bytes for t in chosen]), np.stack([t.operations for t in chosen]),
                   np.stack([t.outside for t in chosen]), ops, " / ".join(names) or "no launches", source)

    @classmethod
    def from_trace(cls, trace, world: int | None = None) -> TrafficMatrix:
        """The matrix of a device trace: bytes per (rank, target rank, kind) from its events.

        Counts only what traced kernels recorded (initialised with ``tracing=True``, while ``ctx.tracing`` was
        enabled); see :mod:`iris.instruments.traffic.from_trace` for which side of each operation is counted.

        Parameters
        ----------
        trace : dict or list of dict
            A merged trace (``ctx.tracing.export(..., merge=True)`` on rank 0,
            :func:`iris.instruments.tracing.host.merge_traces`), or every rank's ``ctx.tracing.trace()``.
        world : int, optional
            The number of ranks; default: the trace's ``metadata["world_size"]``.

        Examples
        --------
        >>> m = TrafficMatrix.from_trace(json.load(open("trace.json")))   # doctest: +SKIP
        """
        parts = trace if isinstance(trace, list) else [trace]
        world = world or parts[0]["metadata"]["world_size"]
        events = [event for part in parts for event in part["traceEvents"]]
        return cls.from_launches([[t] for t in traced_launches(events, world)], source="trace")

    def with_minimum(self, need) -> TrafficMatrix:
        """This matrix with what the operation needs beside it: ``need`` bytes in all, or a ``(world, world)``
        matrix of bytes that must cross from each rank to each other (:mod:`iris.instruments.traffic.minimum`).

        Examples
        --------
        >>> m.with_minimum(iris.instruments.traffic.minimum.all_gather(4096, world=2)).ratio()   # doctest: +SKIP
        1.0
        """
        world = self.world
        if np.ndim(need) == 0:
            if int(need) != need or need < 0:
                raise ValueError(f"need: bytes as a whole number >= 0, got {need!r}")
            return replace(self, minimum=int(need))
        need = np.asarray(need)
        if need.shape != (world, world):
            raise ValueError(f"need: a total or a ({world}, {world}) matrix of bytes from each rank to each other, "
                             f"got shape {need.shape}")
        return replace(self, minimum=need.astype(np.int64))

    # -- reading -----------------------------------------------------------------------------------------
    @property
    def world(self) -> int:
        return self.bytes.shape[0]

    def total(self, kind: str | None = None, remote_only: bool = False) -> int:
        """Bytes of ``kind`` (every kind: None) at every heap, or at peers' heaps only (``remote_only``)."""
        chosen = self.bytes if kind is None else self.bytes[..., kind_index(kind)]
        if remote_only:
            chosen = chosen * (1 - np.eye(self.world, dtype=np.int64)).reshape(
                (self.world, self.world) + (1,) * (chosen.ndim - 2))
        return int(chosen.sum())

    def crossing(self) -> np.ndarray:
        """``(world, world)`` bytes that went from rank a (row) to rank b (column): a's stores and atomics at b's
        heap plus b's loads from a's heap; the diagonal is 0 (nothing crossed)."""
        load, store, atomic = (self.bytes[..., kind_index(k)] for k in KINDS)
        moved = store + atomic + load.T
        np.fill_diagonal(moved, 0)
        return moved

    def needed(self) -> int | None:
        """The minimum as a total of bytes that must cross ranks (None when no minimum is set)."""
        if self.minimum is None:
            return None
        return int(self.minimum) if np.ndim(self.minimum) == 0 else int(self.minimum.sum())

    def ratio(self) -> float | None:
        """Bytes that crossed ranks per byte needed (None without a minimum; inf when none is needed)."""
        needed = self.needed()
        if needed is None:
            return None
        moved = int(self.crossing().sum())
        return moved / needed if needed else (float("inf") if moved else 1.0)

    # -- showing -----------------------------------------------------------------------------------------
    def headline(self) -> str:
        """One line: the kernel (and the label), what crossed ranks against what is needed, what moved in all."""
        moved = int(self.crossing().sum())
        named = f"{self.kernel} ({self.label})" if self.label else self.kernel
        line = f"traffic of {named} on {self.world} ranks: {format_size(moved)} crossed ranks"
        if self.minimum is not None:
            line += f", {format_size(self.needed())} needed ({_ratio_text(self.ratio())})"
        return line + f", {format_size(self.total())} at heaps in all"

    def to_text(self) -> str:
        """The matrix as plain text: per kind, bytes by issuing rank (rows) and heap (columns), then what
        crossed ranks, beside the minimum when one is set.

        Examples
        --------
        >>> print(m.to_text())                                   # doctest: +SKIP
        """
        lines = [self.headline(), f"({SOURCES[self.source]})"]
        heads = [f"heap {j}" for j in range(self.world)] + ["outside"]
        for k, kind in enumerate(KINDS):
            rows = [[f"rank {i}"] + [format_size(v) for v in self.bytes[i, :, k]] + [format_size(self.outside[i, k])]
                    for i in range(self.world)]
            lines += ["", f"{kind} (bytes each rank moved at each heap):", _text_table(["issuer", *heads], rows)]
        if self.atomic_ops:
            rows = [[name, format_size(int(counts.sum()))] for name, counts in sorted(self.atomic_ops.items())]
            lines += ["", "atomics by operation:", _text_table(["operation", "bytes"], rows)]
        lines += ["", "crossed ranks (from row to column):", _text_table(
            ["from", *[f"to {j}" for j in range(self.world)]], self._crossing_rows(str))]
        return "\n".join(lines)

    def to_html(self) -> str:
        """The matrix as HTML, what a notebook shows: the headline, how it was counted, then :meth:`tables_html`."""
        return (f"<div class='iris-traffic'><b>{html.escape(self.headline())}</b>"
                f"<div style='font-size:12px;color:#555'>{html.escape(SOURCES[self.source])}</div>"
                f"{self.tables_html()}</div>")

    def tables_html(self) -> str:
        """The tables alone, side by side: per kind, bytes by issuing rank and heap (cells shaded by their share
        of the largest), then what crossed ranks, beside the minimum when one is set. A view with a header of
        its own shows these under it (the headline once).

        Examples
        --------
        >>> m.tables_html().count("<table")                      # doctest: +SKIP
        4
        """
        biggest = max(int(self.bytes.max(initial=0)), 1)
        tables = []
        for k, kind in enumerate(KINDS):
            rows = [[f"rank {i}", *(_shaded(int(v), biggest) for v in self.bytes[i, :, k]),
                     (format_size(int(self.outside[i, k])), "color:#777")] for i in range(self.world)]
            tables.append(html_table(["issuer", *(f"heap {j}" for j in range(self.world)), "outside"], rows,
                                     caption=kind, css_class="iris-traffic-table"))
        tables.append(html_table(["from", *(f"to {j}" for j in range(self.world))],
                                 self._crossing_rows(html.escape), caption="crossed ranks",
                                 css_class="iris-traffic-table"))
        return f"<div style='display:flex;flex-flow:row wrap;gap:16px;max-width:100%'>{''.join(tables)}</div>"

    def _repr_mimebundle_(self, **kwargs) -> dict:
        return {"text/plain": self.to_text(), "text/html": self.to_html()}

    def _crossing_rows(self, escape) -> list[list[str]]:
        """Per source rank, moved bytes to each rank ("moved / needed (ratio)" with a per-pair minimum)."""
        moved = self.crossing()
        pairs = self.minimum if self.minimum is not None and np.ndim(self.minimum) == 2 else None
        rows = []
        for a in range(self.world):
            cells = [f"rank {a}"]
            for b in range(self.world):
                if a == b:
                    cells.append("–")
                elif pairs is None:
                    cells.append(format_size(int(moved[a, b])))
                else:
                    need = int(pairs[a, b])
                    ratio = moved[a, b] / need if need else (float("inf") if moved[a, b] else 1.0)
                    cells.append(escape(f"{format_size(int(moved[a, b]))} / {format_size(need)} "
                                        f"({_ratio_text(ratio)})"))
            rows.append(cells)
        return rows


def _sum_launches(launches: list[LaunchTraffic], rank: int, world: int) -> LaunchTraffic:
    """Every launch of one rank as one, named after its kernels (each once, in order of first launch)."""
    total = LaunchTraffic.empty(" + ".join(dict.fromkeys(t.kernel for t in launches)), rank, world)
    for traffic in launches:
        total = total.merged(traffic, kernel=total.kernel)
    return total


def _ratio_text(ratio: float) -> str:
    return "nothing needed, something moved" if ratio == float("inf") else f"{ratio:.2f}× the minimum"


def _shaded(value: int, biggest: int) -> tuple[str, str]:
    """A cell of :func:`~iris.base.tables.html_table`: ``value`` as a size, shaded by its share of ``biggest``."""
    alpha = 0.08 + 0.8 * value / biggest if value else 0.0
    return format_size(value), f"background:rgba(78,121,167,{alpha:.2f})"


def _text_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[c])) for r in [head, *rows]) for c in range(len(head))]
    lines = ("  ".join(str(cell).rjust(w) for cell, w in zip(row, widths, strict=True)) for row in [head, *rows])
    return "\n".join(lines)
