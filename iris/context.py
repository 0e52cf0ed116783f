"""The host side of iris: ``Iris``, one per rank, owning the rank's symmetric heap.

Everything a host program needs: tensors on the heap (the creation family, with PyTorch's argument
conventions and upstream Iris's signatures), ``as_remote`` views of other ranks' copies, the heap bases and
device context that kernels take, barriers, broadcast and logging with the rank in every line.

Examples
--------
Run with ``torchrun --nproc_per_node=2 script.py``:

>>> import iris, torch
>>> ctx = iris.iris(64 << 20)                                   # doctest: +SKIP
>>> x = ctx.zeros(1024, dtype=torch.float32, name="x")           # same offset on every rank
>>> ctx.barrier()
>>> peer = ctx.as_remote(x, (ctx.get_rank() + 1) % ctx.get_num_ranks())
>>> peer[:4] = ctx.get_rank()                                   # host write into the next rank's copy
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import torch

from . import log as _log
from .backend import choose_backend
from .ccl import CCL
from .device import HEAP_SIZE_SLOT, enable_debug_checks
from .distributed import HostGroup
from .heap import SymmetricHeap, Usage
from .sizes import parse_size

TRACING_SLOTS = 17  # upstream Iris's device-context tail (no tracing: zero but for the heap size)


def _shape(size) -> tuple[int, ...]:
    """``zeros(2, 3)``, ``zeros((2, 3))``, ``zeros([2, 3])`` and ``zeros(torch.Size([2, 3]))`` all mean (2, 3)."""
    if len(size) == 1 and isinstance(size[0], Sequence | torch.Size):
        size = tuple(size[0])
    for s in size:
        if isinstance(s, bool) or not isinstance(s, int | np.integer):
            raise TypeError(f"tensor sizes must be ints, got {s!r} in {size!r}")
    return tuple(int(s) for s in size)


class Iris:
    """A rank's view of the symmetric heaps. Create it with :func:`iris.iris`, collectively on every rank.

    Attributes
    ----------
    cur_rank, num_ranks : int
        This rank and the world size.
    heap : iris.heap.SymmetricHeap
        The allocator and every rank's mapped heap.
    """

    def __init__(self, heap_size: int | str = 1 << 30, backend: str | None = None, debug: bool | None = None):
        self.backend = choose_backend(backend)
        if self.backend == "cpu":
            from . import interpret

            interpret.activate()
        self.group = HostGroup.from_environment()
        self.cur_rank = self.group.rank
        self.num_ranks = self.group.world_size
        self.debug_mode = bool(debug) if debug is not None else os.environ.get("IRIS_DEBUG", "0") not in ("", "0")
        self.heap = SymmetricHeap(parse_size(heap_size), self.group, self.backend)
        self.heap_size = self.heap.size
        self.device = self.heap.device
        self.gpu_id = self.device.index if self.device.type == "cuda" else None
        # Debug checks in kernels need the heap size; it rides where upstream-visible layouts leave room
        # (see iris.device): just before heap_bases[0], and in the last tracing slot of the device context.
        sized_bases = torch.tensor([self.heap_size, *self.heap.bases], dtype=torch.int64, device=self.device)
        self.heap_bases = sized_bases[1:]
        tracing_slots = [0] * TRACING_SLOTS
        tracing_slots[HEAP_SIZE_SLOT] = self.heap_size
        self._device_context = torch.tensor(
            [self.cur_rank, self.num_ranks, *self.heap.bases] + tracing_slots,
            dtype=torch.int64, device=self.device,
        )
        if self.debug_mode:
            enable_debug_checks(self.cur_rank)
        self.ccl = CCL(self)  # collectives as methods: ctx.ccl.all_reduce(out, inp), ...
        self.group.barrier()
        self.debug(f"heap of {self.heap_size} bytes on {self.device} ({self.backend} backend), bases {self.heap.bases}")

    def __repr__(self) -> str:
        return (f"Iris(rank={self.cur_rank}, num_ranks={self.num_ranks}, backend={self.backend!r}, "
                f"device={self.device}, heap_size={self.heap_size})")

    # -- tensor creation ------------------------------------------------------------------------
    def _check_placement(self, layout, device) -> None:
        if layout not in (None, torch.strided):
            raise ValueError(
                f"rank {self.cur_rank}: only torch.strided tensors live on the symmetric heap, not {layout}"
            )
        if device is not None:
            device = torch.device(device)
            if device.type != self.device.type or device.index not in (None, self.device.index):
                raise RuntimeError(
                    f"rank {self.cur_rank}: device mismatch: this rank's symmetric heap is on {self.device}, "
                    f"not {device}; leave device=None"
                )

    def _check_out(self, out: torch.Tensor, shape, dtype) -> None:
        if not self.heap.owns(out):
            raise ValueError(f"rank {self.cur_rank}: out= must be a tensor on the symmetric heap")
        if out.numel() != math.prod(shape) or (dtype is not None and out.dtype != dtype):
            raise ValueError(
                f"rank {self.cur_rank}: out= is {out.dtype}{list(out.shape)} but the result is "
                f"{dtype or out.dtype}{list(shape)}: it needs as many elements and the same dtype"
            )

    def _new(self, shape, dtype, *, out, layout, device, requires_grad, name, fill=None) -> torch.Tensor:
        """Allocate collectively (or reuse ``out``), initialise with ``fill(tensor)``, then set requires_grad."""
        self._check_placement(layout, device)
        if out is not None:
            self._check_out(out, shape, dtype)
            tensor = out if tuple(out.shape) == tuple(shape) else out.view(shape)  # filled in place
        else:
            tensor = self.heap.allocate(shape, dtype if dtype is not None else torch.get_default_dtype(), label=name)
        if fill is not None:
            with torch.no_grad():
                fill(tensor)
        return tensor.requires_grad_() if requires_grad else tensor

    def empty(self, *size, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False,
              pin_memory=False, memory_format=torch.contiguous_format, name=None) -> torch.Tensor:
        """Uninitialised tensor on the heap (collective: every rank calls it with the same size and dtype)."""
        return self._new(_shape(size), dtype, out=out, layout=layout, device=device,
                         requires_grad=requires_grad, name=name)

    def zeros(self, *size, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False,
              name=None) -> torch.Tensor:
        """Tensor of zeros on the heap, e.g. ``ctx.zeros(4, 8, dtype=torch.float16, name="acc")``."""
        return self._new(_shape(size), dtype, out=out, layout=layout, device=device,
                         requires_grad=requires_grad, name=name, fill=lambda t: t.zero_())

    def ones(self, *size, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False,
             name=None) -> torch.Tensor:
        """Tensor of ones on the heap."""
        return self._new(_shape(size), dtype, out=out, layout=layout, device=device,
                         requires_grad=requires_grad, name=name, fill=lambda t: t.fill_(1))

    def full(self, size, fill_value, *, out=None, dtype=None, layout=torch.strided, device=None,
             requires_grad=False, name=None) -> torch.Tensor:
        """Tensor filled with ``fill_value``; the dtype is inferred from it as :func:`torch.full` does."""
        if dtype is None:
            dtype = out.dtype if out is not None else torch.full((), fill_value).dtype
        size = (size,) if isinstance(size, int) else size
        return self._new(_shape((size,)), dtype, out=out, layout=layout, device=device,
                         requires_grad=requires_grad, name=name, fill=lambda t: t.fill_(fill_value))

    def rand(self, *size, generator=None, out=None, dtype=None, layout=torch.strided, device=None,
             requires_grad=False, pin_memory=False, name=None) -> torch.Tensor:
        """Uniform [0, 1) values on the heap (each rank draws its own unless the generators are seeded alike)."""
        return self._new(_shape(size), dtype, out=out, layout=layout, device=device, requires_grad=requires_grad,
                         name=name, fill=lambda t: t.uniform_(0, 1, generator=generator))

    def randn(self, *size, generator=None, out=None, dtype=None, layout=torch.strided, device=None,
              requires_grad=False, pin_memory=False, name=None) -> torch.Tensor:
        """Standard normal values on the heap."""
        return self._new(_shape(size), dtype, out=out, layout=layout, device=device, requires_grad=requires_grad,
                         name=name, fill=lambda t: t.normal_(0, 1, generator=generator))

    def randint(self, *args, generator=None, out=None, dtype=None, layout=torch.strided, device=None,
                requires_grad=False, name=None) -> torch.Tensor:
        """Random integers in [low, high): ``randint(high, size)`` or ``randint(low, high, size)``."""
        if len(args) == 2:
            (high, size), low = args, 0
        elif len(args) == 3:
            low, high, size = args
        else:
            raise ValueError(f"rank {self.cur_rank}: randint takes (high, size) or (low, high, size), got {args!r}")
        return self._new(_shape((size,)), dtype or torch.int64, out=out, layout=layout, device=device,
                         requires_grad=requires_grad, name=name,
                         fill=lambda t: t.random_(low, high, generator=generator))

    def arange(self, start=0, end=None, step=1, *, out=None, dtype=None, layout=torch.strided, device=None,
               requires_grad=False, name=None) -> torch.Tensor:
        """``torch.arange`` on the heap: ``arange(end)`` or ``arange(start, end, step)``."""
        values = torch.arange(start, end, step, dtype=dtype) if end is not None else torch.arange(start, dtype=dtype)
        return self._new(values.shape, values.dtype, out=out, layout=layout, device=device,
                         requires_grad=requires_grad, name=name, fill=lambda t: t.copy_(values))

    def linspace(self, start, end, steps, out=None, dtype=None, layout=torch.strided, device=None,
                 requires_grad=False, name=None) -> torch.Tensor:
        """``steps`` evenly spaced values from ``start`` to ``end`` on the heap."""
        values = torch.linspace(start, end, steps, dtype=dtype)
        return self._new(values.shape, values.dtype, out=out, layout=layout, device=device,
                         requires_grad=requires_grad, name=name, fill=lambda t: t.copy_(values))

    def _like(self, creator, input: torch.Tensor, dtype, layout, device, requires_grad, name):
        return creator(input.shape, dtype=dtype or input.dtype, layout=layout or input.layout, device=device,
                       requires_grad=requires_grad, name=name)

    def zeros_like(self, input, *, dtype=None, layout=None, device=None, requires_grad=False,
                   memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """Zeros with ``input``'s shape (and dtype unless given), on the heap."""
        return self._like(self.zeros, input, dtype, layout, device, requires_grad, name)

    def ones_like(self, input, *, dtype=None, layout=None, device=None, requires_grad=False,
                  memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """Ones with ``input``'s shape, on the heap."""
        return self._like(self.ones, input, dtype, layout, device, requires_grad, name)

    def empty_like(self, input, *, dtype=None, layout=None, device=None, requires_grad=False,
                   memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """Uninitialised tensor with ``input``'s shape, on the heap."""
        return self._like(self.empty, input, dtype, layout, device, requires_grad, name)

    def full_like(self, input, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False,
                  memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """``fill_value`` with ``input``'s shape, on the heap."""
        return self.full(input.shape, fill_value, dtype=dtype or input.dtype, layout=layout or torch.strided,
                         device=device, requires_grad=requires_grad, name=name)

    def rand_like(self, input, *, dtype=None, layout=None, device=None, requires_grad=False,
                  memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """Uniform [0, 1) values with ``input``'s shape, on the heap."""
        return self._like(self.rand, input, dtype, layout, device, requires_grad, name)

    def randn_like(self, input, *, dtype=None, layout=None, device=None, requires_grad=False,
                   memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """Standard normal values with ``input``'s shape, on the heap."""
        return self._like(self.randn, input, dtype, layout, device, requires_grad, name)

    # -- the heap -------------------------------------------------------------------------------
    def is_symmetric(self, tensor: torch.Tensor) -> bool:
        """True if ``tensor`` is (a view of) a tensor on this rank's symmetric heap."""
        return self.heap.owns(tensor)

    def as_remote(self, tensor: torch.Tensor, rank: int) -> torch.Tensor:
        """Zero-copy view of ``rank``'s copy of ``tensor``: same shape, dtype, strides and storage offset.

        On the CPU backend host code reads and writes the other rank's memory through it; on CUDA it is a
        device tensor over the peer mapping, on this rank's device, valid while the context lives. A tensor
        not on the heap, or a rank outside ``[0, num_ranks)``, is a ``ValueError``.

        Examples
        --------
        >>> right = ctx.as_remote(buf, (ctx.cur_rank + 1) % ctx.num_ranks)   # doctest: +SKIP
        >>> right.data_ptr() - ctx.get_heap_bases()[1] == buf.data_ptr() - ctx.get_heap_bases()[0]  # doctest: +SKIP
        """
        return self.heap.as_remote(tensor, rank)

    def get_heap_bases(self) -> torch.Tensor:
        """int64 tensor on the context's device: entry r is where this process sees rank r's heap."""
        return self.heap_bases

    def get_device_context(self) -> torch.Tensor:
        """int64 tensor ``[cur_rank, num_ranks, heap_base_0 ... heap_base_{n-1}, 17 tracing slots]`` for kernels."""
        return self._device_context

    def heap_usage(self) -> Usage:
        """Bytes in use, free and the largest free block of this rank's heap."""
        return self.heap.usage()

    # -- ranks and devices ----------------------------------------------------------------------
    def get_rank(self) -> int:
        return self.cur_rank

    def get_num_ranks(self) -> int:
        return self.num_ranks

    def get_device(self) -> torch.device:
        return self.device

    def get_device_id(self) -> int | None:
        """The CUDA device index of this rank, None on the CPU backend."""
        return self.gpu_id

    def get_cu_count(self) -> int:
        """Compute units that kernels can fill: SMs on a GPU, CPU cores on the CPU backend."""
        if self.device.type == "cuda":
            return torch.cuda.get_device_properties(self.device).multi_processor_count
        return os.cpu_count() or 1

    # -- synchronisation and exchange -----------------------------------------------------------
    def barrier(self, stream=None, group=None) -> None:
        """Wait for this rank's device work, then for every rank (host-side barrier)."""
        if group is not None:
            raise NotImplementedError("barrier over a sub-group is not supported yet: pass group=None")
        if stream is not None:
            stream.synchronize()
        else:
            self.heap.memory.synchronize()
        self.group.barrier()

    def device_barrier(self, group=None) -> None:
        """Barrier on the device: this rank's later stream work waits until every rank's earlier work is done.

        Flags on the heap (release/acquire) and a call counter on the device; no host synchronisation, so it
        can be captured in a CUDA graph once a first call (which allocates the flags, collectively) has run.
        See :func:`iris.ccl.device_barrier`.
        """
        self.ccl.barrier(group)

    def broadcast(self, value, src: int = 0, *, source_rank: int | None = None):
        """``src``'s value on every rank; tensors and arrays come back as numpy arrays.

        ``source_rank=`` is accepted too (the name older upstream Iris used).
        """
        src = source_rank if source_rank is not None else src
        if not 0 <= src < self.num_ranks:
            raise ValueError(f"rank {self.cur_rank}: broadcast source {src} is not in [0, {self.num_ranks})")
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            value = (value.float() if value.dtype == torch.bfloat16 else value).numpy()  # numpy has no bfloat16
        return self.group.broadcast_object(value, src=src)

    # -- logging --------------------------------------------------------------------------------
    def debug(self, msg: str) -> None:
        _log.log(_log.DEBUG, msg, self.cur_rank, self.num_ranks)

    def info(self, msg: str) -> None:
        _log.log(_log.INFO, msg, self.cur_rank, self.num_ranks)

    def warning(self, msg: str) -> None:
        _log.log(_log.WARNING, msg, self.cur_rank, self.num_ranks)

    def error(self, msg: str) -> None:
        _log.log(_log.ERROR, msg, self.cur_rank, self.num_ranks)


def iris(heap_size: int | str = 1 << 30, backend: str | None = None, debug: bool | None = None) -> Iris:
    """Create this rank's :class:`Iris` context (collective: every rank calls it).

    Parameters
    ----------
    heap_size : int or str
        Bytes of symmetric heap per rank, e.g. ``1 << 30`` or ``"64MiB"``.
    backend : {None, "auto", "cpu", "cuda"}
        None/"auto" reads ``IRIS_BACKEND``, else picks ``cuda`` when a GPU is visible, else ``cpu``.
    debug : bool, optional
        Check every translated pointer in kernels (also ``IRIS_DEBUG=1``).

    Examples
    --------
    >>> ctx = iris.iris("64MiB", backend="cpu")      # doctest: +SKIP
    """
    return Iris(heap_size, backend=backend, debug=debug)
