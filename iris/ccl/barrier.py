"""A device-side barrier over all ranks: one program, flags on the heap, no host synchronisation.

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

from ..device import DeviceContext
from .fast_path import call_key, launch, replay
from .launch import check_group
from .sync import exchange
from .workspace import Workspace

BARRIER = tl.constexpr(0)  # the one flag slot (kernels read only constexpr globals)


@triton.jit
def device_barrier_kernel(context, flags, epochs, rank: tl.constexpr, world: tl.constexpr):
    ctx = DeviceContext.initialize(context, rank, world)
    epoch = tl.load(epochs) + 1
    exchange(ctx, flags, BARRIER, epoch, 0, 1)
    tl.store(epochs, epoch)


def device_barrier(ctx, group=None, workspace: Workspace | None = None) -> Workspace:
    """Wait, on this rank's stream, for every rank to reach this point; collective.

    Parameters
    ----------
    ctx : iris.Iris
        The context; every rank calls with its own.
    group : None
        Sub-groups are not supported (NotImplementedError).
    workspace : Workspace, optional
        The flags of earlier calls (``ctx.ccl`` keeps them); None allocates them, collectively.

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
    check_group(ctx, group)
    if workspace is None:
        workspace = Workspace.allocate(ctx, ("barrier", "flags"), programs=1, slots=1)
    launch(workspace, call, (), device_barrier_kernel, (1,), ctx.get_device_context(), workspace.flags,
           workspace.epochs, rank=ctx.cur_rank, world=ctx.num_ranks, num_warps=1)
    return workspace
