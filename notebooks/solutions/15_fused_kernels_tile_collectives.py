"""Lesson 15, exercise: reduce-scatter in the epilogue.

One solution, out of the lesson's sight: `%iris solution 15` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel
# One solution.
from fused_gemm import tile_of_product


@triton.jit
def gemm_reduce_scatter(A, B, out, published, locks, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                        stride_om, stride_on, context, rank: tl.constexpr, world: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, rank, world)
    dst = iris.make_tensor_view(out, M, N, stride_om, stride_on)
    src = iris.make_tensor_view(published, M, N, stride_om, stride_on)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for t in range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tiles_n, tl.num_programs(0)):
        pid_m, pid_n = t // tiles_n, t % tiles_n
        acc = tile_of_product(A, B, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                              BLOCK_M, BLOCK_N, BLOCK_K)
        tile = iris.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, acc.to(out.dtype.element_ty))
        ptrs, mask = src.tile_ptr(tile)
        tl.store(ptrs, tile.data, mask=mask)
        tl.debug_barrier()
        tl.atomic_xchg(locks + t, 1, sem="release", scope="sys")
        ctx.reduce_scatter(tile, src, dst, locks)


fused.prepare("one_shot")                        # locks zeroed, every rank past a device barrier
fused.out.fill_(-1)
gemm_reduce_scatter[(fused.programs,)](A, B, fused.out, fused.published, fused.locks, M, N, K, *A.stride(),
                                       *B.stride(), *fused.out.stride(), ctx.get_device_context(), rank=rank,
                                       world=world_size, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
ctx.barrier()
