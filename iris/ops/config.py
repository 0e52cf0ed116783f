"""How a fused GEMM + communication op runs: :class:`FusedConfig`, and the :class:`Workspace` it keeps.

Examples
--------
>>> FusedConfig().variant
'auto'
>>> FusedConfig(variant="fused")                          # doctest: +ELLIPSIS
Traceback (most recent call last):
...
NotImplementedError: FusedConfig variant 'fused': upstream's one fused kernel for every op is not built here; ...
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..ccl.config import ALL_REDUCE_VARIANTS
from .graphs import CallGraphs

VARIANTS = ("auto", "sequential", "chunked", "peers_first")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class FusedConfig:
    """Tile sizes, the all-reduce algorithm and the path of a ``ctx.ops`` call (upstream Iris's ``FusedConfig``,
    its field names and defaults, and three of ours).

    Parameters
    ----------
    block_size_m, block_size_n, block_size_k, group_size_m : int
        Upstream's tiles and tile grouping for its fused Triton GEMM. Accepted (and checked, >= 1) so that
        upstream code runs unchanged; the GEMMs are cuBLAS's (``torch.matmul``), so only one thing reads them:
        ``block_size_m x block_size_n`` are the tiles that matmul_reduce_scatter with upstream's full (M, N) out
        hands out to the ranks (:mod:`iris.ops.owned_tiles`).
    num_sms : int or None
        Upstream's persistent grid; without effect here (the transfers are the copy engines', taking no SM).
    num_xcds, chunk_size : int
        AMD-only: the chiplets (XCDs) upstream's kernels remap their tiles over; checked, without effect here.
    cache_modifier_a, cache_modifier_b : str
        Upstream's load cache modifiers for A and B; without effect on cuBLAS.
    allow_tf32 : bool
        Upstream's TF32 switch for its float32 ``tl.dot``; without effect here: float32 GEMMs follow torch's
        ``torch.backends.cuda.matmul.allow_tf32``.
    all_reduce_variant : {None, "atomic", "ring", "one_shot", "two_shot", "two_shot_push", "spinlock"}
        matmul_all_reduce's all-reduce algorithm: :func:`iris.ccl.all_reduce`'s variant of that name, run after
        the GEMM on the sequential path (a named variant makes ``variant="auto"`` take it). None (ours; upstream's
        default is ``"two_shot"``): chosen by size, or the chunked path's own reduction on GPUs. ``"spinlock"``
        adds under a lock per tile as upstream's does, but after the GEMM (iris.ccl's spinlock all-reduce), not
        inside one fused kernel.
    all_reduce_num_rings : int
        Upstream's concurrent rings of its ring variant; checked, without effect here.
    chunks : int or None
        Ours: pieces of the chunked path (row pieces of each rank's block of the product); None: by the shape
        (:func:`iris.ops.choose_path`).
    growth : float or None
        Ours: each piece's rows over the previous piece's (< 1: shrinking, > 1: growing, 1: even); None: the op's
        for the shape (:func:`iris.ops.pieces.growth`, whose module says why).
    variant : {"auto", "sequential", "chunked", "peers_first"}
        Ours: the path. ``"sequential"`` runs ``torch.matmul`` into a heap buffer, then iris's collective
        (:mod:`iris.ccl`); ``"chunked"`` runs each piece's communication on a second stream while the next
        piece computes (:mod:`iris.ops.chunked`); ``"peers_first"`` (matmul_reduce_scatter only) is one Triton
        kernel whose programs compute the peers' tiles first and store them into their inboxes
        (:mod:`iris.ops.peers_first`); ``"auto"`` picks per op and shape (:func:`iris.ops.choose_path`).

    Examples
    --------
    >>> FusedConfig(block_size_m=64, num_xcds=8, all_reduce_variant="one_shot").all_reduce_variant
    'one_shot'
    """

    block_size_m: int = 256
    block_size_n: int = 64
    block_size_k: int = 64
    group_size_m: int = 1
    num_sms: int | None = None
    num_xcds: int = 1
    chunk_size: int = 1
    cache_modifier_a: str = ".ca"
    cache_modifier_b: str = ".ca"
    allow_tf32: bool = True
    all_reduce_variant: str | None = None
    all_reduce_num_rings: int = 1
    chunks: int | None = None
    growth: float | None = None
    variant: str = "auto"

    def __post_init__(self):
        self.validate()

    def validate(self, world_size: int | None = None) -> None:
        """Raise a ``ValueError`` naming the field for a value no path takes (upstream's method; every
        ``FusedConfig`` is checked when made, and its fields cannot change: ``world_size`` adds no check here,
        as the block sizes upstream's ring variant divides by it are not read)."""
        if self.variant == "fused":
            raise NotImplementedError(
                "FusedConfig variant 'fused': upstream's one fused kernel for every op is not built here; 'chunked' "
                "(cuBLAS pieces, copy-engine transfers, a flag per piece) is what 'auto' runs on GPUs for large "
                "GEMMs, and matmul_reduce_scatter has a one-kernel path for small ones, 'peers_first': use "
                "variant='auto', 'sequential', 'chunked' or (matmul_reduce_scatter) 'peers_first'")
        if self.variant not in VARIANTS:
            raise ValueError(f"FusedConfig variant {self.variant!r}: use one of {', '.join(map(repr, VARIANTS))}")
        if self.all_reduce_variant not in (None, *ALL_REDUCE_VARIANTS):
            raise ValueError(f"FusedConfig all_reduce_variant {self.all_reduce_variant!r}: use one of "
                             f"{', '.join(map(repr, ALL_REDUCE_VARIANTS))} or None (chosen by size)")
        optional = ("num_sms", "chunks")
        for name in ("block_size_m", "block_size_n", "block_size_k", "group_size_m", "num_xcds", "chunk_size",
                     "all_reduce_num_rings", *optional):
            value = getattr(self, name)
            if not (name in optional and value is None) and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"FusedConfig {name} must be an int >= 1{' or None' if name in optional else ''}, "
                                 f"got {value!r}")
        if self.growth is not None and (isinstance(self.growth, bool) or not isinstance(self.growth, (int, float))
                                        or not 0 < self.growth < float("inf")):
            raise ValueError(f"FusedConfig growth must be a number > 0 (each piece's rows over the previous "
                             f"piece's) or None, got {self.growth!r}")


@dataclass
class Workspace:
    """What an op keeps between calls with the same shapes: heap buffers and the collective's workspace.

    Allocating it is collective (every rank calls the op), so the first call runs outside a CUDA graph
    capture; later calls reuse it and can be captured.

    Attributes
    ----------
    path : str
        The path the last call took (``"sequential"`` or ``"chunked"``).
    pieces : int
        The pieces the chunked path cut its GEMM into (see :func:`iris.ops.choose_path`).
    growth : float
        Each piece's rows over the previous piece's (:mod:`iris.ops.pieces`).
    key : tuple
        The op, shapes and dtype it was made for.
    buffers : dict of (str, shape, dtype) to torch.Tensor
        Heap buffers (the local product, the gathered input...).
    collective : iris.ccl.Workspace or None
        The collective's own workspace, passed back to it.
    copy_stream : torch.cuda.Stream or None
        The chunked path's second stream (GPUs).
    local_stream : torch.cuda.Stream or None
        all_gather_matmul's third stream, for the copies within this rank (GPUs).
    gathered_layout : {"rows", "columns"} or None
        How all_gather_matmul's gathered A is stored, agreed by the ranks at its first chunked call
        (:func:`iris.ops.chunked.gathered_buffer`).
    signals : iris.ops.signals.PieceSignals or None
        The chunked path's per-piece flags.
    graphs : iris.ops.graphs.CallGraphs
        CUDA graphs of repeated eager calls.
    prepared : bool
        Upstream's flag that its workspace's locks were reset for the next call (its preamble sets it, its call
        clears it, and a call finding it clear prepares again). Ours need no reset between calls (each call's
        waits set the flags it was sent back to 0, :mod:`iris.ops.signals`), so no op reads it: the preamble functions
        (:func:`iris.ops.matmul_all_reduce_preamble` ...) set it, as upstream's do, and a caller may write it.
    """

    key: tuple
    path: str = "sequential"
    pieces: int = 1
    growth: float = 1.0
    buffers: dict = field(default_factory=dict)
    collective: object = None
    copy_stream: object = None
    local_stream: object = None
    gathered_layout: str | None = None
    signals: object = None
    graphs: CallGraphs = field(default_factory=CallGraphs)
    prepared: bool = False

    @property
    def locks(self) -> torch.Tensor | None:
        """Upstream's per-tile flags, which its callers zero between calls. Here: the chunked path's per-piece
        arrival flags (int32 ``[slots, world, 1]`` on the heap), None until a chunked call (or
        :func:`~iris.ops.all_gather_matmul_hbm_buffer.all_gather_matmul_hbm_buffer_preamble`) made them, and on
        the sequential path, whose collective keeps its own. A call waits for every flag it is sent, and sets it
        back to 0, before it returns (in stream order), so zeroing them between calls (as upstream's benchmarks
        do) is harmless."""
        return None if self.signals is None else self.signals.flags

    @property
    def aux_buffer(self) -> torch.Tensor | None:
        """Upstream's staging buffer. Here: all_gather_matmul's gathered A (``(M, K)`` on the heap, every rank's
        shard in its columns, as upstream's HBM buffer holds it; a column-major view where the ranks' shards were,
        see :func:`iris.ops.chunked.gathered_buffer`) once the chunked path made it; None for the other ops, whose
        buffers (``buffers``) are theirs to overwrite: none needs zeroing between calls."""
        if self.key[0] != "all_gather_matmul":
            return None
        return next((tensor if name == "A" else tensor.t() for (name, _, _), tensor in self.buffers.items()
                     if name in ("A", "A_t")), None)

    def wait(self) -> None:
        """After a call with ``async_op=True``: wait (in stream order) until its collective has finished."""
        if self.collective is not None:
            self.collective.wait()

    def on_heap(self, ctx, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` itself when it is contiguous on the heap (peers may read or write it there), else the
        heap buffer ``name`` of its shape and dtype, to be used in its place."""
        if ctx.is_symmetric(tensor) and tensor.is_contiguous():
            return tensor
        return self.buffer(ctx, name, tensor.shape, tensor.dtype)

    def buffer(self, ctx, name: str, shape, dtype, zeroed: bool = False) -> torch.Tensor:
        """The heap buffer ``name`` of this shape and dtype (allocated on the first call that asks for it:
        collective; ``zeroed``: zeros on every rank before any rank goes on, as flags need). Its shape is part of
        its name: calls with another piece count keep their own."""
        key = (name, tuple(shape), dtype)
        if key not in self.buffers:
            make = ctx.zeros if zeroed else ctx.empty
            self.buffers[key] = make(*shape, dtype=dtype, name=f"ops.{self.key[0]}.{name}")
        return self.buffers[key]


# Upstream's name of the workspace class (iris.ops.workspace.FusedWorkspace: iris.ops.workspace is this module).
# Its fields are ours: the ops make it (or a preamble does), never the caller.
FusedWorkspace = Workspace
