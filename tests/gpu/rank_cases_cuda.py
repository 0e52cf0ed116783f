"""Code run inside each rank by tests/gpu: kernels that touch peers' heaps on the CUDA backend."""

import torch
import triton
import triton.language as tl

import iris


@triton.jit
def _ring_put(src, dst, heap_bases, n, rank, peer, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    local_base = tl.load(heap_bases + rank).to(tl.uint64)
    peer_base = tl.load(heap_bases + peer).to(tl.uint64)
    offset = tl.cast(dst + offs, tl.uint64) - local_base
    remote = tl.cast(tl.cast(peer_base, tl.pointer_type(tl.int8)) + offset, (dst + offs).dtype)
    tl.store(remote, tl.load(src + offs, mask=mask), mask=mask)


def kernel_ring_exchange():
    ctx = iris.iris("256MiB", backend="cuda")
    r, n = ctx.cur_rank, ctx.num_ranks
    size = 1 << 20
    src = ctx.full((size,), float(r + 1), dtype=torch.float32)
    dst = ctx.zeros(size, dtype=torch.float32)
    ctx.barrier()
    _ring_put[(triton.cdiv(size, 1024),)](src, dst, ctx.get_heap_bases(), size, r, (r + 1) % n, BLOCK=1024)
    ctx.barrier()
    left = (r - 1) % n
    ok = bool((dst == left + 1).all())
    # the host as_remote view sees the same memory the kernel wrote
    ok &= bool((ctx.as_remote(dst, (r + 1) % n) == r + 1).all())
    ctx.barrier()
    return {"ok": ok, "device": str(ctx.device), "gpu": torch.cuda.get_device_name(ctx.device)}
