"""GPU heaps on CUDA virtual memory: physical chunks mapped into an address range reserved up front, so a heap
grows without moving, and a tensor allocated elsewhere with virtual memory can be taken in without a copy.

Each rank reserves an address range as large as its GPU's memory for its own heap (``cuMemAddressReserve``),
and one as large for every peer it maps. Its heap is physical memory (``cuMemCreate``) mapped at the start of
its range (``cuMemMap``, ``cuMemSetAccess`` for its own device). To share it, the rank exports each chunk as a
file descriptor (``cuMemExportToShareableHandle``), hands the descriptors to the host's other ranks over a Unix
socket (:mod:`iris.heap.cuda.fd_exchange`), and each of them imports them (``cuMemImportFromShareableHandle``) and
maps them at the same offsets in its range for that rank. Growing maps a new chunk after the last on every
rank, collectively, and shares it the same way: the bases never change, and the reservation is the most a
heap can grow to. Peers on other hosts of one NVLink fabric domain would get fabric handles
(``CU_MEM_HANDLE_TYPE_FABRIC``) instead; where the device or the machine cannot make them, the error says what
is missing.

Examples
--------
>>> memory = CudaVmmHeapMemory(64 << 20, group)          # doctest: +SKIP
>>> memory.grow(256 << 20)                                # collective: every rank, same size  # doctest: +SKIP
>>> memory.size, memory.reservation                       # doctest: +SKIP
(268435456, 85899345920)
"""

from __future__ import annotations

import gc
import os

import torch

from ...base.backend import gpu_for_rank
from ..chunks import DEFAULT_CHUNK_SIZE, chunk_size_for
from .fd_exchange import share_fds
from .ipc import CudaHeapMemory, _bindings, _check, _error_name


def _driver():
    return _bindings("driver", "the CUDA virtual-memory heap")


def _attribute(device_id: int, name: str) -> int:
    d = _driver()
    _check(d.cuInit(0), "cuInit", -1)
    device = _check(d.cuDeviceGet(device_id), "cuDeviceGet", -1)
    return int(_check(d.cuDeviceGetAttribute(getattr(d.CUdevice_attribute, name), device), name, -1))


def vmm_unavailable(device_id: int) -> str | None:
    """Why a virtual-memory heap shared through file descriptors cannot live on GPU ``device_id``; None when it can.

    Examples
    --------
    >>> vmm_unavailable(0)                                   # doctest: +SKIP
    """
    try:
        _driver()
    except ImportError as err:
        return str(err)
    if not _attribute(device_id, "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"):
        return f"GPU {device_id}'s driver has no virtual memory management (cuMemCreate/cuMemMap)"
    if not _attribute(device_id, "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED"):
        return f"GPU {device_id}'s driver cannot export memory as file descriptors"
    return None


def fabric_unavailable(device_id: int) -> str | None:
    """Why GPU ``device_id`` cannot share memory with other hosts through fabric handles; None when it can.

    The device attribute says whether the driver offers them; making one (a granule) says whether this machine
    can: it needs an NVLink fabric between hosts (an NVL72-class rack and its fabric manager) and the IMEX
    service with a channel open to this process.
    """
    d = _driver()
    if not _attribute(device_id, "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED"):
        return (f"GPU {device_id} offers no fabric handles (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is 0): "
                "mapping memory across hosts needs GPUs on an NVLink fabric (an NVL72-class rack with its fabric "
                "manager) and the IMEX service")
    prop = _properties(device_id, d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_FABRIC)
    granule = _granularity(prop)
    err, handle = d.cuMemCreate(granule, prop, 0)
    if int(err) != 0:
        return (f"GPU {device_id} offers fabric handles but making one failed with {_error_name(err)}: the IMEX "
                "service is not running, or this process has no IMEX channel (/dev/nvidia-caps-imex-channels)")
    d.cuMemRelease(handle)
    return None


def _properties(device_id: int, handle_type):
    d = _driver()
    prop = d.CUmemAllocationProp()
    prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device_id
    prop.requestedHandleTypes = handle_type
    return prop


def _granularity(prop) -> int:
    d = _driver()
    flag = d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
    return int(_check(d.cuMemGetAllocationGranularity(prop, flag), "cuMemGetAllocationGranularity", -1))


def _round_up(nbytes: int, unit: int) -> int:
    return (nbytes + unit - 1) // unit * unit


