"""Code that runs inside each rank for tests/test_heap.py (one process per rank, torchrun environment)."""

from __future__ import annotations

import os
import stat
import time
import warnings

import numpy as np
import pytest
import torch
from iris.device import HEAP_SIZE_SLOT

import iris
from iris import tensor_creation

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")  # tests/gpu runs these same cases with "cuda"


def _ctx(heap="4MiB"):
    return iris.iris(heap, backend=BACKEND)


def _cpu(t):
    return t.detach().cpu()


def creation_family():
    ctx = _ctx()
    r, n = ctx.get_rank(), ctx.get_num_ranks()
    made = {
        "zeros": ctx.zeros(3, 4, name="z"),
        "zeros_tuple": ctx.zeros((3, 4), dtype=torch.int32),
        "ones": ctx.ones([5], dtype=torch.float16),
        "full": ctx.full((2, 2), 7),
        "full_f": ctx.full(3, 2.5, dtype=torch.bfloat16),
        "empty": ctx.empty(8, dtype=torch.int64),
        "rand": ctx.rand(4, 4),
        "randn": ctx.randn(16, generator=torch.Generator(device=ctx.device).manual_seed(0)),
        "randint": ctx.randint(3, 9, (50,)),
        "arange": ctx.arange(2, 11, 3),
        "arange1": ctx.arange(5),
        "linspace": ctx.linspace(0, 1, 5),
    }
    base = made["zeros"]
    made.update(
        zeros_like=ctx.zeros_like(base), ones_like=ctx.ones_like(base, dtype=torch.int8),
        empty_like=ctx.empty_like(base), full_like=ctx.full_like(base, 3),
        rand_like=ctx.rand_like(base), randn_like=ctx.randn_like(base),
    )
    for name, t in made.items():
        assert ctx.is_symmetric(t), name
        assert t.is_contiguous(), name
    host = {k: _cpu(v) for k, v in made.items()}
    assert torch.equal(host["zeros"], torch.zeros(3, 4))
    assert host["zeros_tuple"].dtype == torch.int32 and host["zeros_tuple"].shape == (3, 4)
    assert torch.equal(host["ones"], torch.ones(5, dtype=torch.float16))
    assert host["full"].dtype == torch.int64 and bool((host["full"] == 7).all())
    assert host["full_f"].dtype == torch.bfloat16 and bool((host["full_f"] == 2.5).all())
    assert bool(((host["rand"] >= 0) & (host["rand"] < 1)).all())
    if BACKEND == "cpu":  # a CUDA generator draws other numbers
        assert torch.equal(host["randn"], torch.randn(16, generator=torch.Generator().manual_seed(0)))
    assert bool(((host["randint"] >= 3) & (host["randint"] < 9)).all()) and host["randint"].dtype == torch.int64
    assert host["arange"].tolist() == [2, 5, 8] and host["arange1"].tolist() == [0, 1, 2, 3, 4]
    assert torch.allclose(host["linspace"], torch.linspace(0, 1, 5))
    assert host["ones_like"].dtype == torch.int8 and bool((host["ones_like"] == 1).all())
    assert bool((host["full_like"] == 3).all()) and host["full_like"].dtype == torch.float32
    assert ctx.zeros(2, requires_grad=True).requires_grad
    out = ctx.zeros(6)
    filled = ctx.full((2, 3), 5.0, out=out)
    assert filled.data_ptr() == out.data_ptr() and filled.shape == (2, 3) and bool((_cpu(out) == 5).all())
    for bad_out in (torch.zeros(6), ctx.zeros(5)):
        with pytest.raises(RuntimeError, match="The output tensor"):  # upstream's type and words
            ctx.ones(6, out=bad_out)
    assert not ctx.is_symmetric(torch.zeros(3))
    # host API getters and the device context layout
    bases = ctx.get_heap_bases()
    assert bases.dtype == torch.int64 and bases.device == ctx.get_device() and bases.shape == (n,)
    dc = ctx.get_device_context()
    assert dc.dtype == torch.int64 and dc.shape == (2 + n + HEAP_SIZE_SLOT + 1,)  # 17 tracing slots, heap size
    assert dc[:2].tolist() == [r, n] and dc[2:2 + n].tolist() == bases.tolist()
    tracing = dc[2 + n:].tolist()  # zero (tracing off) but for the heap size that debug mode reads (iris.device)
    assert tracing.pop(HEAP_SIZE_SLOT) == ctx.heap_size and not any(tracing)
    if BACKEND == "cpu":
        assert ctx.get_device() == torch.device("cpu") and ctx.get_device_id() is None
    else:
        assert ctx.get_device() == torch.device("cuda", r % torch.cuda.device_count()) == base.device
        assert ctx.get_device_id() == r % torch.cuda.device_count()
    assert ctx.cur_rank == r and ctx.num_ranks == n and ctx.get_cu_count() >= 1
    assert bases[r].item() <= base.data_ptr() < bases[r].item() + ctx.heap_size
    for bad in (dict(device="meta" if BACKEND == "cpu" else "cpu"), dict(layout=torch.sparse_coo)):
        with pytest.raises((RuntimeError, ValueError), match="device mismatch|strided"):
            ctx.zeros(2, **bad)
    if BACKEND == "cpu":  # upstream's device="cuda" is taken on a CPU heap (with a CudaOnCpuHeapNote)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", tensor_creation.CudaOnCpuHeapNote)
            on_heap = ctx.zeros(2, device="cuda")
        assert on_heap.device == torch.device("cpu") and ctx.is_symmetric(on_heap)
    return {
        "offsets": {k: t.data_ptr() - bases[r].item() for k, t in made.items()},
        "bases": bases.tolist(),
        "listing": [(a.offset, a.nbytes, str(a.dtype), list(a.shape), a.label) for a in ctx.heap.allocations()][:2],
    }


