"""Lesson 06, exercise: a one-shot all-gather.

One solution, out of the lesson's sight: `%iris solution 06` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel
# One solution.
@triton.jit
def one_shot_all_gather(x, out, n, cur_rank, heap_bases, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    for source in tl.static_range(WORLD):
        iris.get(x + offs, out + source * n + offs, cur_rank, source, heap_bases, mask=mask)

mine_gathered = ctx.zeros(world_size * N, name="mine_gathered")
ctx.barrier()
one_shot_all_gather[(triton.cdiv(N, 256),)](x, mine_gathered, N, rank, ctx.get_heap_bases(), WORLD=world_size, BLOCK=256)
ctx.barrier()
