"""torch's symmetric memory as memory for iris's device API: :class:`TorchSymmMemProvider` (upstream Iris's
``iris.experimental.torch_symm_mem_provider``).

``torch.distributed._symmetric_memory`` allocates a buffer on every rank (``symm_mem.empty``) and, at a collective
rendezvous, maps every peer's buffer into this process; the handle's ``buffer_ptrs`` lists where, rank by rank, with
this rank's entry the tensor's own ``data_ptr()``. That list is a table the device API translates with
(:mod:`iris.runtime.symmetric_memory`), so ``iris.load/store/atomic_*`` with it as ``heap_bases``, and
``DeviceContext`` / Gluon's ``IrisDeviceCtx`` over :meth:`SymmetricAddressMap.device_context
<iris.runtime.symmetric_memory.SymmetricAddressMap.device_context>`, run unchanged on memory torch allocated. Each
table is for its own allocation: torch maps each allocation separately (the peers' offsets differ from one allocation
to the next), so a kernel translates each tensor with that tensor's table. The provider never picks torch's
symmetric-memory backend (``symm_mem.set_backend``): the caller's choice, else torch's default, is used.

torch's symmetric memory allocates CUDA memory only: on a machine without a GPU (the CPU backend) the provider is
refused with a ``RuntimeError`` that says so and names the equivalent that runs there, ``ctx.allocate_symmetric``
(the same ``(tensor, peer_bases)`` over the /dev/shm heap).

Examples
--------
Run with ``torchrun --nproc_per_node=2`` on GPUs:

>>> provider = TorchSymmMemProvider()                                       # doctest: +SKIP
>>> data, data_bases = provider.allocate_symmetric(1024, dtype=torch.float32)  # collective  # doctest: +SKIP
>>> kernel[(1,)](data, data_bases, provider.get_rank(), peer)  # iris.store(.., data_bases)  # doctest: +SKIP
>>> provider.barrier()                                                      # doctest: +SKIP
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .symmetric_memory import SymmetricAddressMap

__all__ = ["SymmetricAddressMap", "TorchSymmMemProvider"]

NEEDS_CUDA = (
    "torch's symmetric memory (torch.distributed._symmetric_memory) allocates CUDA memory only, and {what}. On the CPU "
    "backend use ctx.allocate_symmetric(*size, dtype=...) of an iris context: the same (tensor, peer_bases) and the "
    "same device API, over the /dev/shm heap"
)


class TorchSymmMemProvider:
    """Allocates tensors with torch's symmetric memory and describes them for iris's device API.

    Parameters
    ----------
    group : torch.distributed.ProcessGroup, optional
        The ranks that share each allocation (default: every rank); ranks in the tables are the group's.
    device : torch.device or str, optional
        A CUDA device (default: the current one).

    Every allocation is collective over ``group``: every rank allocates the same sizes in the same order.
    """

    def __init__(self, group=None, device=None):
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed must be initialised before TorchSymmMemProvider: its allocations "
                               "meet at a collective rendezvous (dist.init_process_group, or iris.iris(...) first)")
        if device is None:
            if not torch.cuda.is_available():
                raise RuntimeError(NEEDS_CUDA.format(what="no GPU is visible here"))
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise RuntimeError(NEEDS_CUDA.format(what=f"device={self.device} is not a GPU"))
        import torch.distributed._symmetric_memory as symm_mem

        self._symm_mem = symm_mem
        self._group = group if group is not None else dist.group.WORLD
        self.cur_rank = dist.get_rank(self._group)
        self.num_ranks = dist.get_world_size(self._group)
        # data_ptr -> rendezvous handle: a tensor is described again from its handle, since a second rendezvous
        # would be a collective call made by whichever rank asked.
        self._handles: dict[int, object] = {}

    def allocate_symmetric(self, *size, dtype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tensor, peer_bases)`` as ``Iris.allocate_symmetric`` returns them (collective): the same kernels
        drive either."""
        tensor, address_map = self.allocate_symmetric_map(*size, dtype=dtype)
        return tensor, address_map.peer_bases

    def allocate_symmetric_map(self, *size, dtype=None) -> tuple[torch.Tensor, SymmetricAddressMap]:
        """``(tensor, SymmetricAddressMap)``: a tensor of torch's symmetric memory (uninitialised) and its map
        (collective: the rendezvous inside is)."""
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], tuple | list | torch.Size) else size
        # a forward under inference_mode would otherwise make the allocation an inference tensor
        with torch.inference_mode(False), torch.no_grad():
            tensor = self._symm_mem.empty(*shape, dtype=dtype or torch.get_default_dtype(), device=self.device)
        handle = self._symm_mem.rendezvous(tensor, group=self._group)
        self._handles[tensor.data_ptr()] = handle
        return tensor, self._map(tensor, handle)

    def symmetric_address_map(self, tensor: torch.Tensor) -> SymmetricAddressMap:
        """The map of a tensor this provider allocated; ``KeyError`` for any other (its handle is unknown, and a
        rendezvous made now would be a collective call from one rank)."""
        handle = self._handles.get(tensor.data_ptr())
        if handle is None:
            raise KeyError(f"rank {self.cur_rank}: this tensor ({tensor.dtype}, shape {list(tensor.shape)}) was not "
                           "allocated by this provider: allocate it with allocate_symmetric, which keeps the "
                           "rendezvous handle its map is read from")
        return self._map(tensor, handle)

    def device_context(self, tensor: torch.Tensor) -> torch.Tensor:
        """A context tensor over ``tensor``'s allocation for ``DeviceContext.initialize(context, rank, world)`` and
        ``IrisDeviceCtx.initialize(context)`` (:meth:`SymmetricAddressMap.device_context`)."""
        return self.symmetric_address_map(tensor).device_context()

    def _map(self, tensor: torch.Tensor, handle) -> SymmetricAddressMap:
        bases = [int(p) for p in handle.buffer_ptrs]
        if len(bases) != self.num_ranks:  # kernels index the table by rank: a short one reads past its end
            raise RuntimeError(f"rank {self.cur_rank}: the rendezvous handle lists {len(bases)} buffers for "
                               f"{self.num_ranks} ranks")
        # SymmetricAddressMap.from_bases checks bases[cur_rank] == data_ptr(), which every translation relies on.
        return SymmetricAddressMap.from_bases(bases, self.cur_rank, tensor.data_ptr(),
                                              tensor.numel() * tensor.element_size(), tensor.device,
                                              direct=[base != 0 for base in bases])

    def barrier(self) -> None:
        """A host barrier over the provider's group (``dist.barrier``)."""
        dist.barrier(group=self._group)

    def free(self, tensor: torch.Tensor) -> None:
        """Forget ``tensor``'s handle. Its memory is torch's, reference counted: it goes when the last reference to
        the tensor does."""
        self._handles.pop(tensor.data_ptr(), None)

    def get_rank(self) -> int:
        return self.cur_rank

    def get_num_ranks(self) -> int:
        return self.num_ranks
