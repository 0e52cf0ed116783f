"""Lesson 07, exercise: fuse a bias and a ReLU into the GEMM's epilogue.

One solution, out of the lesson's sight: `%iris solution 07` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel
# One solution.
@triton.jit
def gemm_bias_relu_all_scatter(A, B, D, M, N, K, N_LOCAL, cur_rank, heap_bases, WORLD: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(A + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(B + (k + ks)[:, None] * N_LOCAL + cols[None, :])
        acc += tl.dot(a, b)
    acc = tl.maximum(acc + 1.0, 0.0)
    d_ptrs = D + rows[:, None] * N + (cur_rank * N_LOCAL + cols)[None, :]
    for dest in tl.static_range(WORLD):
        iris.store(d_ptrs, acc, cur_rank, dest, heap_bases)

D = ctx.zeros(M, N, name="D")
ctx.barrier()
gemm_bias_relu_all_scatter[grid](A, B_local, D, M, N, K, N_LOCAL, rank, ctx.get_heap_bases(), WORLD=world_size,
                                 BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=32)
ctx.barrier()
