"""Code that runs inside each rank for tests/test_symmetric_memory.py: ``ctx.allocate_symmetric`` and its tables
driving every spelling of the device API, as upstream Iris's tests of it (#549-#551) and of its providers ask.

``IRIS_TEST_BACKEND=cuda`` runs the same cases on GPUs (tests/gpu/test_symmetric_memory_cuda.py).
"""

from __future__ import annotations

import os

import pytest
import torch
from iris.experimental.symmetric_memory import SymmetricAddressMap
from iris.experimental.torch_symm_mem_provider import TorchSymmMemProvider

import iris
from tests import symmetric_memory_kernels as k

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")


def _sync(ctx):
    if ctx.get_device().type == "cuda":
        torch.cuda.synchronize()
    ctx.barrier()


WARP = 32  # NVIDIA's warp width (the interpreter ignores layouts)


def tables_and_kernels():
    """Every point of upstream's allocate_symmetric tests, then the same kernels through iris's device API."""
    ctx = iris.iris("16MiB", backend=BACKEND)
    r, n = ctx.get_rank(), ctx.get_num_ranks()
    target, source = (r + 1) % n, (r - 1) % n
    done = {}

    # the table: one int64 entry per rank on the context's device, this rank's the tensor's address, one offset
    tensor, peer_bases = ctx.allocate_symmetric(1024, dtype=torch.float32)
    assert tensor.shape == (1024,) and tensor.dtype == torch.float32 and ctx.is_symmetric(tensor)
    assert peer_bases.numel() == n and peer_bases.dtype == torch.int64 and peer_bases.device == ctx.get_device()
    assert int(peer_bases[r]) == tensor.data_ptr()
    heap_bases = ctx.get_heap_bases()
    assert len({int(peer_bases[p]) - int(heap_bases[p]) for p in range(n)}) == 1
    assert int(peer_bases._base[0]) == 1024 * 4  # the allocation's bytes before the table, for debug checks
    assert ctx.allocate_symmetric((2, 3), dtype=torch.int32)[0].shape == (2, 3)
    assert ctx.allocate_symmetric(5)[0].dtype == torch.get_default_dtype()
    amap = ctx.symmetric_address_map(tensor[100:])  # a view: anchored on its allocation
    assert isinstance(amap, SymmetricAddressMap) and amap.allocation_base == tensor.data_ptr()
    assert amap.allocation_bytes == 4096 and amap.all_direct() and amap.indirect_peers() == []
    assert amap.direct == (True,) * n and amap.local_rank == r and amap.world_size == n
    assert amap.owns(tensor[100:]) and not amap.owns(torch.zeros(4, device=ctx.get_device()))
    assert torch.equal(amap.peer_bases.cpu(), peer_bases.cpu())
    context = amap.device_context()
    assert context[:2].tolist() == [r, n] and context[2:2 + n].tolist() == peer_bases.tolist()
    assert int(context[-1]) == 4096
    with pytest.raises(ValueError, match="not on the symmetric heap"):
        ctx.symmetric_address_map(torch.zeros(4, device=ctx.get_device()))

    # a view translates against its allocation: the peer's region from the view on gets the data, not before it
    src, _ = ctx.allocate_symmetric(512, dtype=torch.float32)
    dst, dst_peers = ctx.allocate_symmetric(512, dtype=torch.float32)
    src.fill_(r + 1)
    dst.fill_(-1)
    view = dst[128:]
    assert view.data_ptr() != int(dst_peers[r])
    _sync(ctx)
    k.put_by_hand[(1,)](src, view, dst_peers, view.numel(), target, CUR_RANK=r, BLOCK=512)
    _sync(ctx)
    assert bool((dst[128:] == source + 1).all()) and bool((dst[:128] == -1).all())
    done["view"] = True

    # a remote put with each dtype, masked (200 of 256) and whole
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for count in (256, 200):
            src, _ = ctx.allocate_symmetric(count, dtype=dtype)
            dst, dst_peers = ctx.allocate_symmetric(count, dtype=dtype)
            src.fill_(r + 1)
            dst.fill_(-1)
            _sync(ctx)
            k.put_by_hand[(1,)](src, dst, dst_peers, count, target, CUR_RANK=r, BLOCK=256)
            _sync(ctx)
            assert bool((dst == source + 1).all()), (dtype, count, dst[:4].tolist())
            if n > 1:
                assert float(dst[0]) != r + 1  # the write left this rank
    done["dtypes"] = True

    # two tensors, two tables, one kernel: through the functional API, DeviceContext and Gluon
    for how in ("functional", "device_context", "gluon"):
        a, a_map = ctx.allocate_symmetric_map(k.BLOCK, dtype=torch.float32)
        b, b_map = ctx.allocate_symmetric_map(k.BLOCK, dtype=torch.float32)
        a.fill_(r + 1)
        b.fill_(-1)
        _sync(ctx)
        if how == "functional":
            k.scale_peer_functional[(1,)](a, a_map.peer_bases, b, b_map.peer_bases, k.BLOCK, target, r, BLOCK=k.BLOCK)
        elif how == "device_context":
            k.scale_peer_device_context[(1,)](a_map.device_context(), a, b_map.device_context(), b, k.BLOCK, target,
                                              rank=r, world=n, BLOCK=k.BLOCK)
        else:
            k.scale_peer_gluon[(1,)](iris.gluon.IrisDeviceCtx, a_map.device_context(), a, b_map.device_context(), b,
                                     k.BLOCK, target, BLOCK=k.BLOCK, WARP=WARP, num_warps=1)
        _sync(ctx)
        # written by the rank targeting this one, which read this rank's a (r + 1) and doubled it
        assert bool((b == 2 * (r + 1)).all()), (how, b[:4].tolist())
        assert bool((a == r + 1).all())
        done[how] = True

    # atomics through a table
    counter, counter_peers = ctx.allocate_symmetric(1, dtype=torch.int32)
    counter.zero_()
    _sync(ctx)
    k.atomic_add_everywhere[(1,)](counter, counter_peers, r, world=n)
    _sync(ctx)
    assert int(counter[0]) == n
    done["atomics"] = True

    # torch's symmetric memory needs CUDA: refused on the CPU backend, saying what to use
    if ctx.get_device().type != "cuda":
        with pytest.raises(RuntimeError, match="allocates CUDA memory only.*ctx.allocate_symmetric"):
            TorchSymmMemProvider()
        done["provider_refused"] = True
    ctx.barrier()
    return done


