"""The symmetric heap: every rank owns a heap of the same size, and a tensor has the same offset in all.

Allocation is collective. Every rank asks for the same sizes in the same order; each request is exchanged,
so a rank that asks for something else is reported by name instead of silently corrupting memory. Memory
comes back: a tensor that no rank references any more is released at the next collective allocation.

Examples
--------
>>> heap = SymmetricHeap(64 << 20, group, backend="cpu")          # doctest: +SKIP
>>> x = heap.allocate((4, 8), torch.float32, label="x")           # doctest: +SKIP
>>> flat = heap.allocate(32, torch.float32)                        # upstream's form: an element count  # doctest: +SKIP
>>> peer_x = heap.as_remote(x, rank=1)                              # doctest: +SKIP
>>> heap.bases[1] + heap.find(x).offset == peer_x.data_ptr()        # doctest: +SKIP
True
"""

from __future__ import annotations

import math
import operator
import warnings
import weakref
from dataclasses import dataclass

import torch

from ..base.sizes import format_size
from .allocator import Allocator, OutOfHeap, Usage
from .reach import device_bases, reachable_ranks, unreachable


class AllocationDivergence(RuntimeError):
    """Ranks asked for different allocations at the same point of the program."""


@dataclass(frozen=True)
class AllocationInfo:
    """One live allocation as the inspectors show it."""

    offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    label: str | None


@dataclass
class _Allocation:
    offset: int  # where its reserved range starts; info.offset, where the tensor starts, is later for a taken-in one
    info: AllocationInfo
    reserved: int
    owner: weakref.ref  # dead once no tensor on this rank uses the allocation's storage
    taken_in: bool = False  # outside memory (SymmetricHeap.take_in), unmapped when released

    @property
    def referenced(self) -> bool:
        return self.owner() is not None


@dataclass(frozen=True)
class HeapLocation:
    """Where an address falls: whose heap, at which offset, and in which allocation and element.

    ``str()`` is how every report names it: ``flags[2]``, ``C[3, 17]``, ``heap+0x1f00`` outside the live
    allocations; a label-less allocation is named by its offset (``alloc@0x200[5]``), or, in the workbench,
    after the variables holding it (:meth:`named`, looked up by :attr:`allocation_offset`).

    Examples
    --------
    >>> str(HeapLocation(rank=1, offset=520, allocation=AllocationInfo(512, 64, torch.int32, (16,), "flags"),
    ...                  element=(2,)))
    'flags[2]'
    """

    rank: int
    offset: int
    allocation: AllocationInfo | None
    element: tuple[int, ...] | None  # index in the allocation's shape (row-major: allocations are contiguous)

    @property
    def allocation_offset(self) -> int | None:
        return self.allocation.offset if self.allocation is not None else None

    @property
    def allocation_name(self) -> str | None:
        """The allocation's ``name=`` label, else ``alloc@<offset>``; None outside the live allocations."""
        if self.allocation is None:
            return None
        return self.allocation.label or f"alloc@{self.allocation.offset:#x}"

    def named(self, unlabelled: str | None) -> str:
        """This location, its allocation called by its ``name=`` label, else ``unlabelled`` (the workbench passes
        the variables holding it), else ``alloc@<offset>``: the one rule every report follows."""
        if self.allocation is None:
            return f"heap+{self.offset:#x}"
        name = self.allocation.label or unlabelled or self.allocation_name
        return f"{name}[{', '.join(map(str, self.element))}]" if self.element else name

    def __str__(self) -> str:
        return self.named(None)


def _describe(request) -> str:
    nbytes, dtype, shape = request
    return f"{dtype.replace('torch.', '')}{list(shape)} ({nbytes} bytes)"


