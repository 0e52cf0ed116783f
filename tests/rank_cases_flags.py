"""Code that runs inside each rank for tests/test_flags.py: tests/flags_kernels.py on the CPU backend under
``check="races"``, three calls in a row with new data each time, results checked against torch in the rank.

Returns JSON: per scenario, the number of races this rank found and their texts.
"""

from __future__ import annotations

import torch

import iris

from . import flags_kernels as k

PROGRAMS, BLOCK, CALLS = 2, 8, 3


def _inputs(rank, call, n):
    return torch.randn(n, generator=torch.Generator().manual_seed(100 * call + rank))


def _expected(world, call, n):
    return sum(_inputs(r, call, n) for r in range(world))  # in rank order, as the kernels sum


def _races(ctx):
    ctx.barrier()
    return [str(race) for race in ctx.races()]


def flags_between_ranks():
    ctx = iris.iris("8MiB", backend="cpu", check="races")
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    n = PROGRAMS * BLOCK
    results = {}

    # signal + wait on a block of flags, one lane per peer; then without the wait
    for wait in (True, False):
        inp, out = ctx.zeros(n, name="inp"), ctx.zeros(n, name="out")
        inbox = ctx.zeros(2 * world * n, name="inbox")
        flags = ctx.zeros(world * PROGRAMS, dtype=torch.int32, name="flags")
        epochs = ctx.zeros(PROGRAMS, dtype=torch.int32, name="epochs")
        ctx.barrier()
        for call in range(1, CALLS + 1):
            inp.copy_(_inputs(rank, call, n))  # host write: this rank's kernels only read it after, in order
            k.all_gather_sum[(PROGRAMS,)](ctx.get_device_context(), inp, inbox, out, flags, epochs, rank, world,
                                          BLOCK=BLOCK, WAIT=wait)
            if wait:
                assert torch.equal(out, _expected(world, call, n)), (call, out, _expected(world, call, n))
        if wait:  # this rank waited for every peer's last signal (its own row stays 0: nobody signals it)
            assert flags.tolist() == [CALLS if r != rank else 0 for r in range(world) for _ in range(PROGRAMS)], flags
        results["signal_wait" if wait else "signal_no_wait"] = _races(ctx)

    # arrive at a counter (every program of every rank), wait for the total in a second kernel
    inp, out = ctx.zeros(n, name="inp"), ctx.zeros(n, name="out")
    inbox = ctx.zeros(2 * world * n, name="inbox")
    done = ctx.zeros(1, dtype=torch.int32, name="done")
    send_epochs = ctx.zeros(PROGRAMS, dtype=torch.int32, name="send_epochs")
    sum_epochs = ctx.zeros(1, dtype=torch.int32, name="sum_epochs")
    ctx.barrier()
    for call in range(1, CALLS + 1):
        inp.copy_(_inputs(rank, call, n))
        k.send_and_arrive[(PROGRAMS,)](ctx.get_device_context(), inp, inbox, done, send_epochs, rank, world,
                                       BLOCK=BLOCK)
        k.wait_and_sum[(1,)](ctx.get_device_context(), inbox, out, done, sum_epochs, world * PROGRAMS, rank, world,
                             N=n)
        expected = sum(_inputs(r, call, n).view(PROGRAMS, BLOCK) for r in range(world)).view(-1)
        assert torch.allclose(out, expected, atol=1e-6), (call, out, expected)
    ctx.barrier()
    assert done.item() == CALLS * world * PROGRAMS, done
    results["arrive_wait"] = _races(ctx)
    return results
