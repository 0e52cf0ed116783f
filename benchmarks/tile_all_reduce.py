"""A GEMM whose epilogue all-reduces its tile through the device context, against ``ctx.ops.matmul_all_reduce``
and torch + NCCL, every baseline in the same run.

Run with one rank per GPU::

    torchrun --nproc_per_node=2 benchmarks/tile_all_reduce.py            # M = N = K in 1024, 4096, 8192, bf16
    torchrun --nproc_per_node=2 benchmarks/tile_all_reduce.py --check    # the correctness check alone
    torchrun --nproc_per_node=2 benchmarks/tile_all_reduce.py --cpu      # the check on the CPU backend, small shapes

Each rank holds ``A (M, K / world)`` and ``B (K / world, N)`` (K split, as matmul_all_reduce's users hold it) and
every rank ends with ``out = sum over ranks of A @ B``. Ours is one persistent Triton kernel (:func:`gemm_all_reduce`):
each program computes tiles with ``tl.dot`` and hands each finished tile to a tile-level collective of
``iris.DeviceContext`` (:mod:`iris.language.tile_collectives`):

* **one_shot**: the tile (bf16) is published into a staging buffer with a flag; the collective waits for each
  peer's flag of the same tile, reads its tile and writes the sum; ``out`` is this rank's on return;
* **two_shot**: published the same way; the tile's owner (tile index modulo world) sums and writes the result into
  every rank's ``out``; a device barrier after the kernel;
* **atomic**: the fp32 tile is added into every rank's (zeroed) ``out`` with bf16 atomics;
* **gemm**: the same kernel storing its tile with no communication (what the epilogues cost on top of it).

Before each call a device barrier makes sure no peer still polls the flags or reads the staging buffer of the call
before, then the flags (or, for atomic, ``out``) are zeroed and a second device barrier starts the call. Timed as
CUDA-graph replays (:func:`benchmarks.fused_ops.rotated_medians`: median of rotated rounds, the slowest rank's),
against G (``torch.matmul`` alone), S (``torch.matmul`` then NCCL's all_reduce) and ``ctx.ops.matmul_all_reduce``.
Checked first against torch (every rank regenerates the others' operands from their seeds): the largest error
against the exact (fp32) sum of the products may be at most twice that of torch's bf16 matmuls summed, and the
ranks' ``out`` must agree bit for bit for one_shot and two_shot (they add in rank order). The table goes to
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off, for NCCL too

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402

SIZES = (1024, 4096, 8192)  # M = N = K
CPU_SIZES = (64, 96)  # the CPU check: a tile grid that ends inside a tile (96 = 1.5 blocks of 64)
VARIANTS = ("one_shot", "two_shot", "atomic")
GROUP_M = 8  # tiles of 8 row blocks are taken column by column: A's rows stay in L2


@triton.jit
def gemm_all_reduce(A, B, out, staging, locks, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_om,
                    stride_on, context, rank: tl.constexpr, world: tl.constexpr, VARIANT: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """``out`` = sum over ranks of ``A @ B``, each tile all-reduced as soon as it is computed (persistent grid)."""
    ctx = iris.DeviceContext.initialize(context, rank, world)
    dst = iris.make_tensor_view(out, M, N, stride_om, stride_on)
    published = iris.make_tensor_view(staging, M, N, stride_om, stride_on)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for index in range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0)):
        # grouped order (every rank the same, so peers finish the same tiles at about the same time)
        group = index // (GROUP_M * tiles_n)
        rows_in_group = tl.minimum(tiles_m - group * GROUP_M, GROUP_M)
        pid_m = group * GROUP_M + (index % (GROUP_M * tiles_n)) % rows_in_group
        pid_n = (index % (GROUP_M * tiles_n)) // rows_in_group
        rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M  # wrapped: loads need no row/column mask
        rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = A + rm[:, None] * stride_am + rk[None, :] * stride_ak
        b_ptrs = B + rk[:, None] * stride_bk + rn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BLOCK_K, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BLOCK_K, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        if VARIANT == "atomic":
            ctx.all_reduce_atomic(iris.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, acc), dst)
        else:
            # bf16 as every rank publishes it: this rank adds its own part rounded the same way, so the ranks'
            # sums agree bit for bit
            tile = iris.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, acc.to(out.dtype.element_ty))
            if VARIANT == "gemm":
                ptrs, mask = dst.tile_ptr(tile)
                tl.store(ptrs, tile.data, mask=mask)
            else:
                ptrs, mask = published.tile_ptr(tile)
                tl.store(ptrs, tile.data, mask=mask)
                tl.debug_barrier()  # every thread's part of the tile before the flag
                tl.atomic_xchg(locks + pid_m * tiles_n + pid_n, 1, sem="release", scope="sys")
                if VARIANT == "one_shot":
                    ctx.all_reduce_one_shot(tile, published, dst, locks)
                else:
                    ctx.all_reduce_two_shot(tile, published, dst, locks)


class TileAllReduce:
    """Ours at one shape: ``call(variant)`` queues one all-reduced GEMM (flags reset, barriers as the variant needs).

    Examples
    --------
    >>> ours = TileAllReduce(ctx, A, B)             # doctest: +SKIP
    >>> ours("one_shot"); ours.out                  # doctest: +SKIP
    """

    def __init__(self, ctx, A, B, block=None, launch_options=None):
        self.ctx, self.A, self.B = ctx, A, B
        M, N = A.shape[0], B.shape[1]
        self.out, self.staging = ctx.zeros(M, N, dtype=A.dtype), ctx.zeros(M, N, dtype=A.dtype)
        on_gpu = A.is_cuda
        # 128 x 256 tiles, 8 warps, 4 stages where they give every SM one: the fastest of --sweep's shapes on
        # 2xH200 at 4096 and 8192, alone and with one_shot (RESULTS.md, "tile shapes"); 64 x 64 on small products
        # and on the CPU (fewer, cheaper interpreted programs there too)
        self.block = block or ((128, 256, 64) if on_gpu and M * N // (128 * 256) >= ctx.get_cu_count()
                               else (64, 64, 64))
        self.locks = ctx.zeros(triton.cdiv(M, self.block[0]) * triton.cdiv(N, self.block[1]), dtype=torch.int32)
        self.programs = min(ctx.get_cu_count() if on_gpu else 2, self.locks.numel())
        self.launch_options = launch_options if launch_options is not None else (
            {"num_warps": 8, "num_stages": 4} if on_gpu and self.block[0] == 128 else {})

    def __call__(self, variant: str) -> None:
        ctx, A, B, out = self.ctx, self.A, self.B, self.out
        # Zero only once every peer's last kernel is done: after one_shot (no closing barrier) a slow peer may still
        # poll a lock here, and zeroed before it saw the 1 it would wait forever. Then launch only once every rank
        # has zeroed, or a peer could take a lock still at 1 from the last call for this one's.
        ctx.device_barrier()  # no peer still polls these locks or reads the staging buffer of the call before
        (out if variant == "atomic" else self.locks).zero_()
        ctx.device_barrier()  # zeroed everywhere
        block_m, block_n, block_k = self.block
        gemm_all_reduce[(self.programs,)](
            A, B, out, self.staging, self.locks, A.shape[0], B.shape[1], A.shape[1], *A.stride(), *B.stride(),
            *out.stride(), ctx.get_device_context(), rank=ctx.get_rank(), world=ctx.get_num_ranks(), VARIANT=variant,
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=GROUP_M, **self.launch_options)
        if variant in ("two_shot", "atomic"):
            ctx.device_barrier()  # peers write this rank's out: done when every rank's kernel is


def operands(rank: int, size: int, world: int, device) -> tuple:
    """Rank ``rank``'s ``A (size, size / world)`` and ``B (size / world, size)``, bf16, the same wherever made."""
    generator = torch.Generator().manual_seed(rank)
    k = size // world
    A = torch.randn(size, k, generator=generator) / k ** 0.5
    B = torch.randn(k, size, generator=generator)
    return A.to(device, torch.bfloat16), B.to(device, torch.bfloat16)


