"""Preallocated state of a collective: flags and scratch buffers on the heap, and a call counter per program.

Allocating on the heap is collective (every rank exchanges the request), so it happens once per workspace;
after that a call is a single kernel launch with no host synchronisation, which is what makes repeated calls
cheap and lets them be captured in a CUDA graph.

Examples
--------
>>> ws = ctx.ccl.all_reduce(out, inp)                  # doctest: +SKIP
>>> for _ in range(100):
...     ws = ctx.ccl.all_reduce(out, inp, workspace=ws)   # no allocation, no host sync
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


class Work:
    """Handle of a collective started with ``async_op=True``.

    Examples
    --------
    >>> work = ctx.ccl.all_gather(out, inp, async_op=True)   # doctest: +SKIP
    >>> work.wait()      # device barrier on this rank's stream: out is complete, inp reusable
    """

    def __init__(self, ctx):
        self._ctx = ctx

    def wait(self) -> None:
        """Make this rank's later stream work wait until every rank's collective is complete.

        A device-side barrier (:meth:`iris.Iris.device_barrier`): it does not block the host and may be
        captured in a CUDA graph. Every rank must call it.
        """
        self._ctx.device_barrier()


@dataclass(eq=False)
class Workspace(Work):
    """Flags, per-program call counters and scratch for one collective of one shape, dtype and launch shape.

    Attributes
    ----------
    key : tuple
        (collective, variant, numel, dtype, programs, block); a call with another key needs another
        workspace.
    programs : int
        Programs (CTAs) per launch; program p of every rank pairs with program p of the others.
    flags : torch.Tensor
        int32 ``[slots, world, programs]`` on the heap; see :mod:`iris.ccl.sync`.
    epochs : torch.Tensor
        int32 ``[programs]``: calls made so far, counted on the device.
    scratch : torch.Tensor or None
        Heap buffer some algorithms need (ring: partial sums; atomic: fp32 accumulators; one_shot and push:
        the double-buffered inbox, see :mod:`iris.ccl.inbox`).
    launches : dict
        Calls made with this workspace, ready to be relaunched (:mod:`iris.ccl.fast_path`).
    """

    ctx: object
    key: tuple
    programs: int
    flags: torch.Tensor
    epochs: torch.Tensor
    scratch: torch.Tensor | None = field(default=None)
    launches: dict = field(default_factory=dict)

    def __post_init__(self):
        Work.__init__(self, self.ctx)

    @classmethod
    def allocate(cls, ctx, key: tuple, programs: int, slots: int, scratch: tuple | None = None) -> Workspace:
        """Allocate collectively (every rank with the same arguments); ``scratch`` is ``(numel, dtype)``."""
        name = ".".join(str(part) for part in key[:2])
        flags = ctx.zeros(slots, ctx.num_ranks, programs, dtype=torch.int32, name=f"ccl.{name}.flags")
        epochs = torch.zeros(programs, dtype=torch.int32, device=ctx.device)
        buffer = None
        if scratch is not None:
            buffer = ctx.zeros(scratch[0], dtype=scratch[1], name=f"ccl.{name}.scratch")
        # A fast rank's first call may signal (or add into) a slow rank's new flags and scratch: not before
        # the slow rank has zeroed them.
        ctx.barrier()
        return cls(ctx, key, programs, flags, epochs, buffer)


def reuse_or_allocate(ctx, workspace: Workspace | None, key: tuple, programs: int, slots: int,
                      scratch: tuple | None = None) -> Workspace:
    """``workspace`` when it was made for ``key``, else a new one (collective: every rank decides alike)."""
    if workspace is not None and workspace.key == key and workspace.ctx is ctx:
        return workspace
    return Workspace.allocate(ctx, key, programs, slots, scratch)
