"""GPU-only rank code for tests/gpu/test_device_cuda.py: Gluon layouts compiled for real, the advice for what NVIDIA
refuses (a layout-less range, AMD's 64-wide warps, a volatile load with a cache modifier), debug asserts."""

import torch
from iris.gluon import IrisDeviceCtx, layout_hints
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris
from tests.gluon_auto_layout_kernels import no_iris_call
from tests.portability_kernels import amd_layout_load, narrow_layout_copy, volatile_load_plain
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
    """Layout-less kernels as upstream writes them run (IrisDeviceCtx anchors them), explicit layouts run, AMD's
    64-wide warps run (iris.language.warp_width); a layout-less kernel with no iris call, a layout of 16 threads per
    warp and a plain volatile .cg load fail with advice."""
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
    out.zero_()
    amd_layout_load[(1,)](IrisDeviceCtx, ctx.get_device_context(), buf, out, peer, 64, num_warps=1)  # [64] threads
    _expect("amd_layout_load (64-wide warps, re-expressed for 32)", out[:64], torch.full((64,), float(peer)))
    advice = {
        "no_iris_call": _advice(lambda: no_iris_call[(1,)](buf, out, 64)),
        "narrow_layout_copy": _advice(lambda: narrow_layout_copy[(1,)](buf, out, 64, num_warps=1)),
        "volatile_load_plain": _advice(lambda: volatile_load_plain[(1,)](buf, out, ".cg", 64)),
    }
    ctx.barrier()
    return {"rank": r, **advice}


def _advice(launch) -> dict:
    """What :func:`layout_hints` says about a launch the GPU compiler refuses, and the compiler's own error."""
    try:
        with layout_hints():
            launch()
    except RuntimeError as error:
        return {"advice": str(error), "compiler": str(error.__cause__)}
    raise AssertionError("the GPU compiled a kernel that triton 3.6 refuses: update iris.language.hints and this test")


def debug_mode_stops_bad_pointer_on_gpu():
    """Good launches pass the checks; then a non-heap pointer trips the device assert (the process dies)."""
    ctx, r, n, src, _, _, _ = _debug_setup()
    outside = torch.zeros(16, dtype=torch.float32, device=ctx.device)
    put_block[(1,)](src, outside, ctx.get_heap_bases(), r, (r + 1) % n, 10, BLOCK=16)
    torch.cuda.synchronize()
    return {"rank": r, "survived": True}
