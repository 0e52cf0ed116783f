"""Code that runs inside each rank for tests/test_bench.py: iris.bench's loop inside an existing context.

A workbench cluster already has one context per rank; :func:`iris.bench.run_benchmarks` runs registered
benchmarks there without starting processes.
"""

from __future__ import annotations

import torch

import iris
import iris.bench as bench


@bench.axis("N", [64, 128])
@bench.axis("dtype", [torch.float32])
def peer_copy(state, ctx):
    """Copy the next rank's buffer into this rank's: N elements over one peer link."""
    src = ctx.full((state["N"],), float(ctx.get_rank()), dtype=state["dtype"])
    dst = ctx.zeros(state["N"], dtype=state["dtype"])
    peer = (ctx.get_rank() + 1) % ctx.get_num_ranks()
    state.set_bytes(src.numel() * src.element_size())
    state.add_counter("peer", float(peer))
    state.exec(lambda: dst.copy_(ctx.as_remote(src, peer)), preamble_fn=dst.zero_)


@bench.axis("num_ranks", [4])
def needs_four_ranks(state, ctx):
    state.exec(lambda: None)


def run_in_context() -> list[dict]:
    """Each rank's results of both benchmarks (the second sweeps only 4 ranks, so it is left out on 2)."""
    ctx = iris.iris("16MiB")
    plan = bench.RunPlan(n_warmup=1, n_repeat=3)
    results = bench.run_benchmarks(ctx, [bench.BenchmarkDef.of(peer_copy), bench.BenchmarkDef.of(needs_four_ranks)],
                                   plan)
    return [{"name": r.benchmark_name, "params": {k: str(v) for k, v in r.params.items()}, "times": r.all_times_ms,
             "gbps": r.bandwidth_gbps, "counters": r.counters, "world_size": r.world_size} for r in results]