def check(ctx, ours: TileAllReduce, size: int, variants) -> dict:
    """Each variant's largest error against the exact sum (relative to its largest value), and torch's: raises
    where a variant's is over twice torch's (``torch.matmul`` in bf16, then the sum, as matmul + NCCL computes it),
    or where the ranks' one_shot or two_shot results differ."""
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    products = [operands(r, size, world, ours.A.device) for r in range(world)]
    exact = sum(torch.matmul(A.float(), B.float()) for A, B in products)
    torch_way = sum(torch.matmul(A, B).float() for A, B in products).to(torch.bfloat16)

    def error(result):
        return ((result.float() - exact).abs().max() / exact.abs().max()).item()

    errors = {"torch": error(torch_way)}
    for variant in variants:
        ours.out.fill_(float("nan"))  # nothing of a previous variant's result survives unnoticed
        ctx.barrier()
        ours(variant)
        ctx.barrier()
        errors[variant] = error(ours.out)
        if not errors[variant] <= 2 * errors["torch"] + 2 ** -10:  # (NaN fails too)
            raise AssertionError(f"{variant} at {size}: error {errors[variant]:.2e} relative to the exact sum, "
                                 f"torch's {errors['torch']:.2e}, rank {rank}")
        if variant != "atomic":
            agree = torch.tensor([float(torch.equal(ours.out, _rank0_out(ctx, ours.out)))], device=ours.out.device)
            dist.all_reduce(agree, op=dist.ReduceOp.MIN)
            if agree.item() != 1.0:
                raise AssertionError(f"{variant} at {size}: the ranks' results differ")
    return errors


