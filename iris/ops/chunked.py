"""The chunked path: the GEMM in pieces on the compute stream, the communication of each piece on a second
stream while the next piece computes. Every copy between ranks is a peer-to-peer memcpy over NVLink
(``ctx.as_remote(t, peer)[rows].copy_(t[rows])``), done by the copy engines: it takes no SM from the GEMM.

* :func:`matmul_all_gather`: row pieces, each finished piece pushed into every peer's ``out`` (on the heap);
* :func:`all_gather_matmul`: A gathered row piece by row piece into every rank's heap (2-D copies of each
  shard into its columns; this rank's own in one copy, on a third stream), each piece's full-depth GEMM started
  once its flags say it has landed;
* :func:`matmul_reduce_scatter` and :func:`matmul_all_reduce`: each rank computes its peers' blocks of its
  product first, in pieces pushed to their owners as they finish, then its own block, adding its product in
  place (``addmm_``) onto the peers' pieces, each waited for by its flag (:mod:`iris.ops.signals`) just
  before it is needed; the all-reduce then pushes each reduced piece to every peer.

Each function takes the count of pieces and their ``growth`` (:mod:`iris.ops.pieces` cuts them, the same way
on every rank). Every rank pushes to its peers in turn from the next rank on (:func:`peers_in_turn`), so that at
each step every rank receives from one peer only.

A device barrier opens a call (every peer is done with the last call's buffers). The pushing paths run it on the
compute stream before their first GEMM. On the copy stream instead (ahead of the first transfer, or after the
first GEMM), it made matmul_all_gather 20-110 µs slower (2xH200, benchmarks/RESULTS.md).
Presumably the one-program kernel holds an SM beside the GEMM while it waits for its peers. all_gather_matmul
runs its barrier on its copy stream, where no GEMM runs beside it. Flags, one per
piece (:mod:`iris.ops.signals`; on GPUs stored by the stream, taking no SM), tell a rank that a peer's piece has
landed, just before it needs it. The compute stream then waits for the second stream. Fork and join go through
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

from .pieces import boundary_rows, split
from .signals import PieceSignals


def matmul_all_gather(ctx, out, A, B, bias, async_op, workspace, chunks: int, growth: float):
    """``out`` = every rank's A @ B stacked along M: this rank's rows computed in ``chunks`` pieces, each pushed
    into every peer's ``out`` (a heap buffer first when ``out`` is not on the heap: peers write into it) while
    the next computes, and followed by its flag; the call ends when every peer's pieces have landed."""
    target = workspace.on_heap(ctx, "gathered", out)
    rank, world = ctx.cur_rank, ctx.num_ranks
    m_local = A.shape[0]
    peers = peers_in_turn(rank, world)
    signals = signals_for(ctx, workspace, chunks)
    compute, copy = _streams(ctx, workspace)
    ctx.device_barrier()  # every peer is done with its out from before
    with signals.call():
        for slot, piece in enumerate(split(slice(None), m_local, chunks, growth)):
            rows = slice(rank * m_local + piece.start, rank * m_local + piece.stop)
            torch.matmul(A[piece], B, out=target[rows])
            if bias is not None:
                target[rows] += bias
            with _on(copy):
                _wait(copy, compute)  # this piece is computed
                for peer in peers:
                    ctx.as_remote(target, peer)[rows].copy_(target[rows])
                    signals.signal(slot, peer)
        signals.wait(0, chunks)  # every peer's pieces have landed here
    _wait(compute, copy)  # later work (the next call's GEMMs into target) is ordered after the copies
    if target is not out:
        out.copy_(target)