class CudaVmmHeapMemory(CudaHeapMemory):
    """Every rank's heap as seen from this process, on CUDA virtual memory. Collective: every rank constructs it.

    Views, copies and synchronisation are the IPC heap's (:class:`iris.heap.cuda.ipc.CudaHeapMemory`); what differs
    is where the memory comes from, and that it can :meth:`grow` and :meth:`take_in` outside memory.

    Parameters
    ----------
    size : int
        Bytes per rank to start with, rounded up to the allocation granularity (2 MiB on H100).
    group : iris.base.distributed.HostGroup
        The ranks that share heaps.
    reachable : list of bool, optional
        ``reachable[r]``: this rank maps rank r's heap (default: every rank). An unmapped peer's base is 0.

    Attributes
    ----------
    reservation : int
        The most bytes the heap can grow to: the smallest GPU memory among the ranks (every rank's the same).
    granularity : int
        Chunks are multiples of this many bytes.
    """

    def __init__(self, size: int, group, reachable=None):
        d = _driver()
        from cuda.bindings import runtime

        self.rank = rank = group.rank
        self.device_id = gpu_for_rank(rank)
        self.device = torch.device("cuda", self.device_id)
        torch.cuda.set_device(self.device)
        _check(runtime.cudaSetDevice(self.device_id), "cudaSetDevice", rank)
        _check(runtime.cudaFree(0), "cudaFree(0) (making the device's context current)", rank)
        if CudaHeapMemory._made:  # see CudaHeapMemory: free the dropped heaps still in reference cycles first
            gc.collect()
            group.barrier()
        CudaHeapMemory._made = True
        self._group = group
        self._reserved: list[tuple[int, int]] = []  # (address, bytes) reservations, freed last
        self._maps: dict[tuple[int, int], tuple[int, int, object]] = {}  # (rank, offset) -> (address, bytes, handle)
        reachable = [True] * group.world_size if reachable is None else [bool(r) for r in reachable]
        from ..topology import this_host

        self._handle_type = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        self._prop = _properties(self.device_id, self._handle_type)
        self.granularity = _granularity(self._prop)
        size = _round_up(size, self.granularity)
        total = torch.cuda.get_device_properties(self.device).total_memory
        reason = vmm_unavailable(self.device_id)
        facts = group.all_gather_object((this_host(), total, reachable, reason))
        refused = {r: why for r, (_, _, _, why) in enumerate(facts) if why}
        if refused:
            raise RuntimeError(f"rank {rank}: a CUDA virtual-memory heap cannot be made: " + "; ".join(
                f"rank {r}: {why}" for r, why in refused.items()) + ". Use allocator_type='torch' (CUDA IPC)")
        hosts = [host for host, _, _, _ in facts]
        self._peers = [r for r in range(group.world_size) if reachable[r] and r != rank and hosts[r] == hosts[rank]]
        crossing = [(a, b) for a, (_, _, maps, _) in enumerate(facts) for b in range(group.world_size)
                    if maps[b] and hosts[b] != hosts[a]]
        if crossing:  # seen alike by every rank, so every rank refuses
            a, b = crossing[0]
            why = fabric_unavailable(self.device_id)
            raise RuntimeError(
                f"rank {rank}: rank {a} ({hosts[a]}) is to map the heap of rank {b} ({hosts[b]}), on another host; "
                "this heap shares memory through file descriptors, within one host only"
                + (f", and {why}" if why else ": these GPUs offer fabric handles, which it does not use yet")
            )
        self.reservation = max(size, min(t for _, t, _, _ in facts) // self.granularity * self.granularity)
        self.bases = [0] * group.world_size
        for r in [rank, *self._peers]:
            address = int(_check(d.cuMemAddressReserve(self.reservation, self.granularity, 0, 0),
                                 f"cuMemAddressReserve of {self.reservation} bytes for rank {r}'s heap", rank))
            self._reserved.append((address, self.reservation))
            self.bases[r] = address
        self.size = 0
        self._fill(0, size)
        self.size = size

    @property
    def chunks(self) -> list[tuple[int, int]]:
        """The pieces of physical memory mapped into this rank's heap, ``(offset, bytes)`` in order: one per growth
        (one per chunk for :class:`CudaVmmChunkedHeapMemory`), and the chunks of tensors taken in."""
        return sorted((offset, nbytes) for (rank, offset), (_, nbytes, _) in self._maps.items() if rank == self.rank)

    # -- growing ----------------------------------------------------------------------------------
    def grow(self, new_size: int) -> None:
        """Map more memory after the heap's end on every rank (collective; every rank passes the same size).

        ``new_size`` is rounded up to the granularity; beyond :attr:`reservation` is a ``MemoryError``, and so is
        a GPU out of memory on any rank (every rank raises, the heap is unchanged).
        """
        new_size = _round_up(new_size, self.granularity)
        if new_size > self.reservation:
            raise MemoryError(f"rank {self.rank}: a heap of {new_size} bytes is beyond this heap's reservation of "
                              f"{self.reservation} bytes (the most it can grow to)")
        if new_size > self.size:
            self._fill(self.size, new_size - self.size)
            self.size = new_size

    def _fill(self, offset: int, nbytes: int) -> None:
        """Fresh zeroed memory at ``offset`` of every rank's heap (collective)."""
        d = _driver()
        failure = None
        try:
            err, handle = d.cuMemCreate(nbytes, self._prop, 0)
            if int(err) != 0:
                free, total = torch.cuda.mem_get_info(self.device)
                raise MemoryError(f"rank {self.rank}: cuMemCreate of {nbytes} bytes failed with {_error_name(err)}; "
                                  f"GPU {self.device_id} has {free} of {total} bytes free")
            self._map(self.rank, offset, nbytes, handle)
            _check(d.cuMemsetD8(self.bases[self.rank] + offset, 0, nbytes), "cuMemsetD8", self.rank)
        except (MemoryError, RuntimeError) as err:
            failure = str(err)
        self._agree(failure, [offset])
        self._share({offset: (nbytes, handle)})

    def _agree(self, failure: str | None, offsets) -> None:
        """Raise on every rank when any rank failed (``failure``), unmapping what this rank mapped at ``offsets``
        first, so that no rank waits in a collective the others left."""
        failures = [f for f in self._group.all_gather_object(failure) if f]
        if failures:
            for offset in offsets:
                if (self.rank, offset) in self._maps:
                    self._unmap(self.rank, offset)
            raise MemoryError("; ".join(failures))

    # -- taking in outside memory -----------------------------------------------------------------------
    def segments_of(self, address: int, nbytes: int):
        """The virtual-memory chunks under ``[address, address + nbytes)`` as ``(start, bytes)``, in order, or a
        string saying why that memory cannot be shared (plain ``cudaMalloc`` memory, another GPU, no file
        descriptors)."""
        d = _driver()
        segments, cursor = [], address
        while cursor < address + max(nbytes, 1):
            err, handle = d.cuMemRetainAllocationHandle(cursor)
            if int(err) != 0:
                return ("its memory is not CUDA virtual memory (torch's caching allocator hands out cudaMalloc "
                        "blocks unless PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True is set before CUDA starts)")
            try:
                prop = _check(d.cuMemGetAllocationPropertiesFromHandle(handle),
                              "cuMemGetAllocationPropertiesFromHandle", self.rank)
                start, size = _check(d.cuMemGetAddressRange(cursor), "cuMemGetAddressRange", self.rank)
                start, size = int(start), int(size)
            finally:
                d.cuMemRelease(handle)
            if prop.location.id != self.device_id:
                return f"its memory is on GPU {prop.location.id}, not on this rank's GPU {self.device_id}"
            if not int(prop.requestedHandleTypes) & int(self._handle_type):
                return "its memory was made without file-descriptor handles, so other processes cannot map it"
            segments.append((start, size))
            cursor = start + size
        return segments

    def take_in(self, offset: int, nbytes: int, segments, start: int) -> None:
        """Map the outside chunks ``segments`` (from :meth:`segments_of`) at heap offsets from ``start`` on, in a
        region ``[offset, offset + nbytes)`` appended to the heap, and share them (collective: every rank passes
        the same ``offset`` and ``nbytes``). The chunks' memory stays the outside allocator's: the heap holds a
        reference (``cuMemRetainAllocationHandle``) until :meth:`give_back`."""
        d = _driver()
        if offset + nbytes > self.reservation:
            raise MemoryError(f"rank {self.rank}: taking in {nbytes} bytes needs a heap of {offset + nbytes} bytes, "
                              f"beyond its reservation of {self.reservation}")
        shared, at, failure = {}, start, None
        try:
            for address, size in segments:
                handle = _check(d.cuMemRetainAllocationHandle(address), "cuMemRetainAllocationHandle", self.rank)
                self._map(self.rank, at, size, handle)
                shared[at] = (size, handle)
                at += size
        except RuntimeError as err:
            failure = str(err)
        self._agree(failure, list(shared))
        self._share(shared)
        self.size = offset + nbytes

    def give_back(self, offset: int, nbytes: int) -> None:
        """Unmap every rank's mappings in ``[offset, offset + nbytes)`` (memory taken in) and fill the range with
        fresh memory of the heap's own (collective)."""
        for rank, at in [key for key in self._maps if offset <= key[1] < offset + nbytes]:
            self._unmap(rank, at)
        self._fill(offset, nbytes)

    # -- mapping and sharing ----------------------------------------------------------------------
    def _map(self, rank: int, offset: int, nbytes: int, handle) -> None:
        d = _driver()
        address = self.bases[rank] + offset
        try:
            _check(d.cuMemMap(address, nbytes, 0, handle, 0), f"cuMemMap of rank {rank}'s heap at +{offset:#x}",
                   self.rank)
            access = d.CUmemAccessDesc()
            access.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            access.location.id = self.device_id
            access.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            _check(d.cuMemSetAccess(address, nbytes, [access], 1), "cuMemSetAccess", self.rank)
        except BaseException:
            d.cuMemUnmap(address, nbytes)
            d.cuMemRelease(handle)
            raise
        self._maps[(rank, offset)] = (address, nbytes, handle)

    def _unmap(self, rank: int, offset: int) -> None:
        d = _driver()
        address, nbytes, handle = self._maps.pop((rank, offset))
        d.cuMemUnmap(address, nbytes)
        d.cuMemRelease(handle)

    def _share(self, chunks: dict[int, tuple[int, object]]) -> None:
        """Export this rank's ``chunks`` ({offset: (bytes, handle)}, mapped here already) to the peers and map
        theirs (collective: every rank calls it, with its own chunks)."""
        d = _driver()
        fds, ordered = [], sorted(chunks.items())
        try:
            for _, (_, handle) in ordered:
                fds.append(int(_check(d.cuMemExportToShareableHandle(handle, self._handle_type, 0),
                                      "cuMemExportToShareableHandle", self.rank)))
            layouts = self._group.all_gather_object([(offset, nbytes) for offset, (nbytes, _) in ordered])
            received = share_fds(self._group, fds, self._peers)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            for rank, peer_fds in received.items():
                for (offset, nbytes), fd in zip(layouts[rank], peer_fds, strict=True):
                    handle = _check(d.cuMemImportFromShareableHandle(fd, self._handle_type),
                                    f"cuMemImportFromShareableHandle of rank {rank}'s heap", self.rank)
                    self._map(rank, offset, nbytes, handle)
        finally:
            for peer_fds in received.values():
                for fd in peer_fds:
                    os.close(fd)
        _check(d.cuCtxSynchronize(), "cuCtxSynchronize", self.rank)

    def __del__(self):
        try:
            d = _driver()
            from cuda.bindings import runtime

            runtime.cudaSetDevice(self.device_id)
            runtime.cudaDeviceSynchronize()
            for key in list(self._maps):
                self._unmap(*key)
            for address, nbytes in self._reserved:
                d.cuMemAddressFree(address, nbytes)
            self._reserved.clear()
        except Exception:  # interpreter shutdown: the driver frees everything anyway
            pass


class CudaVmmChunkedHeapMemory(CudaVmmHeapMemory):
    """Upstream Iris's ``allocator_type="vmem_chunked"``: the virtual-memory heap, made of chunks of one size mapped
    once and never remapped. Collective: every rank constructs it, and grows it, together.

    The heap starts at ``size`` rounded up to whole chunks and grows by as many whole chunks as an allocation needs
    (upstream: "init maps ceil(heap_size / chunk_size) chunks, growth maps a chunk at a time"); each chunk is its own
    ``cuMemCreate`` allocation, exported and mapped by the host's other ranks at the same offset, so the bases never
    change. What upstream does besides, here the heap's own: sub-allocation (the first-fit allocator every heap uses,
    where upstream buckets by powers of two) and giving memory back (a tensor no rank references is released at the
    next allocation).

    Parameters
    ----------
    size, group, reachable
        As :class:`CudaVmmHeapMemory`'s.
    chunk_size : int
        Bytes per chunk: :func:`iris.heap.chunks.chunk_size_for` (256 MiB by default, capped at ``size``, a power of
        two and a multiple of the granularity, 2 MiB on H100s).
    """

    def __init__(self, size: int, group, reachable=None, chunk_size: int | None = None):
        d = _driver()
        _check(d.cuInit(0), "cuInit", group.rank)
        handles = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        granularity = _granularity(_properties(gpu_for_rank(group.rank), handles))
        self.chunk_size = chunk_size_for(size, granularity, chunk_size or DEFAULT_CHUNK_SIZE)
        super().__init__(_round_up(max(size, 1), self.chunk_size), group, reachable)

    def grow(self, new_size: int) -> None:
        """Map whole chunks up to ``new_size`` bytes (collective), as :meth:`CudaVmmHeapMemory.grow`."""
        super().grow(_round_up(new_size, self.chunk_size))

    def _fill(self, offset: int, nbytes: int) -> None:
        """Fresh zeroed chunks over ``[offset, offset + nbytes)`` (collective); if one cannot be made on some rank,
        those mapped by this call are unmapped on every rank and every rank raises, the heap unchanged."""
        done = []
        try:
            for start in range(offset, offset + nbytes, self.chunk_size):
                super()._fill(start, min(self.chunk_size, offset + nbytes - start))
                done.append(start)
        except MemoryError:
            for rank, at in [key for key in self._maps if key[1] in done]:
                self._unmap(rank, at)
            raise
