"""Lesson 13, exercise: the local tile first.

One solution, out of the lesson's sight: `%iris solution 13` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel --trace
# One solution.
from sequence_parallel import multiply_tile, send_my_tile


@triton.jit
def ag_gemm_local_first(context, X_local, A, W, Y, flags, epoch, K, N, rank: tl.constexpr, world: tl.constexpr,
                        LOCAL_TILES: tl.constexpr, N_TILES: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, TRACE: tl.constexpr):
    dctx = DeviceContext.initialize(context, rank, world, tracing=TRACE)
    i, j = tl.program_id(0) // N_TILES, tl.program_id(0) % N_TILES
    now = tl.load(epoch)
    if j == 0:
        send_my_tile(dctx, X_local, A, flags, i, now, K, rank, world, LOCAL_TILES, BLOCK_M, BLOCK_K)
    for step in tl.static_range(world):
        src = (rank + step) % world                                  # mine first, then rank + 1, rank + 2, ...
        multiply_tile(dctx, X_local, A, W, Y, flags, src, i, j, now, K, N, rank, LOCAL_TILES, BLOCK_M,
                      BLOCK_N, BLOCK_K, TRACE)


all_gather_gemm(Y, X_local, W1_local, kernel=ag_gemm_local_first)
Y_local_first = Y.clone()
