"""Tensors on the symmetric heap: the creation family behind ``ctx.zeros``, ``ctx.empty``, ... and its checks.

Upstream Iris's ``iris.runtime.tensor_creation``, with its names and signatures: every function takes the heap and
the heap's device first, then PyTorch's arguments (``tensor_creation.zeros(ctx.heap, ctx.get_device(),
(2, 3), dtype=torch.float32)``); the context's methods are these functions with the first two filled in.
Every creation allocates collectively (every rank calls it alike, see :class:`iris.heap.SymmetricHeap`)
unless ``out=`` names a heap tensor to fill instead. Beyond upstream: ``name=`` labels the allocation in
the inspectors, ``memory_format=`` gives the strides torch would (channels-last and friends), and the
``*_like`` family is complete.

Examples
--------
>>> from iris import tensor_creation
>>> t = tensor_creation.zeros(ctx.heap, ctx.get_device(), (2, 3), dtype=torch.float32)   # doctest: +SKIP
>>> tensor_creation.parse_size(((2, 3),))
((2, 3), 6)
>>> tensor_creation.is_valid_device("cuda", torch.device("cuda", 0))
True
"""

from __future__ import annotations

import math
import operator

import torch

from ..base.warning_site import warn_once

# -- sizes, devices, layouts and output tensors -------------------------------------------------------


def _where(rank) -> str:
    return f"rank {rank}: " if rank is not None else ""


def parse_size(size, rank: int | None = None):
    """``(size, number of elements)`` for a size in any form upstream accepts.

    ``zeros(2, 3)``, ``zeros((2, 3))``, ``zeros([2, 3])``, ``zeros(torch.Size([2, 3]))`` and the nested
    ``zeros(((2, 3),))`` all give the sizes ``(2, 3)``; a bare int is a 1-D size. Wrapping sequences of one
    element are unwrapped and the innermost is returned as given (a list stays a list).

    Examples
    --------
    >>> parse_size((2, 3))
    ((2, 3), 6)
    >>> parse_size(([4, 5],))
    ([4, 5], 20)
    >>> parse_size(((),))
    ((), 1)
    """
    if not isinstance(size, tuple | list | torch.Size):
        size = (size,)
    while len(size) == 1 and isinstance(size[0], tuple | list | torch.Size):
        size = size[0]
    if any(isinstance(s, bool) or not hasattr(s, "__index__") for s in size):
        raise TypeError(f"{_where(rank)}tensor sizes must be ints, got {size!r}")
    return size, math.prod(operator.index(s) for s in size)


def is_valid_device(device, iris_device) -> bool:
    """True when ``device`` (None, a string or a ``torch.device``) names the heap's device ``iris_device``.

    None means the heap's device; a device without an index (``"cuda"``) matches any index of its type.

    Examples
    --------
    >>> is_valid_device(None, "cuda:0"), is_valid_device("cuda:1", "cuda:0"), is_valid_device("cpu", "cpu")
    (True, False, True)
    """
    if device is None:
        return True
    requested, heap = torch.device(device), torch.device(iris_device)
    return requested.type == heap.type and requested.index in (None, heap.index)


class CudaOnCpuHeapNote(UserWarning):
    """``device="cuda"`` was given for a tensor of a CPU heap, which is on the CPU; said once per process."""


def _note_cuda_on_cpu_heap(device, rank) -> None:
    warn_once("device cuda on a CPU heap", f"{_where(rank)}device={str(device)!r} on the CPU backend: the tensor "
              "is on the heap, which is in CPU memory (a heap tensor can only be on the heap's device). Upstream "
              "Iris's programs pass device='cuda' everywhere, so it is accepted; said once.", CudaOnCpuHeapNote,
              "iris")


def throw_if_invalid_device(device, iris_device, rank: int | None = None) -> None:
    """``RuntimeError`` unless ``device`` is the heap's device (see :func:`is_valid_device`).

    On a CPU heap, a CUDA device (upstream's programs write ``device="cuda"`` everywhere) is accepted with a
    one-time :class:`CudaOnCpuHeapNote`: the heap's device is the only place a heap tensor can be.
    """
    if device is not None and torch.device(iris_device).type == "cpu" and torch.device(device).type == "cuda":
        _note_cuda_on_cpu_heap(device, rank)
        return
    if not is_valid_device(device, iris_device):
        raise RuntimeError(
            f"{_where(rank)}device mismatch: the symmetric heap is on {iris_device}, not {device}; "
            "tensors on the heap live on its device: leave device=None"
        )


