"""Run upstream Iris's benchmark programs, unchanged, on this project's ``iris.bench``, and print what each printed.

Usage::

    python tests/gpu/run_upstream_benchmarks.py UPSTREAM_DIR [--only ccl,ops/bench_matmul] [--timeout 300]
                                                             [--log out.log] [--markdown table.md]

``UPSTREAM_DIR`` is the user's own checkout of upstream Iris (its ``benchmark/`` folder is run, and its
``examples/``, which some benchmarks load kernels from; nothing of upstream is part of this repository). Each
program runs as upstream's docs say (``python bench_x.py`` and flags), from its own folder, with its axes cut
to 2 ranks (``--axis_num_ranks=2``) and small problems, under a time limit, in a process group killed whole
past it. ``PYTHONPATH`` holds this checkout first, so ``import iris.bench`` is ours (checked before anything
runs).

Result per program:

* ``ran``: it exited 0 and printed a table for each of its benchmarks;
* ``failed``: anything else, with the line that says why;
* ``lacks upstream API``: it imports a name of upstream's that this project does not have (which one is said);
* ``needs a GPU``: on a machine without one, not run; :data:`GPU_ONLY` says what of the GPU it uses;
* ``not a benchmark``: upstream keeps a non-``iris.bench`` script in the folder (:data:`NOT_BENCHMARKS`).

Columns: the table's columns of each benchmark the program printed (axes, ``GPU Time (ms)``, ``BW (GB/s)``,
``TFLOPS``, counters), and its rows (skipped ones counted).

Examples
--------
>>> python tests/gpu/run_upstream_benchmarks.py ~/src/iris --only ccl/bench_all_gather      # doctest: +SKIP
program                   result  seconds  rows  columns
ccl/bench_all_gather.py   ran        21.4  1     all_gather: num_ranks M N dtype | GPU Time (ms) | BW (GB/s)
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from upstream_programs import iris_imported_from, last_line, program_env, run_in_own_group

RANKS = 2
CALLS = ("--n_warmup=2", "--n_repeat=10")  # few calls: this checks that programs run, it measures nothing
HEAP = f"--heap_size={1 << 32}"  # 4 GiB per rank instead of upstream's 16: the problems below are small


@dataclass(frozen=True)
class Program:
    """One upstream benchmark program: its path under ``benchmark/``, its axes on a GPU, and on the CPU backend.

    ``cpu_axes`` None: the program needs a GPU (:data:`GPU_ONLY` says why).
    """

    script: str
    gpu_axes: dict[str, str] = field(default_factory=dict)
    cpu_axes: dict[str, str] | None = None

    def command(self, benchmark_dir: Path, on_gpu: bool) -> list[str]:
        axes = {"num_ranks": str(RANKS), **(self.gpu_axes if on_gpu else self.cpu_axes or {})}
        calls = CALLS if on_gpu else ("--n_warmup=1", "--n_repeat=2")  # the interpreter is slow
        heap = [HEAP] if on_gpu else []  # iris.bench's CPU default (256 MiB) fits a small /dev/shm
        return [sys.executable, str(benchmark_dir / self.script), *calls, *heap,
                *(f"--axis_{name}={values}" for name, values in axes.items())]


SMALL_CCL = {"M": "1024", "N": "1024", "dtype": "fp16"}
TINY_CCL = {"M": "64", "N": "64", "dtype": "fp16"}
PROGRAMS = [
    Program("ccl/bench_all_gather.py", SMALL_CCL, TINY_CCL),
    Program("ccl/bench_all_reduce.py", SMALL_CCL, TINY_CCL),
    Program("ccl/bench_all_reduce_vllm.py", {"M": "1,512", "N": "2880"}),
    Program("ccl/bench_all_to_all.py", SMALL_CCL, TINY_CCL),
    Program("ccl/bench_reduce_scatter.py", SMALL_CCL, TINY_CCL),
    Program("ccl/plot_sweep_results.py"),
    Program("ops/bench_all_gather_matmul.py", {"M": "1024"}),
    Program("ops/bench_matmul_all_gather.py", {"M_local": "1024"}),
    Program("ops/bench_matmul_all_reduce.py", {"M": "1024"}),
    Program("ops/bench_matmul_all_reduce_stages.py", {"M": "32", "bm": "32", "bn": "64"}),
    Program("examples/bench_all_gather.py", {"M": "1024", "N": "1024", "dtype": "fp16"},
            {"M": "64", "N": "64", "dtype": "fp16"}),
    Program("examples/bench_all_gather_gemm_pull.py", {"M": "1024"}),
    Program("examples/bench_all_gather_gemm_push.py", {"M": "1024"}),
    Program("examples/bench_flash_decode.py", {"kv_len": "1024", "num_seqs": "1"}),
    Program("examples/bench_moe.py", {"batch_per_expt": "8"}),
]

# What of a GPU each program uses (read at abd3f2ad); on a machine without one they are not run.
GPU_ONLY = {
    "ccl/bench_all_reduce_vllm.py": "its baseline rccl_all_reduce makes its tensor with device='cuda' and times "
                                    "dist.all_reduce over NCCL",
    "ops/bench_all_gather_matmul.py": "its baseline and inputs use device='cuda' and torch.Generator('cuda')",
    "ops/bench_matmul_all_gather.py": "B = torch.randn(..., device='cuda')",
    "ops/bench_matmul_all_reduce.py": "B = torch.randn(..., device='cuda')",
    "ops/bench_matmul_all_reduce_stages.py": "its inputs and its torch.mm + dist.all_reduce baseline use device='cuda'",
    "examples/bench_all_gather_gemm_pull.py": "tensors on torch.device(f'cuda:{rank}') and "
                                              "torch.cuda.get_device_properties for the grid",
    "examples/bench_all_gather_gemm_push.py": "tensors on torch.device(f'cuda:{rank}') and "
                                              "torch.cuda.get_device_properties for the grid",
    "examples/bench_flash_decode.py": "query and KV cache on torch.device(f'cuda:{rank}')",
    "examples/bench_moe.py": "tensors on torch.device(f'cuda:{rank}'), broadcast over NCCL",
}
NOT_BENCHMARKS = {
    "ccl/plot_sweep_results.py": "plots a sweep's CSV with matplotlib; it registers no iris.bench benchmark",
}

# Upstream's names this project lacks: a module, a name in a module, an attribute (e.g. of upstream's allocator).
MISSING_NAME = re.compile(r"(ImportError: cannot import name '[\w.]+' from '[\w.]+'"
                          r"|ModuleNotFoundError: No module named '[\w.]+'"
                          r"|AttributeError: '[\w.]+' object has no attribute '\w+')")
TABLE_HEADER = "GPU Time (ms)"
LOG_TAIL = 6000  # characters of each program's output kept in --log


@dataclass
class Outcome:
    program: str
    result: str
    seconds: float = 0.0
    rows: str = ""
    columns: str = ""
    note: str = ""


def printed_tables(output: str) -> list[tuple[str, list[str], int, int]]:
    """(benchmark, columns, rows, skipped rows) of each console table in ``output``, as iris.bench prints them."""
    lines = output.splitlines()
    tables = []
    for index, line in enumerate(lines):
        if TABLE_HEADER not in line or index == 0:
            continue
        columns = re.split(r"\s{2,}", line.strip())
        rows = skipped = 0
        for row in lines[index + 1:]:
            if not row.strip() or TABLE_HEADER in row:
                break
            rows += 1
            skipped += "(skipped)" in row
        tables.append((lines[index - 1].strip(), columns, rows, skipped))
    return tables


def classify(returncode: int | None, output: str) -> tuple[str, str]:
    """(result, note) for a finished run: ``ran`` only with exit 0 and a table printed."""
    if returncode is None:
        return "failed", "timed out"
    missing = MISSING_NAME.search(output)
    if returncode != 0 and missing:
        return "lacks upstream API", missing.group(0)
    failure = re.search(r"^iris\.bench: .*$", output, re.MULTILINE)  # iris.bench's own one-line error
    if returncode != 0:
        return "failed", f"exit {returncode}: {failure.group(0) if failure else last_line(output)}"[:300]
    if not printed_tables(output):
        return "failed", "exited 0 without printing a table"
    return "ran", ""


def run_one(program: Program, upstream: Path, on_gpu: bool, gpus: int, timeout: float, log: Path | None) -> Outcome:
    if program.script in NOT_BENCHMARKS:
        return Outcome(program.script, "not a benchmark", note=NOT_BENCHMARKS[program.script])
    if not on_gpu and program.cpu_axes is None:
        return Outcome(program.script, "needs a GPU", note=GPU_ONLY[program.script])
    benchmark_dir = upstream / "benchmark"
    env = program_env(upstream, share_gpus=on_gpu and gpus < RANKS)
    returncode, output, seconds = run_in_own_group(program.command(benchmark_dir, on_gpu),
                                                   benchmark_dir / Path(program.script).parent, env, timeout)
    if log is not None:
        with log.open("a") as file:
            file.write(f"===== {program.script} (exit {returncode}, {seconds:.1f} s)\n{output[-LOG_TAIL:]}\n")
    result, note = classify(returncode, output)
    tables = printed_tables(output)
    rows = ", ".join(f"{rows}" + (f" ({skipped} skipped)" if skipped else "") for _, _, rows, skipped in tables)
    columns = "; ".join(f"{name}: {' | '.join(columns)}" for name, columns, _, _ in tables)
    return Outcome(program.script, result, seconds, rows, columns, note)


def table(outcomes: list[Outcome], markdown: bool = False) -> str:
    if markdown:
        lines = ["| program | result | seconds | rows | columns | note |", "|---|---|---|---|---|---|"]
        lines += [f"| `{o.program}` | {o.result} | {o.seconds:.1f} | {o.rows} | {o.columns} | "
                  f"{o.note.replace('|', '/')} |" for o in outcomes]
        return "\n".join(lines)
    width = max(len(o.program) for o in outcomes)
    lines = [f"{'program':<{width}}  {'result':<18} {'seconds':>7}  {'rows':<14} columns / note"]
    lines += [f"{o.program:<{width}}  {o.result:<18} {o.seconds:>7.1f}  {o.rows:<14} {o.columns or o.note}"
              for o in outcomes]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", type=Path, help="a checkout of upstream Iris (its benchmark/ folder is run)")
    parser.add_argument("--only", default="", help="comma-separated prefixes of the programs to run, e.g. ccl,ops/")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per program (default 300)")
    parser.add_argument("--log", type=Path, help="append the end of each program's output to this file")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown to this file")
    args = parser.parse_args(argv)
    upstream = args.upstream.resolve()
    missing = [p.script for p in PROGRAMS if not (upstream / "benchmark" / p.script).is_file()]
    if missing:
        parser.error(f"{upstream / 'benchmark'} lacks {', '.join(missing)}: point at a checkout of upstream Iris "
                     "(this runner knows its benchmark/ folder as of abd3f2ad)")
    elsewhere = iris_imported_from(upstream, upstream / "benchmark")
    if elsewhere is not None:
        parser.error(f"the programs would import iris from {elsewhere}, not from this project: install it, or run "
                     "this script from its checkout")
    import torch

    gpus = torch.cuda.device_count()
    chosen = [p for p in PROGRAMS if not args.only or any(p.script.startswith(x) for x in args.only.split(","))]
    where = f"{gpus} GPU(s) ({torch.cuda.get_device_name(0)})" if gpus else "no GPU: the CPU backend, tiny axes"
    print(f"{len(chosen)} programs, {RANKS} ranks, {where}", flush=True)
    outcomes = []
    for program in chosen:
        outcome = run_one(program, upstream, gpus > 0, gpus, args.timeout, args.log)
        print(f"{outcome.program}: {outcome.result} ({outcome.seconds:.1f} s) {outcome.note}", flush=True)
        outcomes.append(outcome)
    print(table(outcomes))
    if args.markdown:
        args.markdown.write_text(table(outcomes, markdown=True) + "\n")
    settled = ("ran", "needs a GPU", "not a benchmark")
    return 0 if all(o.result in settled for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
