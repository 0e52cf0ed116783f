"""The handle an iris process group returns for each operation: torch.distributed's ``Work``, over our streams.

On a GPU an operation runs on the backend's own stream, after the caller's (:mod:`iris.distributed.streams`). The
handle records an event where the operation ends: :meth:`IrisWork.wait` makes the stream current *at wait* wait for
it (NCCL's meaning of ``wait``: the host is not blocked, except for a barrier, whose purpose is to block it),
``is_completed`` asks the event, ``get_future`` gives a future completed on that stream. On the CPU backend the
kernels have run by the time the call returns, so the work is complete when made.

Examples
--------
>>> work = dist.all_reduce(t, async_op=True)          # on an "iris" group        # doctest: +SKIP
>>> work.wait()                                        # later kernels on this stream see the sum
>>> work.get_future().wait()[0] is t
True
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class IrisWork(dist._Work):
    """One operation of an :class:`~iris.distributed.IrisProcessGroup`, already queued on the current stream.

    Parameters
    ----------
    result : list of torch.Tensor
        What the operation wrote (its future's value, as torch's backends give).
    device : torch.device
        Where it ran; on ``cuda`` an event is recorded on the current stream (the backend's), now.
    blocking : bool
        ``wait`` blocks the host until the operation ended (a barrier's meaning).
    """

    def __init__(self, result: list, device: torch.device, blocking: bool = False):
        super().__init__()
        self._result = result
        self._blocking = blocking
        self._device = device
        self._event = None
        if device.type == "cuda":
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(device))
            # A CUDA-aware future: its value is ready for a stream once that stream waited on the recorded event,
            # which Future.wait() and then() do for the caller's current stream.
            self._future = torch.futures.Future(devices=[device])
        else:
            self._future = torch.futures.Future()
        self._future.set_result(result)

    def wait(self, timeout=None) -> bool:
        """Order the current stream after the operation (on the CPU backend: nothing left to wait for)."""
        if self._event is not None:
            if self._blocking:
                self._event.synchronize()
            else:
                torch.cuda.current_stream(self._device).wait_event(self._event)
        return True

    def is_completed(self) -> bool:
        """Whether the operation has ended on its device."""
        return self._event is None or self._event.query()

    def is_success(self) -> bool:
        return self.is_completed()

    def exception(self):
        return None

    def synchronize(self) -> None:
        """Block the host until the operation ended."""
        if self._event is not None:
            self._event.synchronize()

    def result(self) -> list:
        """The tensors the operation wrote."""
        return self._result

    def get_future(self) -> torch.futures.Future:
        """A future holding :meth:`result`, usable in DDP's communication hooks (``fut.then(...)``)."""
        return self._future
