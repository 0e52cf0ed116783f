"""Lesson 08, exercise: an all-gather called twice, made race-free.

One solution, out of the lesson's sight: `%iris solution 08` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel --check races
# One solution:
# a barrier at the start of every step. The race is between step 1's store into a peer's
# `gathered` and that peer's load of `gathered` in step 0. The acquire that lets a rank start step 1 only says
# that every rank has *sent* its step-0 block; the peer's loads come after its send, so nothing says that it
# has finished *reading*. On a GPU, a slow peer sums a `gathered` that is partly step 0's and partly step 1's.
# The barrier makes every rank's step-0 kernel, loads included, happen before any rank's step-1 stores. (Without
# a host barrier: a second counter, `done`, that each rank raises with a release after reading and that
# writers acquire before writing; or two `gathered` buffers used in turn, which still needs such a counter
# before a buffer's reuse.)
def gather_twice():
    arrived.zero_()
    ctx.barrier()
    for step in range(STEPS):
        ctx.barrier()      # every rank has finished reading the previous step's gathered
        mine.fill_(10 * step + rank)
        all_gather_sum[(1,)](mine, gathered, arrived, sums, step, rank, ctx.get_heap_bases(), world_size, BLOCK)
    ctx.barrier()

gather_twice()
print("sums", sums.tolist())