def _rank0_out(ctx, out):
    """Rank 0's ``out`` as seen from this rank (through the heap: the same bits, no copy of its own)."""
    return ctx.as_remote(out, 0)


def measure(ctx, ours: TileAllReduce, size: int) -> dict:
    """µs per call of every callable at one shape (CUDA-graph replays, the slowest rank's)."""
    from benchmarks.fused_ops import rotated_medians

    A, B = ours.A, ours.B
    product = torch.empty(size, size, dtype=A.dtype, device=A.device)
    out = ctx.zeros(size, size, dtype=A.dtype)
    ctx.ops.matmul_all_reduce(out, A, B)  # allocates its workspace (collective): outside any capture
    calls = {"G": lambda: torch.matmul(A, B, out=product),
             "S": lambda: (torch.matmul(A, B, out=product), dist.all_reduce(product)),
             "ctx.ops": lambda: ctx.ops.matmul_all_reduce(out, A, B),
             "gemm": lambda: ours("gemm"),
             **{variant: (lambda variant=variant: ours(variant)) for variant in VARIANTS}}
    torch.cuda.synchronize()
    ctx.barrier()
    timings, eager = rotated_medians(calls)
    return {"size": size, "timings": timings, "eager": eager}


# (BLOCK_M, BLOCK_N, BLOCK_K), num_warps, num_stages: the shapes Triton's matmul tutorials tune over on Hopper.
SWEEP = [((128, 128, 64), 8, 3), ((128, 128, 64), 4, 4), ((128, 256, 64), 8, 3), ((128, 256, 64), 8, 4),
         ((256, 128, 64), 8, 3), ((64, 256, 64), 4, 4)]


def sweep(ctx, size: int) -> dict:
    """µs per call of the GEMM alone and of one_shot for each entry of :data:`SWEEP` at one size (each checked
    first as :func:`check` does)."""
    from benchmarks.fused_ops import rotated_medians

    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    A, B = operands(rank, size, world, ctx.get_device())
    calls, keep = {}, []
    for block, warps, stages in SWEEP:
        ours = TileAllReduce(ctx, A, B, block, {"num_warps": warps, "num_stages": stages})
        check(ctx, ours, size, ("one_shot",))
        label = f"{block[0]}x{block[1]}x{block[2]} w{warps} s{stages}"
        calls[f"{label} gemm"] = lambda ours=ours: ours("gemm")
        calls[f"{label} one_shot"] = lambda ours=ours: ours("one_shot")
        keep.append(ours)
    torch.cuda.synchronize()
    ctx.barrier()
    return {"size": size, "timings": rotated_medians(calls)[0]}


