"""Which ranks' heaps this rank maps, and the error for addressing one it does not.

A rank maps the heaps of the ranks it can reach through memory (:meth:`iris.topology.TopologyMap.can_map`: today
the ranks of its host); the others, on other hosts, are reached only over the network, by torch.distributed.
Their heap base is 0, and every way of addressing them (``ctx.as_remote``, and on the CPU interpreter every
remote load, store, atomic, get, put and copy of a kernel) raises :class:`UnreachableRankError`.

Examples
--------
>>> reachable_ranks(topology, rank=0)                      # 2 hosts of 2 ranks  # doctest: +SKIP
[True, True, False, False]
>>> raise unreachable(topology, 0, 2, "ctx.as_remote(x, 2)")  # doctest: +SKIP
Traceback (most recent call last):
iris.heap.reach.UnreachableRankError: ctx.as_remote(x, 2) on rank 0: rank 0 (host-a) cannot address rank 2's ...
"""

from __future__ import annotations

from ..interpret.kernel_errors import RaisedAsIs

ADVICE = ("Exchange data with ranks on other hosts through ctx.ccl's collectives (which cross hosts over "
          "torch.distributed) or torch.distributed itself; kernels address only the ranks of their own domain "
          "(ctx.topology.domains())")


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


def unreachable(topology, rank: int, peer: int, what: str) -> UnreachableRankError:
    """The error for ``what`` (e.g. ``"ctx.as_remote(x, 2)"``, or a kernel's name) on ``rank`` addressing
    ``peer``'s heap: both ranks, their hosts and what connects them (:meth:`TopologyMap.explain`), and what to do."""
    return UnreachableRankError(f"{what} on rank {rank}: {topology.explain(rank, peer)} {ADVICE}.")
