"""Upstream Iris's ``iris.ops.all_gather_matmul_hbm_buffer``: all-gather + GEMM through a staging buffer in GPU
memory, as our :func:`iris.ops.all_gather_matmul` on its chunked path.

Upstream's kernel splits its grid into fetcher programs, which copy every rank's shard of A into a local
``(M, K)`` buffer and raise a flag per group of K blocks, and GEMM programs, which wait for those flags. Our
chunked path is the same staging: the copy engines write each rank's shard into every rank's heap buffer ``A``
(the workspace's ``aux_buffer``: every rank's shard in its columns, as upstream's buffer holds it), a flag per
row piece (its ``locks``), and each piece's cuBLAS GEMM waits for its flags.
So these functions are that path under upstream's names. The knobs of upstream's kernel (fetcher programs and
stages, ``k_per_flag``, fetch tiles, ``num_warps``, ``num_stages``, the buffer's layout) are checked and have
no effect: no SM fetches here, and the buffer is row-major, or column-major where every rank's shard is
(:func:`~iris.ops.chunked.gathered_buffer`). Its ``bias`` is upstream's: one
value per row of the product, ``(M,)``; as for every op of :mod:`iris.ops`, a rank's bias goes with the product
it computes, so each rank adds its own to its own output.

Examples
--------
>>> from iris.ops.all_gather_matmul_hbm_buffer import (all_gather_matmul_hbm_buffer,
...                                                    all_gather_matmul_hbm_buffer_preamble)   # doctest: +SKIP
>>> ws = all_gather_matmul_hbm_buffer_preamble(ctx, A_sharded, B)              # doctest: +SKIP
>>> all_gather_matmul_hbm_buffer(ctx, C, A_sharded, B, workspace=ws)            # doctest: +SKIP
>>> ws.path, ws.aux_buffer.shape                                                # doctest: +SKIP
('chunked', torch.Size([M, K]))
"""

from __future__ import annotations

import dataclasses

import torch

from .chunked import gathered_buffer, signals_for
from .fused import (
    FusedConfig,
    Workspace,
    _check_device,
    _gathered_dims,
    all_gather_matmul,
    all_gather_matmul_preamble,
    choose_path,
)

LAYOUTS = ("k_contiguous", "m_contiguous")
OP = "all_gather_matmul_hbm_buffer"


def all_gather_matmul_hbm_buffer_preamble(ctx, A_sharded, B, config=None, k_per_flag=None,
                                          staged_a_layout="k_contiguous") -> Workspace:
    """The workspace of :func:`all_gather_matmul_hbm_buffer` for these shapes, its staging buffer (``aux_buffer``)
    and flags (``locks``) allocated now, every rank past a barrier. Collective.

    Examples
    --------
    >>> ws = all_gather_matmul_hbm_buffer_preamble(ctx, A_sharded, B)    # doctest: +SKIP
    >>> ws.locks.zero_()                                                 # harmless between calls   # doctest: +SKIP
    """
    _check_knobs(ctx, k_per_flag=k_per_flag)
    _check_layout(ctx, staged_a_layout)
    config = _staged(ctx, config)
    workspace = all_gather_matmul_preamble(ctx, A_sharded, B, config)
    m, n = _gathered_dims(ctx, OP, A_sharded, B)
    # What the chunked path's first call would allocate, allocated now (the same buffer and flags it then reuses).
    gathered_buffer(ctx, workspace, A_sharded)
    signals_for(ctx, workspace, choose_path(ctx, "all_gather_matmul", (m, n), config)[1])
    return workspace