def sweep_table(rows, world: int) -> str:
    from benchmarks.results import environment

    labels = [f"{b[0]}x{b[1]}x{b[2]} w{w} s{s}" for b, w, s in SWEEP]
    lines = [f"{environment()}; {world} ranks, bf16, M = N = K; µs per call (CUDA-graph replays, the slowest rank's): "
             "the GEMM alone / with one_shot in its epilogue, per tile shape (BLOCK_M x BLOCK_N x BLOCK_K), warps "
             "and pipeline stages. Written by `benchmarks/tile_all_reduce.py --sweep`; TileAllReduce's default "
             "follows it.", "", "| M = N = K | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for row in rows:
        t = row["timings"]
        lines.append(f"| {row['size']} | " + " | ".join(f"{t[label + ' gemm']:.0f} / {t[label + ' one_shot']:.0f}"
                                                          for label in labels) + " |")
    return "\n".join(lines)


def table(rows, world: int) -> str:
    from benchmarks.fused_ops import ROUNDS
    from benchmarks.results import environment

    ours = ("one_shot", "two_shot", "atomic")
    lines = [f"{environment()}; {world} ranks, one per GPU, bf16, M = N = K, each rank A (M, K / {world}) and "
             f"B (K / {world}, N); CUDA-graph replays, µs per call, the slowest rank's (median of {ROUNDS} rotated "
             "rounds). G: torch.matmul alone; S: torch.matmul then NCCL all_reduce (NVLS off); ctx.ops: "
             "ctx.ops.matmul_all_reduce; gemm: our Triton GEMM alone (no communication); one_shot, two_shot, "
             "atomic: the same GEMM with ctx.all_reduce_<variant> on each tile in its epilogue "
             "(benchmarks/tile_all_reduce.py).",
             "", "| M = N = K | G | S | ctx.ops | gemm | one_shot | two_shot | atomic | best tile variant / S | "
             "fastest |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        t = row["timings"]
        best = min(ours, key=lambda v: t[v])
        fastest = min(("S", "ctx.ops", *ours), key=lambda key: t[key])
        eager = f" (eager: {', '.join(row['eager'])})" if row["eager"] else ""
        lines.append(f"| {row['size']} | {t['G']:.0f} | {t['S']:.0f} | {t['ctx.ops']:.0f} | {t['gemm']:.0f} | "
                     + " | ".join(f"{t[v]:.0f}" for v in ours)
                     + f" | {best} {t[best] / t['S']:.2f} | {fastest}{eager} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="the correctness check alone")
    parser.add_argument("--cpu", action="store_true", help="the check on the CPU backend (small shapes)")
    parser.add_argument("--sweep", action="store_true", help="instead: time the GEMM alone and one_shot for each "
                        "tile shape and launch option of SWEEP (GPU), to choose the default by measurement")
    parser.add_argument("--sizes", type=lambda text: [int(s) for s in text.split(",")],
                        help="M = N = K, comma-separated (default: 1024,4096,8192; with --cpu: 64,96)")
    args = parser.parse_args()
    if args.cpu:
        if not triton.knobs.runtime.interpret:  # iris picked the backend when imported, before the kernel was defined
            parser.error("--cpu on a machine with a GPU needs IRIS_BACKEND=cpu in the environment: "
                         "IRIS_BACKEND=cpu torchrun --nproc_per_node=2 benchmarks/tile_all_reduce.py --cpu")
        ctx = iris.iris("64MiB", backend="cpu")
    else:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
        ctx = iris.iris("8GiB", backend="cuda")
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    rows = []
    for size in args.sizes or (CPU_SIZES if args.cpu else SIZES):
        if size % world:
            parser.error(f"--sizes: {size} is not divisible by the {world} ranks (K is split between them)")
        if args.sweep:
            rows.append(sweep(ctx, size))
            continue
        ours = TileAllReduce(ctx, *operands(rank, size, world, ctx.get_device()))
        errors = check(ctx, ours, size, VARIANTS)
        if rank == 0:
            print(f"{size}: largest error relative to the exact sum: "
                  + ", ".join(f"{name} {e:.1e}" for name, e in errors.items()))
        if not (args.check or args.cpu):
            rows.append(measure(ctx, ours, size))
            ctx.ops.release_workspaces()  # the next size's buffers take their heap space
        del ours
        ctx.barrier()
    if rows and rank == 0:
        from benchmarks.results import write_section

        if args.sweep:
            text = sweep_table(rows, world)
            print(text)
            write_section(f"tile_all_reduce ({world} GPUs, tile shapes)", text)
            rows = []
    if rows and rank == 0:
        from benchmarks.results import write_section

        text = table(rows, world)
        print(text)
        write_section(f"tile_all_reduce ({world} GPUs)", text)
    ctx.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
