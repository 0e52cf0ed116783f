"""The chunked path: the GEMM in pieces on the compute stream, the communication of each piece on a second
stream while the next piece computes.

* :func:`matmul_all_gather`: row chunks, each finished chunk pushed into every peer's ``out`` (on the heap) by
  the copy engines: ``ctx.as_remote(out, peer)[rows].copy_(out[rows])`` is a peer-to-peer memcpy over NVLink,
  which takes no SM from the GEMM;
* :func:`all_gather_matmul`: the K pieces: this rank's shard times its rows of B first, while the copy engines
  pull every peer's shard; then each peer's term is added as its shard arrives;
* :func:`matmul_all_reduce`: row chunks, each all-reduced by :mod:`iris.ccl` on the second stream while the next
  chunk computes (the collective's kernel shares the SMs with the GEMM).

A device barrier opens a call (every peer is ready: staged, done with the last call's buffers) and one closes
it on the second stream; the compute stream then waits for that stream. Fork and join go through
``wait_stream`` and events, so a whole call can be captured in a CUDA graph.

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
    target = workspace.on_heap(ctx, "gathered", out)
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


def all_gather_matmul(ctx, out, A_sharded, B, bias, async_op, workspace, chunks: int):
    """``out = [every rank's A_sharded along K] @ B``, this rank's term first while the peers' shards arrive."""
    rank, world = ctx.cur_rank, ctx.num_ranks
    m, k_local = A_sharded.shape
    shard = workspace.buffer(ctx, "shard", (m, k_local), A_sharded.dtype)  # staged on the heap: peers pull it
    shard.copy_(A_sharded)
    pulled = workspace.buffer(ctx, "pulled", (world, m, k_local), A_sharded.dtype)
    compute, copy = _streams(ctx, workspace)
    ctx.device_barrier()  # every rank's shard is staged
    _wait(copy, compute)
    peers = [(rank + step) % world for step in range(1, world)]  # each rank starts with another peer
    arrived = {}
    with _on(copy):
        for peer in peers:
            pulled[peer].copy_(ctx.as_remote(shard, peer))
            arrived[peer] = _record(copy)
    torch.matmul(shard, B[rank * k_local:(rank + 1) * k_local], out=out)
    for peer in peers:
        _wait_event(compute, arrived[peer])
        out.addmm_(pulled[peer], B[peer * k_local:(peer + 1) * k_local])
    if bias is not None:
        out += bias
    with _on(copy):
        ctx.device_barrier()  # every rank has pulled every shard: the next call may stage new ones
    _wait(compute, copy)


def matmul_all_reduce(ctx, out, A, B, bias, async_op, workspace, chunks: int):
    """``out = sum over ranks of A @ B``, each row chunk all-reduced while the next one computes."""
    partial = workspace.buffer(ctx, "partial", out.shape, out.dtype)
    reduced = workspace.on_heap(ctx, "reduced", out)
    compute, copy = _streams(ctx, workspace)
    _wait(copy, compute)
    m = A.shape[0]
    step = -(-m // chunks)
    for start in range(0, m, step):
        rows = slice(start, min(start + step, m))
        torch.matmul(A[rows], B, out=partial[rows])
        _wait(copy, compute)  # this chunk is computed
        with _on(copy):
            ctx.ccl.all_reduce(reduced[rows], partial[rows])
    _wait(compute, copy)
    if bias is not None:
        reduced += bias
    if reduced is not out:
        out.copy_(reduced)


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


def _record(stream):
    """An event marking the work queued on ``stream`` so far (None on the CPU)."""
    if stream is None:
        return None
    event = torch.cuda.Event()
    event.record(stream)
    return event


def _wait_event(stream, event) -> None:
    if stream is not None:
        stream.wait_event(event)
