"""Delivery through inboxes: the low-latency path of small all_reduce (one_shot) and all_gather (push).

Every rank writes its input into its own row of every peer's inbox (a heap buffer in the collective's
workspace), then one flag exchange tells everyone that all rows have arrived; each rank then reads the
rows locally. Remote writes are posted (no reply to wait for, unlike remote reads) and there is a single
exchange per call, so a call costs about one link round trip plus the launch.

The inbox is ``[2, world, stride]`` elements, double-buffered by call parity: a rank writes call k's half
again only at call k + 2, after every peer signalled call k + 1 and had therefore finished reading call k.
Program p of each rank writes and reads only its own blocks, so waiting for program p of the others
suffices. The cost is memory, 2 x world copies of the input, which is why the size rules use inboxes for
small tensors only (:func:`use_inbox`).

Examples
--------
>>> box = deliver(ctx, inp, inbox, flags, epoch, n, stride, pid, num_programs, BLOCK, HINT)  # doctest: +SKIP
>>> row = tl.load(box + source * stride + offs, mask=mask)     # rank source's input, read locally
"""

from __future__ import annotations

import triton
import triton.language as tl

from .launch import cdiv
from .sync import exchange

INBOX_BYTES = 4 << 20  # inboxes while each rank writes at most this many bytes per call (see use_inbox)
DELIVERED = tl.constexpr(0)  # the flag slot (kernels read only constexpr globals)


def use_inbox(nbytes: int, world: int) -> bool:
    """Whether a tensor of ``nbytes`` per rank goes through inboxes: ``nbytes * (world - 1) <= 4 MiB``.

    Measured on H200s (2026-11-21, benchmarks/RESULTS.md): inboxes were faster than the two-exchange
    algorithms up to 4 MiB written per rank on 2 GPUs (all_reduce of 4 MiB: one_shot 17.5 µs against
    two_shot's 18.7) and on 4 (all_gather of 1 MiB inputs: push 15.2 µs against pull 17.9), and slower at
    twice that (all_reduce of 16 MiB on 2 GPUs: 62.6 against 57.7 µs).

    Examples
    --------
    >>> use_inbox(1 << 20, 4), use_inbox(2 << 20, 4)
    (True, False)
    """
    return nbytes * max(world - 1, 1) <= INBOX_BYTES


def inbox_stride(n: int) -> int:
    """Elements per inbox row: ``n`` rounded up to 16, so that every row starts 16-byte aligned."""
    return cdiv(n, 16) * 16


def inbox_numel(n: int, world: int) -> int:
    """Elements of the double-buffered inbox for inputs of ``n`` elements."""
    return 2 * world * inbox_stride(n)


@triton.jit
def deliver(ctx, inp, inbox, flags, epoch, n, stride, pid, num_programs, BLOCK: tl.constexpr,
            HINT: tl.constexpr):
    """Write this program's blocks of ``inp`` into every peer's inbox row, wait until every peer's have come.

    Returns this call's half of the local inbox: row ``s`` (at ``box + s * stride``) holds rank s's input
    for every s but this rank (read its own input directly).
    """
    rank: tl.constexpr = ctx.rank
    world: tl.constexpr = ctx.world_size
    box = inbox + tl.multiple_of((epoch % 2) * world * stride, 16)
    for block in range(pid, tl.cdiv(n, BLOCK), num_programs):
        offs = block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        value = tl.load(inp + offs, mask=mask)
        for i in tl.static_range(1, world):
            peer = (rank + i) % world  # everyone starts with a different peer
            tl.store(ctx.as_remote(box + rank * stride + offs, peer, mask, HINT), value, mask=mask)
    exchange(ctx, flags, DELIVERED, epoch, pid, num_programs)
    return box
