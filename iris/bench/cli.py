"""``iris.bench.main()``: upstream Iris's benchmark command line, for a program that registered benchmarks.

Flags: ``--benchmark_filter REGEX``, ``--benchmark_format {console,json,csv}``, ``--benchmark_out FILE``,
``--heap_size BYTES``, ``--use_gluon``, ``--n_warmup N``, ``--n_repeat N``, and per axis
``--axis_<name>=VALUES`` (replace its values) and ``--skip_<name>=VALUES`` (drop some), VALUES as
:func:`iris.bench.axes.parse_axis_values` reads them (``1024,2048``, ``pow2:8:13``, ``lin:64:256:64``, ``fp16``).

Run as ``python prog.py``, it starts a worker group per ``num_ranks`` value; under an outside launcher
(``torchrun --nproc_per_node=N prog.py``) each process is a rank and the benchmarks run at that world size.

Examples
--------
>>> python bench_all_gather.py --axis_num_ranks=2 --axis_M=1024 --benchmark_format=json   # doctest: +SKIP
>>> torchrun --nproc_per_node=2 bench_all_gather.py --axis_M=1024                          # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from .axes import NUM_RANKS, parse_axis_values
from .output import FORMATS, format_results
from .registry import registered
from .runner import BenchmarkError, RunPlan, group_sizes, launched_as_a_rank, run_in_this_process, run_worker_group

GPU_HEAP_SIZE = 1 << 34  # upstream's default heap, per rank
CPU_HEAP_SIZE = 1 << 28  # on the CPU backend: /dev/shm is often small, and the interpreter runs small problems
AXIS_FLAG = re.compile(r"^--(axis|skip)_(\w+)=(.*)$")


def _heap_size(text: str) -> int:
    from iris.base.sizes import parse_size

    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give at least 1")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: give 0 or more")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The fixed flags; ``--axis_<name>=`` and ``--skip_<name>=`` are read from what it leaves."""
    parser = argparse.ArgumentParser(
        description="iris.bench: run this program's registered benchmarks on every num_ranks value; "
                    "axes can be overridden with --axis_<name>=VALUES and filtered with --skip_<name>=VALUES "
                    "(VALUES: 1024,2048 or pow2:8:13 or lin:64:256:64 or fp16,bf16)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--benchmark_filter", default=None, help="regular expression searched in benchmark names")
    parser.add_argument("--benchmark_format", default="console", choices=FORMATS, help="output format")
    parser.add_argument("--benchmark_out", default=None, help="also write the output to this file")
    parser.add_argument("--heap_size", type=_heap_size, default=None,
                        help=f"symmetric heap per rank, bytes or e.g. 4GiB (default {GPU_HEAP_SIZE} on GPUs, "
                             f"{CPU_HEAP_SIZE} on the CPU backend)")
    parser.add_argument("--use_gluon", action="store_true", help="give benchmarks the Gluon host context")
    parser.add_argument("--n_warmup", type=_non_negative, default=25, help="untimed calls before timing")
    parser.add_argument("--n_repeat", type=_positive, default=100, help="timed calls; the time is their mean")
    return parser


def parse_command_line(argv: list[str] | None, benchmarks) -> tuple[RunPlan, argparse.Namespace]:
    """The :class:`RunPlan` the command line asks for, and its parsed flags (output format and file among them);
    bad flags end the program with a message saying why."""
    from iris.base.backend import choose_backend

    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    overrides: dict[str, dict] = {"axis": {}, "skip": {}}
    for token in rest:
        match = AXIS_FLAG.match(token)
        if not match:
            parser.error(f"unrecognized argument {token!r}: axes are set as --axis_<name>=VALUES or "
                         "--skip_<name>=VALUES (one token, with '=')")
        kind, name, text = match.groups()
        try:
            overrides[kind][name] = parse_axis_values(text, name)
        except ValueError as error:
            parser.error(str(error))
    ranks = overrides["axis"].get(NUM_RANKS, [])
    if any(not isinstance(count, int) or count < 1 for count in ranks):
        parser.error(f"--axis_num_ranks: {ranks} is not a list of rank counts (integers >= 1)")
    known = {NUM_RANKS} | {name for b in benchmarks for name in b.axis_names()}
    unknown = sorted((set(overrides["axis"]) | set(overrides["skip"])) - known)
    if unknown:
        parser.error(f"no benchmark of this program has the axis {', '.join(unknown)}; its axes are "
                     f"{', '.join(sorted(known))}")
    if args.benchmark_filter is not None:
        try:
            re.compile(args.benchmark_filter)
        except re.error as error:
            parser.error(f"--benchmark_filter={args.benchmark_filter!r} is not a regular expression: {error}")
    try:
        on_cpu = choose_backend(None) == "cpu"
    except (ValueError, RuntimeError) as error:
        parser.error(str(error))
    heap_size = args.heap_size or (CPU_HEAP_SIZE if on_cpu else GPU_HEAP_SIZE)
    plan = RunPlan(overrides["axis"], overrides["skip"], heap_size, args.use_gluon, args.n_warmup, args.n_repeat,
                   args.benchmark_filter)
    return plan, args


