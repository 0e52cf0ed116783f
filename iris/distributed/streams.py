"""Where the iris backend's operations run on a GPU: a stream of their own, after the caller's, as NCCL's do.

Each operation first makes the backend's stream wait for the caller's current stream (what the caller queued
before it is done before it starts), then queues its copies and kernels there, and records where it ends (its
work's event, :mod:`iris.distributed.work`). ``work.wait()`` (which torch.distributed calls at once for a
blocking call) makes the caller's stream wait for that event. So a DDP gradient bucket's all-reduce runs beside the
rest of the backward pass instead of in its way, and the tensors an operation uses are marked as used by the
backend's stream (``record_stream``), so the caching allocator does not hand their memory out while it runs. All
operations of one device share one stream: they run in the order they were called, which is what lets them share
staging buffers. On the CPU backend every kernel has run when the call returns; nothing changes there.

Examples
--------
>>> with on_side_stream(device, [grad]):                # doctest: +SKIP
...     work = run_the_operation()                       # its event is recorded on the side stream
"""

from __future__ import annotations

import contextlib
import functools

import torch

_streams: dict[int, torch.cuda.Stream] = {}


def side_stream(device: torch.device) -> torch.cuda.Stream:
    """The backend's stream on ``device`` (one per device, made at its first use)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _streams:
        _streams[index] = torch.cuda.Stream(device=index)
    return _streams[index]


def tensors_in(value) -> list[torch.Tensor]:
    """Every tensor in ``value`` (a tensor, or lists and tuples of them, as torch.distributed passes them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    return []


@contextlib.contextmanager
def on_side_stream(device: torch.device, tensors):
    """Queue the block on the backend's stream of ``device``, after the caller's current stream; a no-op off GPUs."""
    if device.type != "cuda":
        yield
        return
    stream = side_stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        yield
    for tensor in tensors:
        if tensor.device.type == "cuda":
            tensor.record_stream(stream)


def streamed(method):
    """A process group method whose work is queued on the backend's stream (``self._ctx``'s device)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with on_side_stream(self._ctx.get_device(), tensors_in(args)):
            return method(self, *args, **kwargs)

    return run
