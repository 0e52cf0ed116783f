"""The bench view's measurement as an :mod:`iris.bench` benchmark: the same candidates and work, timed by
upstream's protocol (:func:`iris.do_bench`: a barrier, an L2 flush and the preamble before every call, the
mean of the timed calls), inside ranks that already have a context (a workbench cluster, a torchrun program).

:func:`as_benchmark` makes the benchmark function (axis ``candidate`` over the labels); :func:`run_benchmark`
runs it with :func:`iris.bench.run_benchmarks` and reports like :func:`iris.perf.compare` (slowest rank's mean,
shares of the spec and measured roofs), so one view draws either.

Examples
--------
>>> fn = as_benchmark({"iris": lambda: ctx.ccl.all_reduce(out, inp)}, bytes=2 * inp.nbytes)   # doctest: +SKIP
>>> iris.bench.run_benchmarks(ctx, [iris.bench.BenchmarkDef.of(fn)])                         # doctest: +SKIP
>>> print(run_benchmark(ctx, {"iris": lambda: ctx.ccl.all_reduce(out, inp)}))                # doctest: +SKIP
"""

from __future__ import annotations

import torch

from ..instruments.replay import ReplayTiming, every_rank_us
from .compare import PerfReport, check_same_everywhere, first_call, judge, per_label, roofs_here

AXIS = "candidate"
PEER_COUNTER = "peer_bytes"


def as_benchmark(candidates: dict, flops=None, bytes=None, peer_bytes=None, *, name: str = "compare"):  # noqa: A002
    """An :mod:`iris.bench` benchmark function ``fn(state, ctx)`` timing ``candidates`` (label -> callable), one
    point per label (axis ``"candidate"``), with the work declared as :func:`iris.perf.compare` takes it.

    ``set_flops`` and ``set_bytes`` carry ``flops`` and ``bytes``; ``peer_bytes`` goes to the counter
    ``"peer_bytes"`` (upstream's Result has no peer bandwidth). Register it with ``iris.bench.register`` or run it
    with ``iris.bench.run_benchmarks(ctx, [iris.bench.BenchmarkDef.of(fn)])``.

    Examples
    --------
    >>> import iris.bench
    >>> fn = as_benchmark({"a": lambda: None, "b": lambda: None}, bytes=64, name="two")
    >>> definition = iris.bench.BenchmarkDef.of(fn)
    >>> definition.name, definition.axes[0].values
    ('two', ['a', 'b'])
    """
    from ..bench import axis

    work = {key: per_label(value, candidates, key) for key, value in
            (("flops", flops), ("bytes", bytes), ("peer_bytes", peer_bytes))}

    def benchmark(state, ctx):
        label = state[AXIS]
        if work["flops"][label] is not None:
            state.set_flops(work["flops"][label])
        if work["bytes"][label] is not None:
            state.set_bytes(work["bytes"][label])
        if work["peer_bytes"][label] is not None:
            state.add_counter(PEER_COUNTER, work["peer_bytes"][label])
        state.exec(candidates[label])

    benchmark.__name__ = benchmark.__qualname__ = name
    return axis(AXIS, list(candidates))(benchmark)


def run_benchmark(ctx, candidates: dict, flops=None, bytes=None, peer_bytes=None, *,  # noqa: A002
                  n_warmup: int = 25, n_repeat: int = 100, dtype=torch.bfloat16, measure_ceilings: bool = True,
                  allow_shared_gpu: bool = False) -> PerfReport:
    """:func:`as_benchmark` run by :func:`iris.bench.run_benchmarks` on every rank, reported as
    :func:`iris.perf.compare` reports (mode ``"iris.bench"``; ``"interpreter"`` on the CPU backend).

    Collective, with compare's checks: the same labels and numbers on every rank, a candidate failing on some
    rank raised on all, ranks sharing a GPU refused unless ``allow_shared_gpu``.

    Examples
    --------
    >>> report = run_benchmark(ctx, {"iris": lambda: ctx.ccl.all_reduce(out, inp)}, n_repeat=20)   # doctest: +SKIP
    >>> report.results[0].mode                                                                    # doctest: +SKIP
    'iris.bench'
    """
    from ..bench import BenchmarkDef, RunPlan, run_benchmarks

    group = ctx.group.group
    declared = {"flops": flops, "bytes": bytes, "peer_bytes": peer_bytes}
    check_same_everywhere(ctx, group, {"labels": list(candidates), **declared, "dtype": str(dtype),
                                       "n_warmup": n_warmup, "n_repeat": n_repeat,
                                       "measure_ceilings": measure_ceilings, "allow_shared_gpu": allow_shared_gpu})
    work = {key: per_label(value, candidates, key, ctx.cur_rank) for key, value in declared.items()}
    device, spec, ceilings, notes = roofs_here(ctx, group, dtype, measure_ceilings, allow_shared_gpu)
    for label, fn in candidates.items():  # a failure on one rank is said on all, before do_bench's barriers
        first_call(ctx, group, label, fn, None)
    definition = BenchmarkDef.of(as_benchmark(candidates, flops, bytes, peer_bytes))
    results = run_benchmarks(ctx, [definition], RunPlan(n_warmup=n_warmup, n_repeat=n_repeat))
    mode = "iris.bench" if ctx.backend == "cuda" else "interpreter"
    rows = []
    for result in results:
        per_rank = every_rank_us(result.gpu_time_ms, group)
        timing = ReplayTiming(max(per_rank), per_rank, False, "iris.do_bench: each call on its own, L2 flushed, mean")
        label = result.params[AXIS]
        rows.append(judge(label, timing, mode, {k: v[label] for k, v in work.items()}, spec, ceilings, dtype))
    notes.append("timed by iris.bench (upstream's protocol: a barrier and an L2 flush before every call, the mean)")
    return PerfReport(ctx.backend, device, ctx.num_ranks, str(dtype).removeprefix("torch."), tuple(rows), spec,
                      ceilings, tuple(notes))
