"""Running benchmarks: every point of every benchmark inside one rank's context, and one worker group per rank count.

:func:`run_benchmarks` is the loop each rank runs: for every benchmark and every point of its axes it calls
the benchmark's setup, then times the callable handed to ``state.exec`` with ``iris.do_bench`` (every rank in
step, ``ctx.barrier`` between calls). :func:`run_worker_group` starts ``num_ranks`` processes on this machine
with torchrun's environment (``torch.distributed``'s own launcher, rendezvous on a free port), runs the loop in
each and returns rank 0's results. A benchmark that raises stops its group: :class:`BenchmarkError` names the
benchmark, the point and the rank, the group's processes are ended, and their heaps go with them.

Examples
--------
>>> results = run_worker_group(registered(), RunPlan(heap_size=1 << 28), num_ranks=2)   # doctest: +SKIP
>>> results = run_benchmarks(ctx, registered(), n_warmup=2, n_repeat=10)               # doctest: +SKIP
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..runtime.timing import do_bench
from .axes import NUM_RANKS, AxisDef, axis_points, dtype_name, effective_values
from .registry import BenchmarkDef
from .state import Result, SkipCombination, State

DEFAULT_NUM_RANKS = 8  # upstream's: a benchmark that declares no num_ranks axis runs on 8 ranks


class BenchmarkError(RuntimeError):
    """A benchmark failed at one point of its sweep on one rank; the message says which, and the cause."""


@dataclass
class RunPlan:
    """What the command line asked of every worker: axis overrides and filters, heap, call counts, name filter."""

    axis_overrides: dict[str, list[Any]] = field(default_factory=dict)
    skip_overrides: dict[str, list[Any]] = field(default_factory=dict)
    heap_size: int = 1 << 34
    use_gluon: bool = False
    n_warmup: int = 25
    n_repeat: int = 100
    benchmark_filter: str | None = None
    first_failure_file: str | None = None  # set by run_worker_group: where the first rank to fail says why

    def selects(self, benchmark: BenchmarkDef) -> bool:
        """Whether ``--benchmark_filter`` (a regular expression searched in the name) keeps ``benchmark``."""
        return not self.benchmark_filter or re.search(self.benchmark_filter, benchmark.name) is not None

    def num_ranks_of(self, benchmark: BenchmarkDef, default: int | None = None) -> list[int] | None:
        """The rank counts ``benchmark`` runs at after overrides and skips; when neither it nor the command line
        names any, ``[default]`` (upstream's is :data:`DEFAULT_NUM_RANKS`), or None for no default."""
        declared = [a for a in benchmark.axes if a.name == NUM_RANKS]
        if not declared and NUM_RANKS not in self.axis_overrides:
            return None if default is None else [default]
        declared = declared or [AxisDef(NUM_RANKS, self.axis_overrides[NUM_RANKS])]
        return effective_values(declared[0], self.axis_overrides, self.skip_overrides)


def describe_point(params: dict[str, Any]) -> str:
    """``M=1024, dtype=float16``: a point of a sweep as messages write it."""
    return ", ".join(f"{name}={dtype_name(value)}" for name, value in params.items()) or "(no axes)"


def _points(benchmark: BenchmarkDef, plan: RunPlan, world_size: int):
    """The points ``benchmark`` runs at on ``world_size`` ranks, each a dict of axis values (``num_ranks`` first)."""
    axes = [AxisDef(a.name, effective_values(a, plan.axis_overrides, plan.skip_overrides))
            for a in benchmark.axes if a.name != NUM_RANKS]
    if any(not a.values for a in axes):
        return  # an axis filtered to nothing leaves nothing of the benchmark, as upstream
    sweeps_ranks = plan.num_ranks_of(benchmark) is not None
    for point in axis_points(axes):
        yield dict(([(NUM_RANKS, world_size)] if sweeps_ranks else []) + point)


def _run_point(ctx, benchmark: BenchmarkDef, params: dict[str, Any], plan: RunPlan) -> Result:
    world_size = ctx.get_num_ranks()
    state = State(params, n_warmup=plan.n_warmup, n_repeat=plan.n_repeat)
    try:
        benchmark.fn(state, ctx)
    except SkipCombination as skip:
        return Result(benchmark.name, params, 0.0, [], skipped=True, skip_reason=skip.reason, world_size=world_size)
    if state._exec_fn is None:
        raise BenchmarkError(f"benchmark {benchmark.name!r} at {describe_point(params)}: its function returned "
                             "without state.exec(fn); hand over the callable to time with state.exec")
    times = do_bench(state._exec_fn, barrier_fn=ctx.barrier, preamble_fn=state._preamble_fn,
                          n_warmup=state._n_warmup, n_repeat=state._n_repeat, return_mode="all")
    mean_ms = statistics.mean(times)
    seconds = mean_ms * 1e-3

    def per_second(amount, unit):  # declared work over the mean time, as upstream computes it
        return amount / unit / seconds if amount is not None and seconds > 0 else None

    return Result(benchmark.name, params, mean_ms, times, bandwidth_gbps=per_second(state._bytes, 1e9),
                  tflops=per_second(state._flops, 1e12), counters=dict(state._counters), world_size=world_size)


def run_benchmarks(ctx, benchmarks: list[BenchmarkDef], plan: RunPlan | None = None,
                   default_num_ranks: int | None = None) -> list[Result]:
    """Run every point of ``benchmarks`` in this rank's context; collective: every rank of ``ctx`` calls it.

    Parameters
    ----------
    ctx : iris.Iris
        This rank's context; the benchmarks' second argument.
    benchmarks : list of BenchmarkDef
        E.g. :func:`iris.bench.registry.registered` ``()``, or ``[BenchmarkDef.of(fn)]``.
    plan : RunPlan, optional
        Axis overrides and filters, call counts, name filter (defaults: upstream's).
    default_num_ranks : int, optional
        The rank count a benchmark without a ``num_ranks`` axis runs at; None: whatever ``ctx`` has.

    Returns
    -------
    list of Result
        This rank's times, one result per point; a benchmark whose ``num_ranks`` excludes ``ctx``'s rank count
        is left out.

    Raises
    ------
    BenchmarkError
        A benchmark raised (or never called ``state.exec``): the message names it, the point and this rank.

    Examples
    --------
    >>> results = run_benchmarks(ctx, [BenchmarkDef.of(copy)], RunPlan(n_warmup=1, n_repeat=5))  # doctest: +SKIP
    """
    plan = plan or RunPlan()
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    results = []
    for benchmark in filter(plan.selects, benchmarks):
        rank_counts = plan.num_ranks_of(benchmark, default_num_ranks)
        if rank_counts is not None and world_size not in rank_counts:
            continue
        for params in _points(benchmark, plan, world_size):
            try:
                results.append(_run_point(ctx, benchmark, params, plan))
            except BenchmarkError as error:
                raise BenchmarkError(f"rank {rank}: {error}") from error.__cause__
            except Exception as error:
                raise BenchmarkError(
                    f"benchmark {benchmark.name!r} failed on rank {rank} of {world_size} at "
                    f"{describe_point(params)}: {type(error).__name__}: {error}") from error
    return results


def _make_context(heap_size: int, use_gluon: bool):
    # The worker imported iris's face (``import iris``: the interpreter switched on, upstream's paths) when it
    # imported this module; the contexts themselves come from the host layer below.
    from ..runtime import context, gluon_context

    return gluon_context.iris(heap_size) if use_gluon else context.iris(heap_size)


def launched_as_a_rank() -> bool:
    """Whether an outside launcher made this process one rank of a group (torchrun, or srun with torchrun's
    variables: ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` all set), so that :func:`iris.bench.main` runs the
    benchmarks here instead of starting worker groups (upstream Iris's #534)."""
    return all(name in os.environ for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))


