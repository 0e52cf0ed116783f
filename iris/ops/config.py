"""How a fused GEMM + communication op runs: :class:`FusedConfig`, and the :class:`Workspace` it keeps.

Examples
--------
>>> FusedConfig().variant
'auto'
>>> FusedConfig(variant="fused")                          # doctest: +ELLIPSIS
Traceback (most recent call last):
...
NotImplementedError: FusedConfig variant 'fused': there is no single-kernel path here; ...
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .graphs import CallGraphs

VARIANTS = ("auto", "sequential", "chunked")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class FusedConfig:
    """Tile sizes, communication programs and the path of a ``ctx.ops`` call (upstream Iris's ``FusedConfig``).

    Parameters
    ----------
    block_m, block_n, block_k, comm_sms : int
        Upstream's tile sizes and communication programs of its single fused kernel. Accepted (and checked)
        so that upstream code runs unchanged; no path here reads them: the GEMM pieces are cuBLAS's and the
        transfers the copy engines', which take no SM.
    chunks : int or None
        Pieces of the chunked path (row pieces of each rank's block of the product); None: by the shape
        (:func:`iris.ops.choose_path`).
    growth : float or None
        Each piece's rows over the previous piece's (< 1: shrinking, > 1: growing, 1: even); None: the op's
        (:data:`iris.ops.pieces.GROWTH`, whose module says why).
    variant : {"auto", "sequential", "chunked"}
        The path: ``"sequential"`` runs ``torch.matmul`` into a heap buffer, then iris's collective
        (:mod:`iris.ccl`); ``"chunked"`` runs each piece's communication on a second stream while the next
        piece computes (:mod:`iris.ops.chunked`);
        ``"auto"`` picks per op and shape (:func:`iris.ops.choose_path`).
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    comm_sms: int = 16
    chunks: int | None = None
    growth: float | None = None
    variant: str = "auto"

    def __post_init__(self):
        if self.variant == "fused":
            raise NotImplementedError(
                "FusedConfig variant 'fused': there is no single-kernel path here; 'chunked' (cuBLAS pieces, "
                "copy-engine transfers, a flag per piece) is what 'auto' runs on GPUs: use variant='auto', "
                "'sequential' or 'chunked'")
        if self.variant not in VARIANTS:
            raise ValueError(f"FusedConfig variant {self.variant!r}: use one of {', '.join(map(repr, VARIANTS))}")
        for name in ("block_m", "block_n", "block_k", "comm_sms", "chunks"):
            value = getattr(self, name)
            if not (name == "chunks" and value is None) and (not isinstance(value, int) or value < 1):
                raise ValueError(f"FusedConfig {name} must be an int >= 1{' or None' if name == 'chunks' else ''}, "
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
    signals : iris.ops.signals.PieceSignals or None
        The chunked path's per-piece flags.
    graphs : iris.ops.graphs.CallGraphs
        CUDA graphs of repeated eager calls.
    """

    key: tuple
    path: str = "sequential"
    pieces: int = 1
    growth: float = 1.0
    buffers: dict = field(default_factory=dict)
    collective: object = None
    copy_stream: object = None
    signals: object = None
    graphs: CallGraphs = field(default_factory=CallGraphs)

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

    def buffer(self, ctx, name: str, shape, dtype) -> torch.Tensor:
        """The heap buffer ``name`` of this shape and dtype (allocated on the first call that asks for it:
        collective). Its shape is part of its name: calls with another piece count keep their own."""
        key = (name, tuple(shape), dtype)
        if key not in self.buffers:
            self.buffers[key] = ctx.empty(*shape, dtype=dtype, name=f"ops.{self.key[0]}.{name}")
        return self.buffers[key]
