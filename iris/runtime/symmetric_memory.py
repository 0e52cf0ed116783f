"""Memory the device API reaches through a table of addresses, whoever allocated it: :class:`SymmetricAddressMap`.

Every remote access of the device API (``iris.load/store/...``, ``DeviceContext``, Gluon's ``IrisDeviceCtx``) goes
through :func:`iris.language.core.translate`, which needs one table: where this process sees each rank's copy,
``table[r]``, with ``table[this rank]`` the local address that pointers are measured from. The heap's
``get_heap_bases()`` is such a table (one per heap); so is the per-allocation table of upstream Iris's
``ctx.allocate_symmetric`` (every rank's address of one tensor), and so is the table of a provider of memory that is
not the heap's: torch's symmetric memory (:class:`iris.runtime.torch_symm_mem.TorchSymmMemProvider`), whose
rendezvous handle lists every rank's address of the buffer. Upstream's module is
``iris.experimental.symmetric_memory``.

The tables made here carry the allocation's size one entry *before* their first base (the tensor handed out is a
view starting one entry in), as ``get_heap_bases()`` carries the heap's: debug mode (``iris.iris(..., debug=True)``,
``IRIS_DEBUG=1``) reads it there to check that every translated pointer lies in the allocation, so debug checks work
with these tables as with the heap's. A table a program builds itself (``torch.tensor(bases)``) carries no size:
with debug mode on, the check would read whatever lies before it, so build such tables with :func:`peer_table`.
A peer this process cannot reach by loads and stores has ``direct`` False; its entry is
:data:`iris.heap.reach.UNMAPPED_BASE` in the heap's tables and 0 in torch's (upstream's convention); debug mode
refuses a translation to either.

Examples
--------
>>> tensor, peer_bases = ctx.allocate_symmetric(1024, dtype=torch.float32)      # doctest: +SKIP
>>> int(peer_bases[ctx.get_rank()]) == tensor.data_ptr()                        # doctest: +SKIP
True
>>> kernel[grid](tensor, peer_bases, ctx.get_rank(), peer)   # iris.store(..., peer_bases)   # doctest: +SKIP
>>> amap = ctx.symmetric_address_map(tensor)                                     # doctest: +SKIP
>>> kernel2[grid](amap.device_context(), tensor)    # DeviceContext.initialize(context, rank, world)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..heap.reach import UNMAPPED_BASE
from ..language.core import HEAP_SIZE_SLOT


def peer_table(bases, nbytes: int, device) -> torch.Tensor:
    """An int64 table of ``bases`` on ``device`` for the device API, with ``nbytes`` (the allocation's size, what
    debug mode checks offsets against) in the entry before its first one.

    Examples
    --------
    >>> table = peer_table([4096, 8192], 256, "cpu")
    >>> table.tolist(), table._base.tolist()
    ([4096, 8192], [256, 4096, 8192])
    """
    return torch.tensor([int(nbytes), *map(int, bases)], dtype=torch.int64, device=device)[1:]


def device_context(rank: int, bases, size: int, device) -> torch.Tensor:
    """The int64 context tensor ``DeviceContext.initialize`` and ``IrisDeviceCtx.initialize`` decode: upstream's
    ``[rank, world_size, base_0 .. base_{n-1}, 17 tracing slots]`` (the slots zero: tracing off) and ours after them,
    ``size``, which debug mode checks offsets against (:data:`iris.language.core.HEAP_SIZE_SLOT`).

    Examples
    --------
    >>> context = device_context(1, [4096, 8192], 1 << 20, "cpu")
    >>> context[:4].tolist(), int(context[-1])
    ([1, 2, 4096, 8192], 1048576)
    """
    bases = [int(b) for b in bases]
    tail = [0] * (HEAP_SIZE_SLOT + 1)
    tail[HEAP_SIZE_SLOT] = int(size)
    return torch.tensor([rank, len(bases), *bases, *tail], dtype=torch.int64, device=device)


@dataclass(frozen=True)
class SymmetricAddressMap:
    """Every rank's address of one allocation, as this process sees them, and what the bare table cannot say.

    Attributes
    ----------
    peer_bases : torch.Tensor
        int64, one entry per rank, on the allocation's device: ``peer_bases[r]`` is where this process reaches rank
        r's copy of the allocation (what kernels take as ``heap_bases``). Made by :func:`peer_table` (the size
        before it).
    local_rank : int
        This process's rank: ``peer_bases[local_rank] == allocation_base``.
    allocation_base : int
        The allocation's address here (views translate against it, not against their own pointer).
    allocation_bytes : int
        Its size.
    direct : tuple of bool
        Per rank: reachable by loads and stores from this process.

    Examples
    --------
    >>> amap = SymmetricAddressMap.from_bases([4096, 0], 0, 4096, 256, "cpu", direct=(True, False))
    >>> amap.all_direct(), amap.indirect_peers(), amap.world_size
    (False, [1], 2)
    """

    peer_bases: torch.Tensor
    local_rank: int
    allocation_base: int
    allocation_bytes: int
    direct: tuple[bool, ...]

    @classmethod
    def from_bases(cls, bases, local_rank: int, allocation_base: int, allocation_bytes: int, device,
                   direct=None) -> SymmetricAddressMap:
        """The map of a table given as ints; ``direct`` defaults to "every entry that is neither 0 nor
        :data:`~iris.heap.reach.UNMAPPED_BASE`". Checks the invariant every translation depends on."""
        bases = [int(b) for b in bases]
        if not 0 <= local_rank < len(bases):
            raise ValueError(f"local_rank {local_rank} is not a rank of a table of {len(bases)} entries")
        if bases[local_rank] != allocation_base:
            raise ValueError(f"rank {local_rank}: the table's own entry {bases[local_rank]:#x} is not the allocation's "
                             f"address {allocation_base:#x}: every translated address would be wrong")
        direct = tuple(b not in (0, UNMAPPED_BASE) for b in bases) if direct is None else tuple(map(bool, direct))
        if len(direct) != len(bases):
            raise ValueError(f"direct has {len(direct)} entries for a table of {len(bases)}")
        return cls(peer_table(bases, allocation_bytes, device), local_rank, allocation_base, allocation_bytes, direct)

    @property
    def world_size(self) -> int:
        return len(self.direct)

    def all_direct(self) -> bool:
        """Every rank reachable by loads and stores (one host, every peer mapped)."""
        return all(self.direct)

    def indirect_peers(self) -> list[int]:
        """The ranks not reachable by loads and stores from here."""
        return [rank for rank, direct in enumerate(self.direct) if not direct]

    def owns(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor``'s elements lie in this allocation (a tensor handed to a kernel with another allocation's
        table would be translated wrongly).

        Examples
        --------
        >>> amap.owns(tensor[128:]), amap.owns(torch.zeros(4))      # doctest: +SKIP
        (True, False)
        """
        start = tensor.data_ptr()
        end = start + tensor.numel() * tensor.element_size()
        return self.allocation_base <= start and end <= self.allocation_base + self.allocation_bytes

    def device_context(self) -> torch.Tensor:
        """A context tensor over this allocation for ``DeviceContext.initialize(context, rank, world_size)`` and
        Gluon's ``IrisDeviceCtx.initialize(context)``: their methods then translate pointers into this allocation
        (and only into it; debug mode checks that). Tracing stays off for it (``tracing=False``)."""
        bases = self.peer_bases.tolist()
        return device_context(self.local_rank, bases, self.allocation_bytes, self.peer_bases.device)
