"""First-fit allocator over a heap's byte range, deterministic so that every rank computes the same offsets.

It knows nothing of ranks or tensors: the symmetric heap runs the same sequence of ``allocate`` and
``release`` calls on every rank, so every rank gets the same offsets.

Examples
--------
>>> a = Allocator(size=4096, alignment=256)
>>> a.allocate(100), a.allocate(300)
(0, 256)
>>> a.release(0); a.allocate(200)
0
>>> a.shortfall(8192)          # bytes the heap must grow by for 8 KiB to fit at its end
4864
>>> a.grow(4096 + 4864); a.allocate(8192)
768
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


class OutOfHeap(Exception):
    """No free block is large enough; the allocator's state is unchanged."""


@dataclass(frozen=True)
class Usage:
    """How a heap is used: sizes in bytes, ``fragmentation`` in [0, 1] (1 - largest free block / free)."""

    size: int
    used: int
    free: int
    largest_free: int
    allocations: int

    @property
    def fragmentation(self) -> float:
        return 0.0 if self.free == 0 else 1.0 - self.largest_free / self.free


class Allocator:
    """First-fit over sorted free blocks, with neighbours merged on release."""

    def __init__(self, size: int, alignment: int = 256):
        if alignment & (alignment - 1):
            raise ValueError(f"alignment must be a power of two, got {alignment}")
        self.size = size
        self.alignment = alignment
        self._free: list[tuple[int, int]] = [(0, size)]  # (offset, nbytes), sorted by offset
        self._live: dict[int, int] = {}  # offset -> nbytes

    def round_up(self, nbytes: int) -> int:
        """Bytes actually reserved for a request of ``nbytes`` (at least one aligned unit)."""
        unit = self.alignment
        return max(unit, (nbytes + unit - 1) // unit * unit)

    def allocate(self, nbytes: int) -> int:
        """Reserve ``nbytes`` and return the offset; ``OutOfHeap`` when no block fits."""
        need = self.round_up(nbytes)
        for i, (offset, free) in enumerate(self._free):
            if free >= need:
                if free == need:
                    del self._free[i]
                else:
                    self._free[i] = (offset + need, free - need)
                self._live[offset] = need
                return offset
        raise OutOfHeap(need)

    def shortfall(self, nbytes: int) -> int:
        """Bytes the heap must grow by so that ``nbytes`` fits: what the free block at the heap's end (if any)
        lacks; 0 when a block fits already."""
        need = self.round_up(nbytes)
        if any(free >= need for _, free in self._free):
            return 0
        tail = self._free[-1][1] if self._free and sum(self._free[-1]) == self.size else 0
        return need - tail

    def grow(self, new_size: int) -> None:
        """The heap now has ``new_size`` bytes: the new ones are free (merged with a free block at the old end)."""
        if new_size < self.size:
            raise ValueError(f"a heap grows only: {new_size} bytes is less than its {self.size}")
        if new_size == self.size:
            return
        if self._free and sum(self._free[-1]) == self.size:
            offset, nbytes = self._free.pop()
            self._free.append((offset, nbytes + new_size - self.size))
        else:
            self._free.append((self.size, new_size - self.size))
        self.size = new_size

    def append(self, nbytes: int) -> int:
        """Grow the heap by ``nbytes`` (a multiple of the alignment) and reserve them at once; return their offset
        (the old size). For memory placed at the heap's end from elsewhere (a tensor taken in)."""
        if nbytes <= 0 or nbytes % self.alignment:
            raise ValueError(f"append takes a positive multiple of {self.alignment} bytes, got {nbytes}")
        offset = self.size
        self.size += nbytes
        self._live[offset] = nbytes
        return offset

    def release(self, offset: int) -> None:
        """Give the block at ``offset`` back, merging it with free neighbours."""
        nbytes = self._live.pop(offset)
        i = bisect.bisect_left(self._free, (offset, 0))
        if i < len(self._free) and offset + nbytes == self._free[i][0]:
            nbytes += self._free.pop(i)[1]
        if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == offset:
            offset, before = self._free.pop(i - 1)
            nbytes += before
            i -= 1
        self._free.insert(i, (offset, nbytes))

    def reserved(self, offset: int) -> int:
        """Bytes reserved for the live block at ``offset``."""
        return self._live[offset]

    @property
    def free_blocks(self) -> int:
        """How many separate free blocks there are."""
        return len(self._free)

    def usage(self) -> Usage:
        free = sum(n for _, n in self._free)
        largest = max((n for _, n in self._free), default=0)
        return Usage(self.size, self.size - free, free, largest, len(self._live))
