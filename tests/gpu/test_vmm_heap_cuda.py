"""The heap on CUDA virtual memory (``allocator_type="vmem"``, iris.heap.cuda.vmm) on GPUs: our heap cases on it,
a heap that starts small and grows, outside tensors taken in without a copy, and nothing left after.

The rank functions below run inside each rank (tests.multirank); the tests start them. Run on a GPU machine by
tests/gpu/run_gpu_checks.sh.
"""

from __future__ import annotations

import gc
import os
import warnings

import pytest
import torch

from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

VMM = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda", "IRIS_ALLOCATOR": "vmem"}
EXPANDABLE = {**VMM, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
HEAP_CASES = ["creation_family", "as_remote_host", "free_and_reuse", "broadcast_values"]


# -- in the ranks ---------------------------------------------------------------------------------------
def grows_and_refuses_beyond_its_reservation():
    from iris.device import HEAP_SIZE_SLOT

    import iris

    ctx = iris.iris("2MiB", "vmem")
    bases, first = list(ctx.heap.bases), ctx.heap_size
    small = ctx.full((1000,), float(ctx.cur_rank))
    big = ctx.full((4 << 20,), float(ctx.cur_rank) + 0.5)  # 16 MiB in a 2 MiB heap: it grows
    peer = (ctx.cur_rank + 1) % ctx.num_ranks
    ctx.barrier()
    seen = [float(ctx.as_remote(t, peer)[-1]) for t in (small, big)]  # the peer's copy, through its mapping
    assert ctx.heap.bases == bases and ctx.heap_size > first
    assert int(ctx.get_device_context()[2 + ctx.num_ranks + HEAP_SIZE_SLOT]) == ctx.heap_size
    with pytest.raises(MemoryError, match="beyond its reservation") as info:
        ctx.empty(ctx.heap.memory.reservation + 1, dtype=torch.uint8)
    after = ctx.ones(1000)  # still usable
    assert bool((after == 1).all()) and float(big[0]) == ctx.cur_rank + 0.5
    return {"first": first, "grown": ctx.heap_size, "seen": seen, "refusal": str(info.value),
            "reservation": ctx.heap.memory.reservation}


def lesson_grows_a_small_heap():
    """Lesson 10's GEMM + all-reduce kernel (its own %%writefile module) on a 2 MiB heap: its inbox alone needs
    more, so the heap grows under the lesson's allocations; the result is the sum over ranks of A_r @ B_r."""
    import iris
    from benchmarks.lesson_modules import lesson_directory

    lesson_directory("notebooks/10_tp_all_reduce_decode.ipynb")
    import tp_all_reduce

    ctx = iris.iris("2MiB", "vmem")
    first = ctx.heap_size
    m, n, k = 16, 4096, 2048
    first_step = tp_all_reduce.GPU_STEPS["1. first kernel"]
    step = tp_all_reduce.GemmAllReduce(ctx, n, m_max=64, dtype=torch.bfloat16, **first_step)

    def operands(rank):
        g = torch.Generator(device=ctx.get_device()).manual_seed(rank)
        return (torch.randn(m, k, generator=g, device=ctx.get_device(), dtype=torch.bfloat16),
                torch.randn(k, n, generator=g, device=ctx.get_device(), dtype=torch.bfloat16))

    out = torch.empty(m, n, device=ctx.get_device(), dtype=torch.bfloat16)
    step(out, *operands(ctx.cur_rank))
    torch.cuda.synchronize()
    expected = sum(a.float() @ b.float() for a, b in map(operands, range(ctx.num_ranks)))
    error = float((out.float() - expected).abs().max() / expected.abs().max())
    return {"first": first, "grown": ctx.heap_size, "error": error}


def takes_in_an_outside_tensor():
    """as_symmetric on the VMM heap: with expandable segments the same memory (a write to either is seen in the
    other, and by the peer); without, a copy and a warning that says why."""
    import iris

    ctx = iris.iris("4MiB", "vmem")
    outside = torch.randn(500, dtype=torch.float32, device=ctx.get_device())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inside = ctx.as_symmetric(outside)
    shared = not caught
    assert ctx.is_symmetric(inside) and not ctx.is_symmetric(outside)
    outside.fill_(ctx.cur_rank + 7.0)
    torch.cuda.synchronize()
    same_memory = float(inside[123]) == ctx.cur_rank + 7.0
    located = ctx.heap.locate(inside.data_ptr() + 123 * inside.element_size()).element  # the views' naming
    ctx.barrier()
    peer = (ctx.cur_rank + 1) % ctx.num_ranks
    from_peer = float(ctx.as_remote(inside, peer)[499])
    del inside
    later = ctx.zeros(1 << 20)  # the taken-in range is given back at this allocation, fresh memory in its place
    assert bool((later == 0).all())
    return {"shared": shared, "same_memory": same_memory, "from_peer": from_peer, "located": located,
            "warning": str(caught[0].message) if caught else None}


def nothing_left_after_a_heap():
    """VMM heaps made, grown to a quarter of the GPU, used and dropped, five times (more than the GPU holds at
    once): after the first (which loads kernels and starts torch's caches), the GPU's free memory and the open
    descriptors come back to where they were after each."""
    import torch.distributed as dist

    import iris

    def one_heap():
        ctx = iris.iris("64MiB", "vmem")
        grown = ctx.zeros(torch.cuda.mem_get_info()[1] // 4 // 4)  # a quarter of the GPU, in float32: it grows
        ctx.barrier()
        del grown, ctx
        gc.collect()
        torch.cuda.empty_cache()
        dist.barrier()  # every rank has unmapped its peers' heaps: only then is their memory free

    one_heap()
    free_before, fds_before = torch.cuda.mem_get_info()[0], len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        one_heap()
    return {"freed_mib": (torch.cuda.mem_get_info()[0] - free_before) / 2**20,
            "fds": len(os.listdir("/proc/self/fd")) - fds_before}


def allocator_chosen():
    import iris

    os.environ.pop("IRIS_ALLOCATOR", None)
    return iris.iris("2MiB").allocator_type


# -- the tests --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", HEAP_CASES)
def test_our_heap_cases_on_the_vmm_heap(case):
    run_ranks(WORLD, f"tests.rank_cases_heap:{case}", env=VMM)


def test_kernels_read_peers_through_the_vmm_heap():
    results = run_ranks(WORLD, "tests.gpu.rank_cases_cuda:kernel_ring_exchange", env=VMM)
    assert all(r["ok"] for r in results), results


def test_a_small_heap_grows_and_refuses_beyond_its_reservation():
    for rank, r in enumerate(run_ranks(WORLD, f"{__name__}:grows_and_refuses_beyond_its_reservation", env=VMM)):
        assert r["grown"] >= (16 << 20) > r["first"], r
        assert r["seen"] == [float((rank + 1) % WORLD), (rank + 1) % WORLD + 0.5]
        assert "beyond its reservation" in r["refusal"]


def test_a_lesson_grows_a_small_heap():
    for r in run_ranks(WORLD, f"{__name__}:lesson_grows_a_small_heap", env=VMM, timeout=300):
        assert r["grown"] > r["first"] and r["error"] < 0.02, r


def test_as_symmetric_shares_virtual_memory():
    for rank, r in enumerate(run_ranks(WORLD, f"{__name__}:takes_in_an_outside_tensor", env=EXPANDABLE)):
        assert r["shared"] and r["same_memory"] and r["located"] == [123], r  # JSON: the tuple comes back a list
        assert r["from_peer"] == (rank + 1) % WORLD + 7.0


def test_as_symmetric_copies_cudamalloc_memory_saying_why():
    for r in run_ranks(WORLD, f"{__name__}:takes_in_an_outside_tensor", env=VMM):
        assert not r["shared"] and not r["same_memory"]
        assert "expandable_segments" in r["warning"]


def test_nothing_left_on_the_gpu_after_the_heaps():
    for r in run_ranks(WORLD, f"{__name__}:nothing_left_after_a_heap", env=VMM, timeout=300):
        assert r["freed_mib"] > -8 and r["fds"] <= 0, r


def test_dropped_vmm_heaps_are_freed_before_a_new_one():
    """The IPC heap's case (ten heaps of an eighth of the GPU, each dropped in a reference cycle), on VMM heaps."""
    assert all(r["size"] > 0 for r in run_ranks(WORLD, "tests.rank_cases_heap:dropped_heaps_are_freed", env=VMM,
                                                 timeout=300))


def test_the_default_on_cuda_is_the_vmm_heap():
    env = {key: value for key, value in VMM.items() if key != "IRIS_ALLOCATOR"}
    assert run_ranks(WORLD, f"{__name__}:allocator_chosen", env=env) == ["vmem"] * WORLD