def all_gather_matmul(ctx, out, A_sharded, B, bias, async_op, workspace, chunks: int, growth: float):
    """``out = A @ B`` with A every rank's ``A_sharded`` side by side along K, gathered into each rank's heap
    buffer (:func:`gathered_buffer`) row piece by row piece: each rank writes its shard's rows into its columns
    of every rank's A (2-D copies by the copy engines to its peers; its own in one copy, on SMs), each piece
    followed by its flag; each piece's full-depth GEMM starts once its rows from every rank have landed. Each
    product element is one GEMM's fp32 sum over the whole K, rounded once, as ``torch.matmul`` of the gathered A
    gives it. (Splitting a piece's K into per-shard terms started sooner, but rounded each term to ``out``'s
    dtype: 2-4 bf16 ulps off where terms cancel.) So the first piece waits for its rows, and the others land
    while it computes."""
    rank, world = ctx.cur_rank, ctx.num_ranks
    m, k_local = A_sharded.shape
    gathered = gathered_buffer(ctx, workspace, A_sharded)  # A, (M, K), stored in the layout the ranks agreed on
    by_columns = workspace.gathered_layout == "columns"
    if shard_layout(A_sharded) != workspace.gathered_layout:  # into that layout: the copies take whole rows, apart
        A_sharded = A_sharded.t().contiguous().t() if by_columns else A_sharded.contiguous()
    stored = gathered.t() if by_columns else gathered  # the buffer as allocated: its rows lie apart
    mine = slice(rank * k_local, (rank + 1) * k_local)

    def copy_rows(into, piece):  # this rank's shard's rows `piece` into its columns of `into` (a stored buffer)
        if piece.start == piece.stop:
            return
        if by_columns:  # both held transposed: copy the transposes
            ctx.heap.copy_2d(into[mine, piece], A_sharded.t()[:, piece])
        else:
            ctx.heap.copy_2d(into[piece, mine], A_sharded[piece])

    rows = split(slice(None), m, chunks, growth, align=boundary_rows("all_gather_matmul"))  # whole 128-row tiles
    peers = peers_in_turn(rank, world)
    signals = signals_for(ctx, workspace, chunks)
    compute, copy = _streams(ctx, workspace)
    local = _local_stream(ctx, workspace)
    # A copy within a GPU needs SMs (a peer-to-peer copy is the copy engines'), and cuBLAS's GEMMs on Hopper are
    # persistent (one CTA per SM): one queued behind a running GEMM waits for its end, one queued before a GEMM
    # delays its start. So this rank's own rows are copied at once, on a third stream, while the SMs wait for
    # the first piece to land (no barrier needed: only this rank's GEMMs read its A, and they are done); on the
    # copy stream they could wait for a GEMM to end, and the next GEMM for them (at 8192 x 8192 x 28672, 112
    # MiB; 2xH100, benchmarks/fused_ops_timeline.py). The signals take no SM (stream stores), so they go out
    # while a GEMM runs and each GEMM waits for its flags alone. (As kernels, a GEMM launched before this rank's
    # signal kernels held every SM, and the peer waited for that whole GEMM: 680 µs at 8192 x 8192 x 8192.)
    with _on(local):
        _wait(local, compute)  # the inputs are ready, and the last call's GEMMs are done with A
        # All of this rank's rows in one copy, for every piece: where A is stored column-major they are one
        # contiguous block. (2xH100, 8192 x 8192 x 8192, replayed: a 2-D copy per piece took 93 µs, and the first
        # GEMM waited for it, its rows from the peer having landed after about 65; as one copy, 42-48 µs.)
        if by_columns:
            stored[mine].copy_(A_sharded.t())
        else:
            ctx.heap.copy_2d(stored[:, mine], A_sharded)
        mine_landed = _record(local)
    with signals.call():
        with _on(copy):
            _wait(copy, compute)  # the inputs are ready
            ctx.device_barrier()  # every rank's GEMMs of the last call are done with its A
            for slot, piece in enumerate(rows):
                for peer in peers:
                    copy_rows(ctx.as_remote(stored, peer), piece)
                    signals.signal(slot, peer)
        _wait_event(compute, mine_landed)
        for slot, piece in enumerate(rows):
            signals.wait(slot)
            torch.matmul(gathered[piece], B, out=out[piece])
    if bias is not None:
        out += bias
    _wait(compute, copy)
    _wait(compute, local)


def shard_layout(A_sharded) -> str | None:
    """``"rows"`` for a shard whose rows lie apart with unit column stride (row-major, or a column block of a
    wider matrix), ``"columns"`` for one held as its transpose (column-major: a layer's ``(K_local, M)`` output
    viewed as A), None for any other strides."""
    m, k_local = A_sharded.shape
    if A_sharded.stride(1) == 1 and A_sharded.stride(0) >= k_local:
        return "rows"
    if A_sharded.stride(0) == 1 and A_sharded.stride(1) >= m:
        return "columns"
    return None