def throw_if_invalid_output_tensor(heap, tensor: torch.Tensor, num_elements: int, dtype: torch.dtype) -> None:
    """``RuntimeError`` unless ``tensor`` can receive the result: element count, dtype, then heap membership.

    The messages begin as upstream's (``"The output tensor has 4 elements, but 9 are required"``,
    ``"... has dtype torch.int32, but torch.float32 is required"``, ``"... is not on the symmetric heap"``).
    """
    where = _where(getattr(heap, "rank", None))
    if tensor.numel() != num_elements:
        raise RuntimeError(f"{where}The output tensor has {tensor.numel()} elements, but {num_elements} are "
                           "required: pass an out= tensor with as many elements as the result")
    if tensor.dtype != dtype:
        raise RuntimeError(f"{where}The output tensor has dtype {tensor.dtype}, but {dtype} is required: "
                           "pass an out= tensor of the result's dtype, or dtype=out.dtype")
    if not heap.is_symmetric(tensor):
        raise RuntimeError(f"{where}The output tensor is not on the symmetric heap: allocate it with the "
                           "context (ctx.empty, ctx.heap.allocate, ...) in the same order on every rank")


def _check_layout(layout, rank=None) -> None:
    if layout not in (None, torch.strided):
        raise ValueError(f"{_where(rank)}Layout {layout} not supported: only torch.strided tensors live on the "
                         "symmetric heap")


def apply_layout(tensor: torch.Tensor, layout: torch.layout) -> torch.Tensor:
    """``tensor`` itself for ``torch.strided``; ``ValueError`` for any other layout."""
    _check_layout(layout)
    return tensor


def memory_format_strides(shape, memory_format, like: torch.Tensor | None = None) -> tuple[int, ...] | None:
    """The strides torch gives a tensor of ``shape`` in ``memory_format``; None for contiguous ones.

    ``torch.preserve_format`` follows ``like`` as ``torch.empty_like`` does (its strides when it is dense,
    else the format torch suggests for it). A format that does not apply to the rank (``channels_last`` on
    a 2-D tensor) falls back to contiguous, as upstream does.

    Examples
    --------
    >>> memory_format_strides((2, 3, 4, 5), torch.channels_last)
    (60, 1, 15, 3)
    >>> memory_format_strides((3, 3), torch.channels_last) is None
    True
    """
    if memory_format in (None, torch.contiguous_format):
        return None
    try:  # torch decides, on the meta device (no memory)
        if memory_format == torch.preserve_format:
            if like is None:
                return None
            probe = torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device="meta")
            strides = torch.empty_like(probe, memory_format=memory_format).stride()
        else:
            strides = torch.empty(tuple(shape), device="meta", memory_format=memory_format).stride()
    except RuntimeError:
        return None
    return None if strides == torch.empty(tuple(shape), device="meta").stride() else strides


def allocate(heap, num_elements: int, dtype: torch.dtype) -> torch.Tensor:
    """A flat tensor of ``num_elements`` on ``heap``, uninitialised (collective)."""
    return heap.allocate(num_elements, dtype)


def _create(heap, iris_device, size, dtype, *, out=None, layout=torch.strided, device=None, requires_grad=False,
            name=None, fill=None, strides=None) -> torch.Tensor:
    """The one creation routine: check, allocate collectively (or take ``out``), fill, then requires_grad."""
    rank = getattr(heap, "rank", None)
    throw_if_invalid_device(device, iris_device, rank)
    _check_layout(layout, rank)
    size, num_elements = parse_size(size, rank)
    shape = tuple(operator.index(s) for s in size)
    if out is not None:
        dtype = out.dtype if dtype is None else dtype  # torch: out= alone decides the dtype
        throw_if_invalid_output_tensor(heap, out, num_elements, dtype)
        tensor = out if out.shape == shape else out.view(shape)
    else:
        dtype = torch.get_default_dtype() if dtype is None else dtype
        tensor = heap.allocate(shape, dtype, label=name)
    if strides is not None and tensor.stride() != strides:
        tensor = tensor.as_strided(shape, strides)  # same elements, channels-last order
    if fill is not None:
        with torch.no_grad():
            fill(tensor)
    return tensor.requires_grad_() if requires_grad else tensor


def _copy_of(values: torch.Tensor):
    return lambda t: t.copy_(values)


