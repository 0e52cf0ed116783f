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
    as_benchmark = iris.perf.run_benchmark(ctx, candidates, flops={"torch add": n}, bytes=2 * 4 * n, n_warmup=0,
                                           n_repeat=2)
    ctx.barrier()
    return {"report": _plain(dataclasses.asdict(report)), "text": str(report),
            "as_benchmark": _plain(dataclasses.asdict(as_benchmark)),
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
    refused("ceilings differ", {"fine": lambda: x.add_(1)}, measure_ceilings=rank == 0)
    refused("needs a GPU", {"torch + NCCL": lambda: torch.ones(4, device="cuda")})
    refused("not callable", {"fine": "x.add_(1)"})

    def operands():  # what the ceilings allocate, out of memory on rank 1 only
        if rank == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return x

    try:
        iris.perf.ceilings._on_every_rank(ctx, ctx.group.group, "two 1 GiB buffers", operands)
    except PerfError as exc:
        messages["out of memory on rank 1"] = str(exc)
    ctx.barrier()
    return messages


# -- on GPUs (tests/gpu/test_perf_cuda.py) -------------------------------------------------------------

def ceilings_on_gpu() -> dict:
    """The ceilings measured here, beside the spec sheet of this GPU; whether a second call was cached."""
    ctx = iris.iris("1GiB", backend="cuda")
    first = iris.perf.ceilings.measure(ctx)
    cached = iris.perf.ceilings.measure(ctx) is first
    fresh = iris.perf.ceilings.measure(ctx, again=True) is not first
    spec = iris.base.gpu_specs.find(torch.cuda.get_device_name(ctx.get_device()))
    ctx.barrier()
    return {"matmul_tflops": first.matmul_tflops, "copy_gbs": first.copy_gbs, "peer_gbs": first.peer_gbs,
            "links": sorted(first.links), "peer_bytes": first.peer_bytes, "cached": cached, "fresh": fresh,
            "spec": None if spec is None else [spec.peak("bf16"), spec.hbm_gbs, spec.peer_gbs]}


def graph_and_eager_on_gpu() -> dict:
    """A capturable matmul and collective (graph), one that synchronises (eager, and why), with a preamble,
    and graph=True refused for the one that cannot be captured."""
    ctx = iris.iris("1GiB", backend="cuda")
    side = 2048
    a, b = (torch.randn(side, side, device=ctx.get_device(), dtype=torch.bfloat16) for _ in range(2))
    out = torch.empty_like(a)
    inp, reduced = ctx.ones(1 << 20, dtype=torch.bfloat16), ctx.zeros(1 << 20, dtype=torch.bfloat16)

    def synchronising():
        torch.mm(a, b, out=out)
        torch.cuda.synchronize()  # not allowed while a stream is captured

    mm_work = {"flops": 2 * side ** 3, "bytes": 3 * 2 * side ** 2}
    report = iris.perf.compare(ctx, {"mm": lambda: torch.mm(a, b, out=out), "mm + sync": synchronising,
                                     "all_reduce": lambda: ctx.ccl.all_reduce(reduced, inp)},
                               flops={"mm": mm_work["flops"], "mm + sync": mm_work["flops"]},
                               bytes={"mm": mm_work["bytes"], "mm + sync": mm_work["bytes"],
                                      "all_reduce": 2 * inp.nbytes},
                               peer_bytes={"all_reduce": inp.nbytes})
    with_preamble = iris.perf.compare(ctx, {"mm": lambda: torch.mm(a, b, out=out)}, preamble=lambda: out.zero_(),
                                      n_repeat=5, measure_ceilings=False)
    try:
        iris.perf.compare(ctx, {"mm + sync": synchronising}, graph=True, measure_ceilings=False)
        strict = None
    except PerfError as exc:
        strict = str(exc)
    ctx.barrier()
    rows = {r.label: {"mode": r.mode, "why": r.why, "time_us": r.time_us, "of_spec": r.of_spec,
                      "of_measured": r.of_measured, "tflops": r.tflops} for r in report.results}
    return {"rows": rows, "roofs": [roof.label for roof in report.roofs()], "text": str(report),
            "preamble_mode": with_preamble.results[0].mode, "strict": strict,
            "sum_ok": bool((reduced.float() == ctx.num_ranks).all())}


def shared_gpu_refused() -> dict:
    """Ranks on one GPU: compare refuses, and with allow_shared_gpu=True it times and says the times mean nothing."""
    ctx = iris.iris("256MiB", backend="cuda")
    x = torch.zeros(1024, device=ctx.get_device())
    try:
        iris.perf.compare(ctx, {"add": lambda: x.add_(1)})
        refused = None
    except PerfError as exc:
        refused = str(exc)
    allowed = iris.perf.compare(ctx, {"add": lambda: x.add_(1)}, allow_shared_gpu=True)
    ctx.barrier()
    return {"refused": refused, "notes": list(allowed.notes), "mode": allowed.results[0].mode,
            "ceilings": allowed.ceilings is not None}


def sweep_on_gpu() -> dict:
    """``iris.perf.sweep`` of all_reduce on GPUs, one rank each: every peer this torch has is timed beside iris (those
    it lacks are named), and reduce_scatter's sweep names the variant that ran."""
    ctx = iris.iris("1GiB", backend="cuda")
    reduce = iris.perf.sweep(ctx, "all_reduce", sizes=[8 << 10, 4 << 20])
    scatter = iris.perf.sweep(ctx, "reduce_scatter", sizes=[64 << 10])
    ctx.barrier()
    return {"peers": sorted({peer for point in reduce.points for peer in point.peers_us}),
            "unavailable": dict(reduce.peers_unavailable), "text": str(reduce),
            "ran": [point.ran["variant"] for point in reduce.points], "scatter_ran": scatter.points[0].ran["variant"],
            "scatter_peers": sorted(scatter.points[0].peers_us)}
