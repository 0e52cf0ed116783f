"""Code that runs inside each rank for tests/test_upstream_host_api.py: upstream Iris's host API as programs use it.

One case checks every point, so a world size costs one start of the ranks. The checks follow upstream's
documented behaviour (types, messages its tests match, strides torch gives) and this project's additions
(rank in every error, advice, collective allocation).
"""

from __future__ import annotations

import io
import logging
import os

import pytest
import torch

import iris
from iris import tensor_creation

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")  # a GPU run can reuse these cases with "cuda"

SIZE_FORMS = ((2, 3), ((2, 3),), ([2, 3],), (torch.Size([2, 3]),), (((2, 3),),))


def _cpu(t):
    return t.detach().cpu()


def _device_is_upstreams_string(ctx):
    assert isinstance(ctx.device, str) and ctx.device == str(ctx.get_device())
    assert ctx.device == "cpu" if BACKEND == "cpu" else ctx.device.startswith("cuda:")
    assert isinstance(ctx.get_device(), torch.device)
    assert str(ctx.zeros(2).device) == ctx.device and torch.zeros(2, device=ctx.device).device == ctx.get_device()
    assert ctx.zeros(2, device=ctx.device).device == ctx.get_device()  # the string is a valid device= too


def _upstream_private_and_older_names(ctx):
    """Names upstream's own tests call: ctx.allocate, the name-mangled helpers, heap.on_symmetric_heap."""
    flat = ctx.allocate(6, torch.float16)
    assert flat.shape == (6,) and flat.dtype == torch.float16 and ctx.is_symmetric(flat)
    assert ctx._Iris__allocate(3, torch.int32).shape == (3,)
    assert ctx._Iris__on_symmetric_heap(flat) and ctx.heap.on_symmetric_heap(flat)
    assert not ctx._Iris__on_symmetric_heap(torch.zeros(2, device=ctx.device))
    assert ctx._Iris__is_valid_device(ctx.device) and ctx._Iris__is_valid_device(ctx.get_device())


def _size_forms(ctx):
    makers = {
        "zeros": ctx.zeros, "ones": ctx.ones, "empty": ctx.empty, "rand": ctx.rand, "randn": ctx.randn,
        "full": lambda *s: ctx.full(s if len(s) > 1 else s[0], 7), "randint": lambda *s: ctx.randint(0, 9, s),
    }
    for name, make in makers.items():
        for form in SIZE_FORMS:
            t = make(*form)
            assert t.shape == (2, 3) and ctx.is_symmetric(t), (name, form, t.shape)
    assert ctx.zeros(((2, 3, 4),)).shape == (2, 3, 4) and ctx.zeros(()).shape == ()
    for steps in (5, (5,), [5], ((5,),)):
        assert torch.allclose(_cpu(ctx.linspace(0, 1, steps)), torch.linspace(0, 1, 5)), steps


def _allocate_and_out(ctx):
    r = ctx.cur_rank
    flat = ctx.heap.allocate(6, torch.float32)  # upstream's element count
    assert flat.shape == (6,) and flat.dtype == torch.float32 and ctx.is_symmetric(flat)
    assert ctx._Iris__allocate(4, torch.int32).shape == (4,)  # upstream's private spelling
    zeros = ctx.zeros(2, 3, out=flat)
    assert zeros.data_ptr() == flat.data_ptr() and zeros.shape == (2, 3) and bool((_cpu(flat) == 0).all())
    assert ctx.ones(6, out=flat) is flat  # the very tensor when the shape already fits
    ints = ctx.heap.allocate(3, torch.int64)
    assert ctx.arange(3, out=ints) is ints and _cpu(ints).tolist() == [0, 1, 2]
    messages = []
    for out, dtype in ((ctx.heap.allocate(4, torch.float32), None), (ctx.heap.allocate(9, torch.int32),
                       torch.float32), (torch.zeros(9, device=ctx.device), None)):
        with pytest.raises(RuntimeError) as info:
            ctx.zeros(3, 3, dtype=dtype, out=out)
        messages.append(str(info.value))
    assert messages[0].startswith(f"rank {r}: The output tensor has 4 elements, but 9 are required")
    assert "The output tensor has dtype torch.int32, but torch.float32 is required" in messages[1]
    assert "The output tensor is not on the symmetric heap" in messages[2]
    with pytest.raises(RuntimeError, match="4 elements, but 9 are required"):
        tensor_creation.throw_if_invalid_output_tensor(ctx.heap, ctx.heap.allocate(4, torch.float32), 9,
                                                       torch.float32)
    made = tensor_creation.zeros(ctx.heap, ctx.get_device(), (2, 3), dtype=torch.float16, name="tc")
    assert made.dtype == torch.float16 and ctx.is_symmetric(made) and bool((_cpu(made) == 0).all())
    like = tensor_creation.zeros_like(ctx.heap, ctx.device, made)
    assert like.shape == (2, 3) and like.dtype == torch.float16 and ctx.is_symmetric(like)
    return messages


