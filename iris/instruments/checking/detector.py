"""The race detector of one rank: checks every heap access of this rank's kernels against every rank's.

It observes the interpreter (:mod:`iris.interpret.access_events`): each load, store and atomic that lands in a
symmetric heap is checked and recorded in the shared shadow (:mod:`iris.instruments.checking.shadow`) with the running
program's epoch (:mod:`iris.instruments.checking.clocks`), FastTrack's way:

* a load races with the last write if that write did not happen before it;
* a store races with the last write and with the reads since it that did not happen before it;
* an atomic races like a store, except with atomics (atomics never race with atomics);
* a release atomic (``release``/``acq_rel``) that writes publishes its program's vector clock on the element
  (joined with the element's earlier releases: every atomic is a read-modify-write, so later ones continue the
  release sequence); an acquire atomic (``acquire``/``acq_rel``) joins the element's published clock, which
  holds exactly the releases that the value it read carries. Relaxed atomics and plain loads order nothing;
* host barriers join every rank's host clock (:meth:`RaceDetector.host_barrier`); device barriers are kernels
  of release/acquire atomics and need nothing more.

Examples
--------
>>> detector = RaceDetector(ctx.heap, ctx.group)        # doctest: +SKIP   (iris.iris(..., check="races") does it)
>>> kernel[(2,)](...)                                    # doctest: +SKIP
>>> detector.take_races()                                # doctest: +SKIP
[Race(kernel='kernel', allocation='buf', ...)]
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

from ...interpret import access_events
from .. import operations
from .clocks import ATOMIC_BIT, ProgramClocks, happened_before, threads_of
from .races import Access, Race, RaceWarning
from .shadow import (
    READ0,
    READ0_INFO,
    READ1,
    READ1_INFO,
    SITE_CAPACITY,
    SYNC,
    WIDTHS,
    WRITE,
    WRITE_INFO,
    SharedShadow,
    pack_info,
    unpack_info,
)

# Threads (vector clock entries) per rank: programs of a launch beyond this many share one (see clocks.py).
PROGRAM_SLOTS = 64


_ACQUIRES = ("acquire", "acq_rel")
_RELEASES = ("release", "acq_rel")


class RaceDetector:
    """This rank's race detector; collective to create (it maps every rank's shadow).

    Parameters
    ----------
    heap : iris.heap.SymmetricHeap
        The CPU heaps whose accesses are checked.
    group : iris.base.distributed.HostGroup
        The ranks.
    """

    def __init__(self, heap, group):
        self.heap = heap
        self.rank = group.rank
        self.clocks = ProgramClocks(group.rank, group.world_size, PROGRAM_SLOTS)
        self.shadow = SharedShadow(heap.size, group, self.clocks.width)
        order = np.argsort(np.array(heap.bases, dtype=np.uint64))
        self._sorted_bases = np.array(heap.bases, dtype=np.uint64)[order]
        self._rank_of_sorted = order
        self._heap_size = np.uint64(heap.size)
        self._kernel = "?"
        self._operation = ""  # the named operation the running launch belongs to (iris.instruments.operations)
        self._sites: dict[tuple, int] = {}
        self._site_keys: list[tuple] = []
        self._races: list[Race] = []
        self._seen: set = set()
        self._warned: set = set()
        self._barriers = 0
        self._overflow_warned = False
        access_events.add_observer(self)

    def close(self) -> None:
        """Stop observing kernels (the context is gone)."""
        access_events.remove_observer(self)
        self.shadow.close()

    # -- what the host does ------------------------------------------------------------------------------
    def take_races(self) -> list[Race]:
        """The races found since the last call, in the order found; forgets them."""
        races, self._races = self._races, []
        self._seen.clear()
        return races

    def host_barrier(self, group) -> None:
        """``ctx.barrier()``: everything every rank did before happens before everything after (collective).

        Each rank publishes its host clock in its shadow file and joins everyone's. Rows alternate between
        barriers, so a fast rank writing the next barrier's row never overwrites one a slow rank still reads.
        """
        self.shadow.drop_abandoned_lock()  # (a cell interrupted in a kernel may have left it held)
        parity = self._barriers % 2
        self._barriers += 1
        self.shadow.publish_host_clock(parity, self.clocks.host)
        group.barrier()
        for vector in self.shadow.host_clocks(parity):
            self.clocks.join_host(vector)
        if self.rank == 0:
            # No kernel runs between the two barriers, and every clock now covers every release record.
            with self.shadow.lock():
                self.shadow.reset_records()
        group.barrier()

    def forget(self, offset: int, nbytes: int) -> None:
        """A new allocation: accesses to its bytes before it existed were to another tensor."""
        with self.shadow.lock():
            self.shadow.forget(offset, nbytes)

    # -- observer of the interpreter (iris.interpret.access_events) ---------------------------------------
    def launch_started(self, kernel: str) -> None:
        self.shadow.drop_abandoned_lock()  # no kernel of this rank runs: it holds no lock, unless interrupted
        self._kernel = kernel
        self._operation = operations.current_label()
        self.clocks.launch_started()

    def launch_finished(self) -> None:
        self.shadow.drop_abandoned_lock()  # (runs when an interrupt ends the launch, too)
        self.clocks.launch_finished()

    def program_started(self, program_id, grid) -> None:
        self.clocks.program_started(program_id, grid)

    def access(self, kind: str, addresses, mask, itemsize: int) -> None:
        located = self._locate(addresses, mask, itemsize)
        if not located:
            return
        epoch = self.clocks.epoch(atomic=False)
        info = pack_info(self._site(kind), self.clocks.program_id)
        found = []
        with self.shadow.lock():
            if self._stopped():
                return
            for heap_rank, offsets, _ in located:
                table = self.shadow.cells(heap_rank, itemsize)
                cells = offsets // itemsize
                if kind == "load":
                    self._load(table, cells, epoch, info, heap_rank, offsets, found)
                else:
                    self._write(table, cells, epoch, info, heap_rank, offsets, found, atomic=False)
        self._report(found, kind, info)

    def atomic(self, kind: str, addresses, mask, itemsize: int, sem: str, perform):
        located = self._locate(addresses, mask, itemsize)
        if not located:
            return perform()[0]
        epoch = self.clocks.epoch(atomic=True)
        info = pack_info(self._site(kind), self.clocks.program_id)
        found = []
        with self.shadow.lock():  # the atomic and its release/acquire bookkeeping: one step for every rank
            result, wrote = perform()
            if self._stopped():
                return result
            if sem in _ACQUIRES:
                for heap_rank, offsets, _ in located:
                    self._acquire(self.shadow.cells(heap_rank, itemsize)[SYNC, offsets // itemsize])
            for heap_rank, offsets, lanes in located:
                table = self.shadow.cells(heap_rank, itemsize)
                cells = offsets // itemsize
                self._write(table, cells, epoch, info, heap_rank, offsets, found, atomic=True)
                if sem in _RELEASES:
                    self._release(table, cells[wrote[lanes]])
        self._report(found, kind, info)
        return result

    # -- locating accesses ----------------------------------------------------------------------------------
    def _locate(self, addresses, mask, itemsize):
        """``[(heap_rank, byte offsets, lane indices)]`` of the unmasked lanes that fall in a heap."""
        if itemsize not in WIDTHS:
            return []
        lanes = np.flatnonzero(mask)
        if lanes.size == 0:
            return []
        wanted = addresses[lanes]
        index = np.searchsorted(self._sorted_bases, wanted, side="right") - 1
        offsets = wanted - self._sorted_bases[index]  # below every base: wraps around to a huge offset
        inside = (index >= 0) & (offsets < self._heap_size)
        if not inside.any():
            return []
        if not inside.all():
            lanes, index, offsets = lanes[inside], index[inside], offsets[inside]
        ranks = self._rank_of_sorted[index]
        offsets = offsets.astype(np.int64)
        first = ranks[0]
        if (ranks == first).all():
            return [(int(first), offsets, lanes)]
        return [(int(r), offsets[ranks == r], lanes[ranks == r]) for r in np.unique(ranks)]

    def _site(self, kind: str) -> int:
        """Index of the access site (kernel, kind, file, line, operation) in this rank's site table."""
        # From the frame that asked for the access, not from our caller: an atomic reaches this observer
        # through the other observers' atomic() (the workbench's hang report is one), outside the kernel.
        frame = access_events.kernel_frame(access_events.access_frame() or sys._getframe(2))
        key = (self._kernel, kind, *((frame.f_code.co_filename, frame.f_lineno) if frame else ("<unknown>", 0)),
               self._operation)
        index = self._sites.get(key)
        if index is None:
            if len(self._site_keys) >= SITE_CAPACITY - 1:  # the last entry stands for every further site
                key = (self._kernel, kind, "<more access sites than the race checker records>", 0, self._operation)
                index = SITE_CAPACITY - 1
            else:
                index = len(self._site_keys)
                self._site_keys.append(key)
            self._sites[key] = index
            self.shadow.write_site(index, *key)
        return index

    # -- checks (with the lock held) -------------------------------------------------------------------------
    def _load(self, table, cells, epoch, info, heap_rank, offsets, found):
        vector = self.clocks.current
        writes = table[WRITE, cells]
        racy = ~happened_before(writes, vector)
        if racy.any():
            found.append((heap_rank, offsets[racy], writes[racy], table[WRITE_INFO, cells[racy]]))
        first_ordered = happened_before(table[READ0, cells], vector)
        second_ordered = happened_before(table[READ1, cells], vector)
        # A read that happened before this one is covered by it (happens-before is transitive): take its slot.
        # Two reads unordered with this one: the second is evicted.
        into_first = cells[first_ordered]
        table[READ0, into_first] = epoch
        table[READ0_INFO, into_first] = info
        table[READ1, cells[first_ordered & second_ordered]] = 0
        into_second = cells[~first_ordered]
        table[READ1, into_second] = epoch
        table[READ1_INFO, into_second] = info

    def _write(self, table, cells, epoch, info, heap_rank, offsets, found, atomic):
        vector = self.clocks.current
        writes = table[WRITE, cells]
        racy = ~happened_before(writes, vector)
        if atomic:
            racy &= (writes & ATOMIC_BIT) == 0
        if racy.any():
            found.append((heap_rank, offsets[racy], writes[racy], table[WRITE_INFO, cells[racy]]))
        for read, read_info in ((READ0, READ0_INFO), (READ1, READ1_INFO)):
            reads = table[read, cells]
            racy = ~happened_before(reads, vector)
            if racy.any():
                found.append((heap_rank, offsets[racy], reads[racy], table[read_info, cells[racy]]))
        table[WRITE, cells] = epoch
        table[WRITE_INFO, cells] = info
        table[READ0, cells] = 0
        table[READ1, cells] = 0

    def _acquire(self, record_ids):
        for record_id in np.unique(record_ids):
            vector = self.shadow.record(int(record_id))
            if vector is not None:
                self.clocks.acquire(vector)

    def _release(self, table, cells):
        """Publish the running program's clock on the elements a release atomic wrote."""
        if cells.size == 0:
            return
        vector = self.clocks.current
        old_ids, inverse = np.unique(table[SYNC, cells], return_inverse=True)
        new_ids = np.empty_like(old_ids)
        own_id = None  # a record of this clock alone, made once per atomic
        for k, old_id in enumerate(old_ids):
            previous = self.shadow.record(int(old_id))
            if previous is not None and (vector <= previous).all():
                new_ids[k] = old_id  # nothing new to publish: a spin loop of acq_rel atomics lands here
                continue
            if previous is None or (previous <= vector).all():
                if own_id is None:
                    own_id = self.shadow.add_record(vector)
                new_id = own_id
            else:  # continue the release sequence of the element's earlier releases
                new_id = self.shadow.add_record(np.maximum(vector, previous))
            if new_id is None:
                return  # out of records: _stopped() says so from now on
            new_ids[k] = new_id
        table[SYNC, cells] = new_ids[inverse.reshape(-1)]
        self.clocks.released()

    def _stopped(self) -> bool:
        """Whether checking is suspended: release records ran out since the last host barrier."""
        if not self.shadow.overflowed:
            return False
        if not self._overflow_warned:
            self._overflow_warned = True
            warnings.warn(RaceWarning(
                f"rank {self.rank}: the race checker stopped: more release/acquire synchronisations happened "
                "since the last host barrier than it can record, so it could no longer tell which accesses are "
                "ordered. It resumes at the next ctx.barrier(); call ctx.barrier() between kernels to keep it on."
            ), stacklevel=2)
        return True

    # -- reporting ---------------------------------------------------------------------------------------------
    def _report(self, found, kind, info) -> None:
        if not found:
            return
        site, program_id = unpack_info(info)
        kernel, _, file, line, operation = self._site_key(site, kind)
        second = Access(self.rank, program_id, kind, file, line, kernel, operation)
        for heap_rank, offsets, epochs, infos in found:
            # One race per earlier access (thread and site), at its first element.
            pairs = np.stack([threads_of(epochs), infos])
            _, firsts = np.unique(pairs, axis=1, return_index=True)
            for lane in sorted(firsts):
                self._add(self._race(heap_rank, int(offsets[lane]), int(epochs[lane]), int(infos[lane]), second))

    def _site_key(self, site, kind):
        if site < len(self._site_keys):
            return self._site_keys[site]
        return self._kernel, kind, "<more access sites than the race checker records>", 0, self._operation

    def _race(self, heap_rank, offset, epoch, info, second) -> Race:
        rank = int(threads_of(np.int64(epoch))) // self.clocks.slots
        site, program_id = unpack_info(info)
        kernel, kind, file, line, operation = self.shadow.read_site(rank, site)
        first = Access(rank, program_id, kind, file, line, kernel, operation)
        allocation, start, element, index = self._element(heap_rank, offset)
        return Race(second.kernel, allocation, start, element, index, heap_rank, first, second)

    def _element(self, heap_rank, offset):
        """``(allocation name, allocation offset, flat element, index)`` of a byte offset of ``heap_rank``'s heap
        (:meth:`iris.heap.SymmetricHeap.locate` names it, as every report does)."""
        where = self.heap.locate(self.heap.bases[heap_rank] + offset)
        allocation = where.allocation
        if allocation is None:
            return f"heap+{offset:#x}", offset, 0, ()
        element = (offset - allocation.offset) // allocation.dtype.itemsize
        return where.allocation_name, allocation.offset, element, where.element

    def _add(self, race: Race) -> None:
        first, second = race.first, race.second
        key = (race.kernel, race.heap_rank, race.offset,
               first.rank, first.program_id, first.kind, first.file, first.line,
               second.rank, second.program_id, second.kind, second.file, second.line)
        if key in self._seen:
            return
        self._seen.add(key)
        self._races.append(race)
        lines = tuple(sorted(((first.file, first.line), (second.file, second.line))))
        if lines not in self._warned:
            self._warned.add(lines)
            warnings.warn_explicit(RaceWarning(str(race)), RaceWarning, second.file, second.line)
