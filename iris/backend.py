"""Which backend a process uses: ``cuda`` (GPU heaps) or ``cpu`` (Triton interpreter over /dev/shm), and which
allocator hands out its heap (upstream Iris's ``allocator_type``: on ``cuda``, ``"vmem"`` for CUDA virtual memory
or ``"torch"`` for CUDA IPC).

Order of precedence for both: the argument, then the environment (``IRIS_BACKEND``, ``IRIS_ALLOCATOR``),
then the default (``cuda`` when a GPU is visible, else ``cpu``; on ``cuda`` the ``vmem`` allocator where the
driver supports it, else ``torch``; on ``cpu`` ``torch``).

Examples
--------
>>> choose_backend("cpu")
'cpu'
>>> choose_allocator("torch", "cpu")
'torch'
"""

from __future__ import annotations

import os

BACKENDS = ("cpu", "cuda")


def gpu_visible() -> bool:
    """True when torch sees at least one CUDA device."""
    import torch

    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def choose_backend(backend: str | None = None) -> str:
    """Resolve ``backend`` (None, "auto", "cpu" or "cuda") to "cpu" or "cuda"."""
    requested = backend if backend not in (None, "auto") else os.environ.get("IRIS_BACKEND", "auto")
    requested = requested.strip().lower() or "auto"
    if requested == "auto":
        return "cuda" if gpu_visible() else "cpu"
    if requested not in BACKENDS:
        raise ValueError(f"unknown iris backend {requested!r}: use 'cpu', 'cuda' or 'auto'")
    if requested == "cuda" and not gpu_visible():
        raise RuntimeError(
            "iris backend 'cuda' was asked for but torch sees no CUDA device "
            f"(torch {__import__('torch').__version__}); use backend='cpu' to run on the Triton interpreter"
        )
    return requested


def gpu_for_rank(rank: int) -> int:
    """The GPU rank ``rank``'s heap lives on: its index among its host's ranks modulo the device count, so ranks
    share GPUs when they outnumber them.

    The index is ``LOCAL_RANK`` (set by torchrun and by the workbench per host) when ``rank`` is this process's
    ``RANK``: ranks dealt round-robin over hosts then still use every GPU of theirs. Otherwise, and where several
    hosts are simulated on one machine (``IRIS_HOST``: they share its GPUs), it is ``rank`` itself.

    Examples
    --------
    >>> gpu_for_rank(3) in range(max(1, __import__("torch").cuda.device_count()))   # doctest: +SKIP
    True
    """
    import torch

    own = os.environ.get("RANK") == str(rank) and "LOCAL_RANK" in os.environ and not os.environ.get("IRIS_HOST")
    return (int(os.environ["LOCAL_RANK"]) if own else rank) % torch.cuda.device_count()


def kernels_run_on_gpu() -> bool:
    """True when this process's kernels run on a GPU: a GPU backend, and Triton not switched to its interpreter
    (``iris.iris(backend="cpu")`` switches it on a GPU machine too). What timing and device queries answer for.

    Examples
    --------
    >>> kernels_run_on_gpu() in (True, False)
    True
    """
    from . import interpret

    return not interpret.is_active() and choose_backend(None) == "cuda"


ALLOCATORS = ("torch", "vmem")
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
    virtual-memory allocator: on ``cuda`` the heap lives on CUDA virtual memory (:mod:`iris.heap.cuda_vmm`),
    grows when an allocation needs it (``heap_size`` is where it starts; it can grow to the GPU's memory), and
    ``as_symmetric`` shares an outside tensor's memory where that memory is CUDA virtual memory (else copies,
    saying why). On ``cpu`` it is refused: the /dev/shm heap is sparse, so a large ``heap_size`` costs only the
    pages used. With nothing named, ``cuda`` uses :data:`CUDA_DEFAULT` (``"vmem"`` where the driver supports it,
    else ``"torch"``, said once). Unlike upstream, an explicit argument wins
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
                         "(CUDA virtual memory)")
    backend = choose_backend(backend)
    if backend == "cpu":
        if requested == "vmem":
            raise NotImplementedError(
                "allocator_type='vmem' (upstream Iris's virtual-memory allocator: a heap that grows on demand, "
                "as_symmetric sharing an outside tensor's memory) is for the cuda backend. On the cpu backend the "
                "heap is a sparse /dev/shm file: only the pages used take memory, so ask for a heap_size as large "
                "as /dev/shm allows, with allocator_type='torch' (the default; unset IRIS_ALLOCATOR)"
            )
        return "torch"
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

    from .heap.cuda_vmm import vmm_unavailable
    from .logging import logger

    why = vmm_unavailable(torch.cuda.current_device())
    if not _choice_said:
        if why is None:
            logger.info("iris: heaps on CUDA virtual memory (allocator_type='vmem'): they grow when an allocation "
                        "needs it; allocator_type='torch' for CUDA IPC")
        else:
            logger.warning("iris: heaps on CUDA IPC (allocator_type='torch'), not CUDA virtual memory: %s", why)
        _choice_said = True
    return "vmem" if why is None else "torch"
