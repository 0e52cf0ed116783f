"""Chunks: what a chunked heap (upstream Iris's ``allocator_type="vmem_chunked"``) maps at a time, on either backend
(:class:`iris.heap.cuda.vmm.CudaVmmChunkedHeapMemory`, :class:`iris.heap.cpu.ShmChunkedHeapMemory`).

Examples
--------
>>> chunk_size_for(64 << 20, 2 << 20) == 64 << 20
True
"""

from __future__ import annotations

DEFAULT_CHUNK_SIZE = 256 << 20  # upstream's vmem_chunked chunk, capped at the heap's size


def chunk_size_for(heap_size: int, granularity: int, requested: int = DEFAULT_CHUNK_SIZE) -> int:
    """The chunk a chunked heap maps at a time (upstream Iris's ``vmem_chunked``): ``requested`` capped at the heap's
    size, at least one granule, rounded up to a power of two (a multiple of the granularity, itself a power of two).

    Upstream refuses a heap size that caps the chunk to something else than a power of two; here it is rounded up.

    Examples
    --------
    >>> chunk_size_for(1 << 20, 2 << 20), chunk_size_for(3 << 20, 4096), chunk_size_for(1 << 30, 4096)
    (2097152, 4194304, 268435456)
    """
    if granularity < 1 or granularity & (granularity - 1):
        raise ValueError(f"the mapping granularity must be a power of two, got {granularity}")
    if requested < 1:
        raise ValueError(f"chunk_size must be positive, got {requested}")
    chunk = max(min(requested, heap_size), granularity)
    return 1 << (chunk - 1).bit_length()
