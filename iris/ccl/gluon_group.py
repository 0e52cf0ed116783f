"""The Gluon collectives' view of a process group: :class:`GluonGroupContext`, :class:`iris.gluon.IrisDeviceCtx`
seen through a group, as :class:`iris.ccl.groups.GroupContext` is for the Triton kernels.

Why a twin: a Gluon kernel's remote accesses go through the Gluon device API (``IrisDeviceCtx``, which reads
this rank and the world from the context tensor at run time), while the collectives need the group's numbering
as constexprs (``rank``, ``world_size``: the static loops over members and the inbox rows depend on them).
Member ``i`` of a group ``start, start + stride, ...`` is global rank ``start + i * stride``, the mapping
:mod:`iris.ccl.groups` defines; with the whole world it folds away at compile time.

Examples
--------
>>> ctx = GluonGroupContext.initialize(context, rank, world, rank_start, rank_stride)      # doctest: +SKIP
>>> value = gl.load(ctx.as_remote(buf + offs, (rank + 1) % world, mask, 16), mask=mask)   # the next member's
"""

# No ``from __future__ import annotations``: Triton's aggregates check field types against their real annotations.
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate

from ..gluon import IrisDeviceCtx


def kernel_args(members) -> dict:
    """The constexprs a Gluon collective kernel takes to build its :class:`GluonGroupContext` from
    :class:`iris.ccl.groups.Members` (the world's size is read from the context tensor, so unlike the Triton
    kernels' ``num_ranks`` it is not passed).

    Examples
    --------
    >>> kernel_args(members(ctx, None))           # rank 1 of 2   # doctest: +SKIP
    {'rank': 1, 'world': 2, 'rank_start': 0, 'rank_stride': 1}
    """
    return dict(rank=members.rank, world=members.size, rank_start=members.start, rank_stride=members.stride)


@aggregate
class GluonGroupContext:
    """This rank's member index ``rank`` and the group's size ``world_size`` (constexprs), over the Gluon device
    context; methods take a member index where :class:`~iris.gluon.IrisDeviceCtx` takes a global rank.

    Has what the collectives' kernels use: :meth:`as_remote` and :meth:`atomic_xchg` (duck-compatible with
    :class:`iris.ccl.groups.GroupContext`).
    """

    device: IrisDeviceCtx
    rank: gl.constexpr
    world_size: gl.constexpr
    start: gl.constexpr
    stride: gl.constexpr

    @gluon.constexpr_function  # see iris.device.DeviceContext.__init__
    def __init__(self, device, rank, world_size, start, stride):
        self.device = device
        self.rank = gl.constexpr(rank)
        self.world_size = gl.constexpr(world_size)
        self.start = gl.constexpr(start)
        self.stride = gl.constexpr(stride)

    @staticmethod
    @gluon.jit
    def initialize(context_tensor, rank: gl.constexpr, world_size: gl.constexpr, start: gl.constexpr,
                   stride: gl.constexpr):
        """Decode ``context_tensor`` for member ``rank`` of the group ``start, start + stride, ...`` of
        ``world_size`` ranks."""
        return GluonGroupContext(IrisDeviceCtx.initialize(context_tensor), rank, world_size, start, stride)

    @gluon.jit
    def as_remote(self, ptr, member, mask=None, hint: gl.constexpr = None):
        """Member ``member``'s address of ``ptr`` (see :meth:`iris.gluon.IrisDeviceCtx.as_remote`)."""
        return self.device.as_remote(ptr, self.start + member * self.stride, mask, hint)

    @gluon.jit
    def atomic_xchg(self, pointer, val, member, mask=None, sem=None, scope=None):
        """Atomic exchange with member ``member``'s copy of ``pointer``; returns the old values."""
        return self.device.atomic_xchg(pointer, val, self.start + member * self.stride, mask, sem, scope)
