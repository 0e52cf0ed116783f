"""Host-side checks and launch shapes shared by the collectives.

Every collective reads or writes other ranks' copies of its tensors, so both tensors must live on the
symmetric heap (allocated collectively, at the same offset on every rank): a tensor elsewhere is a
``ValueError`` that says how to allocate it, rather than a silent read of another rank's unrelated memory.

Examples
--------
>>> check_tensors(ctx, "all_gather", out, inp)                  # doctest: +SKIP
>>> programs(ctx, config, blocks=37)                            # doctest: +SKIP
2
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .config import Config, ReduceOp

REDUCE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CPU_PROGRAMS = 2  # interpreted programs run one after another: few programs, few flag round trips


def check_op(ctx, op) -> None:
    """Accept SUM (iris's or torch.distributed's ReduceOp, or None); anything else is NotImplementedError."""
    if op is None or op == ReduceOp.SUM or op == dist.ReduceOp.SUM:
        return
    raise NotImplementedError(f"rank {ctx.cur_rank}: reduction {op!r} is not implemented; only ReduceOp.SUM "
                              "(iris.ccl.ReduceOp.SUM or torch.distributed.ReduceOp.SUM) is supported")


def check_tensors(ctx, collective: str, out: torch.Tensor, inp: torch.Tensor, reduce: bool = False) -> None:
    """Both on the heap, contiguous, of one dtype; for reductions also a float dtype and one shape."""
    rank = ctx.cur_rank
    for name, tensor in (("input", inp), ("output", out)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"rank {rank}: {collective} {name} must be a torch.Tensor, got {type(tensor).__name__}")
        if not ctx.is_symmetric(tensor):
            raise ValueError(f"rank {rank}: {collective} {name} is not on the symmetric heap; other ranks read "
                             "or write it directly, so allocate it with the context (ctx.zeros, ctx.empty, "
                             "ctx.randn, ...) in the same order on every rank")
        if not tensor.is_contiguous():
            raise ValueError(f"rank {rank}: {collective} {name} must be contiguous; pass tensor.contiguous() "
                             "allocated on the heap")
    if out.dtype != inp.dtype:
        raise ValueError(f"rank {rank}: {collective} output is {out.dtype} but input is {inp.dtype}: use one dtype")
    if reduce and inp.dtype not in REDUCE_DTYPES:
        raise ValueError(f"rank {rank}: {collective} reduces float32, float16 or bfloat16 tensors, not {inp.dtype}")
    if reduce and out.shape != inp.shape:
        raise ValueError(f"rank {rank}: {collective} output {list(out.shape)} and input {list(inp.shape)} must "
                         "have the same shape")


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the bytes of two contiguous tensors overlap."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()


def block_size(ctx, config: Config) -> int:
    """Elements per program step of the flat kernels."""
    if config.block_size is not None:
        return config.block_size
    return 4096 if ctx.get_device().type == "cuda" else 1024


def programs(ctx, config: Config, blocks: int) -> int:
    """Programs to launch for ``blocks`` units of work: all resident at once, since they wait on peers."""
    limit = ctx.get_cu_count() if ctx.get_device().type == "cuda" else CPU_PROGRAMS
    if config.comm_sms is not None:
        if ctx.get_device().type == "cuda" and config.comm_sms > limit:
            raise ValueError(f"rank {ctx.cur_rank}: comm_sms={config.comm_sms} exceeds the {limit} SMs of "
                             f"{ctx.device}; programs wait on other ranks, so all must be resident: "
                             f"use at most {limit}")
        limit = config.comm_sms
    return max(1, min(blocks, limit))


def hint(*spans) -> int | None:
    """16 when every ``(tensor, element offset)`` starts 16-byte aligned, so remote accesses may be wide."""
    for tensor, offset in spans:
        if (tensor.data_ptr() + offset * tensor.element_size()) % 16:
            return None
    return 16


def has_copy_engines(ctx, config: Config) -> bool:
    """Whether a collective may move its bytes by peer-to-peer memcpys, which a GPU's copy engines carry out (no
    SM): on GPUs, unless a Gluon kernel was asked for (``config.use_gluon``).

    Examples
    --------
    >>> has_copy_engines(ctx, Config())          # True on the cuda backend  # doctest: +SKIP
    True
    """
    return ctx.backend == "cuda" and not config.use_gluon


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