def _arange_errors(ctx):
    r = ctx.cur_rank
    with pytest.raises(ValueError, match=f"rank {r}: arange step must be non-zero"):
        ctx.arange(1, 5, 0)
    for args in ((5, 1), (1, 5, -1), (0,), (3, 3)):
        with pytest.raises(ValueError, match="range is empty") as info:
            ctx.arange(*args)
        assert not isinstance(info.value, RuntimeError)
    assert _cpu(ctx.arange(5, 0, -2)).tolist() == [5, 3, 1] and ctx.arange(1, 2.5, 0.5).dtype == torch.float32


def _memory_formats(ctx):
    nchw = ctx.empty(2, 3, 4, 5, memory_format=torch.channels_last)
    assert nchw.stride() == torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride() == (60, 1, 15, 3)
    ncdhw = ctx.empty((2, 3, 4, 5, 6), memory_format=torch.channels_last_3d)
    assert ncdhw.stride() == (360, 1, 90, 18, 3)
    assert ctx.empty(3, 3, memory_format=torch.channels_last).is_contiguous()  # rank 2: contiguous, as upstream
    reference = torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)
    for name in ("zeros_like", "ones_like", "empty_like", "rand_like", "randn_like"):
        t = getattr(ctx, name)(nchw)  # preserve_format follows the input
        assert t.stride() == getattr(torch, name)(reference).stride() and ctx.is_symmetric(t), name
    assert ctx.full_like(nchw, 3).stride() == (60, 1, 15, 3) and bool((_cpu(ctx.full_like(nchw, 3)) == 3).all())
    contiguous = ctx.zeros(2, 3, 4, 5)
    last = ctx.zeros_like(contiguous, memory_format=torch.channels_last)
    assert last.stride() == (60, 1, 15, 3) and bool((_cpu(last) == 0).all())
    assert ctx.ones_like(nchw, memory_format=torch.contiguous_format).is_contiguous()
    transposed = ctx.ones(4, 2).t()
    assert ctx.zeros_like(transposed).stride() == torch.zeros_like(torch.ones(4, 2).t()).stride() == (1, 2)
    out = ctx.heap.allocate(120, torch.float32)
    into = ctx.empty(2, 3, 4, 5, out=out, memory_format=torch.channels_last)
    assert into.data_ptr() == out.data_ptr() and into.stride() == (60, 1, 15, 3)


def _as_remote_range(ctx):
    n = ctx.num_ranks
    buf = ctx.zeros(4)
    messages = []
    for bad in (n, -1):
        with pytest.raises(ValueError, match="out of range") as info:
            ctx.as_remote(buf, bad)
        messages.append(str(info.value))
    return messages


def _as_symmetric(ctx):
    r, n = ctx.cur_rank, ctx.num_ranks
    outside = torch.arange(12.0).reshape(3, 4) + 100 * r
    copy = ctx.as_symmetric(outside)
    assert ctx.is_symmetric(copy) and not ctx.is_symmetric(outside)
    assert copy.shape == (3, 4) and copy.dtype == torch.float32 and torch.equal(_cpu(copy), outside)
    outside += 1  # a copy: later changes do not reach it
    assert torch.equal(_cpu(copy), outside - 1)
    channels_last = ctx.as_symmetric(torch.ones(1, 2, 2, 3).to(memory_format=torch.channels_last))
    assert channels_last.stride() == (12, 1, 6, 2) and ctx.is_symmetric(channels_last)
    ctx.barrier()
    right = (r + 1) % n
    assert torch.equal(_cpu(ctx.as_remote(copy, right)), torch.arange(12.0).reshape(3, 4) + 100 * right)
    with pytest.raises(TypeError, match=f"rank {r}: as_symmetric takes a torch.Tensor"):
        ctx.as_symmetric([1, 2, 3])
    ctx.barrier()  # the right neighbour read our copy: keep it until it did
    return copy.data_ptr() - ctx.heap.bases[r]