def run_in_this_process(benchmarks: list[BenchmarkDef], plan: RunPlan) -> list[Result]:
    """Run the benchmarks as this process's rank of the group an outside launcher started (collective over it):
    rank 0's results, [] on the other ranks. torch.distributed is initialised from torchrun's variables unless the
    program did it already (then it is left as it was found).

    Raises
    ------
    BenchmarkError
        A benchmark raised on this rank (its name, point and rank are in the message).
    """
    return _worker(benchmarks, plan)


def _worker(benchmarks: list[BenchmarkDef], plan: RunPlan) -> list[Result]:
    """One rank of a worker group (started by torch's launcher, or by an outside one, with torchrun's
    environment); rank 0's results."""
    import torch
    import torch.distributed as dist

    from ..base.backend import choose_backend

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    collective_backend = "gloo"
    if choose_backend(None) == "cuda":
        gpus = torch.cuda.device_count()
        torch.cuda.set_device(local_rank % gpus)  # this host's ranks on this host's GPUs
        # NCCL refuses two ranks on one GPU; baselines such as dist.all_reduce then run over gloo.
        collective_backend = "nccl" if int(os.environ.get("LOCAL_WORLD_SIZE", world_size)) <= gpus else "gloo"
    ours = not dist.is_initialized()
    if ours:
        dist.init_process_group(collective_backend)
    try:
        ctx = _make_context(plan.heap_size, plan.use_gluon)
        results = run_benchmarks(ctx, benchmarks, plan, default_num_ranks=DEFAULT_NUM_RANKS)
        ctx.barrier()
    except Exception as error:
        _claim_first_failure(plan.first_failure_file, error if isinstance(error, BenchmarkError) else
                             BenchmarkError(f"rank {rank}: {type(error).__name__}: {error}"))
        raise
    finally:
        # Also when a benchmark raised: a process that exits with gloo's groups alive aborts (SIGABRT) and
        # buries the error under a crash report. A group the program made is the program's to end.
        if ours:
            dist.destroy_process_group()
    return results if rank == 0 else []


