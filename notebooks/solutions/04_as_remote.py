"""Lesson 04, exercise: write through a host as_remote view.

One solution, out of the lesson's sight: `%iris solution 04` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel
# One solution.
ctx.barrier()
if rank == world_size - 1:
    ctx.as_remote(buf, 0)[-1] = -rank
ctx.barrier()