def _uniform(ctx):
    u = ctx.uniform((200,), -2.0, 3.0)
    assert u.dtype == torch.float32 and ctx.is_symmetric(u)
    assert bool(((_cpu(u) >= -2) & (_cpu(u) < 3)).all())
    assert ctx.uniform(4, dtype=torch.float64).dtype == torch.float64 and ctx.uniform([2, 3]).shape == (2, 3)


def _device_barrier_state(ctx):
    assert dict(ctx._device_barrier_state) == {}
    ctx.barrier()
    ctx.device_barrier()
    assert None in ctx._device_barrier_state
    flags = ctx._device_barrier_state[None]
    assert ctx.is_symmetric(flags)
    for _ in range(3):
        ctx.device_barrier()
        assert ctx._device_barrier_state[None].data_ptr() == flags.data_ptr()  # one state: capturable
    with pytest.raises(TypeError):
        ctx._device_barrier_state[None] = flags  # a view of ctx.ccl's state, not a second copy


def _allocator_choice():
    if BACKEND == "cpu":  # "vmem" is the cuda backend's (tests/gpu/test_vmm_heap_cuda.py)
        with pytest.raises(NotImplementedError, match="virtual-memory allocator") as info:
            iris.iris(1 << 20, "vmem", backend=BACKEND)
        assert "allocator_type='torch'" in str(info.value)
    with pytest.raises(ValueError, match="unknown allocator_type 'bump'"):
        iris.iris(1 << 20, allocator_type="bump", backend=BACKEND)
    os.environ["IRIS_ALLOCATOR"] = "vmem"
    try:
        if BACKEND == "cpu":
            with pytest.raises(NotImplementedError):
                iris.iris(1 << 20, backend=BACKEND)
        second = iris.iris(1 << 20, "torch", backend=BACKEND)  # an explicit argument wins
    finally:
        del os.environ["IRIS_ALLOCATOR"]
    assert second.allocator_type == "torch"
    return second


def _logging(ctx):
    capture = io.StringIO()
    handler = logging.StreamHandler(capture)
    handler.setFormatter(iris.base.logging.IrisFormatter())
    iris.logger.addHandler(handler)
    try:
        iris.set_logger_level(iris.INFO)
        ctx.debug("hidden at INFO")
        ctx.info("an info line")
        iris.set_logger_level(iris.DEBUG)
        ctx.debug("a debug line")
        ctx.error("an error line")
        iris.logger.info("no rank")
    finally:
        iris.logger.removeHandler(handler)
    return capture.getvalue().splitlines()


def upstream_host_api():
    """Every point of the upstream host API, on this rank; returns what the test compares across ranks."""
    initial_level = iris.logger.level
    ctx = iris.iris(4 << 20, "torch", backend=BACKEND)
    _device_is_upstreams_string(ctx)
    _upstream_private_and_older_names(ctx)
    _size_forms(ctx)
    out_messages = _allocate_and_out(ctx)
    _arange_errors(ctx)
    _memory_formats(ctx)
    _uniform(ctx)
    symmetric_offset = _as_symmetric(ctx)
    _device_barrier_state(ctx)
    second = _allocator_choice()
    outside_heap = second.zeros(8)
    assert second.is_symmetric(outside_heap) and not ctx.is_symmetric(outside_heap)  # one heap per context
    assert ctx.heap.heap_bases is ctx.get_heap_bases()
    assert ctx.heap.heap_bases.tolist() == ctx.heap.bases
    ctx.barrier()
    return {
        "initial_level": initial_level,
        "out_messages": out_messages,
        "as_remote_messages": _as_remote_range(ctx),
        "symmetric_offset": symmetric_offset,
        "log": _logging(ctx),
    }
