"""One collective over sizes at this world size, beside its peers: at each size, what ``ctx.ccl`` ran (its variant,
grid and block), where that choice came from (this machine's tuning, the shipped table, the size rules), its time,
and its bus bandwidth against the peer link's ceiling. What the workbench's sweep view draws.

The peers: torch.distributed's collective over NCCL on GPUs (gloo on the CPU), and for all_reduce on GPUs every peer
of :mod:`iris.perf.peers` (NCCL's symmetric kernels, torch symmetric memory's one_shot and two_shot) that this torch
and machine have; the report names those they lack.

Timed as CUDA-graph replays with every rank in step (the slowest rank's time) on GPUs; on the CPU interpreter with a
host clock, and the report says those times mean nothing for speed.

Examples
--------
>>> report = iris.perf.sweep(ctx, "all_reduce", sizes=[8 << 10, 1 << 20])       # doctest: +SKIP
>>> print(report)                                                              # doctest: +SKIP
all_reduce, bfloat16, 2 ranks (NVIDIA H200), CUDA-graph replays ...
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..base.gpu_specs import find as find_gpu_spec
from ..ccl import Config, tuning
from ..ccl.groups import members as members_of
from .peers import PEERS, Peers, graph_safe

KiB, MiB = 1 << 10, 1 << 20
GPU_SIZES = (8 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB)
CPU_SIZES = (1 * KiB, 4 * KiB)  # the interpreter is slow: a few small sizes show the machinery
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
ROW = 256  # elements per row of all_to_all's input


def bus_factor(collective: str, world: int) -> float:
    """Bus bandwidth over algorithm bandwidth (NCCL's convention): ``2 (n - 1) / n`` for all_reduce, ``(n - 1) / n``
    for the others."""
    return (2 if collective == "all_reduce" else 1) * (world - 1) / world


@dataclass(frozen=True)
class SweepPoint:
    """One size: ``nbytes`` (all_reduce's and reduce_scatter's input, all_gather's output, all_to_all's input),
    what iris ran (``ran``: variant, grid, block) and why (``source``), µs per call of iris and of each peer."""

    nbytes: int
    ran: dict
    source: str
    us: float
    peers_us: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SweepReport:
    """A sweep's points, with what a reader needs to judge them (see the module)."""

    collective: str
    dtype: str
    world: int
    device: str
    timing: str
    meaningful: bool
    link_gbs: float | None
    link: str | None
    points: tuple
    peers_unavailable: dict = field(default_factory=dict)

    def bus_gbs(self, us: float, nbytes: int) -> float:
        """Bus bandwidth in GB/s of a call of ``nbytes`` taking ``us``."""
        return nbytes * bus_factor(self.collective, self.world) / (us * 1e3)

    def rows(self) -> list[dict]:
        """One dict per size, every figure a table shows."""
        rows = []
        for point in self.points:
            row = {"size": size_text(point.nbytes), "ran": ", ".join(f"{k} {v}" for k, v in point.ran.items()),
                   "chosen by": point.source, "iris µs": point.us,
                   "iris bus GB/s": self.bus_gbs(point.us, point.nbytes)}
            if self.link_gbs:
                row["of the link"] = row["iris bus GB/s"] / self.link_gbs
            for peer, us in point.peers_us.items():
                row[f"{peer} µs"] = us
                row[f"speed-up over {peer}"] = us / point.us
            rows.append(row)
        return rows

    def headline(self) -> str:
        link = f"; peer link {self.link} {self.link_gbs:g} GB/s a direction" if self.link_gbs else ""
        missing = "".join(f"; no {peer} here ({why})" for peer, why in self.peers_unavailable.items())
        return (f"{self.collective}, {self.dtype}, {self.world} ranks ({self.device}), {self.timing}{link}{missing}"
                + ("" if self.meaningful else ": these times mean nothing for speed"))

    def __str__(self) -> str:
        rows = self.rows()
        columns = list(rows[0]) if rows else []
        lines = [self.headline(), " | ".join(columns)]
        lines += [" | ".join(format_cell(c, row[c]) for c in columns) for row in rows]
        return "\n".join(lines)


def format_cell(column: str, value) -> str:
    """A cell of the sweep's table as text: µs to 0.1, the link's share as a percentage (to 0.1 below 10%), speed-ups
    as 1.23x.

    Examples
    --------
    >>> format_cell("iris µs", 4.04), format_cell("of the link", 0.734), format_cell("of the link", 0.0047)
    ('4.0', '73%', '0.5%')
    >>> format_cell("speed-up over NCCL", 2.5)
    '2.50x'
    """
    if not isinstance(value, float):
        return str(value)
    if column.endswith("µs"):
        return f"{value:.1f}"
    if column == "of the link":
        return f"{value:.1%}" if value < 0.1 else f"{value:.0%}"
    if column.startswith("speed-up over "):
        return f"{value:.2f}x"
    return f"{value:.3g}"


def size_text(nbytes: int) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def tensors(ctx, collective: str, nbytes: int, dtype: torch.dtype, world: int, columns: int | None = None):
    """(out, inp) on the heap for one call at ``nbytes`` (see :class:`SweepPoint`), filled with ones; all_to_all's
    rows have ``columns`` elements (default ``ROW * world``; a multiple of ``world``)."""
    n = max(world, nbytes // dtype.itemsize // world * world)
    if collective == "all_gather":
        return ctx.zeros(n, dtype=dtype), ctx.ones(n // world, dtype=dtype)
    if collective == "all_to_all":
        columns = columns or ROW * world
        rows = max(1, n // columns)
        return ctx.zeros(rows, columns, dtype=dtype), ctx.ones(rows, columns, dtype=dtype)
    return ctx.zeros(n, dtype=dtype), ctx.ones(n, dtype=dtype)


_torch_groups: dict = {}


def nccl_group():
    """The sweep's NCCL group for the peers, made once (collective the first time)."""
    if "nccl" not in _torch_groups:
        _torch_groups["nccl"] = dist.new_group(backend="nccl")
    return _torch_groups["nccl"]


def torch_peer(ctx, collective: str, out: torch.Tensor, inp: torch.Tensor):
    """(label, callable): torch.distributed's collective moving the same bytes, over NCCL on GPUs (a group of its
    own, made once) and the context's gloo group on the CPU."""
    on_gpu = ctx.get_device().type == "cuda"
    group, label = (nccl_group(), "NCCL") if on_gpu else (ctx.group.group, "gloo")
    out, scratch = torch.empty_like(out), inp.clone()
    calls = {
        "all_reduce": lambda: dist.all_reduce(scratch, group=group),
        "all_gather": lambda: dist.all_gather_into_tensor(out, inp, group=group),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(out.view(-1)[: inp.numel() // ctx.get_num_ranks()],
                                                             inp, group=group),
        "all_to_all": lambda: dist.all_to_all_single(out.view(-1), inp.view(-1), group=group),
    }
    return label, calls[collective]


def all_reduce_peers_us(ctx, inp: torch.Tensor, calls: int, group, unavailable: dict) -> dict:
    """{peer: µs per call} of every all_reduce peer this torch and machine have (:class:`iris.perf.peers.Peers`, over
    the sweep's NCCL group), on copies of ``inp``; those they lack go into ``unavailable`` with the reason."""
    peers, times = Peers(nccl_group()), {}
    peers.unavailable.update(unavailable)  # a peer missing at one size is not tried again
    for name in PEERS:
        peer = peers.make(name, inp)
        if peer is None:
            continue
        peer.load()
        times[name] = tuning.time_us(peer.call, calls, group, True)
        peer.release()
    unavailable.update(peers.unavailable)
    return times


def sweep(ctx, collective: str = "all_reduce", sizes=None, dtype: torch.dtype = torch.bfloat16,
          peers: bool = True) -> SweepReport:
    """Time ``ctx.ccl.<collective>`` at each size, beside torch.distributed's (``peers``); collective.

    Parameters
    ----------
    ctx : iris.Iris
    collective : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    sizes : list of int, optional
        Bytes per call (see :class:`SweepPoint`); default :data:`GPU_SIZES` on GPUs, :data:`CPU_SIZES` on the CPU.
    dtype : torch.dtype
    peers : bool
        Time the peers too (see the module); not where ranks share a GPU, which NCCL refuses.

    Returns
    -------
    SweepReport
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"rank {ctx.cur_rank}: iris.perf.sweep: collective={collective!r}: use one of "
                         f"{list(COLLECTIVES)}")
    on_gpu, world = ctx.get_device().type == "cuda", ctx.get_num_ranks()
    sizes = list(sizes or (GPU_SIZES if on_gpu else CPU_SIZES))
    if not sizes or any(not isinstance(s, int) or s <= 0 for s in sizes):
        raise ValueError(f"rank {ctx.cur_rank}: iris.perf.sweep: sizes={sizes!r}: give positive byte counts")
    group = ctx.group.group
    members = members_of(ctx, None)
    why_not = tuning.timings_mean_nothing(ctx, members)
    # NCCL refuses two ranks on one GPU: ranks sharing GPUs time iris alone (and the report says its times are moot)
    peers = peers and not (on_gpu and why_not is not None)
    points, unavailable = [], {}
    for nbytes in sizes:
        out, inp = tensors(ctx, collective, nbytes, dtype, world)
        call = getattr(ctx.ccl, collective)
        workspace = call(out, inp)  # the first call chooses (and may tune) outside the timing
        _, source = tuning.lookup(ctx, collective, Config(), inp, world)
        ran = {"variant": workspace.key[1], "grid": workspace.key[4], "block": workspace.key[5]}
        ran = {what: value for what, value in ran.items() if value is not None}  # the copy engines have no block
        calls = 10 if nbytes <= MiB else 1
        us = tuning.time_us(lambda call=call, out=out, inp=inp: call(out, inp), calls, group, on_gpu)
        peers_us = {}
        if peers and on_gpu and collective == "all_reduce":
            peers_us = all_reduce_peers_us(ctx, inp, calls, group, unavailable)
        elif peers:
            label, peer = torch_peer(ctx, collective, out, inp)
            graph = graph_safe(collective, nbytes)
            peers_us[label if graph or not on_gpu else f"{label} (eager loop)"] = tuning.time_us(
                peer, calls, group, on_gpu, graph=graph)
        points.append(SweepPoint(nbytes, ran, source, us, peers_us))
    spec = find_gpu_spec(torch.cuda.get_device_name(ctx.get_device()), warn=False) if on_gpu else None
    return SweepReport(collective, str(dtype).removeprefix("torch."), world,
                       torch.cuda.get_device_name(ctx.get_device()) if on_gpu else "CPU interpreter",
                       "CUDA-graph replays, slowest rank" if on_gpu else "host clock, slowest rank",
                       why_not is None, spec.peer_gbs if spec else None, spec.peer_link if spec else None,
                       tuple(points), unavailable)

