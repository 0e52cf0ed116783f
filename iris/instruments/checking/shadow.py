"""The race checker's shadow state, in shared memory: one /dev/shm file per rank's heap, mapped by every rank.

Every rank checks the accesses its own kernels make, to any rank's heap, against what every rank did before;
so the state lives in files that every rank maps (named and cleaned up like the heaps, see
:func:`iris.heap.cpu.open_rank_files`: unlinked once all ranks opened them, nothing left even after SIGKILL).

Granularity: one cell per element of the accessed width, in four separate tables (1, 2, 4 and 8 bytes), cell
``offset // width``. Per element rather than per byte, because per byte would cost eight times the memory of
8-byte elements; one table per width, so that elements of different dtypes never share a cell (a shared cell
would report two writers of neighbouring fp16 elements as a race). What this misses: accesses of different
widths to the same bytes (an fp32 buffer read as int8) are not compared.

A cell holds, as int64 words (FastTrack's shadow, with two read slots instead of a read vector clock):

* ``write``, ``write_info``: the last write (or atomic) and where it came from;
* ``read0``, ``read0_info``, ``read1``, ``read1_info``: up to two reads not ordered with each other since
  that write (a third concurrent read evicts ``read1``: a race may then go unseen, never be invented);
* ``sync``: the release record an acquire of this element joins (the release sequence of its atomics).

Accesses are epochs packed by :mod:`iris.instruments.checking.clocks`; an info word packs the access's site (see
:meth:`SharedShadow.site_id`) with its program id. The tables are sparse files: only the cells of elements
kernels touch take memory (about 12 bytes per byte accessed for fp32).

Rank 0's file also holds the release records (vector clocks published by release atomics, append-only
between host barriers, which make all of them obsolete), and every file holds its rank's host clock for host
barriers and its table of access sites. A lock on rank 0's file (``flock``: released by the kernel if a rank
dies) makes each check and update of the cells, and each atomic with its release/acquire, one step.

Examples
--------
>>> shadow = SharedShadow(heap_size=1 << 20, group=group, width=128)     # doctest: +SKIP
>>> with shadow.lock():                                                    # doctest: +SKIP
...     shadow.cells(1, 4)[WRITE][:4]
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os

import numpy as np

from ...heap.cpu import open_rank_files

WIDTHS = (1, 2, 4, 8)
WRITE, WRITE_INFO, READ0, READ0_INFO, READ1, READ1_INFO, SYNC = range(7)
FIELDS = 7

SITE_BYTES = 512  # one access site: "kernel\0kind\0file\0line\0operation", utf-8
SITE_CAPACITY = 1 << 14
RECORD_CAPACITY = 1 << 14  # release records between two host barriers

# Header words (rank 0's file).
_RECORD_COUNT, _GENERATION, _OVERFLOW = range(3)

# Info word: site (14 bits) | program x (24 bits) | y (12) | z (12).
_SITE_SHIFT, _X_SHIFT, _Y_SHIFT = 48, 24, 12


def pack_info(site: int, program_id) -> int:
    x, y, z = program_id
    return (site << _SITE_SHIFT) | ((x & 0xFFFFFF) << _X_SHIFT) | ((y & 0xFFF) << _Y_SHIFT) | (z & 0xFFF)


def unpack_info(info: int) -> tuple[int, tuple[int, int, int]]:
    """``(site, (x, y, z))`` of an info word."""
    info = int(info)
    return info >> _SITE_SHIFT, ((info >> _X_SHIFT) & 0xFFFFFF, (info >> _Y_SHIFT) & 0xFFF, info & 0xFFF)


def _page_round(nbytes: int) -> int:
    return (nbytes + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


class _Layout:
    """Byte offsets of the sections of one shadow file."""

    def __init__(self, heap_size: int, width: int):
        self.header = 0
        self.rows = _page_round(64)
        self.sites = self.rows + _page_round(2 * width * 8)
        self.records = self.sites + _page_round(SITE_CAPACITY * SITE_BYTES)
        offset = self.records + _page_round(RECORD_CAPACITY * width * 8)
        self.cells = {}
        for element_width in WIDTHS:
            count = heap_size // element_width
            self.cells[element_width] = (offset, count)
            offset += _page_round(FIELDS * count * 8)
        self.size = offset


class SharedShadow:
    """Every rank's shadow file, mapped into this process. Collective: every rank constructs it together.

    Parameters
    ----------
    heap_size : int
        Bytes of each rank's heap.
    group : iris.base.distributed.HostGroup
        The ranks.
    width : int
        Length of the vector clocks (:attr:`iris.instruments.checking.clocks.ProgramClocks.width`).
    """

    def __init__(self, heap_size: int, group, width: int):
        self.rank = group.rank
        self.width = width
        self.layout = layout = _Layout(heap_size, width)
        fds = open_rank_files(layout.size, group, "shadow")
        try:
            self._mappings = [mmap.mmap(fd, layout.size) for fd in fds]
        finally:
            for rank, fd in enumerate(fds):
                if rank != 0:
                    os.close(fd)
        self._lock_fd = fds[0]  # kept open: flock needs it
        self._header = np.ndarray(8, np.int64, self._mappings[0], layout.header)
        self._records = np.ndarray((RECORD_CAPACITY, width), np.int64, self._mappings[0], layout.records)
        self._rows = [np.ndarray((2, width), np.int64, m, layout.rows) for m in self._mappings]
        self._sites = [np.ndarray((SITE_CAPACITY, SITE_BYTES), np.uint8, m, layout.sites) for m in self._mappings]
        self._cells = [
            {w: np.ndarray((FIELDS, count), np.int64, m, offset) for w, (offset, count) in layout.cells.items()}
            for m in self._mappings
        ]
        if self.rank == 0:
            self._header[_GENERATION] = 1
            self._header[_RECORD_COUNT] = 1  # record 0: none
        group.barrier()  # rank 0 has initialised the header

    def close(self) -> None:
        """Release the lock's file descriptor (the mappings go with the arrays that use them)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @contextlib.contextmanager
    def lock(self):
        """Hold the lock shared by every rank (one check-and-update at a time)."""
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def drop_abandoned_lock(self) -> None:
        """Release the lock if this process still holds it; call where it cannot rightly hold it (no kernel runs).

        A KeyboardInterrupt (the workbench interrupts a hung cell with SIGINT) can land between taking the lock
        and the ``try`` of :meth:`lock`, or in its ``finally`` before the release: the lock stays held, and the
        other ranks' next check (or host barrier) waits for it forever. Releasing a lock one does not hold is a
        no-op for flock.
        """
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- cells ----------------------------------------------------------------------------------------
    def cells(self, rank: int, element_width: int) -> np.ndarray:
        """``(FIELDS, n)`` int64 words of ``rank``'s heap for elements of ``element_width`` bytes."""
        return self._cells[rank][element_width]

    def forget(self, offset: int, nbytes: int) -> None:
        """Forget every access to bytes ``[offset, offset + nbytes)`` of this rank's heap (new allocation).

        Whole pages are given back to the system (a hole punched in the file), so that a freed tensor's
        shadow takes no memory; the cells at the two ends are zeroed.
        """
        mapping = self._mappings[self.rank]
        for element_width, (base, count) in self.layout.cells.items():
            first, last = offset // element_width, min(count, -(-(offset + nbytes) // element_width))
            table = self._cells[self.rank][element_width]
            for field in range(FIELDS):
                start = base + (field * count + first) * 8
                end = base + (field * count + last) * 8
                hole_start, hole_end = _page_round(start), end // mmap.PAGESIZE * mmap.PAGESIZE
                if hole_end > hole_start:
                    mapping.madvise(mmap.MADV_REMOVE, hole_start, hole_end - hole_start)
                    table[field, first:first + (hole_start - start) // 8] = 0
                    table[field, last - (end - hole_end) // 8:last] = 0
                else:
                    table[field, first:last] = 0

    # -- access sites -----------------------------------------------------------------------------------
    def write_site(self, index: int, kernel: str, kind: str, file: str, line: int, operation: str = "") -> None:
        """Record site ``index`` of this rank (before any cell names it); ``operation``: the named operation its
        launch ran in (:mod:`iris.instruments.operations`)."""
        # Long names are cut so that the record always fits (the end of a path says the most).
        text = "\0".join((kernel[:120], kind, file[-260:], str(line), operation[:100])).encode()[:SITE_BYTES]
        row = self._sites[self.rank][index]
        row[:] = 0
        row[:len(text)] = np.frombuffer(text, np.uint8)

    def read_site(self, rank: int, index: int) -> tuple[str, str, str, int, str]:
        """``(kernel, kind, file, line, operation)`` of ``rank``'s site ``index``."""
        parts = bytes(self._sites[rank][index]).rstrip(b"\0").decode(errors="replace").split("\0")
        kernel, kind, file, line = (parts + ["?"] * 4)[:4]  # a record cut short by very long names
        operation = parts[4] if len(parts) > 4 else ""
        return kernel, kind, file, int(line) if line.isdigit() else 0, operation

    # -- release records (call with the lock held) --------------------------------------------------------
    @property
    def overflowed(self) -> bool:
        """The release records ran out since the last host barrier: ordering through atomics is unknown."""
        return bool(self._header[_OVERFLOW])

    def record(self, record_id: int) -> np.ndarray | None:
        """The vector clock of a release record, or None for none / one made obsolete by a host barrier."""
        index, generation = record_id & 0xFFFFFFFF, record_id >> 32
        if index == 0 or generation != self._header[_GENERATION] or index >= self._header[_RECORD_COUNT]:
            return None
        return self._records[index]

    def add_record(self, vector: np.ndarray) -> int | None:
        """Store a vector clock; its id, or None when the records are full (then :attr:`overflowed`)."""
        index = int(self._header[_RECORD_COUNT])
        if index >= RECORD_CAPACITY:
            self._header[_OVERFLOW] = 1
            return None
        self._records[index] = vector
        self._header[_RECORD_COUNT] = index + 1
        return (int(self._header[_GENERATION]) << 32) | index

    def reset_records(self) -> None:
        """Make every record obsolete (rank 0, inside a host barrier: every clock now covers them)."""
        self._header[_GENERATION] += 1
        self._header[_RECORD_COUNT] = 1
        self._header[_OVERFLOW] = 0

    # -- host barriers ---------------------------------------------------------------------------------
    def publish_host_clock(self, parity: int, vector: np.ndarray) -> None:
        self._rows[self.rank][parity] = vector

    def host_clocks(self, parity: int) -> list[np.ndarray]:
        return [rows[parity] for rows in self._rows]