def as_remote_host():
    ctx = _ctx()
    r, n = ctx.cur_rank, ctx.num_ranks
    right, left = (r + 1) % n, (r - 1) % n
    buf = ctx.zeros(6, 8, dtype=torch.float32)
    ctx.barrier()
    remote = ctx.as_remote(buf, right)
    assert remote.shape == buf.shape and remote.stride() == buf.stride() and remote.dtype == buf.dtype
    assert remote.data_ptr() - ctx.heap.bases[right] == buf.data_ptr() - ctx.heap.bases[r]
    remote.fill_(100 + r)  # write into the right neighbour's copy
    ctx.barrier()
    assert bool((_cpu(buf) == 100 + left).all()), buf
    # non-contiguous views keep shape, strides and storage offset, and reads/writes land in the owner's copy
    view = buf.t()[2:, ::3]
    remote_view = ctx.as_remote(view, right)
    assert remote_view.shape == view.shape and remote_view.stride() == view.stride()
    assert remote_view.storage_offset() == view.storage_offset()
    ctx.barrier()
    remote_view.copy_(torch.full(view.shape, float(r)))  # host-to-peer copy
    ctx.barrier()
    expected = torch.full((6, 8), 100.0 + left)
    expected.t()[2:, ::3] = float(left)
    assert torch.equal(_cpu(buf), expected), buf
    # a reinterpreted view (other dtype) maps too
    as_int = buf.view(torch.int32)[1]
    assert torch.equal(_cpu(ctx.as_remote(as_int, left)), _cpu(ctx.as_remote(buf, left).view(torch.int32)[1]))
    # reading through as_remote sees the peer's values (the right neighbour's copy is what this rank wrote)
    ctx.barrier()
    written = torch.full((6, 8), 100.0 + r)
    written.t()[2:, ::3] = float(r)
    assert torch.equal(_cpu(ctx.as_remote(buf, right)), written)
    # own rank is a plain alias
    assert ctx.as_remote(buf, r).data_ptr() == buf.data_ptr()
    errors = []
    for bad_rank, why in ((n, "out of range"), (-1, "out of range"), (1.0, "must be an int"), (True, "must be an int")):
        with pytest.raises(ValueError, match=why) as info:
            ctx.as_remote(buf, bad_rank)
        errors.append(str(info.value))
    with pytest.raises(ValueError, match="not on the symmetric heap") as info:
        ctx.as_remote(torch.zeros(3), right)
    errors.append(str(info.value))
    with pytest.raises(ValueError, match="as_remote view"):
        ctx.as_remote(remote, right)
    # copy_2d: a column block (rows apart) into the right neighbour's copy, by the copy engines on a GPU
    block = (torch.arange(12.0).reshape(6, 2) + 10 * r).to(buf.device)
    ctx.barrier()
    ctx.heap.copy_2d(ctx.as_remote(buf, right)[:, 3:5], block)
    ctx.heap.memory.synchronize()
    ctx.barrier()
    assert torch.equal(_cpu(buf[:, 3:5]), torch.arange(12.0).reshape(6, 2) + 10 * left), buf
    with pytest.raises(ValueError, match="unit column stride") as info:
        ctx.heap.copy_2d(buf.t()[:2], block.t())  # columns 8 apart
    errors.append(str(info.value))
    ctx.barrier()
    return errors


