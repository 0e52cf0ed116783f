"""Delivery through inboxes: the low-latency path of small all_reduce (one_shot) and all_gather (push).

Every rank writes its input into its own row of every peer's inbox (a heap buffer in the collective's
workspace), then one flag exchange tells everyone that all rows have arrived; each rank then reads the
rows locally. Remote writes are posted (no reply to wait for, unlike remote reads) and there is a single
exchange per call, so a call costs about one link round trip plus the launch.

The inbox is ``[2, world, stride]`` elements, double-buffered by call parity: a rank writes call k's half
again only at call k + 2, after every peer signalled call k + 1 and had therefore finished reading call k.
Program p of each rank writes and reads only its own blocks, so waiting for program p of the others
suffices. No peer reads a rank's input or writes its output, so no closing exchange is needed: when the
kernel ends, both may be reused. This rests on what every collective here assumes: the calls on one
workspace run in stream order on each rank, and every rank makes the same calls with the same launch
shape. The cost is memory, 2 x world copies of the input, which is why the size rules use inboxes for
small tensors only (:func:`use_inbox`).

Examples
--------
>>> box = deliver(ctx, inp, inbox, flags, epoch, n, stride, pid, num_programs, BLOCK, HINT)  # doctest: +SKIP
>>> value = tl.load(row(ctx, inp, box, stride, source) + offs, mask=mask)   # rank source's input, locally
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..language.sync import exchange
from .launch import cdiv, hint
from .workspace import Workspace, reuse_or_allocate

INBOX_BYTES = 4 << 20  # inboxes while each rank writes at most this many bytes per call (see use_inbox)
DELIVERED = tl.constexpr(0)  # the flag slot (kernels read only constexpr globals)


def use_inbox(nbytes: int, world: int) -> bool:
    """Whether an input of ``nbytes`` per rank goes through inboxes: ``nbytes * (world - 1) <= 4 MiB``, the
    bytes each rank writes into its peers' inboxes.

    The cap was measured with all_reduce on H200s (2026-11-21): one_shot beat two_shot up to 4 MiB written on 2 and
    4 GPUs. all_gather's push keeps it (ahead of pull a little beyond it: bf16 output of 16 MiB on 2 GPUs, 34.4
    against 35.7 µs; behind from 64 MiB); all_reduce's one_shot now stops earlier on more ranks, where
    two_shot_push wins (:func:`iris.ccl.rules.choose_variant`).

    Examples
    --------
    >>> use_inbox(1 << 20, 4), use_inbox(2 << 20, 4)
    (True, False)
    """
    return nbytes * max(world - 1, 1) <= INBOX_BYTES


def inbox_workspace(ctx, workspace, key: tuple, programs: int, inp, members) -> Workspace:
    """``workspace`` if made for ``key``, else a new one with one flag slot and the inbox, a row per member of
    the call's group (:class:`iris.ccl.groups.Members`); collective.

    Examples
    --------
    >>> ws = inbox_workspace(ctx, None, ("all_gather", "push", n, dtype, 8, 4096, None), 8, inp,
    ...                      members(ctx, None))                                         # doctest: +SKIP
    """
    return reuse_or_allocate(ctx, workspace, key, programs, 1, (inbox_numel(inp.numel(), members.size), inp.dtype),
                             members)


def inbox_hint(workspace: Workspace) -> int | None:
    """Alignment of the inbox rows for remote stores (16 when the inbox starts 16-byte aligned)."""
    return hint((workspace.scratch, 0))


def inbox_stride(n: int) -> int:
    """Elements per inbox row: ``n`` rounded up to 16, so that every row starts 16-byte aligned."""
    return cdiv(n, 16) * 16


def inbox_numel(n: int, world: int) -> int:
    """Elements of the double-buffered inbox for inputs of ``n`` elements."""
    return 2 * world * inbox_stride(n)


@triton.jit
def call_half(inbox, epoch, world, stride):
    """Call ``epoch``'s half of an inbox double-buffered by call parity, ``[2, world, stride]`` elements (64-bit
    offsets: big inboxes)."""
    return inbox + tl.multiple_of((epoch % 2).to(tl.int64) * world * stride, 16)


@triton.jit
def deliver(ctx, inp, inbox, flags, epoch, n, stride, pid, num_programs, BLOCK: tl.constexpr,
            HINT: tl.constexpr):
    """Write this program's blocks of ``inp`` into every peer's inbox row, wait until every peer's have come.

    Returns this call's half of the local inbox: row ``s`` (at ``box + s * stride``) holds rank s's input
    for every s but this rank, whose own input stays where it is (:func:`row` picks the right one).
    """
    rank: tl.constexpr = ctx.rank
    world: tl.constexpr = ctx.world_size
    box = call_half(inbox, epoch, world, stride)
    for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        value = tl.load(inp + offs, mask=mask)
        for i in tl.static_range(1, world):
            peer = (rank + i) % world  # everyone starts with a different peer
            tl.store(ctx.as_remote(box + rank * stride + offs, peer, mask, HINT), value, mask=mask)
    exchange(ctx, flags, DELIVERED, epoch, pid, num_programs)
    return box


@triton.jit
def row(ctx, inp, box, stride, source: tl.constexpr):
    """Where rank ``source``'s input of this call lies on this rank: its inbox row, or ``inp`` for this rank."""
    if source == ctx.rank:
        return inp
    return box + source * stride.to(tl.int64)
