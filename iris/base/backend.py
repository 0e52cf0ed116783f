"""Which backend a process uses, ``cuda`` (GPU heaps) or ``cpu`` (Triton interpreter over /dev/shm), and which GPU
a rank's heap lives on: what every layer may ask, answered from the environment and torch alone.

Order of precedence: the argument, then ``IRIS_BACKEND``, then the default (``cuda`` when a GPU is visible, else
``cpu``). Which allocator hands out the heap is chosen a layer above the heaps it creates
(:func:`iris.runtime.heap_choice.choose_allocator`); whether kernels run on a GPU also depends on the interpreter
(:func:`iris.interpret.kernels_run_on_gpu`).

Examples
--------
>>> choose_backend("cpu")
'cpu'
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
