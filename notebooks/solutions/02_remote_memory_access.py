"""Lesson 02, exercise: gather by hand with iris.get.

One solution, out of the lesson's sight: `%iris solution 02` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel
# One solution.
@triton.jit
def gather(mine, gathered, n, cur_rank, heap_bases, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    for source in tl.static_range(WORLD):
        iris.get(mine + offs, gathered + source * n + offs, cur_rank, source, heap_bases, mask=offs < n)

gathered = ctx.zeros(world_size, N, name="gathered")
ctx.barrier()
gather[(triton.cdiv(N, 64),)](mine, gathered, N, rank, ctx.get_heap_bases(), WORLD=world_size, BLOCK=64)
