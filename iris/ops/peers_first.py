"""matmul_reduce_scatter in one Triton kernel, the peers' tiles first: what lesson 13's last step does, for the
shapes too small for the chunked path to overlap anything.

Each program computes one tile of this rank's product ``A @ B`` (fp32, its bias added) in the column block that a
peer owns and stores it into that peer's inbox (its slot for this rank), then raises the tile's flag there; the
programs of the peers' blocks come first (rank + 1's, rank + 2's, ...), this rank's own block last. An own tile's
program adds each peer's copy of its tile once that copy's flag is up, long since in the common case, and writes
the sum into ``out``: one launch, no host step, the transfers and the peers' GEMMs overlapped tile by tile.

Why: on the sequential path (``world`` narrow cuBLAS GEMMs into a heap buffer, iris.ccl's reduce_scatter, a copy
into ``out``) lesson 13's GEMM + reduce-scatter took 59.8 µs on 4x H200 where the lesson's own kernel took 54.9
(70.8 against 68.3 on 2; benchmarks/RESULTS.md "Lessons against torch + NCCL"). Its shape (2048 x 2048 x 2048 a
rank) is too shallow for the chunked path: a row's GEMM would not hide its push (:func:`iris.ops.pieces.overlaps`).

Calls in a row need no barrier: the inbox holds two halves, by the parity of the call's count, and a rank writes a
peer's half of call k again at call k + 2, after its own tiles of call k + 1 waited on that peer's tiles of call
k + 1, which the peer computes only after its call k (and its reading of that half) ended: stream order.

The stores into a peer's inbox are 16 bytes wide where its rows allow it (``n_local`` elements of a multiple of 16
bytes): without that, 2-byte stores over NVLink made the kernel 9 times slower on 4x H200 (500 against 55 µs at
lesson 13's shape), as lesson 13's first kernel is.

Precision: each peer's tile is rounded to ``out``'s dtype once before it travels (as the sequential path's GEMM
rounds its product); the sum is in fp32, rounded once.

Examples
--------
>>> iris.ops.matmul_reduce_scatter(ctx, out, A, B, config=iris.ops.FusedConfig(variant="peers_first"))  # doctest: +SKIP
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..language.core import DeviceContext
from ..language.flags import signal, wait

# The tile of lesson 13's last step, chosen there by measurement on 2x H200 (benchmarks/lesson13_steps.py --sweep):
# 128 x 128 x 64, 8 warps, 4 stages, for 2-byte dtypes; float32 takes half the depth (its 4 stages of 64 would
# need 256 KiB of shared memory, over an H100's or H200's 227). The CPU interpreter takes small tiles (its time
# grows with the tile).
GPU_TILE = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4)
GPU_TILE_FP32 = dict(GPU_TILE, BLOCK_K=32)
CPU_TILE = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, num_warps=4)


def tile_of(ctx, dtype: torch.dtype) -> dict:
    """The kernel's tile and launch options for ``dtype`` on ``ctx``'s backend."""
    if ctx.backend != "cuda":
        return CPU_TILE
    return GPU_TILE_FP32 if dtype.itemsize == 4 else GPU_TILE


@triton.jit
def peers_first_kernel(context, A, B, bias, out, inbox, flags, epochs, M, N_LOCAL, K, stride_am, stride_ak,
                       stride_bk, stride_bn, stride_om, stride_on, rank: tl.constexpr, world: tl.constexpr,
                       HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, WIDE: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    dctx = DeviceContext.initialize(context, rank, world)
    pid = tl.program_id(0)
    now = tl.load(epochs + pid) + 1
    tiles_n = tl.cdiv(N_LOCAL, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    owner = (rank + 1 + pid // tiles) % world  # the peers' blocks first, this rank's own last
    tile = pid % tiles
    rows = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)  # within the owner's column block
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(A + rows[:, None] * stride_am + (k + ks)[None, :] * stride_ak,
                    mask=(rows < M)[:, None] & (k + ks < K)[None, :], other=0.0)
        b = tl.load(B + (k + ks)[:, None] * stride_bk + (owner * N_LOCAL + cols)[None, :] * stride_bn,
                    mask=(k + ks < K)[:, None] & (cols < N_LOCAL)[None, :], other=0.0)
        acc += tl.dot(a, b, input_precision=PRECISION)
    if HAS_BIAS:
        acc += tl.load(bias + owner * N_LOCAL + cols, mask=cols < N_LOCAL, other=0.0).to(tl.float32)[None, :]
    inside = (rows < M)[:, None] & (cols < N_LOCAL)[None, :]
    at = rows[:, None] * N_LOCAL + cols[None, :]
    half = inbox + (now % 2) * world * M * N_LOCAL  # this call's half: [world, M, N_LOCAL], a slot per source
    if owner != rank:
        if WIDE:  # rows of the tile contiguous and 16-byte aligned in the inbox: 16-byte stores over the link
            dctx.store(half + rank * M * N_LOCAL + at, acc.to(inbox.dtype.element_ty), owner, mask=inside,
                       hint=(1, BLOCK_N))
        else:
            dctx.store(half + rank * M * N_LOCAL + at, acc.to(inbox.dtype.element_ty), owner, mask=inside)
        signal(dctx, flags + rank * tiles + tile, now, owner)
    else:
        for step in tl.static_range(1, world):
            source = (rank + step) % world
            wait(dctx, flags + source * tiles + tile, now)
            acc += tl.load(half + source * M * N_LOCAL + at, mask=inside, other=0.0).to(tl.float32)
        tl.store(out + rows[:, None] * stride_om + cols[None, :] * stride_on, acc.to(out.dtype.element_ty), mask=inside)
    tl.store(epochs + pid, now)


def programs(ctx, m: int, n_local: int) -> int:
    """The kernel's programs for an ``out`` of ``m x n_local``: a tile of it for every rank, this rank's included
    (every dtype's tile is as wide and as tall).

    Examples
    --------
    >>> programs(ctx, 2048, 512)      # 4 ranks on GPUs: 16 x 4 tiles of 128 x 128, 4 times   # doctest: +SKIP
    256
    """
    tile = GPU_TILE if ctx.backend == "cuda" else CPU_TILE
    return ctx.num_ranks * triton.cdiv(m, tile["BLOCK_M"]) * triton.cdiv(n_local, tile["BLOCK_N"])


# "auto" takes this path for GEMMs of at most this many flops a rank (lesson 13's 2048^3), with programs for at least
# a quarter of the SMs (1024^3 on 4 ranks, 64 programs, won; fewer not measured). 4x H200 (2026-11-28, bf16, µs, one
# kernel against sequential; benchmarks/RESULTS.md "matmul_reduce_scatter in one kernel (4 and 2 GPUs)"): won at
# 2048^3 (56.7 against 60.9), 1024^3 (19.7 against 29.2) and 512 x 4096 x 4096 (45.7 against 57.2); lost at 4096 x
# 4096 x 1024 (171 against 157) and 2048 x 8192 x 2048 (215 against 198), where cuBLAS's GEMM outruns this kernel's
# tiles by more than the collective it saves. On 2x H200 alike: 46.5 against 48.1, 16.2 against 18.4, 40.1 against
# 47.7; 125.8 against 124.0.
MOST_FLOPS = 2 * 2048 ** 3


def pays(ctx, m: int, n_local: int, k: int) -> bool:
    """Whether ``"auto"`` takes this path for a matmul_reduce_scatter of an ``m x n_local`` out and depth ``k`` that
    the chunked path would not take: on GPUs, for a GEMM of at most :data:`MOST_FLOPS` a rank whose tiles give at
    least a quarter of the SMs a program (fewer run longer K loops, where cuBLAS would split K: not measured).

    Examples
    --------
    >>> pays(ctx, 2048, 512, 2048), pays(ctx, 4096, 1024, 1024)       # 4 ranks on H200s   # doctest: +SKIP
    (True, False)
    """
    flops = 2 * m * n_local * ctx.num_ranks * k
    return (ctx.backend == "cuda" and flops <= MOST_FLOPS
            and 4 * programs(ctx, m, n_local) >= ctx.get_cu_count())


def matmul_reduce_scatter(ctx, out, A, B, bias, async_op, workspace):
    """out (M, N / world) = this rank's column block of the sum over ranks of (A @ B + bias), each rank's bias
    added to its own product before the sum; one kernel (see the module's text). Complete on this rank when the
    kernel ends (``async_op`` changes nothing: no peer reads this rank's buffers after its own call)."""
    world, rank = ctx.num_ranks, ctx.cur_rank
    m, n_local = out.shape
    tile = tile_of(ctx, out.dtype)
    grid = programs(ctx, m, n_local)
    inbox = workspace.buffer(ctx, "inbox", (2, world, m, n_local), out.dtype)
    flags = workspace.buffer(ctx, "tile_flags", (world, grid // world), torch.int32, zeroed=True)
    epochs = workspace.buffer(ctx, "tile_epochs", (grid,), torch.int32, zeroed=True)
    peers_first_kernel[(grid,)](
        ctx.get_device_context(), A, B, bias if bias is not None else out, out, inbox, flags, epochs, m, n_local,
        A.shape[1], A.stride(0), A.stride(1), B.stride(0), B.stride(1), out.stride(0), out.stride(1), rank=rank,
        world=world, HAS_BIAS=bias is not None, PRECISION=precision(),
        WIDE=(n_local * inbox.element_size()) % 16 == 0 and inbox.data_ptr() % 16 == 0, **tile)


def precision() -> str:
    """fp32 products as torch.matmul makes them: TF32 only where torch allows it (its default: not)."""
    return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
