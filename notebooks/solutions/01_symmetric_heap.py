"""Lesson 01, exercise: translate a pointer by hand, write through ctx.as_remote.

One solution, out of the lesson's sight: `%iris solution 01` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel
# One solution.
bases = ctx.get_heap_bases().tolist()
b_on_rank0 = bases[0] + (b.data_ptr() - bases[rank])
ctx.barrier()
if rank == 1:
    ctx.as_remote(b, 0)[0, 0] = -1
ctx.barrier()
