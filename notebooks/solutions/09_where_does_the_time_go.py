"""Lesson 09, exercise: shorten the critical path: split the tiles evenly.

One solution, out of the lesson's sight: `%iris solution 09` loads it into a notebook cell
(the text after this docstring)."""
%%iris_kernel --trace
# One solution.
TILES_OF = [2, 2]
first_tile, my_tiles = sum(TILES_OF[:rank]), TILES_OF[rank]
start_clean()
produce()
consume(next_layer_wait_each)
ctx.barrier()
Y_even = Y.clone()
