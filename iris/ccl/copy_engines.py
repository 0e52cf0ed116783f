"""Collectives whose bytes the copy engines move: each rank writes its pieces into its peers' outputs by
peer-to-peer memcpys, one peer a step, the ranks kept in step by device barriers. No kernel moves data, so no SM
is taken; the barriers are one-program kernels.

Why in step: each rank pushes to the next rank first, then the one after (every step a permutation), but a rank
that ran ahead would push into a peer that another rank still pushes into, and the two would share that peer's
link. On 4x H200 (2026-11-28, benchmarks/copy_engines.py) pushes in turn without a barrier carried 230-270 GB/s a
rank from 64 to 256 MiB gathered, with one (``in step``) 284-352; a stream per peer, all at once, 233-235.
Pushing turns in the chunked GEMM path (stream waits instead of barriers: ``iris.ops``) did not pay there: its
pieces are shorter, and the waits tied each rank's GEMMs to its peers'.

This rank's own piece is a copy within its GPU, made on a second stream beside the pushes (in line it cost
about 40 µs of a 610 µs all_gather of 256 MiB on 4x H200). On the CPU backend the same copies run one after
another, which is what its tests check.

Examples
--------
>>> key = ("all_gather", "copy_engines", inp.numel(), inp.dtype, 1, None, members.key)
>>> ws = push_in_step(ctx, members, ws, key, lambda: out[mine].copy_(inp),                # doctest: +SKIP
...                   lambda index, peer: ctx.as_remote(out, peer)[mine].copy_(inp))
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .barrier import barrier_on
from .workspace import Workspace, reuse_or_allocate


def push_in_step(ctx, members, workspace, key: tuple, copy_own: Callable[[], object] | None,
                 copy_to: Callable[[int, int], object]) -> Workspace:
    """Run ``copy_own()`` (this rank's own piece, None for none) beside ``copy_to(index, peer)`` for every other
    member, ``index`` its place in the group and ``peer`` its global rank, one a step from the next member on, a
    device barrier before each step and one after the last (every member's pieces have landed here); collective
    over ``members`` (:class:`iris.ccl.groups.Members`).

    The barriers run on the flags of ``workspace`` (reused when it was made for ``key``, the collective's
    workspace key with variant "copy_engines", one program and no block), which is returned for the next call."""
    workspace = reuse_or_allocate(ctx, workspace, key, 1, 1, members=members)
    beside = _own_piece_stream(ctx) if copy_own is not None else None
    if beside is not None:
        beside.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(beside):
            copy_own()
    elif copy_own is not None:  # the CPU backend
        copy_own()
    for step in range(1, members.size):
        # every member is done with the last step (the first: with its output from before): no rank receives
        # from two at once
        barrier_on(ctx, workspace, members)
        index = (members.rank + step) % members.size
        copy_to(index, members.ranks[index])
    if beside is not None:
        torch.cuda.current_stream().wait_stream(beside)
    barrier_on(ctx, workspace, members)
    return workspace


_own_piece_streams: dict = {}  # device index -> the stream push_in_step copies a rank's own piece on


def _own_piece_stream(ctx):
    """A stream of this rank's GPU for the copy of its own piece (None on the CPU backend), made once."""
    if ctx.backend != "cuda":
        return None
    device = ctx.get_device()
    if device.index not in _own_piece_streams:
        _own_piece_streams[device.index] = torch.cuda.Stream(device=device)
    return _own_piece_streams[device.index]
