"""A device-side barrier over all ranks or a process group: one program, flags on the heap, no host sync.

Each rank's program stores its call number (epoch, counted on the device) into its slot of every rank's
flags (release), then waits until every slot of its own flags holds at least that number (acquire). Work
queued on a rank's stream after the barrier starts only once every rank's work queued before it is done
and visible. Because nothing is read back to the host, the barrier can be captured in a CUDA graph; the
flags are allocated (collectively) on the first call, which must therefore come before any capture.

Examples
--------
>>> ctx.device_barrier()                                   # doctest: +SKIP
>>> with torch.cuda.graph(graph):                          # doctest: +SKIP
...     ctx.device_barrier()
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..language.sync import exchange
from .fast_path import call_key, launch, replay
from .groups import GroupContext, kernel_members
from .workspace import Workspace, reuse_or_allocate

BARRIER = tl.constexpr(0)  # the one flag slot (kernels read only constexpr globals)


@triton.jit
def device_barrier_kernel(context, flags, epochs, rank: tl.constexpr, world: tl.constexpr,
                          rank_start: tl.constexpr, rank_stride: tl.constexpr, num_ranks: tl.constexpr):
    ctx = GroupContext.initialize(context, rank, world, rank_start, rank_stride, num_ranks)
    epoch = tl.load(epochs) + 1
    exchange(ctx, flags, BARRIER, epoch, 0, 1)
    tl.store(epochs, epoch)


def device_barrier(ctx, group=None, workspace: Workspace | None = None) -> Workspace:
    """Wait, on this rank's stream, for every rank of ``group`` to reach this point; collective over the group.

    Parameters
    ----------
    ctx : iris.Iris
        The context; every rank calls with its own.
    group : torch.distributed.ProcessGroup, optional
        None or ``dist.group.WORLD``: every rank; else the group's members only (:mod:`iris.ccl.groups`).
    workspace : Workspace, optional
        The flags of earlier calls over this group (``ctx.ccl`` keeps them); None or another group's
        allocates them, collectively (:meth:`Workspace.allocate` says who must call then).

    Returns
    -------
    Workspace
        The barrier's flags and epoch, to pass to the next call.

    Examples
    --------
    >>> ws = iris.ccl.device_barrier(ctx)              # doctest: +SKIP
    >>> ws = iris.ccl.device_barrier(ctx, workspace=ws)
    """
    call = call_key("barrier", (), None, False, group=group)
    if replay(ctx, workspace, call, ()):
        return workspace
    group_of_call = kernel_members(ctx, group, "device_barrier")
    workspace = reuse_or_allocate(ctx, workspace, ("barrier", "flags", group_of_call.key), 1, 1,
                                  members=group_of_call)
    barrier_on(ctx, workspace, group_of_call)
    return workspace


def barrier_on(ctx, workspace: Workspace, members) -> None:
    """One device barrier over ``members`` (:class:`iris.ccl.groups.Members`) on ``workspace``'s flags and call
    counter (one program, one slot): the barrier of a collective whose own workspace keeps them
    (:mod:`iris.ccl.copy_engines`), which the next call replays without the host path.

    Examples
    --------
    >>> barrier_on(ctx, workspace, members)           # doctest: +SKIP
    """
    call = call_key("barrier", (), None, False, group=members.group)
    if not replay(ctx, workspace, call, ()):
        launch(workspace, call, (), device_barrier_kernel, (1,), ctx.get_device_context(), workspace.flags,
               workspace.epochs, **members.kernel_args(), num_warps=1)
