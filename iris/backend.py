"""Which backend a process uses: ``cuda`` (GPU heaps over CUDA IPC) or ``cpu`` (Triton interpreter over /dev/shm).

Order of precedence: the ``backend=`` argument, then the ``IRIS_BACKEND`` environment variable, then
``cuda`` when a GPU is visible, else ``cpu``.

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
