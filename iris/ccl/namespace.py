"""``ctx.ccl``: the collectives as methods of a context, with upstream Iris's ``Iris.CCL`` signatures.

It keeps the most recent workspace of each collective, requested variant and process group (each group has its
own flags, :mod:`iris.ccl.groups`), so repeated calls with the same shapes allocate nothing and may be
captured in a CUDA graph once a first call has run outside the capture; repeated calls with the same tensors
relaunch the kernel directly (:mod:`iris.ccl.fast_path`). When the world spans several domains (hosts), calls over
every rank go through :mod:`iris.ccl.across_domains` (our kernels in each domain, torch.distributed between them).

Examples
--------
>>> ctx.ccl.all_reduce(out, inp)                             # doctest: +SKIP
>>> ctx.ccl.all_gather(gathered, inp)
>>> ctx.ccl.barrier()                                        # same as ctx.device_barrier()
"""

from __future__ import annotations

from .across_domains import AcrossDomains
from .all_gather import all_gather, all_gather_preamble
from .all_reduce import all_reduce, all_reduce_preamble, spinlock_tile
from .all_to_all import all_to_all
from .all_to_all_v import all_to_all_v
from .barrier import device_barrier
from .broadcast import broadcast
from .config import Config
from .gather import gather
from .groups import group_ranks, members
from .p2p import P2PState, batch_isend_irecv, init_p2p, irecv, isend, recv, send, sendrecv
from .reduce import reduce, reduce_preamble
from .reduce_scatter import reduce_scatter
from .rooted import output_and_input, positional, root_of
from .scatter import scatter
from .workspace import Workspace

VARIANT_FIELDS = {"all_reduce": "all_reduce_variant", "all_gather": "all_gather_variant",
                  "broadcast": "broadcast_variant", "gather": "broadcast_variant", "scatter": "broadcast_variant",
                  "reduce": "reduce_variant"}


