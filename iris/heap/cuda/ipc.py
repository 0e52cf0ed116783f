"""GPU heaps: one device allocation per rank, opened by every other rank through CUDA IPC.

Each rank allocates its heap with ``cudaMalloc`` on its own device (rank r uses device
``r % device_count``, so several ranks may share a GPU), exports an IPC handle, and opens every peer's
handle with ``cudaIpcOpenMemHandle(..., cudaIpcMemLazyEnablePeerAccess)`` *with its own device current*.
Opening through ``torch.UntypedStorage._new_shared_cuda`` instead maps the peer under the peer's device,
and kernels then fault with an illegal address (measured on 2xH200, see DESIGN.md).

CUDA IPC handles open only on the host that made them: a peer on another host (``reachable[r]`` False, see
:meth:`iris.heap.topology.TopologyMap.can_map`) is not opened, and its base is 0. Every rank still takes part in the
exchange of handles, so that the collective stays the same on every rank.

Examples
--------
>>> memory = CudaHeapMemory(size=1 << 30, group=group, reachable=[True, True])   # doctest: +SKIP
>>> memory.device                                                                 # doctest: +SKIP
device(type='cuda', index=1)
"""

from __future__ import annotations

import gc
import importlib

import torch

from ...base.backend import gpu_for_rank


def _bindings(module: str, needs: str):
    """``cuda.bindings.<module>``, or an ImportError saying that ``needs`` (what needs it) needs cuda-bindings."""
    try:
        return importlib.import_module(f"cuda.bindings.{module}")
    except ImportError as err:
        raise ImportError(f"{needs} needs cuda-bindings: pip install 'iris-workbench[cuda]' (or pip install "
                          "cuda-bindings), or use backend='cpu'") from err


def _runtime():
    return _bindings("runtime", "the cuda backend, to open peers' heaps,")


def _driver():
    return _bindings("driver", "the cuda backend")


def _check(result, what: str, rank: int):
    """The values of a cuda-bindings call's ``(error, *values)`` (one value alone, None for none); a RuntimeError
    naming ``rank``, the call and the error otherwise. Runtime and driver calls alike."""
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"rank {rank}: {what} failed with {_error_name(err)}")
    return values[0] if len(values) == 1 else tuple(values) if values else None


def _error_name(err) -> str:
    name = getattr(err, "name", None)
    return name or str(err)


class _DeviceBuffer:
    """A device address range that torch can wrap without copying (``__cuda_array_interface__``)."""

    def __init__(self, address: int, nbytes: int, memory):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (address, False), "version": 3, "strides": None,
        }
        self.memory = memory


