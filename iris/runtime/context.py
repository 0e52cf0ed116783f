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

import functools
import os
import warnings
import weakref
from types import MappingProxyType

import torch
import torch.distributed as dist

from ..base import logging as _log
from ..base.backend import choose_backend
from ..base.distributed import HostGroup
from ..base.sizes import parse_size
from ..ccl import CCL
from ..ccl.groups import members as ccl_members
from ..heap import SymmetricHeap, Usage
from ..heap.discover import discover as discover_topology
from ..heap.reach import device_bases, unreachable
from ..instruments.checking import Race, choose_check
from ..instruments.tracing import Tracing
from ..interpret.unmapped_peers import watch as watch_unmapped_peers
from ..language.core import HEAP_SIZE_SLOT, enable_debug_checks
from ..language.core import DeviceContext as TritonContext  # noqa: F401  (upstream's name, iris.runtime.context.TritonContext)
from ..language.gluon import IrisDeviceCtx as GluonContext  # noqa: F401  (upstream's name, iris.runtime.context.GluonContext)
from ..ops.namespace import Ops
from . import tensor_creation
from .heap_choice import choose_allocator, chunk_size
from .symmetric_memory import SymmetricAddressMap, device_context

LATE_INTERPRETER = (
    "backend='cpu' here, but `import iris` chose the cuda backend (a GPU is visible and IRIS_BACKEND was not "
    "'cpu'), so Triton's CPU interpreter comes on only now: iris.DeviceContext and IrisDeviceCtx were built for "
    "the GPU compiler and their methods fail on the interpreter (e.g. \"store() missing 1 required positional "
    "argument: 'to_rank'\"), and kernels defined before this call cannot run. Set IRIS_BACKEND=cpu before "
    "importing iris (os.environ['IRIS_BACKEND'] = 'cpu', or in the shell) to run on the CPU on this machine."
)