def debug_checks_with_tables():
    """Debug mode (IRIS_DEBUG=1) with per-allocation tables: a pointer inside the allocation (a view too) passes;
    a pointer into another allocation, translated with this one's table, is refused with IrisDebugError."""
    ctx = iris.iris("16MiB", backend=BACKEND)
    assert ctx.debug_mode
    r, n = ctx.get_rank(), ctx.get_num_ranks()
    target = (r + 1) % n
    a, a_map = ctx.allocate_symmetric_map(k.BLOCK, dtype=torch.float32)
    b, b_map = ctx.allocate_symmetric_map(k.BLOCK, dtype=torch.float32)
    a.fill_(r + 1)
    b.fill_(-1)
    _sync(ctx)
    k.scale_peer_functional[(1,)](a, a_map.peer_bases, b, b_map.peer_bases, k.BLOCK, target, r, BLOCK=k.BLOCK)
    k.put_by_hand[(1,)](a, b[16:], b_map.peer_bases, 64, target, CUR_RANK=r, BLOCK=64)  # by hand: unchecked
    _sync(ctx)
    assert bool((b[:16] == 2 * (r + 1)).all())
    # b's pointers with a's table: the heap would land them right (one heap, one delta), but they are not a's
    with pytest.raises(iris.IrisDebugError, match="outside rank") as wrong_table:
        k.scale_peer_functional[(1,)](a, a_map.peer_bases, b, a_map.peer_bases, k.BLOCK, target, r, BLOCK=k.BLOCK)
    with pytest.raises(iris.IrisDebugError, match="outside rank") as wrong_context:
        k.scale_peer_device_context[(1,)](a_map.device_context(), a, a_map.device_context(), b, k.BLOCK, target,
                                          rank=r, world=n, BLOCK=k.BLOCK)
    ctx.barrier()
    return {"wrong_table": str(wrong_table.value), "wrong_context": str(wrong_context.value)}
