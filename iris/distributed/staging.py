"""Heap buffers that tensors outside the heap pass through on their way into and out of our kernels.

torch.distributed hands a backend whatever tensors its caller has (DDP's gradient buckets, FSDP's flat
parameters, a user's activations); our kernels read and write other ranks' heaps, so each operation copies its
input into a heap buffer, runs there, and copies the result back out. Every tensor is staged, one on the heap
too: a kernel finds a peer's data at this rank's offset, and a heap tensor on one rank may meet a tensor off the
heap (or at another offset) on another; only an exchange per call could tell, which costs more than the copy.

Each role (``"input"``, ``"output"``) keeps one buffer that grows (to a power of two, at least 1 MiB) when an
operation needs more. Growing allocates on the heap, which is collective: every rank grows at the same call,
because every rank of a call asks for the same bytes (the operations that may differ per rank, all_to_all with
split sizes, agree on the largest first).

Examples
--------
>>> staging = Staging(ctx)                                        # doctest: +SKIP
>>> x = staging.view("input", (4, 8), torch.float32)               # a heap tensor, reused by later calls
"""

from __future__ import annotations

import math

import torch

MIN_BYTES = 1 << 20
ALIGN = 256  # views start on this boundary, so every dtype's kernels may use wide accesses


def _rounded(nbytes: int) -> int:
    return max(MIN_BYTES, 1 << (max(nbytes, 1) - 1).bit_length())


class Staging:
    """The heap buffers of one context's iris process groups."""

    def __init__(self, ctx):
        self._ctx = ctx
        self._buffers: dict[str, torch.Tensor] = {}

    def bytes(self, role: str, nbytes: int) -> torch.Tensor:
        """A uint8 heap tensor of at least ``nbytes`` (collective the first time a role needs more)."""
        buffer = self._buffers.get(role)
        if buffer is None or buffer.numel() < nbytes:
            self._buffers.pop(role, None)  # released to the heap at the next allocation
            size = _rounded(nbytes)
            try:
                buffer = self._ctx.heap.allocate(size, torch.uint8, f"iris.distributed.{role}")
            except MemoryError as error:
                raise MemoryError(
                    f"{error}\nThe iris backend stages tensors that are not on the heap through a buffer of "
                    f"{size} bytes for this call: give the heap more room (dist.init_process_group('iris', "
                    "pg_options=iris.distributed.Options(heap_size=...)) or IRIS_HEAP_SIZE)") from None
            self._buffers[role] = buffer
        return self._buffers[role]

    def view(self, role: str, shape, dtype: torch.dtype) -> torch.Tensor:
        """A contiguous heap tensor of ``shape`` and ``dtype`` at the start of ``role``'s buffer."""
        shape = tuple(shape)
        nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        return self.bytes(role, nbytes)[:nbytes].view(dtype).view(shape)

    def put(self, role: str, tensor: torch.Tensor, shape=None) -> torch.Tensor:
        """A heap copy of ``tensor`` (reshaped to ``shape``) in ``role``'s buffer."""
        staged = self.view(role, tuple(tensor.shape) if shape is None else shape, tensor.dtype)
        staged.view(-1).copy_(tensor.reshape(-1))
        return staged