def gathered_buffer(ctx, workspace, A_sharded) -> torch.Tensor:
    """all_gather_matmul's heap buffer for the gathered A, as an ``(M, world * K_local)`` tensor, every rank's
    shard in its columns (upstream's staging buffer, the workspace's ``aux_buffer``).

    It is stored row-major, or column-major (the transpose of a ``(K, M)`` buffer) where every rank's shard was
    column-major at the workspace's first call: cuBLAS then multiplies the layout those callers hold (at (M, N, K)
    = (8192, 28672, 8192) on 2xH100 its kernel for a transposed A ran 4-5% faster than for a row-major one, and
    torch's best sequence gathers A transposed). A peer writes into this rank's buffer in the layout it stores,
    so the ranks agree on it once (``workspace.gathered_layout``), collectively, as that call's allocations are;
    a later call whose shard is in the other layout is copied into the agreed one first."""
    if workspace.gathered_layout is None:
        layouts = ctx.group.all_gather_object(shard_layout(A_sharded))
        workspace.gathered_layout = "columns" if all(layout == "columns" for layout in layouts) else "rows"
    m, k_local = A_sharded.shape
    k = ctx.num_ranks * k_local
    if workspace.gathered_layout == "columns":
        return workspace.buffer(ctx, "A_t", (k, m), A_sharded.dtype).t()
    return workspace.buffer(ctx, "A", (m, k), A_sharded.dtype)


def matmul_all_reduce(ctx, out, A, B, bias, async_op, workspace, chunks: int, growth: float):
    """``out = sum over ranks of A @ B``: a reduce-scatter of row blocks, then an all-gather, both piece by piece.

    Rank j owns row block j. Each rank first computes its peers' row blocks of its product, in ``chunks``
    pieces, each pushed into the owner's ``out`` while the next computes; then its own block, piece by piece:
    once the peers' piece has landed, ``addmm_`` adds its own product in place (cuBLAS's beta = 1: no separate
    add), and the reduced piece is pushed into every peer's ``out``.
    """
    target = workspace.on_heap(ctx, "reduced", out)
    blocks = [(rows, slice(None)) for rows in split(slice(None), A.shape[0], ctx.num_ranks)]
    _reduce_in_pieces(ctx, target, A, B, bias, workspace, chunks, growth, blocks, send_per_peer=False, gather=True)
    if target is not out:
        out.copy_(target)


def matmul_reduce_scatter(ctx, out, A, B, bias, async_op, workspace, chunks: int, growth: float):
    """``out`` = this rank's column block of the sum over ranks of A @ B: each peer's column block first, in
    ``chunks`` row pieces pushed to it while the next computes; then this rank's own, piece by piece, its
    product added in place (``addmm_``) onto the peers' pieces as they land."""
    target = workspace.on_heap(ctx, "reduced", out)
    world, n_local = ctx.num_ranks, out.shape[1]
    blocks = [(slice(None), slice(j * n_local, (j + 1) * n_local)) for j in range(world)]
    _reduce_in_pieces(ctx, target, A, B, bias, workspace, chunks, growth, blocks, send_per_peer=True,
                      gather=False)
    if target is not out:
        out.copy_(target)


def _reduce_in_pieces(ctx, target, A, B, bias, workspace, chunks: int, growth: float, blocks, send_per_peer: bool,
                      gather: bool):
    """Reduce rank j's block ``A[rows_j] @ B[:, columns_j]`` of every rank's product into rank j's ``target[rows_j]``
    (``blocks[j] = (rows_j, columns_j)``; the rows of A are the rows of target); with ``gather``, then copy
    every rank's reduced block into every rank's target. ``bias`` (N,), this rank's, is added to each piece of
    its own product (its columns of it) before the piece is sent or reduced: part of this rank's contribution.

    Rank r pushes its piece of j's block into j's ``target`` itself when r is j's next rank (so on 2 ranks
    nothing is staged), else into j's ``received[r]``, which j adds. Each piece lands with a signal
    (:class:`~iris.ops.signals.PieceSignals`: slot c for reduction piece c, ``chunks + c`` for gathered piece
    c) that the owner waits for just before it needs the piece.
    """
    rank, world = ctx.cur_rank, ctx.num_ranks
    send = workspace.buffer(ctx, "send", (world if send_per_peer else 1, *target.shape), target.dtype)
    received = workspace.buffer(ctx, "received", (world, *target.shape), target.dtype) if world > 2 else None
    signals = signals_for(ctx, workspace, 2 * chunks if gather else chunks)
    compute, copy = _streams(ctx, workspace)
    ctx.device_barrier()  # every peer has consumed the last call's pieces (and its user has read target)
    with signals.call():
        for peer in peers_in_turn(rank, world):  # the peers' blocks in the order they are pushed
            rows, columns = blocks[peer]
            into = ctx.as_remote(target if rank == (peer + 1) % world else received[rank], peer)
            sent = send[peer if send_per_peer else 0]
            for slot, piece in enumerate(split(rows, target.shape[0], chunks, growth)):
                torch.matmul(A[piece], B[:, columns], out=sent[piece])
                if bias is not None:
                    sent[piece] += bias[columns]  # this rank's bias goes with its product
                with _on(copy):
                    _wait(copy, compute)  # this piece is computed
                    into[piece].copy_(sent[piece])
                    signals.signal(slot, peer)
        rows, columns = blocks[rank]
        peers = peers_in_turn(rank, world)
        own_first = own_product_first(world, chunks)  # into this rank's own slot of `received`, unused by peers
        for slot, piece in enumerate(split(rows, target.shape[0], chunks, growth)):
            if own_first:
                torch.matmul(A[piece], B[:, columns], out=received[rank][piece])
            signals.wait(slot)  # every peer's piece has landed
            if own_first:
                target[piece] += received[rank][piece]
            elif peers:
                target[piece].addmm_(A[piece], B[:, columns])  # onto the piece that rank + 1 pushed into target
            else:
                torch.matmul(A[piece], B[:, columns], out=target[piece])  # one rank: nobody pushed
            for source in peers:
                if source != (rank + 1) % world:
                    target[piece] += received[source][piece]
            if bias is not None:
                target[piece] += bias[columns]  # this rank's own contribution's bias (the peers' came with theirs)
            if gather:
                with _on(copy):
                    _wait(copy, compute)  # this piece is reduced
                    for peer in peers:
                        ctx.as_remote(target, peer)[piece].copy_(target[piece])
                        signals.signal(chunks + slot, peer)
        if gather:
            signals.wait(chunks, chunks)  # every peer's reduced block has landed here
    _wait(compute, copy)  # later work (the next call's sends) is ordered after the copies