def free_and_reuse():
    ctx = _ctx("1MiB")
    offsets = []
    for i in range(20):  # 20 x 512 KiB through a 1 MiB heap only works if memory comes back
        t = ctx.full((128, 1024), float(i), name=f"step{i}")
        offsets.append(t.data_ptr() - ctx.heap.bases[ctx.cur_rank])
        del t
    assert ctx.heap_usage().allocations == 1
    # a view keeps its allocation alive
    keep = ctx.zeros(1000)
    view = keep[10:20]
    del keep
    other = ctx.zeros(1000)
    assert other.data_ptr() != view.data_ptr() - 10 * 4
    labels = [a.label for a in ctx.heap.allocations()]
    del view
    third = ctx.zeros(1000)  # the viewed block is released now and reused
    assert ctx.heap_usage().allocations == 2, ctx.heap_usage()
    del other, third
    # a tensor still referenced on one rank only is not released anywhere
    held = ctx.zeros(256 * 1024 // 4)
    if ctx.cur_rank == 0:
        del held
    filler = ctx.zeros(100)
    still_live = ctx.heap_usage().allocations
    del filler
    return {"offsets": offsets, "labels": labels, "live_after_partial_free": still_live}


def divergence_and_oom():
    ctx = _ctx("1MiB")
    r = ctx.cur_rank
    before = ctx.zeros(10)
    with pytest.raises(iris.AllocationDivergence) as info:
        ctx.zeros(64 if r == 1 else 32)
    divergence = str(info.value)
    with pytest.raises(MemoryError) as info:
        ctx.empty(2 << 20, dtype=torch.uint8)
    oom = str(info.value)
    after = ctx.ones(1000)  # the heap is still usable
    assert ctx.is_symmetric(after) and bool((_cpu(after) == 1).all()) and bool((_cpu(before) == 0).all())
    big = ctx.zeros(200 * 1024)  # most of the heap still fits
    del big
    return {"divergence": divergence, "oom": oom}


def broadcast_values():
    ctx = _ctx("1MiB")
    r = ctx.cur_rank
    tensor = ctx.broadcast(torch.arange(4, device=ctx.device) * (r + 1))
    return {
        "int": ctx.broadcast(42 if r == 0 else None),
        "float": ctx.broadcast(2.5 if r == 1 else None, src=1),
        "obj": ctx.broadcast({"a": [1, 2], "r": r}, source_rank=1),
        "tensor": [type(tensor).__name__, tensor.tolist()],
        "bf16": ctx.broadcast(torch.ones(2, dtype=torch.bfloat16)).tolist(),
        "array": ctx.broadcast(np.array([r, r]), src=1).tolist(),
        "string": ctx.broadcast("hello" if r == 0 else ""),
    }


def logging_lines():
    ctx = _ctx("1MiB")
    iris.set_logger_level(iris.DEBUG)
    ctx.info("info line")
    ctx.debug("debug line")
    iris.set_logger_level(iris.WARNING)
    ctx.info("hidden")
    ctx.warning("warned")
    return True


def heap_file_mode():
    ctx = _ctx("1MiB")
    own = ctx.heap.bases[ctx.cur_rank]
    modes = []
    for entry in os.listdir("/proc/self/map_files"):
        start, _ = (int(x, 16) for x in entry.split("-"))
        if start in ctx.heap.bases:
            st = os.stat(f"/proc/self/map_files/{entry}")
            modes.append(stat.S_IMODE(st.st_mode))
            assert "(deleted)" in os.readlink(f"/proc/self/map_files/{entry}"), "heap file not unlinked"
    assert len(modes) == ctx.num_ranks and own in ctx.heap.bases
    return modes


def wait_to_be_killed():
    ctx = _ctx("1MiB")
    x = ctx.ones(100)
    ctx.barrier()
    print("READY", flush=True)
    time.sleep(120)
    return float(x.sum())


def world_of_one():
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        os.environ.pop(key, None)
    ctx = _ctx("1MiB")
    t = ctx.arange(4)
    return [ctx.num_ranks, ctx.cur_rank, t.tolist(), ctx.as_remote(t, 0).tolist()]


def heap_larger_than_dev_shm():
    with pytest.raises(MemoryError, match="smaller heap_size") as info:
        iris.iris("100TiB", backend="cpu")
    return str(info.value)


def dropped_heaps_are_freed(count: int = 10):
    """``count`` contexts in a row, each heap an eighth of the GPU's free memory (shared by the ranks on it),
    each dropped while still in a reference cycle, as a test or a notebook drops one: more than the GPU holds at
    once unless the dropped heaps are freed before each new one. Returns the heap size used."""
    import torch.distributed as dist

    probe = iris.iris(1 << 20, backend=BACKEND)  # starts torch.distributed (gloo), which the sizes agree over
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
    free = torch.tensor([torch.cuda.mem_get_info()[0] if device is not None else 1 << 30], dtype=torch.int64)
    dist.all_reduce(free, op=dist.ReduceOp.MIN)  # every rank asks for the same size
    sharing = max(1, int(os.environ["WORLD_SIZE"]) // max(1, torch.cuda.device_count())) if device else 1
    size = int(free.item()) // (8 * sharing) // (1 << 20) << 20
    del probe
    for _ in range(count):
        ctx = iris.iris(size, backend=BACKEND)
        ctx.zeros(1024)
        cycle = [ctx]
        cycle.append(cycle)  # alive until the collector runs
        del ctx, cycle
    return {"size": size}