def _timing_note(group_sizes: list[int]) -> str:
    """A line saying what the times are when they are not one GPU's per rank, else empty."""
    import torch

    from iris.base.backend import choose_backend

    if choose_backend(None) == "cpu":
        return "Note: CPU backend: times are the Triton interpreter's on this machine's CPU, not a GPU's.\n"
    gpus = torch.cuda.device_count()
    shared = [size for size in group_sizes if size > gpus]
    if shared:
        return (f"Note: {gpus} GPU(s) here: in the {', '.join(map(str, shared))}-rank groups ranks share GPUs, so "
                "those times are not one GPU per rank's.\n")
    return ""


def main(argv: list[str] | None = None) -> None:
    """Run the program's registered benchmarks: call from ``if __name__ == "__main__": bench.main()``.

    One worker group (one process per rank) is started per ``num_ranks`` value, smallest first; each runs
    every selected benchmark that sweeps that rank count. Results (rank 0's times) are printed when all
    groups are done, in ``--benchmark_format``, and written to ``--benchmark_out`` if given. If a benchmark
    raises, its group is ended, the results finished before it are printed, the error (benchmark, point,
    rank) goes to stderr and the program exits with status 1.

    Started by an outside launcher (``torchrun --nproc_per_node=N prog.py``, or srun with torchrun's variables:
    ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` set), the process is one rank already: nothing is started, the
    benchmarks run here at the launcher's world size, and rank 0 prints (upstream Iris's #534). A world size that
    no selected benchmark runs at ends every rank with status 1 and, from rank 0, a message naming the flag that
    fixes it (``--axis_num_ranks=N``); rank counts other than the launcher's are left out, said once on stderr.
    A benchmark that raises ends its rank with status 1 and the error on stderr (the launcher ends the others).

    Examples
    --------
    >>> if __name__ == "__main__":           # doctest: +SKIP
    ...     bench.main()
    """
    benchmarks = registered()
    if not benchmarks:
        sys.exit("iris.bench: no benchmarks registered: decorate a function fn(state, ctx) with @bench.register")
    plan, args = parse_command_line(argv, benchmarks)
    sizes = group_sizes(benchmarks, plan)
    if not sizes:
        sys.exit("iris.bench: nothing to run: the filters and skips leave no benchmark and rank count")
    if launched_as_a_rank():
        _main_as_a_rank(benchmarks, plan, args, sizes)
        return
    results, failure = [], None
    for num_ranks in sizes:
        try:
            results += run_worker_group(benchmarks, plan, num_ranks)
        except BenchmarkError as error:
            failure = error
            break  # as upstream: a failed group ends the run
    _report(results, args, sizes)
    if failure is not None:
        sys.exit(f"iris.bench: {failure}")


def _report(results, args, sizes: list[int]) -> None:
    """Print the results in ``--benchmark_format`` (with the timing note where times are not one GPU's per rank)
    and write them to ``--benchmark_out``."""
    output = format_results(results, args.benchmark_format)
    note = _timing_note(sizes)
    if note:
        # Console output carries the note itself; JSON and CSV stay parseable, so it goes to stderr there.
        print(note, end="", file=sys.stdout if args.benchmark_format == "console" else sys.stderr)
    print(output, end="")
    if args.benchmark_out:
        with open(args.benchmark_out, "w") as file:
            file.write(output)


def _main_as_a_rank(benchmarks, plan: RunPlan, args, sizes: list[int]) -> None:
    """:func:`main` in a process an outside launcher started as one rank: run here, rank 0 reports."""
    world_size, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    if world_size not in sizes:
        if rank == 0:
            print(f"iris.bench: launched as {world_size} ranks (WORLD_SIZE={world_size}), but the selected benchmarks "
                  f"run at num_ranks {', '.join(map(str, sizes))}: pass --axis_num_ranks={world_size}, or launch "
                  f"with a world size they run at", file=sys.stderr)
        sys.exit(1)
    left_out = [size for size in sizes if size != world_size]
    if left_out and rank == 0:
        print(f"iris.bench: launched as {world_size} ranks (WORLD_SIZE={world_size}): num_ranks "
              f"{', '.join(map(str, left_out))} not run (a launcher's group has one size)", file=sys.stderr)
    try:
        results = run_in_this_process(benchmarks, plan)
    except BenchmarkError as error:
        sys.exit(f"iris.bench: {error}")
    if rank == 0:
        _report(results, args, [world_size])