class Iris:
    """A rank's view of the symmetric heaps. Create it with :func:`iris.iris`, collectively on every rank.

    Attributes
    ----------
    cur_rank, num_ranks : int
        This rank and the world size.
    device : str
        Upstream's string for the heap's device: ``"cuda:0"``, or ``"cpu"`` on the CPU backend
        (:meth:`get_device` gives the ``torch.device``).
    topology : iris.heap.topology.TopologyMap
        Which ranks map each other's heaps and how every pair is linked (``ctx.topology.explain(0, 2)``).
    heap : iris.heap.SymmetricHeap
        The allocator and every rank's mapped heap (``heap.allocate(num_elements, dtype)``,
        ``heap.heap_bases``, as upstream's).
    allocator_type : str
        ``"torch"`` (CUDA IPC or /dev/shm), ``"vmem"`` (CUDA virtual memory) or ``"vmem_chunked"`` (in chunks, on
        either backend): :func:`iris.runtime.heap_choice.choose_allocator`.
    check : str or None
        ``"races"`` when kernels are checked for data races (:meth:`races`), else None.
    """

    CCL = CCL  # upstream's name for the class of ctx.ccl (its API reference: iris.host.iris.Iris.CCL.all_reduce)

    def __init__(self, heap_size: int | str = 1 << 30, allocator_type: str | None = None, *,
                 backend: str | None = None, debug: bool | None = None, check: str | None = None,
                 host_group: HostGroup | None = None):
        self.backend = choose_backend(backend)
        self.allocator_type = choose_allocator(allocator_type, self.backend)
        if self.backend == "cpu":
            from .. import interpret

            if not interpret.is_active():
                warnings.warn(LATE_INTERPRETER, RuntimeWarning, stacklevel=2)
            interpret.activate()
        # the iris backend of torch.distributed passes its own (iris.distributed): it builds this context while
        # torch.distributed is still starting, over the store of that start
        self.group = host_group or HostGroup.from_environment()
        self.cur_rank = self.group.rank
        self.num_ranks = self.group.world_size
        requested = choose_check(check, self.backend, self.cur_rank)
        if requested == "races" and self.allocator_type == "vmem_chunked":
            self._refuse_races_on_a_growing_heap()
        self.check = None
        self.debug_mode = bool(debug) if debug is not None else os.environ.get("IRIS_DEBUG", "0") not in ("", "0")
        self.topology = discover_topology(self.group, self.backend)  # who maps whom (collective)
        self.heap = SymmetricHeap(parse_size(heap_size), self.group, self.backend, allocator=self.allocator_type,
                                  topology=self.topology, chunk_size=chunk_size())
        if self.heap.reachable is not None and self.backend == "cpu":  # kernels addressing other hosts: refused
            watch_unmapped_peers(functools.partial(unreachable, self.topology, self.cur_rank))
        self.heap_size = self.heap.size
        self.device = str(self.heap.device)
        self.gpu_id = self.heap.device.index if self.backend == "cuda" else None
        self.heap_bases = self.heap.heap_bases
        # Tracing slots zero until ctx.tracing.enable() fills them; then the heap size, for debug checks
        # in kernels (see iris.language.core).
        self._device_context = device_context(self.cur_rank, device_bases(self.heap.bases), self.heap_size,
                                              self.heap.device)
        self.heap.on_grow.append(weakref.WeakMethod(self._heap_grew))  # a "vmem" heap grows when it must
        self.tracing = Tracing(self)  # device tracing: ctx.tracing.enable(), reset(), export()
        if self.debug_mode:
            enable_debug_checks(self.cur_rank)
        self.ccl = CCL(self)  # collectives as methods: ctx.ccl.all_reduce(out, inp), ...
        self.ops = Ops(self)  # GEMM + communication: ctx.ops.matmul_all_reduce(out, A, B), ...
        self._race_detector = None
        self._step_gate = None  # while a stepped run holds this rank (iris.instruments.stepping.stepped)
        if requested == "races":
            self.start_race_check()
        self.group.barrier()
        self.debug(f"heap of {self.heap_size} bytes on {self.device} ({self.backend} backend), bases {self.heap.bases}")

    def _heap_grew(self, size: int) -> None:
        self.heap_size = size
        self._device_context[2 + self.num_ranks + HEAP_SIZE_SLOT] = size  # debug checks in kernels read it

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(rank={self.cur_rank}, num_ranks={self.num_ranks}, "
                f"backend={self.backend!r}, device={self.device!r}, heap_size={self.heap_size})")

    # -- tensor creation (iris.runtime.tensor_creation, with this heap and its device) ----------------------
    def empty(self, *size, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False,
              pin_memory=False, memory_format=torch.contiguous_format, name=None) -> torch.Tensor:
        """Uninitialised tensor on the heap (collective: every rank calls it with the same size and dtype).

        ``memory_format=torch.channels_last`` (or ``channels_last_3d``) gives torch's strides for it;
        ``pin_memory`` is accepted and ignored, as upstream does.
        """
        return tensor_creation.empty(self.heap, self.device, size, out=out, dtype=dtype, layout=layout,
                                     device=device, requires_grad=requires_grad, memory_format=memory_format,
                                     name=name)

    def zeros(self, *size, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False,
              name=None) -> torch.Tensor:
        """Tensor of zeros on the heap, e.g. ``ctx.zeros(4, 8, dtype=torch.float16, name="acc")``.

        Sizes in every form upstream accepts: ``zeros(2, 3)``, ``zeros((2, 3))``, ``zeros([2, 3])``,
        ``zeros(torch.Size([2, 3]))``, ``zeros(((2, 3),))``; likewise for the rest of the family.
        """
        return tensor_creation.zeros(self.heap, self.device, size, out=out, dtype=dtype, layout=layout,
                                     device=device, requires_grad=requires_grad, name=name)

    def ones(self, *size, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False,
             name=None) -> torch.Tensor:
        """Tensor of ones on the heap."""
        return tensor_creation.ones(self.heap, self.device, size, out=out, dtype=dtype, layout=layout,
                                    device=device, requires_grad=requires_grad, name=name)

    def full(self, size, fill_value, *, out=None, dtype=None, layout=torch.strided, device=None,
             requires_grad=False, name=None) -> torch.Tensor:
        """Tensor filled with ``fill_value``; the dtype is inferred from it as :func:`torch.full` does."""
        return tensor_creation.full(self.heap, self.device, size, fill_value, out=out, dtype=dtype, layout=layout,
                                    device=device, requires_grad=requires_grad, name=name)

    def rand(self, *size, generator=None, out=None, dtype=None, layout=torch.strided, device=None,
             requires_grad=False, pin_memory=False, name=None) -> torch.Tensor:
        """Uniform [0, 1) values on the heap (each rank draws its own unless the generators are seeded alike)."""
        return tensor_creation.rand(self.heap, self.device, size, generator=generator, out=out, dtype=dtype,
                                    layout=layout, device=device, requires_grad=requires_grad, name=name)

    def randn(self, *size, generator=None, out=None, dtype=None, layout=torch.strided, device=None,
              requires_grad=False, pin_memory=False, name=None) -> torch.Tensor:
        """Standard normal values on the heap."""
        return tensor_creation.randn(self.heap, self.device, size, generator=generator, out=out, dtype=dtype,
                                     layout=layout, device=device, requires_grad=requires_grad, name=name)

    def uniform(self, size, low=0.0, high=1.0, dtype=torch.float, *, name=None) -> torch.Tensor:
        """Uniform values in [``low``, ``high``) on the heap, e.g. ``ctx.uniform((2, 3), -1.0, 1.0)``."""
        return tensor_creation.uniform(self.heap, self.device, size, low, high, dtype, name=name)

    def randint(self, *args, generator=None, out=None, dtype=None, layout=torch.strided, device=None,
                requires_grad=False, name=None) -> torch.Tensor:
        """Random integers in [low, high): ``randint(high, size)`` or ``randint(low, high, size)``."""
        if len(args) == 2:
            (high, size), low = args, 0
        elif len(args) == 3:
            low, high, size = args
        else:
            raise ValueError(f"rank {self.cur_rank}: randint takes (high, size) or (low, high, size), got {args!r}")
        return tensor_creation.randint(self.heap, self.device, low, high, size, generator=generator, out=out,
                                       dtype=dtype, layout=layout, device=device, requires_grad=requires_grad,
                                       name=name)

    def arange(self, start=0, end=None, step=1, *, out=None, dtype=None, layout=torch.strided, device=None,
               requires_grad=False, name=None) -> torch.Tensor:
        """``torch.arange`` on the heap: ``arange(end)`` or ``arange(start, end, step)``.

        A zero step, or a range with no element in the step's direction, is a ``ValueError`` (upstream's).
        """
        start, end = (0, start) if end is None else (start, end)
        return tensor_creation.arange(self.heap, self.device, start, end, step, out=out, dtype=dtype,
                                      layout=layout, device=device, requires_grad=requires_grad, name=name)

    def linspace(self, start, end, steps, out=None, dtype=None, layout=torch.strided, device=None,
                 requires_grad=False, name=None) -> torch.Tensor:
        """``steps`` evenly spaced values from ``start`` to ``end`` on the heap (``steps``: 5, (5,), [5]...)."""
        return tensor_creation.linspace(self.heap, self.device, start, end, steps, out=out, dtype=dtype,
                                        layout=layout, device=device, requires_grad=requires_grad, name=name)

    def zeros_like(self, input, *, dtype=None, layout=None, device=None, requires_grad=False,
                   memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """Zeros with ``input``'s shape (and dtype, and strides under ``preserve_format``), on the heap."""
        return tensor_creation.zeros_like(self.heap, self.device, input, dtype=dtype, layout=layout, device=device,
                                          requires_grad=requires_grad, memory_format=memory_format, name=name)

    def ones_like(self, input, *, dtype=None, layout=None, device=None, requires_grad=False,
                  memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """Ones with ``input``'s shape, on the heap."""
        return tensor_creation.ones_like(self.heap, self.device, input, dtype=dtype, layout=layout, device=device,
                                         requires_grad=requires_grad, memory_format=memory_format, name=name)

    def empty_like(self, input, *, dtype=None, layout=None, device=None, requires_grad=False,
                   memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """Uninitialised tensor with ``input``'s shape, on the heap."""
        return tensor_creation.empty_like(self.heap, self.device, input, dtype=dtype, layout=layout, device=device,
                                          requires_grad=requires_grad, memory_format=memory_format, name=name)

    def full_like(self, input, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False,
                  memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """``fill_value`` with ``input``'s shape, on the heap."""
        return tensor_creation.full_like(self.heap, self.device, input, fill_value, dtype=dtype, layout=layout,
                                         device=device, requires_grad=requires_grad, memory_format=memory_format,
                                         name=name)

    def rand_like(self, input, *, dtype=None, layout=None, device=None, requires_grad=False,
                  memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """Uniform [0, 1) values with ``input``'s shape, on the heap."""
        return tensor_creation.rand_like(self.heap, self.device, input, dtype=dtype, layout=layout, device=device,
                                         requires_grad=requires_grad, memory_format=memory_format, name=name)

    def randn_like(self, input, *, dtype=None, layout=None, device=None, requires_grad=False,
                   memory_format=torch.preserve_format, name=None) -> torch.Tensor:
        """Standard normal values with ``input``'s shape, on the heap."""
        return tensor_creation.randn_like(self.heap, self.device, input, dtype=dtype, layout=layout, device=device,
                                          requires_grad=requires_grad, memory_format=memory_format, name=name)

    def allocate(self, num_elements: int, dtype: torch.dtype) -> torch.Tensor:
        """A flat uninitialised tensor of ``num_elements`` on the heap (collective), as upstream's
        ``allocate``; ``ctx.heap.allocate`` is the same."""
        return tensor_creation.allocate(self.heap, num_elements, dtype)

    def allocate_symmetric(self, *size, dtype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """An uninitialised tensor on the heap and every rank's address of it (collective), as upstream Iris's.

        Returns ``(tensor, peer_bases)``: ``peer_bases`` is an int64 table on the context's device, one entry per
        rank, ``peer_bases[r]`` where this process reaches rank r's copy of ``tensor`` (``peer_bases[cur_rank] ==
        tensor.data_ptr()``; every entry at the tensor's offset in its rank's heap). Kernels translate with it as
        with ``get_heap_bases()``: ``iris.store(ptr, value, rank, peer, peer_bases)``, or inline
        (``peer_bases[peer] + (ptr - peer_bases[rank])``), for pointers into this tensor, views of it included; the
        same kernels run on memory another provider allocated (torch's symmetric memory:
        :class:`iris.runtime.torch_symm_mem.TorchSymmMemProvider`). Debug mode checks translated pointers against
        this tensor's bytes (the table carries them: :mod:`iris.runtime.symmetric_memory`). A rank this one does not
        map (another host) has :data:`iris.heap.reach.UNMAPPED_BASE` there, as in ``get_heap_bases()``.

        ``size`` in any form the creation functions take (``1024``, ``(2, 3)``...); ``dtype`` None is torch's
        default dtype.

        Examples
        --------
        >>> dst, dst_peers = ctx.allocate_symmetric(512, dtype=torch.float32)       # doctest: +SKIP
        >>> int(dst_peers[ctx.cur_rank]) == dst.data_ptr()                           # doctest: +SKIP
        True
        """
        tensor, address_map = self.allocate_symmetric_map(*size, dtype=dtype)
        return tensor, address_map.peer_bases

    def allocate_symmetric_map(self, *size, dtype=None) -> tuple[torch.Tensor, SymmetricAddressMap]:
        """As :meth:`allocate_symmetric`, with the whole :class:`~iris.runtime.symmetric_memory.SymmetricAddressMap`
        (which peers are reachable, the allocation's base and bytes, a device context over it): the surface of the
        providers (:class:`iris.runtime.torch_symm_mem.TorchSymmMemProvider`)."""
        tensor = self.empty(*size, dtype=dtype if dtype is not None else torch.get_default_dtype())
        return tensor, self.symmetric_address_map(tensor)

    def symmetric_address_map(self, tensor: torch.Tensor) -> SymmetricAddressMap:
        """Every rank's address of the heap allocation ``tensor`` views (not collective: the heap knows them all).

        The map is anchored on the allocation, not on the view: ``allocation_base`` is where the allocation starts
        here. A tensor not on this rank's heap is a ``ValueError`` saying why.

        Examples
        --------
        >>> amap = ctx.symmetric_address_map(buf)                    # doctest: +SKIP
        >>> amap.allocation_base == buf.data_ptr(), amap.all_direct()   # doctest: +SKIP
        (True, True)
        """
        allocation = self.heap.find(tensor)
        bases = [base + allocation.offset if base else 0 for base in self.heap.bases]
        return SymmetricAddressMap.from_bases(device_bases(bases), self.cur_rank, bases[self.cur_rank],
                                              allocation.nbytes, self.heap.device,
                                              direct=[bool(base) for base in self.heap.bases])

    # Upstream's private spellings, which its tests call (ctx._Iris__allocate(n, dtype), ...).
    __allocate = allocate

    def __on_symmetric_heap(self, tensor: torch.Tensor) -> bool:
        return self.is_symmetric(tensor)

    def __is_valid_device(self, device) -> bool:
        return tensor_creation.is_valid_device(device, self.get_device())

    # -- the heap -------------------------------------------------------------------------------
    def is_symmetric(self, tensor: torch.Tensor) -> bool:
        """True if ``tensor`` is (a view of) a tensor on this rank's symmetric heap."""
        return self.heap.is_symmetric(tensor)

    def as_symmetric(self, external_tensor: torch.Tensor, *, name=None) -> torch.Tensor:
        """``external_tensor`` on the heap: same shape, dtype and values (collective).

        With ``allocator_type="vmem"`` on ``cuda`` the heap takes in the tensor's own memory where it can
        (:meth:`iris.heap.SymmetricHeap.take_in`: CUDA virtual memory, e.g. torch's allocator with
        ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``), as upstream's ``vmem`` allocator does: no copy, and
        writes to either tensor are seen in the other. Otherwise (and with upstream's ``torch`` allocator) it is a
        copy: later changes to either tensor do not reach the other. Every rank calls it with a tensor of the
        same shape and dtype, since it allocates. Any device and layout is accepted for a copy: a dense input
        keeps its strides, others come back contiguous.

        Examples
        --------
        >>> weights = ctx.as_symmetric(torch.randn(64, 64))     # doctest: +SKIP
        >>> ctx.is_symmetric(weights)                           # doctest: +SKIP
        True
        """
        if not isinstance(external_tensor, torch.Tensor):
            raise TypeError(f"rank {self.cur_rank}: as_symmetric takes a torch.Tensor, got "
                            f"{type(external_tensor).__name__}")
        if self.allocator_type in ("vmem", "vmem_chunked"):
            shared = self.heap.take_in(external_tensor, label=name)
            if shared is not None:
                return shared
        copy = self.empty_like(external_tensor, name=name)
        with torch.no_grad():
            copy.copy_(external_tensor)
        return copy

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
        """int64 tensor ``[cur_rank, num_ranks, heap_base_0 ... heap_base_{n-1}, 17 tracing slots, heap_size]``.

        Upstream's layout (the heap size after it is ours: debug checks read it); the tracing slots are
        zero until :meth:`iris.instruments.tracing.Tracing.enable` fills them (:mod:`iris.language.trace_events`).
        """
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
        """The heap's ``torch.device`` (``ctx.device`` is the same as upstream's string)."""
        return self.heap.device

    def get_device_id(self) -> int | None:
        """The CUDA device index of this rank, None on the CPU backend."""
        return self.gpu_id

    def get_cu_count(self) -> int:
        """Compute units that kernels can fill: SMs on a GPU, CPU cores on the CPU backend."""
        if self.backend == "cuda":
            return torch.cuda.get_device_properties(self.heap.device).multi_processor_count
        return os.cpu_count() or 1

    # -- synchronisation and exchange -----------------------------------------------------------
    def barrier(self, stream=None, group=None) -> None:
        """Wait for this rank's device work, then for every rank of ``group`` (host-side barrier).

        ``group``: None or ``dist.group.WORLD`` for every rank, or a torch.distributed sub-group whose members
        alone call (:mod:`iris.ccl.groups`); a rank outside it gets a ``ValueError``.
        """
        sub_group = ccl_members(self, group, "barrier").group
        if self._step_gate is not None:  # a stepped run holds the rank here too, and shows it waiting in the barrier
            self._step_gate.at_host_barrier()
        if stream is not None:
            stream.synchronize()
        else:
            self.heap.memory.synchronize()
        if sub_group is not None:
            if self._race_detector is not None:
                raise NotImplementedError(f"rank {self.cur_rank}: barrier over a sub-group with the race checker "
                                          "on: the checker orders accesses at barriers of every rank; use "
                                          "group=None while it runs")
            dist.barrier(group=sub_group)
        elif self._race_detector is not None:
            self._race_detector.host_barrier(self.group)  # the barrier, telling the race checker too
        else:
            self.group.barrier()

    def device_barrier(self, group=None) -> None:
        """Barrier on the device: this rank's later stream work waits until every rank's earlier work is done
        (every rank of ``group``, a torch.distributed group whose members alone call; None: all ranks).

        Flags on the heap (release/acquire) and a call counter on the device; no host synchronisation, so it
        can be captured in a CUDA graph once a first call (which allocates the flags, collectively) has run.
        See :func:`iris.ccl.device_barrier`.
        """
        self.ccl.barrier(group)

    @property
    def _device_barrier_state(self) -> MappingProxyType:
        """Upstream's view of the device barrier's state: its flags tensor per group (None: all ranks).

        Read-only and empty until the first :meth:`device_barrier`; the flags stay the same tensor from
        then on, which is what lets later barriers be captured in a CUDA graph. The state itself lives in
        ``ctx.ccl`` (:meth:`iris.ccl.CCL.barrier_state`).
        """
        return MappingProxyType(self.ccl.barrier_state())

    # upstream's newer spelling of the same state
    _ccl_barrier_state = _device_barrier_state

    def start_race_check(self) -> None:
        """Check every later kernel access for data races, as ``check="races"`` does from the start (collective).

        Accesses made before it are not known to the checker: it cannot report a race with them (nor invent
        one). Nothing happens when the checker is on already. Needs the CPU backend.

        Examples
        --------
        >>> ctx.start_race_check()        # every rank, e.g. before a kernel under suspicion   # doctest: +SKIP
        """
        if self._race_detector is not None:
            return
        choose_check("races", self.backend, self.cur_rank)  # the CPU backend, else the error that says so
        if hasattr(self.heap.memory, "grow"):
            self._refuse_races_on_a_growing_heap()
        from ..instruments.checking.detector import RaceDetector

        self._race_detector = detector = RaceDetector(self.heap, self.group)
        self.heap.on_allocate.append(detector.forget)
        weakref.finalize(self, detector.close)  # the detector must not keep the context alive
        self.check = "races"

    def _refuse_races_on_a_growing_heap(self) -> None:
        raise NotImplementedError(
            f"rank {self.cur_rank}: the race checker's shadow state is sized when it starts, and this heap grows "
            f"(allocator_type={self.allocator_type!r}): accesses past its first size would go unchecked. Check "
            "races with allocator_type='torch' (the CPU backend's default) and a heap_size that fits")

    def races(self) -> list[Race]:
        """The data races this rank's kernels ran into since the last call (then forgotten); needs ``check="races"``.

        Each :class:`iris.Race` names the kernel, the allocation (its ``name=``, else its offset) and element, and
        both accesses (rank, program id, kind, ``file:line``). A race is reported by the rank whose access came
        second, so gather every rank's list to see them all. An :class:`iris.RaceWarning` is also issued when a
        race is found, once per pair of source lines.

        Examples
        --------
        >>> ctx = iris.iris("16MiB", check="races")                  # doctest: +SKIP
        >>> producer[(1,)](data, flag, ctx.get_rank(), 1, ctx.get_heap_bases())   # doctest: +SKIP
        >>> ctx.barrier()                                              # doctest: +SKIP
        >>> [str(race) for race in ctx.races()]                        # doctest: +SKIP
        ["race on data[0] (rank 1's heap): store at mp.py:9 (rank 0, program (0, 0, 0), kernel producer) and ..."]
        """
        if self._race_detector is None:
            raise RuntimeError(
                f"rank {self.cur_rank}: ctx.races() needs the race checker, which is off: create the context with "
                "iris.iris(..., check='races') (or set IRIS_CHECK=races) on the CPU backend"
            )
        return self._race_detector.take_races()

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
    def debug(self, message: str) -> None:
        _log.log(_log.DEBUG, message, self.cur_rank, self.num_ranks)

    def info(self, message: str) -> None:
        _log.log(_log.INFO, message, self.cur_rank, self.num_ranks)

    def warning(self, message: str) -> None:
        _log.log(_log.WARNING, message, self.cur_rank, self.num_ranks)

    def error(self, message: str) -> None:
        _log.log(_log.ERROR, message, self.cur_rank, self.num_ranks)


def iris(heap_size: int | str = 1 << 30, allocator_type: str | None = None, *, backend: str | None = None,
         debug: bool | None = None, check: str | None = None) -> Iris:
    """Create this rank's :class:`Iris` context (collective: every rank calls it).

    Parameters
    ----------
    heap_size : int or str
        Bytes of symmetric heap per rank, e.g. ``1 << 30`` or ``"64MiB"``.
    allocator_type : {None, "torch", "vmem", "vmem_chunked"}
        Upstream's choice of allocator. None reads ``IRIS_ALLOCATOR``, else the backend's default. ``"torch"``:
        the heap's own collective allocator, which frees. ``"vmem"`` on ``cuda``: the heap on CUDA virtual memory,
        growing when an allocation needs it, and ``as_symmetric`` sharing memory; refused on ``cpu``.
        ``"vmem_chunked"``: a heap of chunks of one size (``IRIS_VMEM_CHUNK_SIZE``, default 256 MiB capped at
        ``heap_size``), growing a chunk at a time, on ``cuda`` and on ``cpu``
        (:func:`iris.runtime.heap_choice.choose_allocator`).
    backend : {None, "auto", "cpu", "cuda"}
        None/"auto" reads ``IRIS_BACKEND``, else picks ``cuda`` when a GPU is visible, else ``cpu``.
    debug : bool, optional
        Check every translated pointer in kernels (also ``IRIS_DEBUG=1``).
    check : {None, "races", "none"}
        ``"races"``: check every heap access of every kernel for data races (CPU backend only; see
        :meth:`Iris.races`). None reads ``IRIS_CHECK`` (unset: no check).

    Examples
    --------
    >>> ctx = iris.iris("64MiB", backend="cpu")      # doctest: +SKIP
    >>> ctx = iris.iris("16MiB", backend="cpu", check="races")   # doctest: +SKIP
    >>> ctx = iris.iris(1 << 30, allocator_type="torch")   # upstream's spelling  # doctest: +SKIP
    """
    return Iris(heap_size, allocator_type, backend=backend, debug=debug, check=check)
