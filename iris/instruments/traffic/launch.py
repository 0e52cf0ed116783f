"""What one launch of one rank moved: :class:`LaunchTraffic`, bytes per (heap rank, kind), and how it is counted.

The counting rules, in one place (the CPU recorder, :mod:`.recorder`, and the trace reader,
:meth:`iris.instruments.traffic.TrafficMatrix.from_trace`, both follow them):

* **bytes, not launches**: an access moves its element size once per lane that is not masked off; a lane
  masked off moves nothing;
* kinds (:data:`KINDS`): ``"load"`` (a read), ``"store"`` (a write), ``"atomic"`` (a read-modify-write, counted
  once, as the element's bytes, per lane performed: a compare-and-swap that failed still read the element, so
  it counts as much as one that swapped, as it costs as much);
* per atomic operation too (:attr:`LaunchTraffic.atomic_ops`): ``atomic_add`` ... ``atomic_cas``. The Triton
  interpreter sees ``atomic_sub`` as the ``atomic_add`` of the negated value (that is how iris and Triton lower
  it), so on the CPU a sub is counted under ``atomic_add``;
* accesses outside every symmetric heap (a rank's plain torch tensors, the trace buffers) are not in the
  matrix: they are counted apart, per kind, in :attr:`LaunchTraffic.outside`, so a table can say how much
  of a kernel's traffic never touched a heap.

Examples
--------
>>> t = LaunchTraffic.empty("kernel", rank=0, world=2)
>>> t.add("store", heap_rank=1, nbytes=64)
>>> t.moved("store", 1), t.moved("load")
(64, 0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KINDS = ("load", "store", "atomic")
KIND_INDEX = {kind: i for i, kind in enumerate(KINDS)}


def kind_index(kind: str) -> int:
    """The index of ``kind`` (``"load"``, ``"store"``, ``"atomic"``) in :data:`KINDS`; a clear error otherwise."""
    if kind not in KIND_INDEX:
        raise ValueError(f"unknown traffic kind {kind!r}: use one of {', '.join(map(repr, KINDS))}")
    return KIND_INDEX[kind]


@dataclass
class LaunchTraffic:
    """The bytes one rank's launch moved, per heap rank and kind.

    Attributes
    ----------
    kernel : str
        The launched kernel's name.
    rank : int
        The rank that issued the accesses.
    bytes : numpy.ndarray
        int64, shape ``(world, 3)``: ``bytes[heap_rank, k]`` for kind ``KINDS[k]``.
    operations : numpy.ndarray
        int64, shape ``(world, 3)``: how many memory operations (one per ``tl.load``/``tl.store``/atomic call
        of a program, whatever its width) touched each heap: many small operations cost more than few wide ones.
    atomic_ops : dict of str to numpy.ndarray
        Per atomic operation name, bytes per heap rank (shape ``(world,)``).
    outside : numpy.ndarray
        int64, shape ``(3,)``: bytes per kind outside every symmetric heap.
    operation : iris.instruments.operations.Operation or None
        The named operation the launch belonged to (a collective of the ``iris`` torch.distributed backend), None
        outside every one.
    """

    kernel: str
    rank: int
    bytes: np.ndarray
    operations: np.ndarray
    atomic_ops: dict = field(default_factory=dict)
    outside: np.ndarray = field(default_factory=lambda: np.zeros(len(KINDS), dtype=np.int64))
    operation: object = None

    @classmethod
    def empty(cls, kernel: str, rank: int, world: int, operation=None) -> LaunchTraffic:
        """A launch that moved nothing yet (within ``operation``, when it belongs to a named one)."""
        zeros = np.zeros((world, len(KINDS)), dtype=np.int64)
        return cls(kernel, rank, zeros, zeros.copy(), operation=operation)

    @property
    def world(self) -> int:
        return self.bytes.shape[0]

    def add(self, kind: str, heap_rank: int, nbytes: int, op: str | None = None) -> None:
        """Count ``nbytes`` of ``kind`` at ``heap_rank``'s heap (one operation); ``op``: the atomic's name."""
        k = kind_index(kind)
        self.bytes[heap_rank, k] += nbytes
        self.operations[heap_rank, k] += 1
        if op is not None:
            self.atomic_ops.setdefault(op, np.zeros(self.world, dtype=np.int64))[heap_rank] += nbytes

    def moved(self, kind: str | None = None, heap_rank: int | None = None) -> int:
        """Bytes of ``kind`` (every kind: None) at ``heap_rank``'s heap (every heap: None).

        Examples
        --------
        >>> t = LaunchTraffic.empty("k", 0, 2); t.add("load", 1, 8); t.add("atomic", 0, 4, op="atomic_add")
        >>> t.moved(), t.moved("atomic", 0), int(t.atomic_ops["atomic_add"][0])
        (12, 4, 4)
        """
        rows = self.bytes if heap_rank is None else self.bytes[heap_rank:heap_rank + 1]
        return int(rows.sum() if kind is None else rows[:, kind_index(kind)].sum())

    def merged(self, other: LaunchTraffic, kernel: str | None = None) -> LaunchTraffic:
        """This launch's bytes plus ``other``'s (the same rank's), under ``kernel`` (default: this one's); the
        operation both belong to, else None."""
        ops = {name: counts.copy() for name, counts in self.atomic_ops.items()}
        for name, counts in other.atomic_ops.items():
            ops[name] = ops.get(name, 0) + counts
        operation = self.operation if self.operation == other.operation else None
        return LaunchTraffic(kernel or self.kernel, self.rank, self.bytes + other.bytes,
                             self.operations + other.operations, ops, self.outside + other.outside, operation)
