"""Which backend a process uses: ``cuda`` (GPU heaps over CUDA IPC) or ``cpu`` (Triton interpreter over /dev/shm),
and which allocator hands out its heap (upstream Iris's ``allocator_type``).

Order of precedence for both: the argument, then the environment (``IRIS_BACKEND``, ``IRIS_ALLOCATOR``),
then the default (``cuda`` when a GPU is visible, else ``cpu``; the ``torch`` allocator).

Examples
--------
>>> choose_backend("cpu")
'cpu'
>>> choose_allocator("torch")
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
    """The GPU rank ``rank``'s heap lives on: ``rank % device count``, so ranks share GPUs when they outnumber them.

    Examples
    --------
    >>> gpu_for_rank(3) in range(max(1, __import__("torch").cuda.device_count()))   # doctest: +SKIP
    True
    """
    import torch

    return rank % torch.cuda.device_count()


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


ALLOCATORS = ("torch",)


def choose_allocator(allocator_type: str | None = None) -> str:
    """Resolve upstream Iris's ``allocator_type`` (None reads ``IRIS_ALLOCATOR``, default ``"torch"``).

    ``"torch"`` is upstream's default: one fixed region per rank handed out as torch tensors. Here that is
    the heap's collective allocator (``cudaMalloc`` memory on ``cuda``, a /dev/shm file on ``cpu``), which
    also gives memory back when no rank uses a tensor any more. ``"vmem"`` is upstream's virtual-memory
    allocator for AMD GPUs (HIP VMM: a heap that grows on demand, and ``as_symmetric`` sharing an outside
    tensor's memory instead of copying it); neither backend here has an equivalent, so it is refused.
    Unlike upstream, an explicit argument wins over ``IRIS_ALLOCATOR``, as ``backend=`` wins over
    ``IRIS_BACKEND``.

    Examples
    --------
    >>> choose_allocator(None)      # IRIS_ALLOCATOR unset
    'torch'
    """
    requested = allocator_type if allocator_type is not None else os.environ.get("IRIS_ALLOCATOR", "torch")
    requested = str(requested).strip().lower() or "torch"
    if requested == "vmem":
        raise NotImplementedError(
            "allocator_type='vmem' is AMD-only: upstream Iris's virtual-memory allocator for AMD GPUs (HIP VMM: "
            "a heap that grows on demand, as_symmetric sharing an outside tensor's memory); iris-workbench has no "
            "equivalent on its cuda or cpu backend. Use allocator_type='torch' (the default; unset "
            "IRIS_ALLOCATOR): its heap gives memory back when tensors die, and as_symmetric copies."
        )
    if requested not in ALLOCATORS:
        raise ValueError(f"unknown allocator_type {requested!r}: use 'torch' (upstream's 'vmem' is not available)")
    return requested
