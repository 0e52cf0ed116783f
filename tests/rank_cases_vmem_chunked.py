"""Code that runs inside each rank for tests/test_vmem_chunked.py: upstream Iris's ``allocator_type="vmem_chunked"``
(its PR #516 and tests/unittests/test_vmem_chunked_allocator.py) as programs use it: ``chunk_size``, the allocator's
``granularity``, ``get_num_chunks``, ``get_stats``, growth a chunk at a time at fixed bases, and remote access into
chunks mapped after the start.

``IRIS_TEST_BACKEND=cuda`` runs the same cases on GPUs (tests/gpu/test_vmem_chunked_cuda.py).
"""

from __future__ import annotations

import gc
import os

import pytest
import torch
import triton
import triton.language as tl

import iris

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")
STATS = {"num_chunks", "mapped_bytes", "bump", "num_active_allocs", "num_free_blocks", "free_bytes", "va_size",
         "chunk_size", "granularity"}


@triton.jit
def read_peer(src, out, heap_bases, rank, peer, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, iris.load(src + offs, rank, peer, heap_bases, mask=mask), mask=mask)


def _sync(ctx):
    if ctx.get_device().type == "cuda":
        torch.cuda.synchronize()
    ctx.barrier()


def chunked_heap():
    """Every point of upstream's tests that a heap of ours can honour, on every rank."""
    ctx = iris.iris(1 << 20, allocator_type="vmem_chunked", backend=BACKEND)
    r, n = ctx.get_rank(), ctx.get_num_ranks()
    peer = (r + 1) % n
    alloc = ctx.heap.allocator
    done = {"allocator_type": ctx.allocator_type, "granularity": alloc.granularity, "chunk_size": alloc.chunk_size,
            "heap_size": ctx.heap_size}
    assert alloc.granularity > 0 and alloc.granularity & (alloc.granularity - 1) == 0
    assert alloc.chunk_size % alloc.granularity == 0 and ctx.heap_size % alloc.chunk_size == 0
    stats = alloc.get_stats()
    assert set(stats) == STATS, stats
    assert stats["num_chunks"] == alloc.get_num_chunks() >= 1 and stats["mapped_bytes"] == ctx.heap_size
    assert stats["va_size"] >= ctx.heap_size and stats["granularity"] == alloc.granularity

    # allocation, data, no overlap, dtypes, empty tensors
    tensors = [ctx.full((256,), float(i)) for i in range(20)]
    assert all(bool((t == float(i)).all()) for i, t in enumerate(tensors))
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64):
        assert ctx.zeros(100, dtype=dtype).dtype == dtype
    assert ctx.zeros(0).numel() == 0
    assert alloc.owns_tensor(tensors[0]) and not alloc.owns_tensor(torch.zeros(4, device=ctx.get_device()))
    stats = alloc.get_stats()
    assert stats["num_active_allocs"] >= 20 and stats["bump"] > 0
    del tensors

    # memory comes back: the same place for the same sizes (upstream's free lists; here, the allocator's first fit)
    first = ctx.zeros(1024)
    where = first.data_ptr()
    del first
    gc.collect()
    assert ctx.zeros(1024).data_ptr() == where
    unit = max(1, alloc.granularity // 4)  # upstream's size classes: 1, 4 and 16 granules of float32
    sizes = (unit, unit * 4, unit * 16)
    if sum(sizes) * 4 < ctx.heap_size // 2:
        made = [ctx.zeros(size) for size in sizes]
        places = [t.data_ptr() for t in made]
        del made
        gc.collect()
        again = [ctx.zeros(size) for size in sizes]  # held, so that each is placed beside the others
        assert [t.data_ptr() for t in again] == places
        del again
    gc.collect()
    ctx.zeros(1)  # releases what no rank holds
    assert alloc.get_stats()["num_free_blocks"] >= 1

    # growth a chunk at a time, at fixed bases; a peer reaches the new chunks (host view and a kernel)
    bases, chunks = list(ctx.heap.bases), alloc.get_num_chunks()
    grown = []
    while alloc.get_num_chunks() <= chunks:
        grown.append(ctx.full((32768,), float(r + 1)))  # 128 KiB each
    done["chunks"] = [chunks, alloc.get_num_chunks()]
    assert alloc.get_num_chunks() == chunks + 1, "one chunk at a time"
    assert ctx.heap.bases == bases and ctx.heap_size == alloc.get_num_chunks() * alloc.chunk_size
    assert alloc.get_stats()["mapped_bytes"] == ctx.heap_size
    last = grown[-1]
    _sync(ctx)
    seen = ctx.as_remote(last, peer)
    assert float(seen[0]) == float(seen[-1]) == peer + 1
    out = torch.zeros(1024, device=ctx.get_device())
    read_peer[(1,)](last, out, ctx.get_heap_bases(), r, peer, 1024, BLOCK=1024)
    _sync(ctx)
    assert bool((out == peer + 1).all())
    done["peer_read"] = True

    # beyond the reservation: a MemoryError that says so, on every rank, and the heap still usable
    with pytest.raises(MemoryError, match="beyond its reservation"):
        ctx.empty(alloc.get_stats()["va_size"] + 1, dtype=torch.uint8)
    assert bool((ctx.ones(1000) == 1).all())
    if ctx.get_device().type == "cpu":
        with pytest.raises(NotImplementedError, match="the race checker's shadow state is sized when it starts"):
            ctx.start_race_check()
    ctx.barrier()
    return done


def chunk_size_from_the_environment():
    """IRIS_VMEM_CHUNK_SIZE (the test sets 256 KiB) picks the chunk, at least a granule: a 1 MiB heap starts with
    whole chunks and grows by the chunks three tensors of 1 MiB need."""
    ctx = iris.iris(1 << 20, allocator_type="vmem_chunked", backend=BACKEND)
    alloc = ctx.heap.allocator
    start = {"chunk_size": alloc.chunk_size, "chunks": alloc.get_num_chunks(), "granularity": alloc.granularity}
    keep = [ctx.full((1 << 18,), float(i)) for i in range(3)]  # 1 MiB each
    assert all(bool((t == i).all()) for i, t in enumerate(keep))
    ctx.barrier()
    return {**start, "after": alloc.get_num_chunks(), "heap_size": ctx.heap_size}
