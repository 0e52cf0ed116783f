"""The all_reduce implementations iris is measured against, each on buffers of its own kind: NCCL, NCCL's
symmetric kernels on a registered window, torch symmetric memory's one_shot and two_shot. ``benchmarks/allreduce.py``
times them in its tables and :func:`iris.perf.sweep` beside ``ctx.ccl.all_reduce``.

Examples
--------
>>> peers = Peers(nccl_group)                                  # doctest: +SKIP
>>> peer = peers.make("torch two_shot", inp)   # None where this torch or machine has none  # doctest: +SKIP
>>> peer.load(); peer.call(); peer.result      # the sum, in the peer's own buffer           # doctest: +SKIP
>>> peer.release()                                                                          # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

PEERS = ("NCCL", "NCCL symmetric", "torch one_shot", "torch two_shot")
# NCCL's all_to_all_single captured in a CUDA graph never ended its first replay at 4 MiB per rank on 4x H200 (torch
# 2.11, NCCL 2.28.9, 2026-11-28: every rank waited in the synchronize after the replay; 1 MiB ran), and calls from
# 16 MiB stalled at 2 ranks the same way: larger calls are timed as an eager loop (see graph_safe).
NCCL_ALL_TO_ALL_GRAPH_BYTES = 1 << 20


def graph_safe(collective: str, nbytes: int) -> bool:
    """Whether torch.distributed's (NCCL's) ``collective`` of ``nbytes`` per rank may be timed as CUDA-graph replays;
    where not, time an eager loop (see :data:`NCCL_ALL_TO_ALL_GRAPH_BYTES`).

    Examples
    --------
    >>> graph_safe("all_to_all", 1 << 20), graph_safe("all_to_all", 4 << 20), graph_safe("all_reduce", 1 << 30)
    (True, False, True)
    """
    return collective != "all_to_all" or nbytes <= NCCL_ALL_TO_ALL_GRAPH_BYTES


@dataclass
class PeerCall:
    """One peer's all_reduce of one input: ``call`` sums what ``load`` put in its buffer into ``result``;
    ``release`` gives its buffers back (collective where their registration was)."""

    call: Callable[[], object]
    result: torch.Tensor
    load: Callable[[], object]
    release: Callable[[], object] = lambda: None


class Peers:
    """The all_reduce implementations ours is measured against, each on buffers of its own kind.

    * **NCCL**: ``dist.all_reduce`` on a buffer of torch's caching allocator;
    * **NCCL symmetric**: the same call on a buffer NCCL allocated (``ncclMemAlloc``, through the process group's
      ``mem_allocator`` and a ``torch.cuda.MemPool``) and the group registered as a symmetric window
      (``register_mem_pool(pool, symm=True)``: ``ncclCommWindowRegister`` with ``NCCL_WIN_COLL_SYMMETRIC``), where
      NCCL 2.27+ may run its symmetric kernels. Which kernels it ran is read from a profile of one call (the
      symmetric ones are named ``ncclSymk...``), kept in ``kernels`` by (dtype, bytes) and said beside the table;
    * **torch one_shot / two_shot**: ``torch.ops.symm_mem.one_shot_all_reduce_out`` and ``two_shot_all_reduce_out``
      (torch's own kernels; NVLink multicast off) on a buffer from ``symm_mem.empty``, rendezvoused over the group.

    A peer that cannot be set up here (this torch lacks it, the machine refuses it) or that sums wrongly is left
    out on every rank alike, with the first rank's reason in ``unavailable``.
    """

    def __init__(self, group):
        self.group = group
        self.unavailable: dict[str, str] = {}
        self.kernels: dict[tuple[torch.dtype, int], list[str]] = {}

    def make(self, name: str, inp: torch.Tensor) -> PeerCall | None:
        """``name``'s :class:`PeerCall` over a copy of ``inp``, or None where it is unavailable (on every rank)."""
        maker = {"NCCL": self._nccl, "NCCL symmetric": self._nccl_symmetric,
                 "torch one_shot": self._torch_symm_mem, "torch two_shot": self._torch_symm_mem}[name]
        return self.agreed(name, lambda: maker(name, inp))

    def agreed(self, name: str, attempt):
        """``attempt()``'s value, or None on every rank when it raised on any (the peer is then marked
        unavailable with the first rank's reason): every rank goes on to time the same calls."""
        if name in self.unavailable:
            return None
        try:
            value, why = attempt(), None
        except Exception as error:  # any: every rank must learn of it before the next collective
            first_line = (str(error).strip().splitlines() or [""])[0]
            value, why = None, f"{type(error).__name__}: {first_line}"
        whys = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(whys, why, group=self.group)
        failed = [f"rank {rank}: {w}" for rank, w in enumerate(whys) if w]
        if failed:
            self.unavailable[name] = failed[0]
            return None
        return value

    def _nccl(self, name, inp):
        buffer = inp.clone()
        return PeerCall(lambda: dist.all_reduce(buffer, group=self.group), buffer, lambda: buffer.copy_(inp))

    def _nccl_symmetric(self, name, inp):
        backend = self.group._get_backend(inp.device)
        pool = torch.cuda.MemPool(backend.mem_allocator)
        with torch.cuda.use_mem_pool(pool):
            buffer = torch.empty_like(inp)
        # After the allocation: a segment the pool makes later is not made a symmetric window in every torch.
        backend.register_mem_pool(pool, symm=True)
        return PeerCall(lambda: dist.all_reduce(buffer, group=self.group), buffer, lambda: buffer.copy_(inp),
                        lambda: backend.deregister_mem_pool(pool))

    def _torch_symm_mem(self, name, inp):
        from torch.distributed import _symmetric_memory as symm_mem

        group_name = self.group.group_name
        buffer = symm_mem.empty(inp.numel(), dtype=inp.dtype, device=inp.device)
        symm_mem.rendezvous(buffer, group_name)
        out = torch.empty_like(buffer)
        op = (torch.ops.symm_mem.one_shot_all_reduce_out if name == "torch one_shot"
              else torch.ops.symm_mem.two_shot_all_reduce_out)  # its schema lets it write its input: load first
        return PeerCall(lambda: op(buffer, "sum", group_name, out), out, lambda: buffer.copy_(inp))

    def record_kernels(self, key: tuple[torch.dtype, int], call) -> None:
        """The NCCL kernels one ``call`` launched, from a profile of it. Collective: the call is made on every rank
        even where the profiler cannot start."""
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        try:
            profiler = profile(activities=[ProfilerActivity.CUDA])
            profiler.start()
        except Exception as error:  # no CUPTI here: the call is still made, for the peers
            profiler, why = None, f"no profile: {type(error).__name__}"
        call()
        torch.cuda.synchronize()
        if profiler is None:
            self.kernels[key] = [why]
            return
        profiler.stop()
        self.kernels[key] = sorted({event.key for event in profiler.key_averages()
                                    if event.device_type == DeviceType.CUDA and "nccl" in event.key.lower()})