class CudaHeapMemory:
    """Every reachable rank's heap as seen from this process. Collective: every rank constructs it together.

    Parameters
    ----------
    size : int
        Bytes per rank.
    group : iris.base.distributed.HostGroup
        The ranks.
    reachable : list of bool, optional
        ``reachable[r]``: this rank opens rank r's heap (ranks of this host); an unopened rank's base is 0.
        None: every rank.
    """

    _made = False  # a heap was made in this process before: a dropped one may still hold its memory

    def __init__(self, size: int, group, reachable=None):
        rt = _runtime()
        self.rank = group.rank
        self.size = size
        self.device_id = gpu_for_rank(group.rank)
        self.device = torch.device("cuda", self.device_id)
        torch.cuda.set_device(self.device)
        _check(rt.cudaSetDevice(self.device_id), "cudaSetDevice", self.rank)
        if CudaHeapMemory._made:
            # A context a program dropped is often still alive in a reference cycle (the context, its ops and
            # ccl namespaces, their workspaces) until Python's collector runs, which GPU memory does not
            # trigger: upstream's tests make an 8 GiB heap per test, and on an 80 GiB H100 one failed its
            # cudaMalloc with the dropped heaps not yet freed. So collect first, on every rank, then meet (the
            # device set above: NCCL's barrier runs there): a peer's mapping of a dropped heap
            # (cudaIpcOpenMemHandle) holds its memory until that peer closes it.
            gc.collect()
            group.barrier()
        CudaHeapMemory._made = True
        try:
            own = _check(rt.cudaMalloc(size), f"cudaMalloc of a {size}-byte heap", self.rank)
        except RuntimeError as err:
            free, total = torch.cuda.mem_get_info(self.device)
            raise MemoryError(
                f"{err}; device {self.device_id} has {free} of {total} bytes free: ask for a smaller heap"
            ) from err
        self._own = int(own)
        self._opened: list[int] = []
        _check(rt.cudaMemset(self._own, 0, size), "cudaMemset", self.rank)
        handle = _check(rt.cudaIpcGetMemHandle(self._own), "cudaIpcGetMemHandle", self.rank)
        handles = group.all_gather_object(bytes(handle.reserved))
        self.bases = []
        for rank, raw in enumerate(handles):
            if rank == self.rank:
                self.bases.append(self._own)
                continue
            if reachable is not None and not reachable[rank]:  # another host's handle means nothing here
                self.bases.append(0)
                continue
            peer = rt.cudaIpcMemHandle_t()
            peer.reserved = raw
            address = _check(
                rt.cudaIpcOpenMemHandle(peer, rt.cudaIpcMemLazyEnablePeerAccess),
                f"cudaIpcOpenMemHandle of rank {rank}'s heap", self.rank,
            )
            self._opened.append(int(address))
            self.bases.append(int(address))
        _check(rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize", self.rank)

    def view(self, rank: int, offset: int, nbytes: int):
        """``(tensor, owner)``: a 1-D uint8 device tensor over ``nbytes`` of rank's heap from ``offset``.

        The tensor is on this rank's device (the one that opened the mapping). For this rank's own heap
        the tensor keeps ``owner`` alive, which keeps the heap memory alive; a view of a peer's heap does
        not own it (``owner`` is None) and is valid while the heap is open.
        """
        if rank == self.rank:
            owner = _DeviceBuffer(self.bases[rank] + offset, nbytes, self)
            tensor = torch.as_tensor(owner, device=self.device)
            if tensor.data_ptr() != self.bases[rank] + offset:  # torch copied instead of wrapping
                raise RuntimeError(f"rank {self.rank}: torch {torch.__version__} did not wrap heap memory in place")
            return tensor, owner
        # torch tags a wrapped pointer with the device that owns the memory; a peer mapping must be
        # used from *this* device, so build the storage with this device named explicitly.
        storage = torch._C._construct_storage_from_data_pointer(self.bases[rank] + offset, self.device, nbytes)
        return torch.empty(0, dtype=torch.uint8, device=self.device).set_(storage), None

    def synchronize(self) -> None:
        """Wait for this rank's device."""
        torch.cuda.synchronize(self.device)

    def copy_2d(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """``dst.copy_(src)`` for 2-D blocks whose rows lie apart (unit column stride), on the current stream: one
        ``cudaMemcpy2DAsync`` (torch launches its own copy kernel for a strided block). Either side may be a
        peer's heap; such a copy is the copy engines', taking no SM, where a copy within one GPU needs SMs
        (2xH100, 2026-11-26, a one-off script: queued beside a running GEMM, a peer's copy ran at once, a local
        one only after the GEMM)."""
        if src.shape[0] == 0 or src.shape[1] == 0:  # nothing to copy (an all_to_all of empty chunks)
            return
        size = src.element_size()
        stream = torch.cuda.current_stream(self.device).cuda_stream
        rt = _runtime()
        _check(rt.cudaMemcpy2DAsync(dst.data_ptr(), dst.stride(0) * size, src.data_ptr(), src.stride(0) * size,
                                    src.shape[1] * size, src.shape[0], rt.cudaMemcpyKind.cudaMemcpyDefault, stream),
               "cudaMemcpy2DAsync", self.rank)

    def store_flag(self, flag: torch.Tensor, value: int) -> None:
        """Store ``value`` into the int32 ``flag`` (this rank's heap or a peer's) on the current stream, once
        everything queued before it on that stream is done and visible system-wide: one ``cuStreamWriteValue32``,
        which the GPU's front end carries out, taking no SM. So it happens as soon as a copy before it ends, even
        while a GEMM holds every SM (2xH100, 2026-11-26: the flag after a 16 MiB peer copy was stored 0.2-0.45 ms
        into a 1.5 ms GEMM on another stream), and it can be captured in a CUDA graph."""
        driver = _driver()
        stream = driver.CUstream(torch.cuda.current_stream(self.device).cuda_stream)
        _check(driver.cuStreamWriteValue32(stream, driver.CUdeviceptr(flag.data_ptr()), value,
                                           driver.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT),
               "cuStreamWriteValue32", self.rank)

    def __del__(self):
        try:
            rt = _runtime()
            rt.cudaSetDevice(self.device_id)
            rt.cudaDeviceSynchronize()
            for address in self._opened:
                rt.cudaIpcCloseMemHandle(address)
            rt.cudaFree(self._own)
        except Exception:  # interpreter shutdown: the driver frees everything anyway
            pass
