"""Collectives over a process group: which ranks take part, and how a kernel numbers them.

``group=`` takes what torch.distributed's collectives take: None or ``dist.group.WORLD`` (every rank), or a
sub-group from ``dist.new_group(ranks)`` whose ranks are evenly spaced, consecutive (``[0, 1]``, ``[2, 3]``)
or strided (``[0, 2]``, ``[1, 3]``), as upstream Iris takes them. Only the group's members call; a rank
outside the group that calls gets a ``ValueError``.

Inside a collective's kernel, ranks are the group's: ``rank`` is this rank's index in the group and
``world`` the group's size, so the same kernel serves every group. :class:`GroupContext` maps a member's
index ``i`` to its global rank ``start + i * stride`` where it reaches another rank's heap. Each group has
its own workspaces (flags, call counters, scratch: :class:`iris.ccl.Workspace`), so two groups running at
once never read each other's flags. ``ctx.ops`` (GEMMs fused with communication) takes no ``group``, as
upstream's ops take none: they run over every rank, and ``group=`` there is Python's ``TypeError``.

Examples
--------
>>> tp = dist.new_group([0, 1]); tp2 = dist.new_group([2, 3])        # every rank creates every group
>>> mine = tp if ctx.cur_rank < 2 else tp2                          # doctest: +SKIP
>>> ctx.ccl.all_reduce(out, inp, group=mine)                        # doctest: +SKIP
>>> members(ctx, mine)                                              # on rank 3   # doctest: +SKIP
Members(ranks=(2, 3), rank=1, num_ranks=4, group=<ProcessGroup>)
"""

# No ``from __future__ import annotations``: Triton's aggregates check field types against their real annotations.
from dataclasses import dataclass

import torch.distributed as dist
import triton
import triton.language as tl
from triton.language.core import _aggregate as aggregate

from ..language.core import DeviceContext


@dataclass(frozen=True)
class Members:
    """The ranks of one collective call.

    Attributes
    ----------
    ranks : tuple of int
        Global ranks of the group, ascending and evenly spaced.
    rank : int
        This rank's index in ``ranks``.
    num_ranks : int
        Ranks of the context (the world), whatever the group.
    group : torch.distributed.ProcessGroup or None
        What the caller passed (None for every rank), kept for :meth:`iris.ccl.Work.wait`.
    """

    ranks: tuple
    rank: int
    num_ranks: int
    group: object = None

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def start(self) -> int:
        return self.ranks[0]

    @property
    def stride(self) -> int:
        return self.ranks[1] - self.ranks[0] if len(self.ranks) > 1 else 1

    @property
    def key(self) -> tuple | None:
        """None for every rank, else the group's ranks: what workspaces and caches are told apart by."""
        return None if self.group is None else self.ranks

    def kernel_args(self) -> dict:
        """The constexprs every collective kernel takes to build its :class:`GroupContext`."""
        return dict(rank=self.rank, world=self.size, rank_start=self.start, rank_stride=self.stride,
                    num_ranks=self.num_ranks)


def group_ranks(group) -> tuple | None:
    """The global ranks of ``group``, or None when it is every rank (None, ``dist.group.WORLD``, or a group of
    all ranks); ``()`` for what is no group of this rank (:func:`members` says why). Cheap enough for every
    call's :func:`iris.ccl.fast_path.call_key`."""
    if group is None:
        return None
    if not isinstance(group, dist.ProcessGroup):  # GroupMember.NON_GROUP_MEMBER too
        return ()
    ranks = tuple(dist.get_process_group_ranks(group))
    return None if ranks == tuple(range(dist.get_world_size())) else ranks


def members(ctx, group, collective: str = "collective") -> Members:
    """Who takes part in a call with ``group=group`` on ``ctx``; a clear error for a group this rank cannot use.

    Raises
    ------
    ValueError
        This rank is not in ``group`` (ranks outside a group do not call its collectives, as with
        torch.distributed), or ``group`` is not a process group.
    NotImplementedError
        The group's ranks are not evenly spaced (e.g. ``[0, 1, 3]``); upstream Iris refuses them too.

    Examples
    --------
    >>> members(ctx, None)                                  # doctest: +SKIP
    Members(ranks=(0, 1, 2, 3), rank=2, num_ranks=4, group=None)
    """
    rank = ctx.cur_rank
    if isinstance(group, int) and group == dist.GroupMember.NON_GROUP_MEMBER:  # what new_group gives non-members
        raise ValueError(f"rank {rank}: {collective} called with a group this rank is not in (torch.distributed "
                         "gave it GroupMember.NON_GROUP_MEMBER): only a group's members call its collectives")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise ValueError(f"rank {rank}: {collective} group= takes None, dist.group.WORLD or a group from "
                         f"dist.new_group(ranks), not {type(group).__name__}")
    ranks = group_ranks(group)
    if ranks is None:
        return Members(tuple(range(ctx.num_ranks)), rank, ctx.num_ranks)
    if rank not in ranks:
        raise ValueError(f"rank {rank}: {collective} called with group ranks {list(ranks)}, which does not "
                         "hold this rank: only a group's members call its collectives (as with torch.distributed)")
    steps = {b - a for a, b in zip(ranks, ranks[1:], strict=False)}
    if len(steps) > 1:
        raise NotImplementedError(f"rank {rank}: {collective} over group ranks {list(ranks)}: the ranks must be "
                                  "evenly spaced, consecutive like [0, 1] or strided like [0, 2] (as upstream "
                                  "Iris); make one group per evenly spaced set of ranks")
    return Members(ranks, ranks.index(rank), ctx.num_ranks, group)


