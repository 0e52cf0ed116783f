"""Vector clocks of one rank: its host and the programs of the launch that is running.

The happens-before model. Each rank owns ``slots`` threads of the global vector (index ``rank * slots + slot``);
program ``p`` of a launch is thread ``p % slots`` of its rank. Programs of one launch are concurrent, as on a
GPU, although the interpreter runs them one after another: each starts (forks) from the rank's host clock at
the launch, not from the program before it. When the launch ends its programs are joined into the host clock,
so launches on one rank are ordered in host order. Programs that share a slot (grids larger than ``slots``)
are treated as one thread in program order: that can hide a race between them, never invent one.

A clock value names an epoch of a thread: an access is packed with its thread and clock in one int64
(:func:`pack_epoch`), and it happened before a thread whose vector clock ``vc`` has ``vc[thread] >= clock``.

Examples
--------
>>> clocks = ProgramClocks(rank=0, world=2, slots=4)
>>> clocks.launch_started(); clocks.program_started((0, 0, 0), (2, 1, 1))
>>> first = clocks.epoch(atomic=False)
>>> clocks.program_started((1, 0, 0), (2, 1, 1))
>>> bool(happened_before(np.array([first]), clocks.current)[0])      # programs of one launch: concurrent
False
>>> clocks.launch_finished(); clocks.launch_started(); clocks.program_started((0, 0, 0), (1, 1, 1))
>>> bool(happened_before(np.array([first]), clocks.current)[0])      # the next launch: ordered
True
"""

from __future__ import annotations

import numpy as np

THREAD_BITS = 23  # world * slots threads at most (8 million)
ATOMIC_BIT = 1 << THREAD_BITS  # the access was an atomic (atomics never race with atomics)
CLOCK_SHIFT = THREAD_BITS + 1
THREAD_MASK = ATOMIC_BIT - 1


def pack_epoch(thread: int, clock: int, atomic: bool) -> int:
    """One int64 naming an access: its thread, that thread's clock, whether it was atomic. 0: no access."""
    return (clock << CLOCK_SHIFT) | (ATOMIC_BIT if atomic else 0) | thread


def threads_of(epochs: np.ndarray) -> np.ndarray:
    return epochs & THREAD_MASK


def happened_before(epochs: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Which accesses (packed epochs; 0 = none) happened before the thread whose vector clock is ``vector``."""
    return vector[epochs & THREAD_MASK] >= (epochs >> CLOCK_SHIFT)


class ProgramClocks:
    """The host's and the running programs' vector clocks of one rank.

    Parameters
    ----------
    rank, world : int
        This rank and the number of ranks.
    slots : int
        Threads per rank: programs of one launch beyond this many share threads (see the module docstring).
    """

    def __init__(self, rank: int, world: int, slots: int):
        self.rank = rank
        self.slots = slots
        self.width = world * slots
        self.host = np.zeros(self.width, dtype=np.int64)  # what the rank's host code knows
        self._programs: dict[int, np.ndarray] = {}  # slot -> vector clock, for the running launch
        self._released: dict[int, bool] = {}
        self._slot = 0
        self.current = self.host  # the running program's vector clock
        self.thread = rank * slots
        self.program_id = (0, 0, 0)

    def launch_started(self) -> None:
        self._programs.clear()
        self._released.clear()

    def program_started(self, program_id, grid) -> None:
        x, y, z = program_id
        slot = (x + grid[0] * (y + grid[1] * z)) % self.slots
        thread = self.rank * self.slots + slot
        vector = self._programs.get(slot)
        if vector is None:  # fork from the host
            vector = self._programs[slot] = self.host.copy()
            vector[thread] = self.host[thread] + 1
        else:  # a later program on the same slot continues that thread
            vector[thread] += 1
        self._released[slot] = False
        self._slot, self.thread, self.current, self.program_id = slot, thread, vector, program_id

    def launch_finished(self) -> None:
        for vector in self._programs.values():  # join: the host now knows everything its programs did
            np.maximum(self.host, vector, out=self.host)
        self._programs.clear()
        self.current = self.host

    def epoch(self, atomic: bool) -> int:
        """The running program's epoch for an access now (after a release, a plain access starts a new one)."""
        if not atomic and self._released.get(self._slot):
            # Ticking lazily, at the first plain access after a release, keeps spin loops of acq_rel atomics
            # from minting a new clock (and a new release record) on every iteration.
            self.current[self.thread] += 1
            self._released[self._slot] = False
        return pack_epoch(self.thread, int(self.current[self.thread]), atomic)

    def released(self) -> None:
        """The running program has just published its clock (a release): later plain accesses are not covered."""
        self._released[self._slot] = True

    def acquire(self, vector: np.ndarray) -> None:
        """The running program has acquired ``vector``: everything it covers happened before what follows."""
        np.maximum(self.current, vector, out=self.current)

    def join_host(self, vector: np.ndarray) -> None:
        """A host barrier: the host knows ``vector`` (every rank's host clock joined)."""
        np.maximum(self.host, vector, out=self.host)
