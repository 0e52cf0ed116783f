"""iris.bench: declare a benchmark in a few lines, sweep it over axes, time it on every rank in step.

Upstream Iris's benchmarking API, with its names and meaning (upstream's ``benchmark/`` programs run on it
unchanged). A benchmark is a function ``fn(state, ctx)``: ``state`` is a :class:`State`, ``ctx`` this rank's
:class:`iris.Iris`. Its body is setup and is not timed: it reads the point's axis values (``state["M"]``),
declares what one call moves and computes (``state.set_bytes``, ``state.set_flops``, ``state.add_counter``)
and hands over the callable to time with ``state.exec(fn, preamble_fn=...)``. The runner then times that
callable with :func:`iris.do_bench` (every rank in step; ``preamble_fn`` before each call, untimed) and
reports the mean of rank 0's timed calls, bandwidth ``bytes / time`` and TFLOP/s ``flops / time``.

``@bench.axis(name, values)`` decorators stack into a Cartesian product (the first written varies slowest);
:func:`power_of_two` and :func:`linear_range` make common value lists. The ``num_ranks`` axis is special:
:func:`main` starts one worker group (a process per rank, torchrun's environment) per value, and a
benchmark without it runs on 8 ranks; under an outside launcher (``torchrun --nproc_per_node=N prog.py``, which sets
``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``) the process is one rank already and :func:`main` runs the benchmarks in
it, at the launcher's world size. On the CPU backend the ranks run kernels in the Triton interpreter,
and the output says that its times are the interpreter's.

Command line of :func:`main`: ``--benchmark_filter REGEX``, ``--benchmark_format console|json|csv``,
``--benchmark_out FILE``, ``--heap_size``, ``--use_gluon``, ``--n_warmup``, ``--n_repeat``,
``--axis_<name>=VALUES`` (replace an axis: ``1024,2048``, ``pow2:8:13``, ``lin:64:256:64``, ``fp16``) and
``--skip_<name>=VALUES`` (drop values). Inside ranks that already have a context (a workbench cluster),
:func:`run_benchmarks` runs the same loop without starting processes.

Examples
--------
A program, ``bench_all_gather.py``::

    import torch
    import iris.bench as bench

    @bench.register
    @bench.axis("num_ranks", [2, 4])
    @bench.axis("M", bench.power_of_two(10, 12))
    @bench.axis("dtype", [torch.float16])
    def all_gather(state, ctx):
        M, dtype, world = state["M"], state["dtype"], ctx.get_num_ranks()
        inp = ctx.zeros((M, 1024), dtype=dtype)
        out = ctx.zeros((world * M, 1024), dtype=dtype)
        state.set_bytes((world - 1) * inp.numel() * inp.element_size())
        state.exec(lambda: ctx.ccl.all_gather(out, inp), preamble_fn=out.zero_)

    if __name__ == "__main__":
        bench.main()

run as ``python bench_all_gather.py --axis_num_ranks=2 --axis_M=1024 --benchmark_format=csv``.

>>> import iris.bench as bench
>>> bench.power_of_two(10, 12)
[1024, 2048, 4096]
"""

from .axes import AxisDef, axis, linear_range, power_of_two
from .cli import main
from .registry import BenchmarkDef, register
from .runner import BenchmarkError, RunPlan, run_benchmarks
from .state import Result, State

__all__ = [
    "AxisDef", "BenchmarkDef", "BenchmarkError", "Result", "RunPlan", "State", "axis", "linear_range", "main",
    "power_of_two", "register", "run_benchmarks",
]