def kernel_members(ctx, group, collective: str = "collective") -> Members:
    """:func:`members`, for a call whose kernels address every member's heap: refused when the members span
    several domains (hosts), whose heaps this rank does not map. A one-domain world pays one attribute test.

    Raises
    ------
    NotImplementedError
        Naming the domains, how two of the ranks are connected, and what to use instead.

    Examples
    --------
    >>> kernel_members(ctx, tp_group, "all_reduce")          # a group inside one host  # doctest: +SKIP
    Members(ranks=(0, 1), rank=0, num_ranks=4, group=<ProcessGroup>)
    """
    found = members(ctx, group, collective)
    across = getattr(getattr(ctx, "ccl", None), "across", None)  # iris.ccl.across_domains.AcrossDomains
    if across is None:
        return found
    spanned = sorted({across.domain_index[r] for r in found.ranks})
    if len(spanned) > 1:
        first, other = (across.domains[d][0] for d in spanned[:2])
        raise NotImplementedError(
            f"rank {ctx.cur_rank}: {collective} over ranks {list(found.ranks)} spans {len(spanned)} domains "
            f"({', '.join(str(across.domains[d]) for d in spanned)}): its kernels address every member's heap, "
            f"and {ctx.topology.explain(first, other)} Use ctx.ccl's collectives with group=None (they cross "
            "domains over torch.distributed), or a group inside one domain")
    return found


def extract_group_info(group, ctx) -> tuple[int, int, int, int, int]:
    """Upstream Iris's view of a group: ``(rank_in_group, rank_global, world_size, rank_start, rank_stride)``.

    Examples
    --------
    >>> extract_group_info(None, ctx)                      # rank 2 of 4   # doctest: +SKIP
    (2, 2, 4, 0, 1)
    """
    found = members(ctx, group, "extract_group_info")
    return found.rank, ctx.cur_rank, found.size, found.start, found.stride


@aggregate
class GroupContext:
    """A :class:`iris.DeviceContext` seen through a group: ``rank`` and ``world_size`` are the group's, and a
    peer is named by its index in the group (``start + index * stride`` is its global rank).

    Has the methods the collectives' kernels use (:meth:`as_remote`, :meth:`atomic_xchg`); with ``start=0,
    stride=1`` and the whole world it is the device context itself (the mapping folds away at compile time).

    Examples
    --------
    >>> ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)  # doctest: +SKIP
    >>> value = tl.load(ctx.as_remote(buf + offs, (rank + 1) % world))                   # the next member's
    """

    device: DeviceContext
    rank: tl.constexpr
    world_size: tl.constexpr
    start: tl.constexpr
    stride: tl.constexpr

    @triton.constexpr_function
    def __init__(self, device, rank, world_size, start, stride):
        self.device = device
        self.rank = tl.constexpr(rank)
        self.world_size = tl.constexpr(world_size)
        self.start = tl.constexpr(start)
        self.stride = tl.constexpr(stride)

    @staticmethod
    @triton.jit
    def initialize(context_tensor, rank: tl.constexpr, world_size: tl.constexpr, start: tl.constexpr,
                   stride: tl.constexpr, num_ranks: tl.constexpr):
        """Decode ``context_tensor`` (``num_ranks``: how many ranks it describes) for member ``rank`` of a
        group of ``world_size`` ranks ``start, start + stride, ...``."""
        device = DeviceContext.initialize(context_tensor, start + rank * stride, num_ranks)
        return GroupContext(device, rank, world_size, start, stride)

    @triton.jit
    def as_remote(self, ptr, member, mask=None, hint: tl.constexpr = None):
        """Member ``member``'s address of ``ptr`` (see :meth:`iris.DeviceContext.as_remote`)."""
        return self.device.as_remote(ptr, self.start + member * self.stride, mask, hint)

    @triton.jit
    def atomic_xchg(self, pointer, val, member, mask=None, sem=None, scope=None, hint: tl.constexpr = None):
        """Atomic exchange with member ``member``'s copy of ``pointer``; returns the old values."""
        return self.device.atomic_xchg(pointer, val, self.start + member * self.stride, mask, sem, scope, hint)