class SymmetricHeap:
    """This rank's heap plus every peer's, as mapped in this process.

    Parameters
    ----------
    size : int
        Bytes per rank.
    group : iris.base.distributed.HostGroup
        The ranks that share heaps.
    backend : {"cpu", "cuda"}
        Where the heaps live.
    alignment : int
        Every allocation starts at a multiple of this many bytes (wide vector loads need 16).
    allocator : {"torch", "vmem", "vmem_chunked"}
        Upstream's ``allocator_type`` (:func:`iris.runtime.heap_choice.choose_allocator`): ``"vmem"`` on ``cuda`` puts
        the heap on CUDA virtual memory (:mod:`iris.heap.cuda.vmm`): it grows when an allocation needs it, up to
        ``memory.reservation``, and :meth:`take_in` shares outside tensors' memory. ``"vmem_chunked"``: the same
        made of chunks of one size, growing a chunk at a time (:class:`iris.heap.cuda.vmm.CudaVmmChunkedHeapMemory`;
        on ``cpu``, :class:`iris.heap.cpu.ShmChunkedHeapMemory`).
    chunk_size : int, optional
        ``"vmem_chunked"``'s chunk (:func:`iris.heap.chunks.chunk_size_for`; default 256 MiB, capped at ``size``).
    topology : iris.heap.topology.TopologyMap, optional
        Who maps whom: the heaps of ranks this rank cannot map (other hosts) are not mapped, their base is 0
        (:data:`iris.heap.reach.UNMAPPED_BASE` in ``heap_bases``),
        and addressing them raises :class:`iris.heap.reach.UnreachableRankError`. None: every rank is mapped.
    """

    def __init__(self, size: int, group, backend: str, alignment: int = 256, topology=None, allocator: str = "torch",
                 chunk_size: int | None = None):
        chunked = {}
        if backend == "cpu" and allocator == "vmem_chunked":
            from .cpu import ShmChunkedHeapMemory as Memory

            chunked = {"chunk_size": chunk_size}
        elif backend == "cpu":
            from .cpu import ShmHeapMemory as Memory
        elif backend == "cuda" and allocator == "vmem_chunked":
            from .cuda.vmm import CudaVmmChunkedHeapMemory as Memory

            chunked = {"chunk_size": chunk_size}
        elif backend == "cuda" and allocator == "vmem":
            from .cuda.vmm import CudaVmmHeapMemory as Memory
        elif backend == "cuda":
            from .cuda.ipc import CudaHeapMemory as Memory
        else:
            raise ValueError(f"unknown heap backend {backend!r}: use 'cpu' or 'cuda'")
        self.group = group
        self.rank = group.rank
        self.world_size = group.world_size
        self.backend = backend
        self.topology = topology
        self.reachable = reachable_ranks(topology, group.rank)  # None: every rank's heap is mapped here
        self.memory = Memory(size, group, self.reachable, **chunked)
        self.size = self.memory.size
        self.bases: list[int] = list(self.memory.bases)
        self.device = self.memory.device
        # Debug checks in kernels need the heap size; it rides just before heap_bases[0] (see iris.language.core),
        # where upstream's layout leaves room.
        self._sized_bases = torch.tensor([self.size, *device_bases(self.bases)], dtype=torch.int64, device=self.device)
        self.heap_bases = self._sized_bases[1:]
        self._allocator = Allocator(self.size, alignment)
        self._live: dict[int, _Allocation] = {}
        self._count = 0
        # Called with (offset, reserved bytes) of every new allocation (the race checker forgets old accesses).
        self.on_allocate: list = []
        # Weak references (weakref.WeakMethod) to callables called with the new size when the heap grows (the
        # context's device context carries the size): the heap lives as long as any tensor on it, and must not
        # keep a dropped context (and its race checker) alive with it.
        self.on_grow: list = []

    # -- allocation -------------------------------------------------------------------------------
    def allocate(self, size, dtype: torch.dtype, label: str | None = None) -> torch.Tensor:
        """Collectively allocate an uninitialised tensor; same offset on every rank.

        ``size`` is an element count (upstream's ``allocate(num_elements, dtype)``: a flat tensor) or a
        shape. ``label`` names the allocation in the inspectors.
        """
        shape = self._shape(size)
        nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        request = (nbytes, str(dtype), shape)
        self._agree_on(request)
        try:
            offset = self._allocator.allocate(nbytes)
        except OutOfHeap:
            if not hasattr(self.memory, "grow"):
                raise self._out_of_memory(request, label) from None
            self._grow_for(nbytes, request, label)  # collective: every rank's allocator ran out alike
            offset = self._allocator.allocate(nbytes)
        reserved = self._allocator.reserved(offset)
        raw, owner = self.memory.view(self.rank, offset, reserved)
        tensor = raw[:nbytes].view(dtype).view(shape)
        info = AllocationInfo(offset, nbytes, dtype, shape, label)
        self._live[offset] = _Allocation(offset, info, reserved, weakref.ref(owner))
        for listener in self.on_allocate:
            listener(offset, reserved)
        return tensor

    def _grow_for(self, nbytes: int, request, label) -> None:
        """Grow the heap (every rank) so that ``nbytes`` fit: to twice its size, or to just enough when twice does
        not fit the reservation or the GPU; a ``MemoryError`` saying so when neither does."""
        need = self.size + self._allocator.shortfall(nbytes)
        limit = self.memory.reservation
        if need > limit:
            raise MemoryError(
                f"rank {self.rank}: symmetric heap out of memory allocating {_describe(request)}"
                + (f" named {label!r}" if label else "") + f": the heap would have to grow to {format_size(need)}, "
                f"beyond its reservation of {format_size(limit)} (the most it can grow to: the GPU's memory). "
                "Delete tensors you no longer need on every rank (they are released at the next allocation)"
            ) from None
        # a chunked heap grows by the chunks the allocation needs (upstream's); the others double, to grow seldom
        targets = [need] if hasattr(self.memory, "chunk_size") else [min(limit, max(need, 2 * self.size)), need]
        for target in dict.fromkeys(targets):
            try:
                self.memory.grow(target)
                break
            except MemoryError as err:
                if target == need:
                    raise MemoryError(f"{err}: the heap of {format_size(self.size)} could not grow to hold "
                                      f"{_describe(request)}") from None
        self._grown()

    def _grown(self) -> None:
        self.size = self.memory.size
        self._allocator.grow(self.size)
        self._sized_bases[0] = self.size
        for reference in self.on_grow:
            if (listener := reference()) is not None:
                listener(self.size)

    def _shape(self, size) -> tuple[int, ...]:
        dims = tuple(size) if isinstance(size, tuple | list | torch.Size) else (size,)
        if any(isinstance(d, bool) or not hasattr(d, "__index__") for d in dims):
            raise TypeError(f"rank {self.rank}: allocate takes an element count or a shape of ints, got {size!r}: "
                            "pass e.g. heap.allocate(6, torch.float32) or heap.allocate((2, 3), torch.float32)")
        shape = tuple(operator.index(d) for d in dims)
        if any(s < 0 for s in shape):
            raise ValueError(f"rank {self.rank}: negative dimension in shape {list(shape)}: sizes must be >= 0")
        return shape

    def _agree_on(self, request, fact=None) -> list:
        """The collective step of every allocation: release what no rank uses, check that every rank asks for the
        same ``request``, and return every rank's ``fact`` (anything a rank must tell the others)."""
        unreferenced = sorted(offset for offset, a in self._live.items() if not a.referenced)
        gathered = self.group.all_gather_object((request, unreferenced, fact))
        self._count += 1
        self._release(set.intersection(*(set(dead) for _, dead, _ in gathered)))
        self._check_agreement([req for req, _, _ in gathered])
        return [fact for _, _, fact in gathered]

    def _release(self, offsets) -> None:
        # Every rank computes the same set (the intersection), so allocator states stay identical.
        for offset in sorted(offsets):
            if self._live[offset].taken_in:  # collective too: the range gets fresh memory of the heap's own
                self.memory.give_back(offset, self._live[offset].reserved)
            self._allocator.release(offset)
            del self._live[offset]

    def take_in(self, tensor: torch.Tensor, label: str | None = None) -> torch.Tensor | None:
        """Make ``tensor``'s own memory part of the heap, without a copy (collective, like an allocation).

        Upstream's ``vmem`` meaning of ``as_symmetric``: the result is a heap tensor over the same memory, so a
        write to either is seen in the other (and by peers, at the same offset on every rank). It needs CUDA
        virtual memory on every rank (torch's allocator with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``,
        or another allocator on ``cuMemCreate``), contiguous, at the same place within its chunks on every rank.
        Returns None (every rank alike), with a ``RuntimeWarning`` saying why, where that does not hold: the
        caller copies instead. The heap keeps ``tensor`` alive while the result lives, so that its allocator
        cannot hand the memory out again.

        Examples
        --------
        >>> shared = heap.take_in(torch.ones(500, device="cuda"))       # doctest: +SKIP
        """
        nbytes = tensor.numel() * tensor.element_size()
        request = (nbytes, str(tensor.dtype), tuple(tensor.shape))
        if not hasattr(self.memory, "take_in"):
            return None
        if tensor.device != self.device or not tensor.is_contiguous() or nbytes == 0:
            segments = f"it is not a contiguous, non-empty tensor on {self.device}"
        else:
            segments = self.memory.segments_of(tensor.data_ptr(), nbytes)
        facts = self._agree_on(request, segments if isinstance(segments, str) else
                               (tensor.data_ptr() - segments[0][0], sum(n for _, n in segments)))
        unit = self.memory.granularity
        why = {rank: fact for rank, fact in enumerate(facts) if isinstance(fact, str)}
        if not why and len({lead % unit for lead, _ in facts}) > 1:
            why = {rank: f"it starts {lead % unit:#x} bytes into a chunk" for rank, (lead, _) in enumerate(facts)}
        if why:
            warnings.warn(f"rank {self.rank}: as_symmetric copies the tensor onto the heap: its memory cannot be "
                          "shared on every rank (" + "; ".join(f"rank {r}: {w}" for r, w in why.items()) + ")",
                          RuntimeWarning, stacklevel=3)
            return None
        lead = max(lead for lead, _ in facts)  # where the tensor starts in the region, on every rank
        region = max(lead - own_lead + span for own_lead, span in facts)
        offset = self._allocator.append(region)
        self.memory.take_in(offset, region, segments, start=offset + lead - facts[self.rank][0])
        self._grown()
        raw, owner = self.memory.view(self.rank, offset, region)
        owner.outside = tensor  # its memory stays its allocator's: keep it from being handed out again
        shared = raw[lead:lead + nbytes].view(tensor.dtype).view(tensor.shape)
        info = AllocationInfo(offset + lead, nbytes, tensor.dtype, tuple(tensor.shape), label)  # lead bytes in
        self._live[offset] = _Allocation(offset, info, region, weakref.ref(owner), taken_in=True)
        for listener in self.on_allocate:
            listener(offset, region)
        return shared

    def _check_agreement(self, requests) -> None:
        if len(set(requests)) == 1:
            return
        by_request: dict = {}
        for rank, request in enumerate(requests):
            by_request.setdefault(request, []).append(rank)
        detail = "; ".join(
            f"rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))} asked for {_describe(req)}"
            for req, ranks in by_request.items()
        )
        raise AllocationDivergence(
            f"rank {self.rank}: symmetric allocation #{self._count} diverged between ranks: {detail}. "
            "Every rank must allocate the same shapes and dtypes in the same order."
        )

    def _out_of_memory(self, request, label) -> MemoryError:
        use = self.usage()
        what = _describe(request) + (f" named {label!r}" if label else "")
        return MemoryError(
            f"rank {self.rank}: symmetric heap out of memory allocating {what}: the heap of "
            f"{format_size(use.size)} has {format_size(use.used)} in use by {use.allocations} allocations, "
            f"{format_size(use.free)} free, largest free block {format_size(use.largest_free)}. "
            "Delete tensors you no longer need on every rank (they are released at the next allocation) "
            "or create the context with a larger heap_size."
        )

    # -- lookup -----------------------------------------------------------------------------------
    def _allocation_of(self, tensor: torch.Tensor) -> _Allocation | None:
        if not isinstance(tensor, torch.Tensor) or tensor.device != self.device:
            return None
        return self._live.get(tensor.untyped_storage().data_ptr() - self.bases[self.rank])

    def is_symmetric(self, tensor: torch.Tensor) -> bool:
        """True if ``tensor`` is (a view of) an allocation of this rank's heap (upstream's name)."""
        return self._allocation_of(tensor) is not None

    on_symmetric_heap = is_symmetric  # upstream's older name, still called by its tests
    owns_tensor = is_symmetric  # upstream's allocators' name (ctx.heap.allocator.owns_tensor)

    def get_base_address(self) -> int:
        """This rank's heap base address (upstream's allocators' name): where offset 0 of the heap lives."""
        return self.bases[self.rank]

    def find(self, tensor: torch.Tensor) -> AllocationInfo:
        """The allocation ``tensor`` views; ``ValueError`` saying why when it is not on this rank's heap."""
        allocation = self._allocation_of(tensor)
        if allocation is not None:
            return allocation.info
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"rank {self.rank}: expected a torch.Tensor on the symmetric heap, got {type(tensor)}")
        address = tensor.untyped_storage().data_ptr() if tensor.device == self.device else None
        for rank, base in enumerate(self.bases):
            if address is not None and rank != self.rank and base and base <= address < base + self.size:
                raise ValueError(
                    f"rank {self.rank}: this tensor already views rank {rank}'s heap (an as_remote view); "
                    "pass the local tensor it was made from"
                )
        raise ValueError(
            f"rank {self.rank}: tensor ({tensor.dtype}, shape {list(tensor.shape)}, {tensor.device}) is not on the "
            "symmetric heap: create it with the context (ctx.zeros, ctx.empty, ctx.randn...) so that every rank "
            "has a copy at the same offset"
        )

    def as_remote(self, tensor: torch.Tensor, rank: int) -> torch.Tensor:
        """Zero-copy view of ``rank``'s copy of ``tensor``: same shape, dtype, strides and storage offset."""
        if isinstance(rank, bool) or not isinstance(rank, int):
            raise ValueError(f"rank {self.rank}: as_remote rank must be an int, got {rank!r}")
        if not 0 <= rank < self.world_size:
            raise ValueError(
                f"rank {self.rank}: as_remote rank {rank} is out of range: the valid ranks are "
                f"0 to {self.world_size - 1}"
            )
        allocation = self._allocation_of(tensor)
        if allocation is None:
            self.find(tensor)  # raises, saying why the tensor is not on this rank's heap
        if self.reachable is not None and not self.reachable[rank]:
            raise unreachable(self.topology, self.rank, rank, f"as_remote(tensor, {rank})")
        raw, _ = self.memory.view(rank, allocation.offset, allocation.reserved)
        return raw.view(tensor.dtype).as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())

    def copy_2d(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """``dst.copy_(src)`` for 2-D blocks of one dtype with unit column stride and rows that do not overlap
        (e.g. a column block of a matrix), in stream order; on GPUs by the copy engines, taking no SM. Either
        may be a peer's view (:meth:`as_remote`) or any tensor on this rank's device."""
        rows_apart = all(t.dim() == 2 and (t.stride(1) == 1 or t.shape[1] == 1) and (
            t.stride(0) >= t.shape[1] or t.shape[0] == 1) for t in (dst, src))
        if dst.shape != src.shape or dst.dtype != src.dtype or not rows_apart:
            raise ValueError(f"rank {self.rank}: copy_2d takes two 2-D blocks of one shape and dtype with unit "
                             f"column stride and rows apart, got {list(dst.shape)} {dst.dtype} strides {dst.stride()} "
                             f"and {list(src.shape)} {src.dtype} strides {src.stride()}: call .contiguous() on a "
                             "transposed or expanded one")
        self.memory.copy_2d(dst, src)

    def store_flag(self, flag: torch.Tensor, value: int) -> None:
        """Store ``value`` into ``flag``, one int32 on this rank's heap or a peer's (:meth:`as_remote`), in stream
        order: once the work queued before it is done and visible to every rank. On GPUs no kernel does it, so
        it takes no SM (``cuStreamWriteValue32``). The CPU backend has no streams: signal from a kernel there
        (:func:`iris.language.sync.signal`).

        Examples
        --------
        >>> ctx.heap.store_flag(ctx.as_remote(flags, peer)[slot], 1)   # after this stream's copy   # doctest: +SKIP
        """
        store = getattr(self.memory, "store_flag", None)
        if store is None:
            raise NotImplementedError(f"rank {self.rank}: store_flag needs a GPU heap (the {self.backend} backend "
                                      "has no streams): store the flag from a kernel, iris.language.sync.signal")
        if flag.dtype != torch.int32 or flag.numel() != 1:
            raise ValueError(f"rank {self.rank}: store_flag takes one int32 element, got {flag.dtype} of shape "
                             f"{list(flag.shape)}")
        store(flag, value)

    # -- inspection -------------------------------------------------------------------------------
    def locate(self, address: int) -> HeapLocation | None:
        """The rank, offset, allocation and element of ``address`` in any rank's heap as mapped here; None
        when it is in none of them.

        Examples
        --------
        >>> str(heap.locate(flags.data_ptr() + 8))                  # doctest: +SKIP
        'flags[2]'
        """
        rank = next((r for r, base in enumerate(self.bases) if base and base <= address < base + self.size), None)
        if rank is None:
            return None
        offset = address - self.bases[rank]
        for a in self.allocations():
            if a.offset <= offset < a.offset + a.nbytes:
                element = (offset - a.offset) // torch.empty(0, dtype=a.dtype).element_size()
                index = tuple(int(i) for i in torch.unravel_index(torch.tensor(element), a.shape)) if a.shape else ()
                return HeapLocation(rank, offset, a, index)
        return HeapLocation(rank, offset, None, None)

    def allocations(self) -> list[AllocationInfo]:
        """Allocations some tensor on this rank still uses, by offset."""
        return [a.info for _, a in sorted(self._live.items()) if a.referenced]

    def usage(self) -> Usage:
        """Sizes in bytes: total, used (including tensors awaiting release), free, largest free block."""
        return self._allocator.usage()

    # -- upstream's allocator names ----------------------------------------------------------------
    @property
    def allocator(self) -> SymmetricHeap:
        """Upstream's ``ctx.heap.allocator`` (its bump allocator, behind its heap): this heap, which allocates
        itself; upstream's programs read and set its :attr:`heap_offset`."""
        return self

    @property
    def granularity(self) -> int:
        """The smallest piece the heap's memory is mapped in (upstream's allocators' ``granularity``): the driver's
        minimum on CUDA virtual memory (2 MiB on H100s), a page on the CPU backend, the allocation alignment on the
        CUDA IPC heap (one ``cudaMalloc``, never remapped)."""
        return getattr(self.memory, "granularity", self._allocator.alignment)

    @property
    def chunk_size(self) -> int | None:
        """``allocator_type="vmem_chunked"``'s chunk (what the heap grows by); None for the other heaps."""
        return getattr(self.memory, "chunk_size", None)

    @property
    def chunks(self) -> list[tuple[int, int]]:
        """The pieces of memory the heap is made of, ``(offset, bytes)``: a chunk heap's chunks, a growing heap's
        growths (and tensors taken in), a fixed heap's one piece."""
        return list(getattr(self.memory, "chunks", [(0, self.size)]))

    def get_num_chunks(self) -> int:
        """How many pieces the heap is made of (upstream's chunked allocator's ``get_num_chunks``)."""
        return len(self.chunks)

    def get_stats(self) -> dict:
        """Upstream's chunked allocator's statistics, from this heap: ``num_chunks``, ``mapped_bytes`` (the heap's
        size), ``bump`` (:attr:`heap_offset`), ``num_active_allocs`` (allocations not yet released),
        ``num_free_blocks`` and ``free_bytes`` (the allocator's free blocks), ``va_size`` (the most the heap can
        grow to), ``chunk_size`` and ``granularity``.

        Examples
        --------
        >>> ctx.heap.allocator.get_stats()["num_chunks"]                # doctest: +SKIP
        1
        """
        use = self.usage()
        return {"num_chunks": self.get_num_chunks(), "mapped_bytes": self.size, "bump": self.heap_offset,
                "num_active_allocs": len(self._live), "num_free_blocks": self._allocator.free_blocks,
                "free_bytes": use.free, "va_size": getattr(self.memory, "reservation", self.size),
                "chunk_size": self.chunk_size, "granularity": self.granularity}

    @property
    def heap_offset(self) -> int:
        """The first byte past every allocation a tensor on this rank still uses (0 when none does).

        Upstream's bump allocator hands out memory from this offset on and never frees, so its programs read it,
        allocate, and set it back to reuse what they allocated since (e.g. its MoE benchmark, between calls).
        Here memory no tensor on any rank uses comes back at the next allocation anyway, so setting it changes
        nothing, and is checked: an offset outside the heap is a ``ValueError``, and allocations still in use
        past it (upstream would hand their memory out again) are kept, with a ``RuntimeWarning`` naming them.

        Examples
        --------
        >>> mark = ctx.heap.allocator.heap_offset              # doctest: +SKIP
        >>> scratch = ctx.zeros(1024); del scratch               # doctest: +SKIP
        >>> ctx.heap.allocator.heap_offset = mark                # doctest: +SKIP
        """
        return max((a.offset + a.reserved for a in self._live.values() if a.referenced), default=0)

    @heap_offset.setter
    def heap_offset(self, offset: int) -> None:
        if isinstance(offset, bool) or not hasattr(offset, "__index__") or not 0 <= offset <= self.size:
            raise ValueError(f"rank {self.rank}: heap_offset must be an int from 0 to the heap's {self.size} bytes, "
                             f"got {offset!r}: set it to a value read from heap_offset")
        in_use = [a.info for a in self._live.values() if a.referenced and a.offset + a.reserved > offset]
        if in_use:
            names = ", ".join(f"{a.label or f'alloc@{a.offset:#x}'} ({_describe((a.nbytes, str(a.dtype), a.shape))})"
                              for a in sorted(in_use, key=lambda a: a.offset))
            warnings.warn(f"rank {self.rank}: heap_offset set to {offset}, but tensors still use {names} past it: "
                          "upstream's bump allocator would hand their memory out again; this heap keeps it until no "
                          "rank uses them", RuntimeWarning, stacklevel=2)