def all_gather_matmul_hbm_buffer(ctx, output_tensor, A_sharded, B, bias=None, async_op=False, config=None,
                                 workspace=None, num_fetch_sms=None, k_per_flag=None, fetch_block_m=None,
                                 fetch_block_k=None, staged_a_layout="k_contiguous", num_warps=8, num_stages=2,
                                 num_fetch_stages=None, first_stage_fetch_sms=None, trace=False) -> Workspace:
    """``output_tensor = A @ B (+ bias[:, None])``, A every rank's ``A_sharded`` (M, K / world) side by side along
    K, staged in each rank's heap (see the module's docstring); ``bias`` is ``(M,)``, one value per row.

    Examples
    --------
    >>> all_gather_matmul_hbm_buffer(ctx, C, A_sharded, B, num_fetch_sms=16, k_per_flag=8)   # doctest: +SKIP
    """
    _check_knobs(ctx, num_fetch_sms=num_fetch_sms, k_per_flag=k_per_flag, fetch_block_m=fetch_block_m,
                 fetch_block_k=fetch_block_k, num_warps=num_warps, num_stages=num_stages,
                 num_fetch_stages=num_fetch_stages, first_stage_fetch_sms=first_stage_fetch_sms)
    _check_layout(ctx, staged_a_layout)
    if trace:
        raise NotImplementedError(f"rank {ctx.cur_rank}: {OP}(trace=True) records upstream's fetcher and GEMM "
                                  "programs; here the copy engines fetch: see the transfers with ctx.tracing or "
                                  "iris.instruments.traffic instead, and call without trace")
    m, _ = _gathered_dims(ctx, OP, A_sharded, B)
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (m,)
                             or bias.dtype != A_sharded.dtype):
        got = f"{list(bias.shape)} {bias.dtype}" if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise ValueError(f"rank {ctx.cur_rank}: {OP}: bias must be [{m}] {A_sharded.dtype} (upstream's: one value "
                         f"per row of the product), got {got}")
    if bias is not None:
        _check_device(ctx, OP, "bias", bias)
    workspace = all_gather_matmul(ctx, output_tensor, A_sharded, B, None, async_op, _staged(ctx, config), workspace)
    if bias is not None:
        output_tensor += bias[:, None]  # in stream order after the product
    return workspace


# Upstream's shapes whose launch parameters its sweeps tuned for its fetcher kernel on MI300X: none here, where
# no parameter of that kernel has an effect (the module's docstring).
_CHAMPION_CONFIGS: dict = {}


def _auto_config(M: int, N: int, K: int, world_size: int = 8):
    """Upstream's chooser of its fetcher kernel's launch parameters for a shape: ``(FusedConfig, k_per_flag,
    num_fetch_sms, num_fetch_stages, first_stage_fetch_sms)``, which :func:`all_gather_matmul_hbm_buffer` takes.

    None of them has an effect here (the copy engines fetch, cuBLAS multiplies), so it gives the same answer for
    every shape: :class:`FusedConfig`'s defaults and 1 for each knob (a flag per K block, one fetch program and
    stage), values the call accepts. Upstream's tuned choices (its MI300X block sizes and fetcher counts) are not
    repeated: they would say nothing about this machine.

    Examples
    --------
    >>> config, k_per_flag, *fetch = _auto_config(4096, 4096, 8192, world_size=2)
    >>> config == FusedConfig(), k_per_flag, fetch
    (True, 1, [1, 1, 1])
    """
    for name, value in (("M", M), ("N", N), ("K", K), ("world_size", world_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{OP}: _auto_config's {name} must be an int >= 1, got {value!r}")
    return FusedConfig(), 1, 1, 1, 1


def _staged(ctx, config) -> FusedConfig:
    """``config`` on the chunked path, the one that stages A (``"auto"`` becomes ``"chunked"``)."""
    config = config if config is not None else FusedConfig()
    if not isinstance(config, FusedConfig):
        raise TypeError(f"rank {ctx.cur_rank}: {OP} config must be an iris.ops.FusedConfig, got {type(config)}")
    if config.variant == "sequential":
        raise ValueError(f"rank {ctx.cur_rank}: {OP} is the path that stages A in a buffer (variant 'chunked'), "
                         "not the sequential one: call iris.ops.all_gather_matmul with FusedConfig(variant="
                         "'sequential') for that")
    return dataclasses.replace(config, variant="chunked")


def _check_knobs(ctx, **knobs) -> None:
    for name, value in knobs.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"rank {ctx.cur_rank}: {OP}: {name} must be an int >= 1 or None, got {value!r} "
                             "(it tunes upstream's kernel and has no effect here)")


def _check_layout(ctx, layout) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"rank {ctx.cur_rank}: {OP}: staged_a_layout {layout!r}: use one of "
                         f"{', '.join(map(repr, LAYOUTS))} (the buffer is row-major here whichever is given)")
