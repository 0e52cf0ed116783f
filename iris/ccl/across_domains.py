"""``ctx.ccl`` over ranks on several hosts: our kernels inside each domain, torch.distributed between domains.

A domain is a group of ranks that map each other's heaps (:meth:`iris.heap.topology.TopologyMap.domains`: today the
ranks of one host). Kernels reach only their own domain, so a collective over a world of several domains runs in
two levels: our collective kernels over the ranks of each domain (a process group per domain, :mod:`.groups`),
and torch.distributed's library between domains (gloo on the CPU backend, NCCL on GPUs), among the ranks with the
same index in their domains (the *cross group* of a rank) or, for all_to_all, between every pair of domains.

=================  ===============================================  =============================================
collective         inside each domain (our kernels)                 between domains (torch.distributed)
=================  ===============================================  =============================================
all_reduce         all_reduce of the whole tensor                   all_reduce of the result, in the cross group
all_gather         all_gather of the domain's inputs (heap buffer)  all_gather_into_tensor of those, cross group
reduce_scatter     reduce_scatter of the input, rearranged so that  reduce_scatter_tensor of that chunk, in the
                   each rank gets the chunks of its cross group     cross group: the rank's own chunk
all_to_all         all_to_all of the columns for the domain's       all_to_all_single of the columns for ranks of
                   ranks (heap buffers)                             other domains, every rank to every rank
barrier            device barrier over the domain                   all_reduce of one element, cross group
broadcast, reduce  nothing                                          the same collective over every rank
gather, scatter
send, recv         our kernels to a peer of the same domain         send and recv to a peer of another domain
=================  ===============================================  =============================================

Every level is stream-ordered (on GPUs NCCL's work waits for the kernels before it, and later work for NCCL's),
so the calls keep their one-domain meaning (reductions round each domain's partial sum to the tensor's dtype
before the levels between domains add them, as NCCL's own two-level algorithms do), but they run as
``async_op=False`` (the workspace returned is the
domain level's; its ``wait()`` is then a barrier over the domain and nothing more). The domains must be of one
size, each of evenly spaced ranks (hosts with the same number of ranks, as a Slurm allocation of whole nodes
gives); other layouts are refused, naming the domains. ``group=`` sub-groups inside one domain run on our kernels
alone, as in a one-domain world; a sub-group spanning domains is refused
(:func:`iris.ccl.groups.kernel_members`). A world of
one domain never comes here: ``ctx.ccl`` pays one attribute test per call for it.

Examples
--------
>>> ctx.topology.domains()                               # 2 hosts of 2 ranks  # doctest: +SKIP
[[0, 1], [2, 3]]
>>> ctx.ccl.all_reduce(out, inp)     # kernels over [0, 1] and [2, 3], then gloo/NCCL over [0, 2] and [1, 3]
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .all_gather import all_gather
from .all_reduce import all_reduce, all_reduce_preamble
from .all_to_all import all_to_all
from .barrier import device_barrier
from .groups import group_ranks
from .launch import check_tensors, overlaps
from .reduce_scatter import chunk_size, reduce_scatter

NETWORK_BACKEND = {"cpu": "gloo", "cuda": "nccl"}  # torch.distributed's library between domains, per heap backend
# torch 2.13 renamed the tensor forms (the old names warn); the GPU image's torch 2.11 has only the old ones.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def domains_of(ctx) -> list[list[int]]:
    """The context's domains (:meth:`iris.heap.topology.TopologyMap.domains`); one of every rank without a topology."""
    topology = getattr(ctx, "topology", None)
    return topology.domains() if topology is not None else [list(range(ctx.num_ranks))]


