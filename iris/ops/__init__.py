"""GEMM + communication ops, upstream Iris's ``ctx.ops``: a matmul and a collective in one call.

* :func:`matmul_all_reduce`: ``out (M, N) = sum over ranks of A (M, K) @ B (K, N)``;
* :func:`all_gather_matmul`: ``out (M, N) = [A_sharded of rank 0, rank 1, ...] (M, K) @ B (K, N)``, each rank
  holding ``A_sharded (M, K / world)``, its columns of A;
* :func:`matmul_all_gather`: ``out (M * world, N)`` = every rank's ``A (M, K) @ B (K, N)``, stacked in rank order;
* :func:`matmul_reduce_scatter`: ``out (M, N / world)`` = this rank's column block of the sum over ranks of
  ``A @ B``; or, in upstream's form, a full ``(M, N)`` ``out`` of which this rank's tiles get the sum
  (:mod:`iris.ops.owned_tiles`).

Upstream's preambles (:func:`matmul_all_reduce_preamble`, :func:`all_gather_matmul_preamble`,
:func:`matmul_all_gather_preamble`, :func:`matmul_reduce_scatter_preamble`) make a workspace before the calls;
:mod:`iris.ops.all_gather_matmul_hbm_buffer` is all_gather_matmul's chunked path under upstream's name for its
staged kernel. Upstream's per-op modules (``iris.ops.matmul_reduce_scatter``...) are this module under those
paths (:mod:`iris.upstream`), so ``from iris.ops.matmul_reduce_scatter import matmul_reduce_scatter``
gives the function below.

Each is a function taking the context first (``iris.ops.matmul_all_reduce(ctx, out, A, B)``) and a method of
``ctx.ops`` (``ctx.ops.matmul_all_reduce(out, A, B)``); every rank calls it with the same shapes. fp16, bf16
and fp32, any sizes (``N`` a multiple of the world size for reduce-scatter, ``K`` for all-gather-matmul's
shards by construction). Inputs are left intact.

**Bias**, one meaning for every op and path (upstream Iris's formulas: ``all_reduce(A @ B + bias)``,
``all_gather(A @ B + bias)``, ``reduce_scatter(A @ B + bias)``, ``all_gather(A_sharded) @ B + bias``): a rank's
``bias`` (N,) goes with that rank's own product, before any communication. So matmul_all_reduce and
matmul_reduce_scatter sum every rank's bias with the products (the same bias on every rank counts ``world``
times: pass it on one rank only, ``bias=None`` on the others, to add it once); matmul_all_gather's rows from
rank s carry rank s's bias; all_gather_matmul's product is computed on each rank, which adds its own bias. The
result never depends on the path.

Each call returns its :class:`Workspace` (its ``path`` says how it ran); ``ctx.ops`` keeps one per op and
shapes, so repeated calls allocate nothing and, after the first, can be captured in a CUDA graph. On GPUs an
eager call repeated with the same tensors replays a CUDA graph of itself (:mod:`iris.ops.graphs`): one launch
instead of the host work of queueing each piece.

**Paths** (``workspace.path`` says which ran; :func:`choose_path` picks):

* ``"sequential"``: ``torch.matmul`` into a heap buffer, then :mod:`iris.ccl`'s collective; every op, every backend;
* ``"chunked"`` (:mod:`iris.ops.chunked`): the GEMM in pieces (cuBLAS; :mod:`iris.ops.pieces` says how many and
  how big), each piece sent by the copy engines on a second stream while the next computes, and consumed by its
  owner as it lands; every op;
* ``"peers_first"`` (:mod:`iris.ops.peers_first`): matmul_reduce_scatter as one Triton kernel whose programs
  compute the peers' tiles first and store them into their inboxes, the owner summing as they land (lesson 13's
  last step); taken where the GEMM is small (2048^3 a rank or less), whose host steps and launches the other
  paths cannot hide.

For large GEMMs no single fused kernel is built: cuBLAS pieces with copy-engine transfers keep the GEMM at cuBLAS
speed and give the communication no SM; ``benchmarks/fused_ops.py`` says where each op stands against a matmul
followed by NCCL.

Examples
--------
>>> out = ctx.zeros(M, N, dtype=torch.bfloat16)                         # doctest: +SKIP
>>> ws = ctx.ops.matmul_all_reduce(out, A, B)                            # doctest: +SKIP
>>> ws.path                                                              # doctest: +SKIP
'sequential'
"""

# Upstream's names beyond the ops: iris.ops.OpsNamespace, the class of ctx.ops (its API reference documents
# iris.ops.OpsNamespace.matmul_all_reduce...), and its staged all-gather + GEMM (our chunked path under its names;
# like upstream, iris.ops.all_gather_matmul_hbm_buffer is the function, and its module stays importable by path).
from .all_gather_matmul_hbm_buffer import all_gather_matmul_hbm_buffer, all_gather_matmul_hbm_buffer_preamble
from .config import FusedConfig, FusedWorkspace, Workspace
from .fused import (
    all_gather_matmul,
    all_gather_matmul_preamble,
    choose_path,
    matmul_all_gather,
    matmul_all_gather_preamble,
    matmul_all_reduce,
    matmul_all_reduce_preamble,
    matmul_reduce_scatter,
    matmul_reduce_scatter_preamble,
)
from .namespace import Ops as OpsNamespace

__all__ = ["FusedConfig", "FusedWorkspace", "OpsNamespace", "Workspace", "all_gather_matmul",
           "all_gather_matmul_hbm_buffer", "all_gather_matmul_hbm_buffer_preamble", "all_gather_matmul_preamble",
           "choose_path", "matmul_all_gather", "matmul_all_gather_preamble", "matmul_all_reduce",
           "matmul_all_reduce_preamble", "matmul_reduce_scatter", "matmul_reduce_scatter_preamble"]
