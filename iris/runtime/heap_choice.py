"""Which allocator hands out a rank's heap (upstream Iris's ``allocator_type``): on ``cuda``, ``"vmem"`` for CUDA
virtual memory, ``"vmem_chunked"`` for CUDA virtual memory in chunks of one size, or ``"torch"`` for CUDA IPC; on
``cpu``, ``"torch"`` (a /dev/shm file) or ``"vmem_chunked"`` (a /dev/shm file the heap takes a chunk at a time).

Chosen here, by the host layer that creates the heap, never by the heap's backends themselves: asking whether this
GPU supports the virtual-memory heap is a question to :mod:`iris.heap.cuda.vmm`, which must not ask back.
Order of precedence: the argument, then ``IRIS_ALLOCATOR``, then the backend's default.

Examples
--------
>>> choose_allocator("torch", "cpu")
'torch'
"""

from __future__ import annotations

import os

from ..base.backend import choose_backend

ALLOCATORS = ("torch", "vmem", "vmem_chunked")
# What the cuda backend uses when no allocator is named: "vmem" where the driver supports it, else "torch" (CUDA
# IPC), the choice said once. The VMM heap is the default because it measured within 3% of the IPC heap (RMA
# bandwidth, all_reduce latency; 2 x H100, 2026-11-26): benchmarks/vmm_vs_ipc.py, benchmarks/RESULTS.md "The VMM
# heap against the IPC heap (issue 30)".
CUDA_DEFAULT = "vmem"
_choice_said = False


def choose_allocator(allocator_type: str | None = None, backend: str | None = None) -> str:
    """Resolve upstream Iris's ``allocator_type`` (None reads ``IRIS_ALLOCATOR``, then the backend's default).

    ``"torch"`` is upstream's default: one fixed region per rank handed out as torch tensors. Here that is
    the heap's collective allocator (``cudaMalloc`` memory shared by CUDA IPC on ``cuda``, a /dev/shm file on
    ``cpu``), which also gives memory back when no rank uses a tensor any more. ``"vmem"`` is upstream's
    virtual-memory allocator: on ``cuda`` the heap lives on CUDA virtual memory (:mod:`iris.heap.cuda.vmm`),
    grows when an allocation needs it (``heap_size`` is where it starts; it can grow to the GPU's memory), and
    ``as_symmetric`` shares an outside tensor's memory where that memory is CUDA virtual memory (else copies,
    saying why). On ``cpu`` it is refused: the /dev/shm heap is sparse, so a large ``heap_size`` costs only the
    pages used. ``"vmem_chunked"`` is upstream's chunked virtual-memory allocator (upstream's PR #516): the heap is
    made of chunks of ``chunk_size`` (``IRIS_VMEM_CHUNK_SIZE``, default 256 MiB capped at ``heap_size``), starts at
    whole chunks and grows a chunk at a time as allocations need, at fixed bases; ``ctx.heap.allocator`` reports
    ``chunk_size``, ``granularity``, ``get_num_chunks()`` and ``get_stats()``. On ``cuda`` the chunks are CUDA
    virtual memory (:class:`iris.heap.cuda.vmm.CudaVmmChunkedHeapMemory`); on ``cpu`` they are taken from a sparse
    /dev/shm mapping as large as /dev/shm (:class:`iris.heap.cpu.ShmChunkedHeapMemory` says why that is the same
    thing there, and what differs). With nothing named, ``cuda`` uses :data:`CUDA_DEFAULT` (``"vmem"`` where the
    driver supports it, else ``"torch"``, said once). Unlike upstream, an explicit argument wins
    over ``IRIS_ALLOCATOR``, as ``backend=`` wins over ``IRIS_BACKEND``.

    Examples
    --------
    >>> choose_allocator(None, "cpu")      # IRIS_ALLOCATOR unset
    'torch'
    """
    requested = allocator_type if allocator_type is not None else os.environ.get("IRIS_ALLOCATOR", "")
    requested = str(requested).strip().lower()
    if requested and requested not in ALLOCATORS:
        raise ValueError(f"unknown allocator_type {requested!r}: use 'torch' (CUDA IPC or /dev/shm) or 'vmem' "
                         "(CUDA virtual memory), or 'vmem_chunked' (a heap growing in chunks of one size)")
    backend = choose_backend(backend)
    if backend == "cpu":
        if requested == "vmem":
            raise NotImplementedError(
                "allocator_type='vmem' (upstream Iris's virtual-memory allocator: a heap that grows on demand, "
                "as_symmetric sharing an outside tensor's memory) is for the cuda backend. On the cpu backend the "
                "heap is a sparse /dev/shm file: only the pages used take memory, so ask for a heap_size as large "
                "as /dev/shm allows, with allocator_type='torch' (the default; unset IRIS_ALLOCATOR), or one that "
                "grows a chunk at a time, with allocator_type='vmem_chunked'"
            )
        return "vmem_chunked" if requested == "vmem_chunked" else "torch"
    if requested:
        return requested
    if CUDA_DEFAULT == "vmem":
        return _vmem_or_ipc()
    return "torch"


def _vmem_or_ipc() -> str:
    """``"vmem"`` where this process's GPU supports the virtual-memory heap, else ``"torch"``; said once per process
    (a warning for the fallback, an info line otherwise)."""
    global _choice_said
    import torch

    from ..base.logging import logger
    from ..heap.cuda.vmm import vmm_unavailable

    why = vmm_unavailable(torch.cuda.current_device())
    if not _choice_said:
        if why is None:
            logger.info("iris: heaps on CUDA virtual memory (allocator_type='vmem'): they grow when an allocation "
                        "needs it; allocator_type='torch' for CUDA IPC")
        else:
            logger.warning("iris: heaps on CUDA IPC (allocator_type='torch'), not CUDA virtual memory: %s", why)
        _choice_said = True
    return "vmem" if why is None else "torch"


def chunk_size(value: int | str | None = None) -> int | None:
    """``"vmem_chunked"``'s chunk: ``value`` (bytes, or a size such as ``"64MiB"``), else ``IRIS_VMEM_CHUNK_SIZE``,
    else None (the heap's default: 256 MiB capped at ``heap_size``).

    Examples
    --------
    >>> chunk_size("64MiB")
    67108864
    """
    from ..base.sizes import parse_size

    value = value if value is not None else os.environ.get("IRIS_VMEM_CHUNK_SIZE") or None
    return None if value is None else parse_size(value)
