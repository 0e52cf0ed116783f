"""Rank-side cases of tests/test_stepping.py: lesson 03's message passing, stepped by a coordinator in the test."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

import iris


@triton.jit
def produce(mailbox, flag, cur_rank, consumer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.store(mailbox + offs, offs.to(tl.float32) * 0.5 + 42, cur_rank, consumer, heap_bases)
    iris.atomic_xchg(flag, 1, cur_rank, consumer, heap_bases, sem="release", scope="sys")


@triton.jit
def consume(mailbox, flag, received, BLOCK: tl.constexpr):
    while tl.atomic_cas(flag, 1, 1, sem="acquire", scope="sys") != 1:
        pass
    offs = tl.arange(0, BLOCK)
    tl.store(received + offs, tl.load(mailbox + offs))


@triton.jit
def consume_without_waiting(mailbox, received, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(received + offs, tl.load(mailbox + offs))


def message_passing(address: str, wait: bool = True) -> dict:
    """Rank 0 sends 4 floats to rank 1 and raises its flag; rank 1 waits for the flag (``wait``) and copies them."""
    from iris.instruments.stepping import stepped

    ctx = iris.iris(1 << 20)
    rank = ctx.cur_rank
    mailbox = ctx.zeros(4, name="mailbox")
    flag = ctx.zeros(1, dtype=torch.int32, name="flag")
    received = ctx.zeros(4, name="received")
    ctx.barrier()
    with stepped(ctx, address):
        if rank == 0:
            produce[(1,)](mailbox, flag, rank, 1, ctx.get_heap_bases(), BLOCK=4)
        elif wait:
            consume[(1,)](mailbox, flag, received, BLOCK=4)
        else:
            consume_without_waiting[(1,)](mailbox, received, BLOCK=4)
        ctx.barrier()
    return {"received": received.tolist()}


def no_heap_access(address: str) -> dict:
    """A stepped body that never touches a heap."""
    from iris.instruments.stepping import stepped

    ctx = iris.iris(1 << 20)
    with stepped(ctx, address):
        x = sum(range(10))
    return {"x": x}
