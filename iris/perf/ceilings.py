"""Ceilings measured now, on this machine: what a large cuBLAS matmul, a device copy and a peer copy reach.

The spec sheet (:mod:`iris.base.gpu_specs`) says what the part could do; these say what it does today, under its
clocks, power cap and driver: a kernel near the measured roof has little left to gain, whatever the datasheet
says. Each is timed with :func:`iris.instruments.replay.replay_time` (CUDA-graph replays, ranks in step, the slowest
rank's time), all ranks at once, so the peer copies load every link in both directions as a collective does.

- matmul: ``torch.mm`` of two ``MATMUL_SIDE``-square matrices of the dtype asked, ``2 n**3`` flops;
- device copy: ``COPY_BYTES`` copied, counted as read + write (``2 x bytes``), as the spec's HBM bandwidth counts
  them;
- peer copy: this rank writes a buffer into each peer's heap in turn (through ``ctx.as_remote(buf, peer)``, over
  CUDA IPC), every rank to a different peer at the same time, bytes counted once (one direction).

Each copy is made two ways, and the faster counts: ``dst.copy_(src)`` (a memcpy: inside a CUDA graph the driver
may hand it to a copy engine, which on 2 H200s reached 2.6 TB/s of the 4.8 the spec gives) and an elementwise
kernel on the SMs (``torch.bitwise_not`` of int32 words: what a kernel that loads and stores reaches).

Examples
--------
>>> ceilings = measure(ctx)                               # doctest: +SKIP
>>> ceilings.matmul_tflops, ceilings.copy_gbs, ceilings.peer_gbs    # doctest: +SKIP
(742.1, 4102.5, 371.0)
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from ..base.sizes import format_size
from ..instruments.replay import ReplayTiming, everyone, replay_time
from .errors import PerfError
from .placement import shared_groups, sharing_message, this_gpu

MATMUL_SIDE = 8192
COPY_BYTES = 1 << 30
PEER_BYTES = 256 << 20  # at most this much of the heap, less when the heap has less free
MIN_PEER_BYTES = 1 << 20
MATMUL_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # what torch.mm multiplies (fp8 needs scales)

_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # ctx -> {dtype name: Ceilings}


@dataclass(frozen=True)
class Ceilings:
    """What this machine reached just now (the same on every rank: each figure is the slowest rank's).

    Attributes
    ----------
    dtype : str
        The matmul's dtype (``"bfloat16"``).
    matmul_tflops : float
        TFLOP/s of a ``MATMUL_SIDE``-square ``torch.mm``.
    copy_gbs : float
        GB/s of a device-to-device copy, read + write counted.
    links : dict
        ``(source rank, destination rank)`` -> GB/s of a copy into the destination's heap, one direction.
    peer_bytes : int
        The size of each peer copy (smaller than ``PEER_BYTES`` when the heap had less free).

    Examples
    --------
    >>> Ceilings("bfloat16", 700.0, 4000.0, {(0, 1): 360.0, (1, 0): 355.0}, 1 << 28).peer_gbs
    355.0
    """

    dtype: str
    matmul_tflops: float
    copy_gbs: float
    links: dict
    peer_bytes: int

    @property
    def peer_gbs(self) -> float | None:
        """The slowest link's GB/s (None with one rank)."""
        return min(self.links.values()) if self.links else None

    def describe(self) -> str:
        """One line with every figure and how it was measured."""
        peer = (f"peer copy {self.peer_gbs:.0f} GB/s a direction (slowest of {len(self.links)} links, "
                f"{format_size(self.peer_bytes)})" if self.links else "no peer (one rank)")
        return (f"measured: {self.dtype} matmul {MATMUL_SIDE}^3 {self.matmul_tflops:.0f} TFLOP/s, device copy "
                f"{self.copy_gbs:.0f} GB/s (read + write, {format_size(COPY_BYTES)}), {peer}")


def measure(ctx, dtype=torch.bfloat16, *, again: bool = False) -> Ceilings:
    """The ceilings of this machine for ``dtype``, measured on every rank at once; cached per process.

    Collective: every rank calls it with the same arguments. The first call measures (a few seconds); later
    calls return the same figures unless ``again`` is true.

    Parameters
    ----------
    ctx : iris.Iris
        A context on the ``cuda`` backend, one rank per GPU.
    dtype : torch.dtype
        The matmul's dtype (what a roofline of kernels in that dtype needs).
    again : bool
        Measure even if this process measured before.

    Raises
    ------
    PerfError
        On the CPU backend (no hardware to measure), and when ranks share a GPU.

    Examples
    --------
    >>> iris.perf.ceilings.measure(ctx).describe()        # doctest: +SKIP
    'measured: bfloat16 matmul 8192^3 741 TFLOP/s, device copy 4102 GB/s (read + write, 1 GiB), peer copy ...'
    """
    if ctx.backend != "cuda":
        raise PerfError(f"rank {ctx.cur_rank}: ceilings are measured on GPUs; this context runs on the "
                        f"{ctx.backend} backend (the Triton interpreter), where there is no hardware roof to "
                        "measure. Use iris.iris(backend='cuda') on a GPU machine")
    if dtype not in MATMUL_DTYPES:
        raise PerfError(f"rank {ctx.cur_rank}: no matmul ceiling for {dtype}: torch.mm multiplies "
                        f"{', '.join(map(str, MATMUL_DTYPES))}; measure one of those")
    key = str(dtype).removeprefix("torch.")
    found = _cache.setdefault(ctx, {})
    if key in found and not again:
        return found[key]
    group = ctx.group.group
    shared = shared_groups(everyone(this_gpu(ctx), group))
    if shared:
        raise PerfError(f"rank {ctx.cur_rank}: " + sharing_message(shared, "measuring the GPU's ceilings"))
    found[key] = Ceilings(key, _matmul_tflops(ctx, dtype, group), _copy_gbs(ctx, group),
                          *_peer_links(ctx, group))
    torch.cuda.empty_cache()  # the GiBs of operands go back to the GPU, not to this process's cache
    return found[key]


def _on_every_rank(ctx, group, what: str, make):
    """``make()`` (operands to measure with), or a :class:`PerfError` on every rank where it failed on any: a
    rank out of GPU memory would otherwise leave its peers waiting in the measurement's collectives."""
    try:
        made, error = make(), None
    except Exception as exc:  # said on every rank below
        made, error = None, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    failed = [(rank, e) for rank, e in enumerate(everyone(error, group)) if e is not None]
    if failed:
        said = "; ".join(f"rank {rank}: {e}" for rank, e in failed)
        raise PerfError(f"rank {ctx.cur_rank}: could not allocate {what} to measure the ceilings ({said}): free "
                        "GPU memory, or pass measure_ceilings=False")
    return made


def _matmul_tflops(ctx, dtype, group) -> float:
    def operands():
        a, b = (torch.randn(MATMUL_SIDE, MATMUL_SIDE, device=ctx.get_device()).to(dtype) for _ in range(2))
        return a, b, torch.empty_like(a)

    a, b, out = _on_every_rank(ctx, group, f"the {MATMUL_SIDE}^3 matmul's operands", operands)
    timing = replay_time(lambda: torch.mm(a, b, out=out), group=group)
    return 2 * MATMUL_SIDE ** 3 / (timing.us * 1e6)


def _fastest_copy(dst, src, group) -> ReplayTiming:
    """The faster (slowest rank's time) of a memcpy and an SM kernel writing ``src``'s bytes to ``dst``."""
    words_in, words_out = src.view(torch.int32), dst.view(torch.int32)
    return min(replay_time(lambda: dst.copy_(src), group=group),
               replay_time(lambda: torch.bitwise_not(words_in, out=words_out), group=group), key=lambda t: t.us)


def _copy_gbs(ctx, group) -> float:
    src, dst = _on_every_rank(ctx, group, f"two {format_size(COPY_BYTES)} buffers", lambda: tuple(
        torch.empty(COPY_BYTES, dtype=torch.uint8, device=ctx.get_device()) for _ in range(2)))
    return 2 * COPY_BYTES / (_fastest_copy(dst, src, group).us * 1e3)


def _peer_links(ctx, group) -> tuple[dict, int]:
    """({(rank, peer): GB/s} for every ordered pair of ranks, the bytes each copy moved)."""
    world, rank = ctx.num_ranks, ctx.cur_rank
    if world == 1:
        return {}, 0
    # The same size on every rank (allocation is collective): what the fullest heap can spare.
    free = min(everyone(ctx.heap_usage().largest_free, group))
    nbytes = min(PEER_BYTES, free // 2 // MIN_PEER_BYTES * MIN_PEER_BYTES)
    if nbytes < MIN_PEER_BYTES:
        raise PerfError(f"rank {rank}: the heap has {format_size(free)} free, too little for a peer copy of "
                        f"{format_size(MIN_PEER_BYTES)}: start the ranks with a larger heap")
    inbox = ctx.zeros(nbytes, dtype=torch.uint8)
    src = _on_every_rank(ctx, group, f"a {format_size(nbytes)} buffer",
                         lambda: torch.empty(nbytes, dtype=torch.uint8, device=ctx.get_device()))
    links = {}
    for step in range(1, world):  # at each step every rank writes to another peer, all links busy at once
        peer = (rank + step) % world
        timing = _fastest_copy(ctx.as_remote(inbox, peer), src, group)
        for source, us in enumerate(timing.per_rank_us):
            links[(source, (source + step) % world)] = nbytes / (us * 1e3)
    ctx.barrier()  # no rank frees its inbox while a peer may still write into it
    return links, nbytes
