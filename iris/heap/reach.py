"""Which ranks' heaps this rank maps, and the error for addressing one it does not.

A rank maps the heaps of the ranks it can reach through memory (:meth:`iris.heap.topology.TopologyMap.can_map`: today
the ranks of its host); the others, on other hosts, are reached only over the network, by torch.distributed.
Their heap base is 0 (:data:`UNMAPPED_BASE` in the bases kernels read), and every way of addressing them
(``ctx.as_remote``, and on the CPU interpreter every remote load, store, atomic, get, put and copy of a kernel)
raises :class:`UnreachableRankError`; on a GPU, where a kernel cannot raise, the access faults and
:func:`fault_note` says the same beside the fault.

Examples
--------
>>> reachable_ranks(topology, rank=0)                      # 2 hosts of 2 ranks  # doctest: +SKIP
[True, True, False, False]
>>> raise unreachable(topology, 0, 2, "ctx.as_remote(x, 2)")  # doctest: +SKIP
Traceback (most recent call last):
iris.heap.reach.UnreachableRankError: ctx.as_remote(x, 2) on rank 0: rank 0 (host-a) cannot address rank 2's ...
"""

from __future__ import annotations

from ..base.errors import RaisedAsIs
from .topology.map import rank_ranges

# What the device-side heap bases hold for a rank this rank does not map (``heap.bases`` keeps 0 on the host): far
# above any address a GPU or a CPU maps (GPUs map below 2**57; x86-64 user space ends at 2**47), so that base plus any
# heap offset faults, wherever the GPU's mappings lie, instead of landing in memory mapped here.
UNMAPPED_BASE = 1 << 62


def device_bases(bases: list[int]) -> list[int]:
    """``bases`` as kernels see them: an unmapped rank's 0 becomes :data:`UNMAPPED_BASE`.

    Examples
    --------
    >>> device_bases([4096, 0]) == [4096, UNMAPPED_BASE]
    True
    """
    return [base if base else UNMAPPED_BASE for base in bases]


ADVICE = ("Exchange data with ranks on other hosts through ctx.ccl's collectives (which cross hosts over "
          "torch.distributed) or torch.distributed itself; kernels address only the ranks of their own domain "
          "(ctx.topology.domains())")


# What CUDA says when a kernel touched an address nothing maps, or iris's debug-mode assertion fired.
GPU_FAULTS = ("an illegal memory access was encountered", "device-side assert triggered")


class UnreachableRankError(RaisedAsIs, ValueError):
    """A rank addressed the heap of a rank whose heap it does not map (one on another host).

    Raised as itself from interpreted kernels (:class:`iris.interpret.kernel_errors.RaisedAsIs`).
    """


def reachable_ranks(topology, rank: int) -> list[bool] | None:
    """``reachable[r]``: whether ``rank`` maps rank r's heap; None when it maps every rank (one domain).

    Examples
    --------
    >>> reachable_ranks(None, 0) is None                   # no topology: every rank, as before
    True
    """
    if topology is None:
        return None
    reachable = [topology.can_map(rank, peer) for peer in range(topology.world_size)]
    return None if all(reachable) else reachable


def fault_note(topology, rank: int, error: str) -> str | None:
    """For a GPU fault on ``rank`` (``error``: its message) in a world of several domains, what the report should add:
    which ranks' heaps this rank maps, which it does not and what connects them (on a GPU a kernel cannot raise: one
    that addresses an unmapped rank faults, see :mod:`iris.language.core`); None for other errors or one domain.

    Examples
    --------
    >>> print(fault_note(topology, 0, "CUDA error: an illegal memory access was encountered"))  # doctest: +SKIP
    rank 0 maps the heaps of ranks 0-1 only; ranks 2-3 are on other hosts: rank 0 (host-a) cannot address ...
    """
    if topology is None or not any(fault in error for fault in GPU_FAULTS):
        return None
    domains = topology.domains()
    if len(domains) == 1:
        return None
    mine = next(members for members in domains if rank in members)
    others = [r for r in range(topology.world_size) if r not in mine]
    return (f"rank {rank} maps the heaps of {rank_ranges(mine)} only; {rank_ranges(others)} "
            f"{'is' if len(others) == 1 else 'are'} on other hosts: {topology.explain(rank, others[0])} A kernel that "
            "addresses them faults like this on a GPU (an illegal address; in debug mode, iris's device assertion). "
            "The rank's CUDA context is lost: restart the ranks (%iris restart)")


def unreachable(topology, rank: int, peer: int, what: str) -> UnreachableRankError:
    """The error for ``what`` (e.g. ``"ctx.as_remote(x, 2)"``, or a kernel's name) on ``rank`` addressing
    ``peer``'s heap: both ranks, their hosts and what connects them (:meth:`TopologyMap.explain`), and what to do."""
    return UnreachableRankError(f"{what} on rank {rank}: {topology.explain(rank, peer)} {ADVICE}.")