class CCL:
    """Collectives over the ranks of ``ctx``; every method is collective over its ``group`` (None: every rank),
    whose members alone call it, alike."""

    def __init__(self, ctx):
        self._ctx = ctx
        self._workspaces: dict[tuple, Workspace] = {}
        self.across = AcrossDomains.of(ctx)  # None in a world of one domain: every call takes today's path
        self.p2p_state: P2PState | None = None  # the latest init_p2p's: what send and recv use by default

    @staticmethod
    def _key(collective: str, config: Config | None, group, root=None) -> tuple:
        field = VARIANT_FIELDS.get(collective)
        variant = getattr(config, field) if field and config is not None else None
        # The spinlock all-reduce's workspace has a lock per tile: one kept for larger tiles has too few for
        # smaller ones (refused when passed in), so each tile size keeps its own. A reduce's inbox is its root's:
        # each root keeps its own workspace (iris.ccl.reduce).
        tile = spinlock_tile(config) if variant == "spinlock" else root
        return collective, variant, tile, group_ranks(group)

    def _cached(self, collective: str, config: Config | None, group=None, root=None) -> Workspace | None:
        return self._workspaces.get(self._key(collective, config, group, root))

    def _keep(self, collective: str, config: Config | None, workspace: Workspace, group=None,
              root=None) -> Workspace:
        self._workspaces[self._key(collective, config, group, root)] = workspace
        return workspace

    def all_reduce_preamble(self, output_tensor, input_tensor, config=None, workspace=None) -> Workspace:
        """The workspace :meth:`all_reduce` over every rank would use for these tensors (allocated now if needed;
        upstream's signature: for a group's, call :func:`iris.ccl.all_reduce_preamble` with ``group=``)."""
        workspace = workspace or self._cached("all_reduce", config)
        if self.across is not None:
            return self._keep("all_reduce", config,
                              self.across.all_reduce_preamble(output_tensor, input_tensor, config, workspace))
        return self._keep("all_reduce", config,
                          all_reduce_preamble(output_tensor, input_tensor, self._ctx, config, workspace))

    def all_reduce(self, output_tensor, input_tensor, op=None, group=None, async_op=False, config=None,
                   workspace=None) -> Workspace:
        """Sum over ranks into ``output_tensor``; returns the workspace (see :func:`iris.ccl.all_reduce`)."""
        workspace = workspace or self._cached("all_reduce", config, group)
        if self.across is not None and self.across.spans(group):
            return self._keep("all_reduce", config,
                              self.across.all_reduce(output_tensor, input_tensor, op, config, workspace), group)
        return self._keep("all_reduce", config, all_reduce(output_tensor, input_tensor, self._ctx, op, group,
                                                           async_op, config, workspace), group)

    def all_gather(self, output_tensor, input_tensor, group=None, async_op=False, config=None,
                   workspace=None) -> Workspace:
        """Concatenate every rank's input along dim 0 (see :func:`iris.ccl.all_gather`)."""
        workspace = workspace or self._cached("all_gather", config, group)
        if self.across is not None and self.across.spans(group):
            return self._keep("all_gather", config, self.across.all_gather(
                output_tensor, input_tensor, config, workspace), group)
        return self._keep("all_gather", config, all_gather(output_tensor, input_tensor, self._ctx, group, async_op,
                                                           config, workspace), group)

    def all_gather_preamble(self, output_tensor, input_tensor, group=None, config=None, workspace=None) -> Workspace:
        """The workspace :meth:`all_gather` would use for these tensors, allocated now (before a CUDA graph capture;
        upstream's name). Over several domains: the domain level's, made by a first call."""
        workspace = workspace or self._cached("all_gather", config, group)
        if self.across is not None and self.across.spans(group):
            raise NotImplementedError(f"rank {self._ctx.cur_rank}: all_gather_preamble over ranks on several hosts: "
                                      "call all_gather once outside the capture instead (it keeps its workspace)")
        return self._keep("all_gather", config, all_gather_preamble(output_tensor, input_tensor, self._ctx, group,
                                                                    config, workspace), group)

    def all_to_all(self, output_tensor, input_tensor, group=None, async_op=False, config=None) -> Workspace:
        """Column chunk j of the input to rank j (see :func:`iris.ccl.all_to_all`)."""
        if self.across is not None and self.across.spans(group):
            return self._keep("all_to_all", None, self.across.all_to_all(
                output_tensor, input_tensor, config, self._cached("all_to_all", None, group)), group)
        return self._keep("all_to_all", None, all_to_all(output_tensor, input_tensor, self._ctx, group, async_op,
                                                         config, self._cached("all_to_all", None, group)), group)

    def all_to_all_v(self, output_tensor, input_tensor, output_split_sizes, input_split_sizes, group=None,
                     async_op=False, config=None, workspace=None) -> Workspace:
        """Input chunk j (``input_split_sizes[j]`` columns) to rank j, rank s's into output chunk s (see
        :func:`iris.ccl.all_to_all_v`). Over several hosts: refused (a NotImplementedError saying so)."""
        if self.across is not None and self.across.spans(group):
            raise NotImplementedError(f"rank {self._ctx.cur_rank}: all_to_all_v over ranks on several hosts is not "
                                      "built yet; call it over a group inside one host, or use "
                                      "torch.distributed.all_to_all")
        workspace = workspace or self._cached("all_to_all_v", config, group)
        return self._keep("all_to_all_v", config, all_to_all_v(output_tensor, input_tensor, output_split_sizes,
                                                               input_split_sizes, self._ctx, group, async_op, config,
                                                               workspace), group)

    def reduce_scatter(self, output_tensor, input_tensor, op=None, group=None, async_op=False,
                       config=None) -> Workspace:
        """This rank's chunk of the sum over ranks (see :func:`iris.ccl.reduce_scatter`)."""
        if self.across is not None and self.across.spans(group):
            return self._keep("reduce_scatter", None, self.across.reduce_scatter(
                output_tensor, input_tensor, op, config, self._cached("reduce_scatter", None, group)), group)
        return self._keep("reduce_scatter", None, reduce_scatter(
            output_tensor, input_tensor, self._ctx, op, group, async_op, config,
            self._cached("reduce_scatter", None, group)), group)

    # -- the collectives with a root (iris.ccl.rooted) ----------------------------------------------------------
    def broadcast(self, *tensors, src=0, group=None, async_op=False, config=None, workspace=None):
        """The root's tensor into every rank's: ``broadcast(tensor, src=0)`` in place, or ``broadcast(output,
        input, src=0)`` (see :func:`iris.ccl.broadcast`); ``src`` is a rank of the group."""
        tensors, _, src = positional("broadcast", tensors, self._ctx, src, 0)
        if self.across is not None and self.across.spans(group):
            return self.across.broadcast(*output_and_input("broadcast", tensors), self._root("broadcast", src))
        workspace = workspace or self._cached("broadcast", config, group)
        return self._keep("broadcast", config, broadcast(*tensors, ctx=self._ctx, src=src, group=group,
                                                         async_op=async_op, config=config, workspace=workspace),
                          group)

    def reduce(self, *tensors, dst=None, root=None, op=None, group=None, async_op=False, config=None,
               workspace=None):
        """The sum over ranks into the root's tensor: ``reduce(tensor, dst=0)`` in place, or ``reduce(output,
        input, root=0)`` (``dst=`` too; see :func:`iris.ccl.reduce`); the root is a rank of the group."""
        tensors, _, dst = positional("reduce", tensors, self._ctx, dst, None)
        if self.across is not None and self.across.spans(group):
            out, inp = output_and_input("reduce", tensors)
            return self.across.reduce(out, inp, self._root("reduce", dst, root))
        workspace = workspace or self._cached("reduce", config, group, (dst, root))
        return self._keep("reduce", config, reduce(*tensors, ctx=self._ctx, dst=dst, root=root, op=op, group=group,
                                                   async_op=async_op, config=config, workspace=workspace),
                          group, (dst, root))

    def reduce_preamble(self, *tensors, dst=None, root=None, op=None, group=None, config=None, workspace=None):
        """The workspace :meth:`reduce` would use for these tensors, allocated now (before a CUDA graph capture)."""
        workspace = workspace or self._cached("reduce", config, group, (dst, root))
        return self._keep("reduce", config, reduce_preamble(*tensors, ctx=self._ctx, dst=dst, root=root, op=op,
                                                            group=group, config=config, workspace=workspace),
                          group, (dst, root))

    def gather(self, output_tensor, input_tensor, dst=0, group=None, async_op=False, config=None, workspace=None):
        """Every rank's input into the root's output, along dim 0 (see :func:`iris.ccl.gather`)."""
        if self.across is not None and self.across.spans(group):
            return self.across.gather(output_tensor, input_tensor, self._root("gather", dst))
        workspace = workspace or self._cached("gather", config, group)
        return self._keep("gather", config, gather(output_tensor, input_tensor, self._ctx, dst, group, async_op,
                                                   config, workspace), group)

    def scatter(self, output_tensor, input_tensor, src=0, group=None, async_op=False, config=None, workspace=None):
        """Chunk i of the root's input into rank i's output (see :func:`iris.ccl.scatter`)."""
        if self.across is not None and self.across.spans(group):
            return self.across.scatter(output_tensor, input_tensor, self._root("scatter", src))
        workspace = workspace or self._cached("scatter", config, group)
        return self._keep("scatter", config, scatter(output_tensor, input_tensor, self._ctx, src, group, async_op,
                                                     config, workspace), group)

    def _root(self, collective: str, *given) -> int:
        names = ("dst", "root") if collective in ("reduce", "gather") else ("src",)
        return root_of(self._ctx, collective, members(self._ctx, None, collective), *zip(names, given, strict=False))

    # -- point-to-point (iris.ccl.p2p) ------------------------------------------------------------------------
    def init_p2p(self, max_numel: int = 2 ** 20, dtype=None, config=None) -> P2PState:
        """Allocate the point-to-point state (collective); later sends and receives use it by default."""
        self.p2p_state = init_p2p(self._ctx, max_numel, dtype, config)
        return self.p2p_state

    def send(self, tensor, dst: int, p2p_state=None, group=None, tag: int = 0) -> None:
        """Send ``tensor`` to rank ``dst`` of ``group`` (see :mod:`iris.ccl.p2p`)."""
        send(self._ctx, tensor, dst, p2p_state, group, tag)

    def recv(self, tensor, src: int, p2p_state=None, group=None, tag: int = 0) -> None:
        """Receive into ``tensor`` the next message of rank ``src`` of ``group``."""
        recv(self._ctx, tensor, src, p2p_state, group, tag)

    def isend(self, tensor, dst: int, p2p_state=None, group=None, tag: int = 0):
        """:meth:`send`, returning a :class:`iris.ccl.p2p.P2PWork`."""
        return isend(self._ctx, tensor, dst, p2p_state, group, tag)

    def irecv(self, tensor, src: int, p2p_state=None, group=None, tag: int = 0):
        """:meth:`recv`, returning a :class:`iris.ccl.p2p.P2PWork`."""
        return irecv(self._ctx, tensor, src, p2p_state, group, tag)

    def sendrecv(self, send_tensor, recv_tensor, dst: int, src: int, p2p_state=None, group=None) -> None:
        """Send to ``dst`` and receive from ``src`` at once (a ring's step)."""
        sendrecv(self._ctx, send_tensor, recv_tensor, dst, src, p2p_state, group)

    def batch_isend_irecv(self, p2p_op_list, p2p_state=None) -> list:
        """Every send of a list of :class:`iris.ccl.p2p.P2POp`, then every receive; a work each."""
        return batch_isend_irecv(self._ctx, p2p_op_list, p2p_state)

    def barrier(self, group=None, async_op=False) -> None:
        """Device-side barrier over ``group``'s ranks (None: all; see :func:`iris.ccl.device_barrier`). It never
        blocks the host (the wait is on this rank's stream), so ``async_op`` (upstream's) changes nothing."""
        if self.across is not None and self.across.spans(group):
            self._keep("barrier", None, self.across.barrier(self._cached("barrier", None, group)), group)
            return
        self._keep("barrier", None, device_barrier(self._ctx, group, self._cached("barrier", None, group)), group)

    def barrier_state(self) -> dict:
        """The device barrier's flags per group once a barrier over it ran, keyed as upstream Iris: None for all
        ranks, else the torch.distributed group (the first one passed with those ranks).

        The flags keep their address from the first barrier on, so barriers captured in a CUDA graph later
        keep working; upstream Iris shows the same as ``ctx._device_barrier_state``.
        """
        return {workspace.group: workspace.flags for key, workspace in self._workspaces.items() if key[0] == "barrier"}

