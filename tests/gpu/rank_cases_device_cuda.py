"""GPU-only rank code for tests/gpu/test_device_cuda.py: Gluon layouts compiled for real, debug asserts."""

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris
from iris.gluon import IrisDeviceCtx, layout_hints
from tests.gluon_auto_layout_kernels import no_iris_call
from tests.rank_cases_device import _debug_setup, _expect, put_block, read_from_peer


@gluon.jit
def read_from_peer_coalesced(IrisDeviceCtx: gl.constexpr, context_tensor, buf, out, peer: gl.constexpr,
                             BLOCK: gl.constexpr):
    """DESIGN.md's example with the one change a GPU needs: a layout on the range."""
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=gl.CoalescedLayout())
    mask = offs < BLOCK
    remote_ptr = ctx.as_remote(buf + offs, peer)
    gl.store(out + offs, gl.load(remote_ptr, mask=mask), mask=mask)


@gluon.jit
def read_from_peer_blocked(IrisDeviceCtx: gl.constexpr, context_tensor, buf, out, peer: gl.constexpr,
                           BLOCK: gl.constexpr):
    """The same with an explicit BlockedLayout: 32 threads per warp on NVIDIA (AMD examples say 64)."""
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([1], [32], [gl.num_warps()], [0]))
    gl.store(out + offs, ctx.load(buf + offs, peer, hint=16))


def gluon_layouts_on_gpu():
    """Layout-less kernels as upstream writes them run (IrisDeviceCtx anchors them), explicit layouts run, and
    a layout-less kernel with no iris call fails with our advice."""
    ctx = iris.iris("64MiB", backend="cuda")
    r, n = ctx.cur_rank, ctx.num_ranks
    peer = (r + 1) % n
    buf = ctx.full((256,), float(r), dtype=torch.float32)
    out = ctx.zeros(256, dtype=torch.float32)
    ctx.barrier()
    read_from_peer[(1,)](IrisDeviceCtx, ctx.get_device_context(), buf, out, peer, 64)  # DESIGN.md's, verbatim
    _expect("read_from_peer as written (no layout)", out[:64], torch.full((64,), float(peer)))
    read_from_peer_coalesced[(1,)](IrisDeviceCtx, ctx.get_device_context(), buf, out, peer, 256)
    _expect("read_from_peer with CoalescedLayout", out, torch.full((256,), float(peer)))
    out.zero_()
    read_from_peer_blocked[(1,)](IrisDeviceCtx, ctx.get_device_context(), buf, out, peer, 256, num_warps=4)
    _expect("read_from_peer with BlockedLayout", out, torch.full((256,), float(peer)))
    try:
        with layout_hints():
            no_iris_call[(1,)](buf, out, 64)
    except RuntimeError as error:
        advice, compiler = str(error), str(error.__cause__)
    else:
        raise AssertionError("a layout-less gl.arange with nothing to anchor it compiled on the GPU: drop the "
                             "advice from iris.gluon")
    ctx.barrier()
    return {"rank": r, "advice": advice, "compiler": compiler}


def debug_mode_stops_bad_pointer_on_gpu():
    """Good launches pass the checks; then a non-heap pointer trips the device assert (the process dies)."""
    ctx, r, n, src, _, _, _ = _debug_setup()
    outside = torch.zeros(16, dtype=torch.float32, device=ctx.device)
    put_block[(1,)](src, outside, ctx.get_heap_bases(), r, (r + 1) % n, 10, BLOCK=16)
    torch.cuda.synchronize()
    return {"rank": r, "survived": True}