def group_sizes(benchmarks: list[BenchmarkDef], plan: RunPlan) -> list[int]:
    """The rank counts to start a worker group for, smallest first: the union over the selected benchmarks."""
    sizes = set()
    for benchmark in filter(plan.selects, benchmarks):
        sizes.update(plan.num_ranks_of(benchmark, DEFAULT_NUM_RANKS))
    return sorted(sizes)


def _claim_first_failure(path: str | None, error: BenchmarkError) -> None:
    """Write ``error`` to ``path`` unless a rank did first.

    The first rank to fail writes before its connections close; the peers it leaves waiting fail only after
    that (gloo: "Connection reset by peer"), so the file names the cause, not its echoes.
    """
    if path is None:
        return
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    with os.fdopen(descriptor, "w") as file:
        file.write(str(error))


def _first_failure_message(failure) -> str:
    """The exception line of the rank that failed first, as torch's launcher reports it (when no rank could say)."""
    rank, process = min(failure.failures.items(), key=lambda item: item[1].timestamp)
    message = process.message
    if isinstance(message, dict):
        message = message.get("message", "")
    if not message:
        return f"rank {rank} exited with status {process.exitcode} (signal {process.signal_name()})"
    lines = [line for line in str(message).strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"rank {rank} failed"


def run_worker_group(benchmarks: list[BenchmarkDef], plan: RunPlan, num_ranks: int) -> list[Result]:
    """Start ``num_ranks`` ranks on this machine, run :func:`run_benchmarks` in each, return rank 0's results.

    Raises
    ------
    BenchmarkError
        A rank failed: the message is its error (benchmark, point, rank, cause); every rank has been ended.
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if num_ranks < 1:
        raise ValueError(f"num_ranks={num_ranks}: a worker group needs at least one rank")
    workdir = tempfile.mkdtemp(prefix="iris-bench-")
    plan = replace(plan, first_failure_file=os.path.join(workdir, "first-failure"))
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=num_ranks, rdzv_backend="c10d",
                          rdzv_endpoint="127.0.0.1:0", max_restarts=0,  # port 0: the rendezvous takes a free one
                          run_id=f"iris-bench-{os.getpid()}-{num_ranks}")
    try:
        per_rank = elastic_launch(config, _worker)(benchmarks, plan)
    except ChildFailedError as failure:
        first = Path(plan.first_failure_file)
        cause = first.read_text() if first.exists() else _first_failure_message(failure)
        raise BenchmarkError(f"the {num_ranks}-rank worker group failed: {cause}") from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return per_rank[0]
