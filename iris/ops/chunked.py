"""The chunked path: the GEMM in row chunks on the compute stream, each finished chunk pushed to every peer by the
copy engines on a second stream while the next chunk computes.

Only :func:`matmul_all_gather` has it so far. Its communication is plain copies into the peers' ``out`` (which
must therefore be on the heap): ``ctx.as_remote(out, peer)[rows].copy_(out[rows])`` is a peer-to-peer memcpy,
done by the copy engines over NVLink, so it takes no SM from the GEMM. A device barrier opens the call (no
peer still reads its ``out`` from before) and one closes it on the copy stream (every chunk of every rank
has landed); the compute stream then waits for the copy stream. Stream fork and join go through
``wait_stream``, so the whole call can be captured in a CUDA graph.

On the CPU backend there are no streams: the same steps run in order, which is what the tests check.

Examples
--------
>>> ctx.ops.matmul_all_gather(out, A, B, config=iris.ops.FusedConfig(variant="chunked")).path   # doctest: +SKIP
'chunked'
"""

from __future__ import annotations

import contextlib

import torch


def matmul_all_gather(ctx, out, A, B, bias, async_op, workspace, chunks: int):
    """``out`` = every rank's A @ B stacked along M, computed and pushed in ``chunks`` row chunks (into a heap
    buffer first when ``out`` is not on the heap: peers write into it)."""
    target = out if ctx.is_symmetric(out) and out.is_contiguous() else workspace.buffer(
        ctx, "gathered", out.shape, out.dtype)
    _push_in_chunks(ctx, target, A, B, bias, workspace, chunks)
    if target is not out:
        out.copy_(target)


def _push_in_chunks(ctx, out, A, B, bias, workspace, chunks: int):
    rank, world = ctx.cur_rank, ctx.num_ranks
    m_local = A.shape[0]
    peers = [ctx.as_remote(out, peer) for peer in range(world) if peer != rank]
    compute, copy = _streams(ctx, workspace)
    ctx.device_barrier()  # every peer is done with its out from before
    with _on(copy):
        _wait(copy, compute)
    step = -(-m_local // chunks)
    for start in range(0, m_local, step):
        rows = slice(rank * m_local + start, rank * m_local + min(start + step, m_local))
        torch.matmul(A[start:start + step], B, out=out[rows])
        if bias is not None:
            out[rows] += bias
        with _on(copy):
            _wait(copy, compute)  # this chunk is computed
            for peer_out in peers:
                peer_out[rows].copy_(out[rows])
    with _on(copy):
        ctx.device_barrier()  # every rank's chunks have landed everywhere
    _wait(compute, copy)  # (so async_op has nothing to defer: later work is ordered after the copies)


def _streams(ctx, workspace):
    """(compute, copy) streams on a GPU (the copy stream kept in the workspace); (None, None) on the CPU."""
    if ctx.backend != "cuda":
        return None, None
    if workspace.copy_stream is None:
        workspace.copy_stream = torch.cuda.Stream(device=ctx.get_device())
    return torch.cuda.current_stream(), workspace.copy_stream


def _on(stream):
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


def _wait(waiter, waited) -> None:
    if waiter is not None:
        waiter.wait_stream(waited)
