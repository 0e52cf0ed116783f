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
from .all_gather import all_gather
from .all_reduce import all_reduce, all_reduce_preamble, spinlock_tile
from .all_to_all import all_to_all
from .barrier import device_barrier
from .config import Config
from .groups import group_ranks
from .reduce_scatter import reduce_scatter
from .workspace import Workspace

VARIANT_FIELDS = {"all_reduce": "all_reduce_variant", "all_gather": "all_gather_variant"}


class CCL:
    """Collectives over the ranks of ``ctx``; every method is collective over its ``group`` (None: every rank),
    whose members alone call it, alike."""

    def __init__(self, ctx):
        self._ctx = ctx
        self._workspaces: dict[tuple, Workspace] = {}
        self.across = AcrossDomains.of(ctx)  # None in a world of one domain: every call takes today's path

    @staticmethod
    def _key(collective: str, config: Config | None, group) -> tuple:
        field = VARIANT_FIELDS.get(collective)
        variant = getattr(config, field) if field and config is not None else None
        # The spinlock all-reduce's workspace has a lock per tile: one kept for larger tiles has too few for
        # smaller ones (refused when passed in), so each tile size keeps its own.
        tile = spinlock_tile(config) if variant == "spinlock" else None
        return collective, variant, tile, group_ranks(group)

    def _cached(self, collective: str, config: Config | None, group=None) -> Workspace | None:
        return self._workspaces.get(self._key(collective, config, group))

    def _keep(self, collective: str, config: Config | None, workspace: Workspace, group=None) -> Workspace:
        self._workspaces[self._key(collective, config, group)] = workspace
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

    def all_gather(self, output_tensor, input_tensor, group=None, async_op=False, config=None) -> Workspace:
        """Concatenate every rank's input along dim 0 (see :func:`iris.ccl.all_gather`)."""
        if self.across is not None and self.across.spans(group):
            return self._keep("all_gather", config, self.across.all_gather(
                output_tensor, input_tensor, config, self._cached("all_gather", config, group)), group)
        return self._keep("all_gather", config, all_gather(output_tensor, input_tensor, self._ctx, group, async_op,
                                                           config, self._cached("all_gather", config, group)), group)

    def all_to_all(self, output_tensor, input_tensor, group=None, async_op=False, config=None) -> Workspace:
        """Column chunk j of the input to rank j (see :func:`iris.ccl.all_to_all`)."""
        if self.across is not None and self.across.spans(group):
            return self._keep("all_to_all", None, self.across.all_to_all(
                output_tensor, input_tensor, config, self._cached("all_to_all", None, group)), group)
        return self._keep("all_to_all", None, all_to_all(output_tensor, input_tensor, self._ctx, group, async_op,
                                                         config, self._cached("all_to_all", None, group)), group)

    def reduce_scatter(self, output_tensor, input_tensor, op=None, group=None, async_op=False,
                       config=None) -> Workspace:
        """This rank's chunk of the sum over ranks (see :func:`iris.ccl.reduce_scatter`)."""
        if self.across is not None and self.across.spans(group):
            return self._keep("reduce_scatter", None, self.across.reduce_scatter(
                output_tensor, input_tensor, op, config, self._cached("reduce_scatter", None, group)), group)
        return self._keep("reduce_scatter", None, reduce_scatter(
            output_tensor, input_tensor, self._ctx, op, group, async_op, config,
            self._cached("reduce_scatter", None, group)), group)

    def barrier(self, group=None) -> None:
        """Device-side barrier over ``group``'s ranks (None: all; see :func:`iris.ccl.device_barrier`)."""
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