# -- the creation family ------------------------------------------------------------------------------


def zeros(heap, iris_device, size, *, out=None, dtype=None, layout=torch.strided, device=None,
          requires_grad=False, name=None) -> torch.Tensor:
    """Zeros of ``size`` on the heap (``dtype`` defaults to torch's default dtype).

    A new tensor is zero on every rank before any rank returns, so a peer may write into it at once: upstream's
    heap hands out memory that is already zero, and its programs rely on it (a flag array from ``ctx.zeros`` is
    set by a producer rank while the consumer may still be in its own call). Ours reuses freed memory, so each
    rank zeroes its copy, then the ranks meet (after the device finished the zeroing): a write that came first
    would be lost under the zeroing, and a consumer spinning on that flag would never see it.

    Examples
    --------
    >>> flags = ctx.zeros(blocks, dtype=torch.int32)   # peers may set flags at once   # doctest: +SKIP
    """
    tensor = _create(heap, iris_device, size, dtype, out=out, layout=layout, device=device,
                     requires_grad=requires_grad, name=name, fill=lambda t: t.zero_())
    if out is None:
        heap.memory.synchronize()
        heap.group.barrier()
    return tensor


def ones(heap, iris_device, size, *, out=None, dtype=None, layout=torch.strided, device=None,
         requires_grad=False, name=None) -> torch.Tensor:
    """Ones of ``size`` on the heap."""
    return _create(heap, iris_device, size, dtype, out=out, layout=layout, device=device,
                   requires_grad=requires_grad, name=name, fill=lambda t: t.fill_(1))


def full(heap, iris_device, size, fill_value, *, out=None, dtype=None, layout=torch.strided, device=None,
         requires_grad=False, name=None) -> torch.Tensor:
    """``fill_value`` everywhere; the dtype is inferred from it as :func:`torch.full` does."""
    if dtype is None and out is None:
        dtype = torch.full((), fill_value).dtype
    return _create(heap, iris_device, size, dtype, out=out, layout=layout, device=device,
                   requires_grad=requires_grad, name=name, fill=lambda t: t.fill_(fill_value))


def empty(heap, iris_device, size, *, out=None, dtype=None, layout=torch.strided, device=None,
          requires_grad=False, memory_format=torch.contiguous_format, name=None) -> torch.Tensor:
    """Uninitialised tensor of ``size``, with ``memory_format``'s strides."""
    shape = tuple(parse_size(size, getattr(heap, "rank", None))[0])
    return _create(heap, iris_device, size, dtype, out=out, layout=layout, device=device,
                   requires_grad=requires_grad, name=name, strides=memory_format_strides(shape, memory_format))


def rand(heap, iris_device, size, *, generator=None, out=None, dtype=None, layout=torch.strided, device=None,
         requires_grad=False, name=None) -> torch.Tensor:
    """Uniform values in [0, 1) (each rank draws its own unless the generators are seeded alike)."""
    return _create(heap, iris_device, size, dtype, out=out, layout=layout, device=device,
                   requires_grad=requires_grad, name=name, fill=lambda t: t.uniform_(0, 1, generator=generator))


def randn(heap, iris_device, size, *, generator=None, out=None, dtype=None, layout=torch.strided, device=None,
          requires_grad=False, name=None) -> torch.Tensor:
    """Standard normal values."""
    return _create(heap, iris_device, size, dtype, out=out, layout=layout, device=device,
                   requires_grad=requires_grad, name=name, fill=lambda t: t.normal_(0, 1, generator=generator))


def uniform(heap, iris_device, size, low=0.0, high=1.0, dtype=torch.float, *, name=None) -> torch.Tensor:
    """Uniform values in [``low``, ``high``) of ``size`` (an int or a shape)."""
    return _create(heap, iris_device, size, dtype, name=name, fill=lambda t: t.uniform_(low, high))


def randint(heap, iris_device, low, high, size, *, generator=None, out=None, dtype=None, layout=torch.strided,
            device=None, requires_grad=False, name=None) -> torch.Tensor:
    """Random integers in [``low``, ``high``); int64 unless ``dtype`` says otherwise."""
    dtype = torch.int64 if dtype is None and out is None else dtype
    return _create(heap, iris_device, size, dtype, out=out, layout=layout, device=device,
                   requires_grad=requires_grad, name=name,
                   fill=lambda t: t.random_(low, high, generator=generator))