def peers_in_turn(rank: int, world: int) -> list[int]:
    """The order in which ``rank`` pushes to its peers: ``rank + 1, rank + 2, ...`` (modulo ``world``).

    At each step every rank then sends to one peer and receives from one: the steps are permutations. In rank
    order instead (0, 1, ... skipping itself), at 4 ranks every rank's first push went to rank 0 (rank 0's to rank
    1), so rank 0's link took three pushes at once, and rank 3's at the last step: on 4x H200 (benchmarks/RESULTS.md,
    fused_ops (4 GPUs), 2026-11-28) a plain copy-engine push so ordered received 237 GB/s a rank against
    NCCL's 280-340, and the ops that pushed so (matmul_all_gather, matmul_all_reduce's gathered pieces) hid
    -11% to 42% of what overlap can hide, where the ops already pushing in turn (the reduce-scatter,
    all_gather_matmul) hid 64-89%. At 2 ranks both orders are the one peer.

    Examples
    --------
    >>> peers_in_turn(1, 4), peers_in_turn(3, 4), peers_in_turn(0, 2)
    ([2, 3, 0], [0, 1, 2], [1])
    """
    return [(rank + step) % world for step in range(1, world)]


def own_product_first(world: int, chunks: int) -> bool:
    """Whether a reduction computes this rank's own product before its peers' pieces have landed, and adds it
    after, rather than adding it in place (``addmm_``) once they have: with one piece a block at more than 2
    ranks. Rank + 1 then computes this rank's block last of its peers' blocks, so its piece lands one transfer
    after this rank's last peer GEMM; computing first costs one more add of the piece instead of that wait. With
    more pieces a block that piece lands while the next one computes, and at 2 ranks there is no spare buffer.

    Examples
    --------
    >>> own_product_first(4, 1), own_product_first(4, 2), own_product_first(2, 1)
    (True, False, False)
    """
    return world > 2 and chunks == 1


def signals_for(ctx, workspace, slots: int) -> PieceSignals:
    """The workspace's per-piece flags, with at least ``slots`` slots (allocated on first use, or when a call
    needs more: collective, as every rank makes the same calls; the workspace's CUDA graphs of calls with the
    old flags are then dropped by :mod:`iris.ops.graphs`)."""
    if workspace.signals is None or workspace.signals.slots < slots:
        workspace.signals = PieceSignals(ctx, workspace.key, slots)
    return workspace.signals


def _streams(ctx, workspace):
    """(compute, copy) streams on a GPU (the copy stream kept in the workspace); (None, None) on the CPU."""
    if ctx.backend != "cuda":
        return None, None
    if workspace.copy_stream is None:
        # High priority: its kernels (all_gather_matmul's opening barrier) take the first free SM.
        workspace.copy_stream = torch.cuda.Stream(device=ctx.get_device(), priority=-1)
    return torch.cuda.current_stream(), workspace.copy_stream


def _local_stream(ctx, workspace):
    """A third stream for copies within this rank (None on the CPU), kept in the workspace."""
    if ctx.backend != "cuda":
        return None
    if workspace.local_stream is None:
        workspace.local_stream = torch.cuda.Stream(device=ctx.get_device())
    return workspace.local_stream


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
