"""A first look at symmetric heaps: run with ``torchrun --nproc_per_node=4 examples/heap_demo.py``.

Every rank allocates the same tensor (same offset in every heap) and writes its rank into its right
neighbour's copy through ``as_remote``; rank 0 then reads every rank's copy, again through ``as_remote``.
"""

import torch

import iris

ctx = iris.iris("16MiB")
rank, world = ctx.get_rank(), ctx.get_num_ranks()

inbox = ctx.zeros(8, dtype=torch.float32, name="inbox")
ctx.barrier()
ctx.as_remote(inbox, (rank + 1) % world).fill_(rank)  # a store into the right neighbour's heap
ctx.barrier()

if rank == 0:
    bases = ctx.get_heap_bases().tolist()
    offset = inbox.data_ptr() - bases[0]
    print(f"{world} ranks, {ctx.backend} backend, {ctx.heap_size >> 20} MiB heap per rank, inbox at offset {offset}")
    agree = True
    for r in range(world):
        copy = ctx.as_remote(inbox, r)
        expected = (r - 1) % world
        agree &= bool((copy.cpu() == expected).all()) and copy.data_ptr() == bases[r] + offset
        print(f"  rank {r}: heap base {bases[r]:#x}, inbox holds {copy[:3].tolist()}... written by rank {expected}")
    print(f"all {world} ranks agree" if agree else "MISMATCH between ranks")
ctx.barrier()