def arange(heap, iris_device, start, end, step, *, out=None, dtype=None, layout=torch.strided, device=None,
           requires_grad=False, name=None) -> torch.Tensor:
    """``torch.arange(start, end, step)`` on the heap; ``ValueError`` for a zero step or an empty range.

    Upstream refuses a range with no element in the step's direction (``arange(5, 1)``, ``arange(1, 5,
    -1)``, ``arange(0)``) where torch would raise its own RuntimeError or return an empty tensor.
    """
    where = _where(getattr(heap, "rank", None))
    if step == 0:
        raise ValueError(f"{where}arange step must be non-zero")
    if (step > 0 and start >= end) or (step < 0 and start <= end):
        direction = "positive" if step > 0 else "negative"
        raise ValueError(f"{where}arange range is empty: start={start}, end={end} with a {direction} step={step} "
                         "gives no element; pass start < end for a positive step, start > end for a negative one")
    values = torch.arange(start, end, step, dtype=dtype if dtype is not None or out is None else out.dtype)
    return _create(heap, iris_device, values.shape, values.dtype, out=out, layout=layout, device=device,
                   requires_grad=requires_grad, name=name, fill=_copy_of(values))


def linspace(heap, iris_device, start, end, steps, *, out=None, dtype=None, layout=torch.strided, device=None,
             requires_grad=False, name=None) -> torch.Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end``; ``steps`` as ``5``, ``(5,)``, ``[5]`` or ``((5,),)``.

    A sequence of several sizes counts their product, as upstream does.
    """
    count = parse_size(steps, getattr(heap, "rank", None))[1]
    values = torch.linspace(start, end, count, dtype=dtype if dtype is not None or out is None else out.dtype)
    return _create(heap, iris_device, values.shape, values.dtype, out=out, layout=layout, device=device,
                   requires_grad=requires_grad, name=name, fill=_copy_of(values))


# -- *_like: input's shape (and dtype, layout, strides unless given) ------------------------------------


def _like(creator, heap, iris_device, input, dtype, layout, device, requires_grad, memory_format, name, **kwargs):
    # device=None is the heap's device (the only place a heap tensor can live), whatever input's device is.
    strides = memory_format_strides(input.shape, memory_format, like=input)
    tensor = creator(heap, iris_device, input.shape, dtype=dtype or input.dtype, layout=layout or input.layout,
                     device=device, name=name, **kwargs)
    if strides is not None:
        tensor = tensor.as_strided(input.shape, strides)  # filled with one value: any order will do
    return tensor.requires_grad_() if requires_grad else tensor


def zeros_like(heap, iris_device, input, *, dtype=None, layout=None, device=None, requires_grad=False,
               memory_format=torch.preserve_format, name=None) -> torch.Tensor:
    """Zeros with ``input``'s shape (and dtype, layout and, by default, strides)."""
    return _like(zeros, heap, iris_device, input, dtype, layout, device, requires_grad, memory_format, name)


def ones_like(heap, iris_device, input, *, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=torch.preserve_format, name=None) -> torch.Tensor:
    """Ones with ``input``'s shape."""
    return _like(ones, heap, iris_device, input, dtype, layout, device, requires_grad, memory_format, name)


def empty_like(heap, iris_device, input, *, dtype=None, layout=None, device=None, requires_grad=False,
               memory_format=torch.preserve_format, name=None) -> torch.Tensor:
    """Uninitialised tensor with ``input``'s shape."""
    return _like(empty, heap, iris_device, input, dtype, layout, device, requires_grad, memory_format, name)


def full_like(heap, iris_device, input, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=torch.preserve_format, name=None) -> torch.Tensor:
    """``fill_value`` with ``input``'s shape (and dtype unless given)."""
    return _like(full, heap, iris_device, input, dtype, layout, device, requires_grad, memory_format, name,
                 fill_value=fill_value)


def rand_like(heap, iris_device, input, *, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=torch.preserve_format, name=None) -> torch.Tensor:
    """Uniform [0, 1) values with ``input``'s shape."""
    return _like(rand, heap, iris_device, input, dtype, layout, device, requires_grad, memory_format, name)


def randn_like(heap, iris_device, input, *, dtype=None, layout=None, device=None, requires_grad=False,
               memory_format=torch.preserve_format, name=None) -> torch.Tensor:
    """Standard normal values with ``input``'s shape."""
    return _like(randn, heap, iris_device, input, dtype, layout, device, requires_grad, memory_format, name)