class AcrossDomains:
    """The collectives of ``ctx.ccl`` when the world spans several domains; made by ``ctx.ccl`` (:meth:`of`).

    Parameters
    ----------
    ctx : iris.Iris
    domains : list of list of int
        The domains, each sorted, ordered by first rank.

    Attributes
    ----------
    domain : list of int
        This rank's domain.
    local : int
        This rank's index in it.
    cross : list of int
        The ranks with this rank's index in every domain, ascending: its peers between domains.
    """

    def __init__(self, ctx, domains: list[list[int]]):
        self._ctx = ctx
        self.domains = domains
        self.domain_index = {rank: d for d, members in enumerate(domains) for rank in members}
        self.domain = domains[self.domain_index[ctx.cur_rank]]
        self.local = self.domain.index(ctx.cur_rank)
        self.problem = _layout_problem(domains)
        self.cross = sorted(members[self.local] for members in domains) if self.problem is None else []
        self._groups = None  # (domain, cross, network): made by the first collective, which every rank calls
        self._buffers: dict[tuple, torch.Tensor] = {}

    @classmethod
    def of(cls, ctx) -> AcrossDomains | None:
        """For a context whose world spans several domains, else None (the one-domain path, unchanged)."""
        domains = domains_of(ctx)
        return cls(ctx, domains) if len(domains) > 1 else None

    def spans(self, group) -> bool:
        """Whether a call with ``group=`` is over every rank (None, ``dist.group.WORLD``), hence across domains."""
        return group_ranks(group) is None

    # -- the collectives ------------------------------------------------------------------------------
    def all_reduce(self, out, inp, op=None, config=None, workspace=None):
        """Sum over every rank: our all_reduce in the domain, then torch.distributed's in the cross group."""
        domain, cross, _ = self._groups_made("all_reduce")
        workspace = all_reduce(out, inp, self._ctx, op, domain, False, config, workspace)
        dist.all_reduce(out, group=cross)
        return workspace

    def all_reduce_preamble(self, out, inp, config=None, workspace=None):
        """The domain level's workspace for :meth:`all_reduce` of these tensors."""
        domain, _, _ = self._groups_made("all_reduce")
        return all_reduce_preamble(out, inp, self._ctx, config, workspace, domain)

    def all_gather(self, out, inp, config=None, workspace=None):
        """Every rank's input along dim 0, in rank order: the domain's through our kernel into a heap buffer, then
        the domains' buffers through torch.distributed in the cross group."""
        ctx, world = self._ctx, self._ctx.num_ranks
        check_tensors(ctx, "all_gather", out, inp)
        if out.shape != (world * inp.shape[0], *inp.shape[1:]):
            raise ValueError(f"rank {ctx.cur_rank}: all_gather output {list(out.shape)} must be "
                             f"{[world * inp.shape[0], *inp.shape[1:]]} (world {world} x the input's rows)")
        domain, cross, _ = self._groups_made("all_gather")
        gathered = self._buffer("all_gather", (len(self.domain) * inp.shape[0], *inp.shape[1:]), inp.dtype)
        workspace = all_gather(gathered, inp, ctx, domain, False, config, workspace)
        # Block j of the cross gather is the domain of the cross group's rank j, in its domain's order.
        order = [r for peer in self.cross for r in self.domains[self.domain_index[peer]]]
        if order == list(range(world)):
            _all_gather_single(out, gathered, group=cross)
        else:
            blocks = torch.empty_like(out)
            _all_gather_single(blocks, gathered, group=cross)
            out.view(world, -1)[order] = blocks.view(world, -1)
        return workspace

    def reduce_scatter(self, out, inp, op=None, config=None, workspace=None):
        """Rank r's chunk (:func:`iris.ccl.reduce_scatter`'s) of the sum: the input is rearranged so that our
        reduce_scatter in the domain gives each rank its cross group's chunks, summed over the domain; torch's
        reduce_scatter in the cross group then sums those over the domains."""
        ctx, world, rank = self._ctx, self._ctx.num_ranks, self._ctx.cur_rank
        check_tensors(ctx, "reduce_scatter", out, inp, reduce=True)
        domain, cross, _ = self._groups_made("reduce_scatter")
        n, chunk, width = inp.numel(), chunk_size(inp.numel(), world), len(self.domains)
        # Block (l, j) of the rearranged input: the chunk of rank j of local index l's cross group.
        order = [sorted(members[local] for members in self.domains)[j]
                 for local in range(len(self.domain)) for j in range(width)]
        padded = F.pad(inp.reshape(-1), (0, world * chunk - n)).view(world, chunk)
        arranged = self._buffer("reduce_scatter.in", (world * chunk,), inp.dtype)
        arranged.view(world, chunk).copy_(padded[order])
        summed = self._buffer("reduce_scatter.out", (world * chunk,), inp.dtype)
        workspace = reduce_scatter(summed, arranged, ctx, op, domain, False, config, workspace)
        mine = torch.empty(chunk, dtype=inp.dtype, device=inp.device)
        _reduce_scatter_single(mine, summed[self.local * width * chunk:(self.local + 1) * width * chunk], group=cross)
        lo, hi = rank * chunk, min((rank + 1) * chunk, n)
        if hi > lo:
            out.view(-1)[lo:hi] = mine[:hi - lo]
        return workspace

    def all_to_all(self, out, inp, config=None, workspace=None):
        """Column chunk j of every rank's input to rank j: the chunks between ranks of the domain through our
        all_to_all on heap buffers, the others through torch.distributed's all_to_all_single."""
        ctx, world = self._ctx, self._ctx.num_ranks
        check_tensors(ctx, "all_to_all", out, inp)
        rows, columns = inp.shape[0], inp.shape[-1] if inp.dim() == 2 else 0
        if inp.dim() != 2 or out.shape != inp.shape or columns % world:
            raise ValueError(f"rank {ctx.cur_rank}: all_to_all takes 2-D input and output of one shape (M, N * world),"
                             f" got {list(inp.shape)} and {list(out.shape)} on {world} ranks")
        if overlaps(out, inp):
            raise ValueError(f"rank {ctx.cur_rank}: all_to_all needs an output separate from the input")
        domain, _, network = self._groups_made("all_to_all")
        width, size = columns // world, len(self.domain)
        chunks_in, chunks_out = inp.view(rows, world, width), out.view(rows, world, width)
        local_in = self._buffer("all_to_all.in", (rows, size * width), inp.dtype)
        local_out = self._buffer("all_to_all.out", (rows, size * width), inp.dtype)
        local_in.view(rows, size, width).copy_(chunks_in[:, self.domain])
        workspace = all_to_all(local_out, local_in, ctx, domain, False, config, workspace)
        chunks_out[:, self.domain] = local_out.view(rows, size, width)
        others = [r for r in range(world) if self.domain_index[r] != self.domain_index[ctx.cur_rank]]
        splits = [0 if self.domain_index[r] == self.domain_index[ctx.cur_rank] else rows * width for r in range(world)]
        sent = chunks_in[:, others].permute(1, 0, 2).contiguous()
        received = torch.empty_like(sent)
        dist.all_to_all_single(received.view(-1), sent.view(-1), splits, splits, group=network)
        chunks_out[:, others] = received.permute(1, 0, 2)
        return workspace

    # The rooted collectives go over every rank through torch.distributed's library in one level (a two-level
    # algorithm would gain over it only where the domains' links are much faster than the network's): correct
    # wherever the ranks are, and returning no workspace of ours.
    def broadcast(self, out, inp, root: int):
        """The root's input into every rank's output, by ``dist.broadcast`` over every rank."""
        if self._ctx.cur_rank == root and out.data_ptr() != inp.data_ptr():
            out.copy_(inp)
        dist.broadcast(out, src=root, group=self._groups_made("broadcast")[2])

    def reduce(self, out, inp, root: int):
        """The sum over every rank into the root's output, by ``dist.reduce`` of a copy (the inputs stay intact)."""
        total = inp.clone()
        dist.reduce(total, dst=root, group=self._groups_made("reduce")[2])
        if self._ctx.cur_rank == root:
            out.copy_(total)

    def gather(self, out, inp, root: int):
        """Every rank's input into the root's output, by ``dist.gather``."""
        rows = list(out.chunk(self._ctx.num_ranks)) if self._ctx.cur_rank == root else None
        dist.gather(inp.contiguous(), gather_list=rows, dst=root, group=self._groups_made("gather")[2])

    def scatter(self, out, inp, root: int):
        """Chunk i of the root's input into rank i's output, by ``dist.scatter``."""
        chunks = [c.contiguous() for c in inp.chunk(self._ctx.num_ranks)] if self._ctx.cur_rank == root else None
        dist.scatter(out, scatter_list=chunks, src=root, group=self._groups_made("scatter")[2])

    def barrier(self, workspace=None):
        """Every rank of every domain reached this point, in stream order: a device barrier over the domain (its
        ranks all arrived), then a one-element all_reduce in the cross group (so did every other domain's)."""
        domain, cross, _ = self._groups_made("barrier")
        workspace = device_barrier(self._ctx, domain, workspace)
        dist.all_reduce(torch.zeros(1, device=self._ctx.heap.device), group=cross)
        return workspace

    # -- groups and buffers ---------------------------------------------------------------------------
    def _groups_made(self, collective: str):
        """(domain group, cross group, network group of every rank) of this rank, made at the first call.

        ``dist.new_group`` is collective over every rank, in the same order; the first collective over every
        rank is such a point.
        """
        if self.problem is not None:
            raise NotImplementedError(f"rank {self._ctx.cur_rank}: ctx.ccl.{collective} across domains "
                                      f"{self.domains}: {self.problem}")
        if self._groups is None:
            network = NETWORK_BACKEND[self._ctx.backend]
            domain = [dist.new_group(members) for members in self.domains][self.domain_index[self._ctx.cur_rank]]
            crosses = [dist.new_group(sorted(members[local] for members in self.domains), backend=network)
                       for local in range(len(self.domain))]
            everyone = None if dist.get_backend() == network else dist.new_group(backend=network)
            self._groups = (domain, crosses[self.local], everyone)
        return self._groups

    def _buffer(self, name: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        """A heap buffer kept for ``name``, shape and dtype (allocated collectively on first use: every rank
        makes the same calls)."""
        key = (name, tuple(shape), dtype)
        if key not in self._buffers:
            self._buffers[key] = self._ctx.zeros(*shape, dtype=dtype, name=f"ccl.across.{name}")
        return self._buffers[key]


def _layout_problem(domains: list[list[int]]) -> str | None:
    """Why collectives cannot cross these domains (None: they can): domains of one size, evenly spaced ranks."""
    sizes = sorted({len(members) for members in domains})
    if len(sizes) > 1:
        return (f"the domains hold {' and '.join(map(str, sizes))} ranks; collectives across domains need the same "
                "number of ranks in each (start as many ranks on every host)")
    uneven = [members for members in domains if len({b - a for a, b in zip(members, members[1:], strict=False)}) > 1]
    if uneven:
        return (f"the ranks of domain {uneven[0]} are not evenly spaced; our kernels take consecutive or strided "
                "ranks (give each host a block of consecutive ranks)")
    return None
