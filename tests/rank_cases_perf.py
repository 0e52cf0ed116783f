"""Code that runs inside each rank for tests/test_perf.py (CPU ranks): ``iris.perf.compare`` on the interpreter,
and the errors it gives for bad input, raised alike on every rank.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

import iris
from iris.perf import PerfError


@triton.jit
def _ring_put(src, dst, cur_rank, world, heap_bases, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iris.put(src + offs, dst + offs, cur_rank, (cur_rank + 1) % world, heap_bases, mask=offs < n)


def compare_on_cpu() -> dict:
    """A host op, an iris kernel putting into the next rank and an iris collective, compared; the report as JSON."""
    ctx = iris.iris("16MiB", backend="cpu")
    n = 4096
    src, dst = ctx.full((n,), float(ctx.cur_rank)), ctx.zeros(n)
    inp, out = ctx.ones(n), ctx.zeros(n)
    bases = ctx.get_heap_bases()
    candidates = {
        "torch add": lambda: src.add_(0.0),
        "put kernel": lambda: _ring_put[(triton.cdiv(n, 1024),)](src, dst, ctx.cur_rank, ctx.num_ranks, bases, n,
                                                                  BLOCK=1024),
        "ccl all_reduce": lambda: ctx.ccl.all_reduce(out, inp),
    }
    report = iris.perf.compare(ctx, candidates, flops={"torch add": n}, bytes=2 * 4 * n,
                               peer_bytes={"put kernel": 4 * n}, n_repeat=3, n_warmup=1)
    ctx.barrier()
    return {"report": _plain(dataclasses.asdict(report)), "text": str(report),
            "dst_first": dst[0].item(), "out_first": out[0].item()}


def _plain(value):
    """JSON-able copy (tuples -> lists)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def bad_input() -> dict:
    """The message of each refused call (the same context throughout: every error leaves the ranks in step)."""
    ctx = iris.iris("16MiB", backend="cpu")
    rank = ctx.cur_rank
    x = ctx.zeros(64)
    messages = {}

    def refused(name, *args, **kwargs):
        try:
            iris.perf.compare(ctx, *args, n_repeat=1, n_warmup=0, **kwargs)
        except PerfError as exc:
            messages[name] = str(exc)
        else:
            messages[name] = None

    refused("fails on rank 1", {"fine": lambda: x.add_(1), "divides": lambda: x.add_(1 / (1 - rank))})
    refused("flops differ", {"fine": lambda: x.add_(1)}, flops=100 * (rank + 1))
    refused("needs a GPU", {"torch + NCCL": lambda: torch.ones(4, device="cuda")})
    refused("not callable", {"fine": "x.add_(1)"})
    ctx.barrier()
    return messages
