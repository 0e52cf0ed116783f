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

    def __init__(self, ctx, group=None):
        self._ctx = ctx
        self.group = group  # a Workspace's dataclass field of the same name: one attribute, not two

    def wait(self) -> None:
        """Make this rank's later stream work wait until every rank of the call's group has completed it.

        A device-side barrier over that group (:meth:`iris.Iris.device_barrier`): it does not block the host
        and may be captured in a CUDA graph. Every rank of the group must call it.
        """
        self._ctx.device_barrier(group=self.group)


# The variant of each collective that keeps no inbox: what to ask for when an inbox's scratch does not fit the heap.
NO_INBOX = {"all_reduce": "two_shot", "reduce_scatter": "two_shot", "all_gather": "pull", "all_to_all": "pull"}


@dataclass(eq=False)
class Workspace(Work):
    """Flags, per-program call counters and scratch for one collective of one shape, dtype and launch shape.

    Attributes
    ----------
    key : tuple
        (collective, variant, numel, dtype, programs, block, group ranks or None); a call with another key
        needs another workspace, so each process group has its own (:mod:`iris.ccl.groups`).
    programs : int
        Programs (CTAs) per launch; program p of every rank pairs with program p of the others.
    flags : torch.Tensor
        int32 ``[slots, group size, programs]`` on the heap; see :mod:`iris.language.sync`.
    epochs : torch.Tensor
        int32 ``[programs]``: calls made so far, counted on the device.
    scratch : torch.Tensor or None
        Heap buffer some algorithms need (ring: partial sums; atomic: fp32 accumulators; one_shot and push:
        the double-buffered inbox, see :mod:`iris.ccl.inbox`).
    launches : dict
        Calls made with this workspace, ready to be relaunched (:mod:`iris.ccl.fast_path`).
    group : torch.distributed.ProcessGroup or None
        The process group its calls run over (None: every rank); :meth:`wait` is a barrier over it.
    """

    ctx: object
    key: tuple
    programs: int
    flags: torch.Tensor
    epochs: torch.Tensor
    scratch: torch.Tensor | None = field(default=None)
    launches: dict = field(default_factory=dict)
    group: object = field(default=None)

    def __post_init__(self):
        Work.__init__(self, self.ctx, self.group)

    @classmethod
    def allocate(cls, ctx, key: tuple, programs: int, slots: int, scratch: tuple | None = None,
                 members=None) -> Workspace:
        """Allocate collectively (every rank with the same arguments); ``scratch`` is ``(numel, dtype)``;
        ``members`` (:class:`iris.ccl.groups.Members`, None: every rank) sizes the flags for its group.

        A heap allocation is collective over every rank, a group's too: the call that allocates a group's
        workspace must be made on every rank at once, each rank with its own group (as tensor- and
        data-parallel groups are called); the calls after it involve the group's members only.
        """
        name = ".".join(str(part) for part in key[:2])
        world = ctx.num_ranks if members is None else members.size
        # A fast rank's first call may signal (or add into) a slow rank's new flags and scratch: ctx.zeros returns
        # only once every rank has zeroed its copy, so no barrier is needed here.
        flags = ctx.zeros(slots, world, programs, dtype=torch.int32, name=f"ccl.{name}.flags")
        epochs = torch.zeros(programs, dtype=torch.int32, device=ctx.device)
        buffer = None
        if scratch is not None:
            try:
                buffer = ctx.zeros(scratch[0], dtype=scratch[1], name=f"ccl.{name}.scratch")
            except MemoryError as error:  # the inbox variants' scratch holds copies of the input: say so
                instead = (f"Config({key[0]}_variant={NO_INBOX[key[0]]!r}) needs none, or give the heap more room"
                           if key[0] in NO_INBOX else "give the heap more room")
                raise MemoryError(
                    f"{error}\n{key[0]} {key[1]!r} keeps a scratch (its inbox) of {scratch[0] * scratch[1].itemsize} "
                    f"bytes on the heap for this shape: {instead}") from None
        return cls(ctx, key, programs, flags, epochs, buffer, group=None if members is None else members.group)


def reuse_or_allocate(ctx, workspace: Workspace | None, key: tuple, programs: int, slots: int,
                      scratch: tuple | None = None, members=None) -> Workspace:
    """``workspace`` when it was made for ``key``, else a new one (collective: every rank decides alike).

    ``key`` ends with ``members.key`` (the group's ranks, None for every rank), so a group never reuses
    another group's workspace: each keeps its own flags and call counters.
    """
    if workspace is not None and workspace.key == key and workspace.ctx is ctx:
        return workspace
    return Workspace.allocate(ctx, key, programs, slots, scratch, members)
