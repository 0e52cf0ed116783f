"""Run upstream Iris's examples, unchanged, against this project's ``iris``, and print what each one did.

Usage::

    python tests/gpu/run_upstream_examples.py UPSTREAM_DIR [--ranks 2] [--timeout 180] [--only 07,24]
                                                           [--jobs 1] [--log out.log] [--markdown table.md]

``UPSTREAM_DIR`` is the user's own checkout of upstream Iris (its ``examples/`` folder is used; nothing of
upstream is part of this repository). Each example runs as upstream's README says (``python script.py
--num_ranks N`` or ``torchrun --nproc_per_node=N``), with a small problem and its own validation switched on,
under a time limit, in a process group that is killed whole when the limit passes, from its own folder; one
at a time, or ``--jobs`` at once (for a correctness pass: the seconds then include waiting for the GPUs).
``PYTHONPATH`` holds this checkout first (so ``import iris`` is this project's; checked before anything runs),
then upstream's checkout (the examples import ``examples.common``).

Result per example:

* ``passed``: it exited 0 and printed its own check's success (and no failure);
* ``failed``: anything else (exit status, timeout, a failure line), with the line that says why;
* ``ran, no check``: it exited 0 without printing a check's result (the example has no check of its own);
* ``check wrong upstream``: it failed a check of its own that cannot pass (:data:`CHECK_WRONG_UPSTREAM` says why);
* ``AMD-only``: refused up front, with the AMD-only feature it needs (:data:`AMD_ONLY`); not run;
* ``needs N GPUs``: refused up front on a machine with fewer GPUs than the example places ranks on by index.

What the runner changes, and only when needed, is in ``tests/gpu/example_shim/sitecustomize.py`` (put on
``PYTHONPATH``; it patches torch, never the example or iris):

* when ranks outnumber GPUs, ranks share GPUs: ``torch.cuda.set_device``, ``torch.cuda.get_device_properties``
  and ``init_process_group(device_id=...)`` take the GPU index modulo the GPU count, and ``backend="nccl"``
  becomes ``"gloo"`` (NCCL refuses two ranks on one GPU);
* with ``--jobs`` above 1, each example running beside others gets its own rendezvous port (upstream's spawn
  their ranks at a fixed ``tcp://127.0.0.1:29500``).

Examples
--------
>>> python tests/gpu/run_upstream_examples.py ~/src/iris --only 00,24     # doctest: +SKIP
example                         result    seconds  note
00_load/load_bench.py           passed       21.4
24_ccl_all_reduce/example.py    passed       14.9
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from upstream_programs import HERE, iris_imported_from, last_line, program_env, run_in_own_group

PORT_STRIDE = 37  # rendezvous port offset between examples running at once (--jobs)
_log_lock = threading.Lock()
HEAP = str(1 << 30)  # 1 GiB per rank instead of upstream's 2-64 GiB defaults: the problems below are small
GEMM = ["-m", "1024", "-n", "1024", "-k", "512", "--heap_size", HEAP, "-v"]
MICRO = ["-z", str(1 << 20), "-p", HEAP, "-w", "1", "-d", "-v"]  # 1 MiB buffers, validation on, said (-d -v)
LOG_TAIL = 6000  # characters of each example's output kept in --log
SWEEP = ["-m", str(1 << 20), "-M", str(1 << 21), "-p", HEAP, "-x", "2", "-w", "1", "-d", "-v"]


@dataclass(frozen=True)
class Example:
    """One upstream program: its script under ``examples/``, how it is started, and its small validating arguments.

    ``ranks_flag``: the script's own option for the number of ranks (it spawns them); None: started by
    ``torchrun``. ``gpus_by_index``: the script puts rank r's tensors on ``cuda:r`` itself, so ranks cannot
    share a GPU. ``variant``: a flag of the script that runs another code path of it (``--use_gluon``), passed
    and named in the table beside the script.
    """

    script: str
    args: tuple[str, ...] = ()
    ranks_flag: str | None = "-r"
    gpus_by_index: bool = False
    variant: str = ""

    @property
    def name(self) -> str:
        return f"{self.script} {self.variant}".rstrip()

    def command(self, examples: Path, ranks: int) -> list[str]:
        path = str(examples / self.script)
        args = (*self.args, self.variant) if self.variant else self.args
        if self.ranks_flag is None:
            return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", path,
                    *args]
        return [sys.executable, path, self.ranks_flag, str(ranks), *args]


EXAMPLES = [
    Example("00_load/load_bench.py", (*MICRO, "-n", "2")),
    Example("01_store/store_bench.py", (*MICRO, "-n", "2")),
    Example("02_all_load/all_load_bench.py", (*SWEEP, "-a", "2")),
    Example("03_all_store/all_store_bench.py", (*SWEEP, "-a", "2")),
    Example("04_atomic_add/atomic_add_bench.py", (*MICRO, "-x", "2")),
    Example("05_atomic_xchg/atomic_xchg_bench.py", (*MICRO, "-x", "2")),
    Example("06_message_passing/message_passing_put.py", ("-p", HEAP)),
    Example("06_message_passing/message_passing_load_store.py", ("-p", HEAP)),
    Example("06_message_passing/message_passing_device_context.py", ("--heap_size", HEAP), "--num_ranks"),
    Example("06_message_passing/message_passing_gluon.py", ("-p", HEAP)),
    Example("07_gemm_all_scatter/benchmark.py", tuple(GEMM)),
    Example("08_gemm_all_reduce_atomics/benchmark.py", tuple(GEMM)),
    Example("09_gemm_one_shot_all_reduce/benchmark.py", tuple(GEMM)),
    Example("10_gemm_all_scatter_wg_specialization/benchmark.py", tuple(GEMM)),
    Example("11_gemm_all_scatter_producer_consumer/benchmark.py", tuple(GEMM)),
    Example("12_gemm_all_scatter_bulk_synchronous/benchmark.py", tuple(GEMM)),
    Example("13_flash_decode/example_run.py", ("--kv_len_per_rank", "1024", "--num_heads", "16", "--num_seqs", "2"),
            "--num_ranks"),
    Example("14_all_gather_gemm/example_run_pull.py", ("--K", "1024"), "--num_ranks"),
    Example("14_all_gather_gemm/example_run_push.py", ("--K", "1024"), "--num_ranks"),
    Example("15_gemm_all_reduce_ring_based/benchmark.py", tuple(GEMM)),
    Example("16_all_reduce_ring_based/benchmark.py", ("-m", "1024", "-n", "1024", "--heap_size", HEAP, "-v")),
    Example("20_gemm_all_scatter_independent/benchmark.py", tuple(GEMM)),
    Example("21_gemm_one_shot_all_reduce_independent/benchmark.py", tuple(GEMM)),
    Example("22_gemm_one_shot_reduce_scatter_wg_specialization/benchmark.py", tuple(GEMM)),
    Example("23_gemm_all_scatter_tracing/benchmark.py", tuple(GEMM)),
    Example("24_ccl_all_reduce/example.py", ("--heap_size", HEAP, "-v"), None),
    Example("25_ccl_all_gather/example.py", ("--heap_size", HEAP, "-v"), None),
    Example("25_ccl_all_gather/example.py", ("--heap_size", HEAP, "-v"), None, variant="--use_gluon"),
    Example("26_ccl_all_to_all/example.py", ("--heap_size", HEAP, "-v"), None),
    Example("27_ccl_reduce_scatter/example.py", ("--heap_size", HEAP, "-v"), None),
    Example("28_ops_matmul_all_reduce/example.py", ("--heap_size", HEAP, "-v"), None),
    Example("29_ops_all_gather_matmul/example.py", ("--heap_size", HEAP, "-v"), None),
    Example("30_ops_matmul_all_gather/example.py", ("--heap_size", HEAP, "-v"), None),
    Example("31_expert_sharded_moe/example_run.py", (), "--num_ranks", gpus_by_index=True),
    Example("31_message_passing/example.py", ("-v",), None),
    Example("32_gluon_all_gather_tracing/all_gather_tracing.py", ("--heap_size", HEAP), None, gpus_by_index=True),
    Example("benchmark/bench_all_shapes.py"),
]

# Examples refused up front, and the AMD-only feature each needs. Every program above but this one gets what it
# asks for on NVIDIA GPUs, AMD-only launch options and 64-wide Gluon layouts included. (benchmark/reference/ holds
# RCCL and torch baselines, which do not use iris, and is not listed.)
AMD_ONLY: dict[str, str] = {
    "benchmark/bench_all_shapes.py": "a SLURM sweep: it submits the GEMM examples with sbatch to run inside upstream's "
                                     "ROCm Apptainer image (apptainer/iris.def: rocm/pytorch); the examples it sweeps "
                                     "(07-12, 15, 20-23) are run directly above",
}

# Examples whose own check cannot pass, whatever iris does (read at abd3f2ad): a failure of theirs is reported as
# "check wrong upstream", with the reason.
CHECK_WRONG_UPSTREAM = {
    "00_load/load_bench.py": "expects arange, but the buffer it loads is ones, and it checks the destination's "
                             "result buffer, which only the source rank's kernel writes",
    "02_all_load/all_load_bench.py": "expects arange, but the buffer every rank loads is zeros",
    "05_atomic_xchg/atomic_xchg_bench.py": "expects arange back, but every timed exchange first swapped 1 in, so "
                                           "later exchanges return 1",
}

FAILURE = re.compile(r"validation failed|validation: failed|test failed|\bis failed\b|verification failed|mismatch"
                     r"|\bdiffer\b|❌|Traceback|(?-i:\bFAILED\b)", re.IGNORECASE)
SUCCESS = re.compile(r"validation passed|validation: passed|\bis passed\b|test passed|✅|\bmatch(es)?\b|successful"
                     r"|(?-i:\bPASSED\b)", re.IGNORECASE)


@dataclass
class Outcome:
    example: str
    result: str
    seconds: float
    note: str = ""


def classify(returncode: int | None, output: str) -> tuple[str, str]:
    """(result, note) for a finished run: ``passed`` only with exit 0, a success line and no failure line."""
    failure = FAILURE.search(output)
    if returncode is None:
        return "failed", "timed out"
    if returncode != 0 or failure:
        line = _line_of(output, failure) if failure else last_line(output)
        return "failed", f"exit {returncode}: {line}"
    if not SUCCESS.search(output):
        return "ran, no check", "exited 0; it printed no check's result (upstream's example has none)"
    return "passed", ""


def _line_of(output: str, match: re.Match) -> str:
    start = output.rfind("\n", 0, match.start()) + 1
    end = output.find("\n", match.end())
    if match.group(0) == "Traceback":  # the exception itself is the traceback's last line
        return last_line(output[start:])
    return output[start:end if end >= 0 else None].strip()[:200]


def run_one(example: Example, examples: Path, ranks: int, gpus: int, timeout: float, log: Path | None,
            port_offset: int = 0) -> Outcome:
    """Run one example under the time limit (its whole process group is killed past it)."""
    if example.script in AMD_ONLY:
        return Outcome(example.name, "AMD-only", 0.0, AMD_ONLY[example.script])
    if example.gpus_by_index and gpus < ranks:
        return Outcome(example.name, f"needs {ranks} GPUs", 0.0,
                       f"puts rank r's tensors on cuda:r itself; this machine has {gpus} GPU(s)")
    env = program_env(examples.parent, share_gpus=gpus < ranks, port_offset=port_offset)
    returncode, output, seconds = run_in_own_group(example.command(examples, ranks),
                                                   examples / Path(example.script).parent, env, timeout)
    if log is not None:
        with _log_lock, log.open("a") as file:
            file.write(f"===== {example.name} (exit {returncode}, {seconds:.1f} s)\n{output[-LOG_TAIL:]}\n")
    result, note = classify(returncode, output)
    # Only a run that ended well but failed its own check: a timeout, a crash or a traceback stays "failed".
    ran_to_its_end = returncode == 0 and "Traceback" not in output
    if result == "failed" and example.script in CHECK_WRONG_UPSTREAM and ran_to_its_end:
        result, note = "check wrong upstream", f"{CHECK_WRONG_UPSTREAM[example.script]} ({note})"
    return Outcome(example.name, result, seconds, note)


def table(outcomes: list[Outcome], markdown: bool = False) -> str:
    if markdown:
        rows = ["| example | result | seconds | note |", "|---|---|---|---|"]
        rows += [f"| `{o.example}` | {o.result} | {o.seconds:.1f} | {o.note.replace('|', '/')} |" for o in outcomes]
        return "\n".join(rows)
    width = max(len(o.example) for o in outcomes)
    rows = [f"{'example':<{width}}  {'result':<12} {'seconds':>7}  note"]
    rows += [f"{o.example:<{width}}  {o.result:<12} {o.seconds:>7.1f}  {o.note}" for o in outcomes]
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", type=Path, help="a checkout of upstream Iris (its examples/ folder is run)")
    parser.add_argument("--ranks", type=int, default=2, help="ranks per example (default 2)")
    parser.add_argument("--timeout", type=float, default=180, help="seconds per example (default 180)")
    parser.add_argument("--only", default="", help="comma-separated prefixes of the examples to run, e.g. 07,24")
    parser.add_argument("--jobs", type=int, default=1, help="examples run at once (default 1; seconds then include "
                        "the wait for the GPUs others use)")
    parser.add_argument("--log", type=Path, help="append the end of each example's output to this file")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown to this file")
    args = parser.parse_args(argv)
    examples = (args.upstream / "examples").resolve()
    if not examples.is_dir():
        parser.error(f"{args.upstream} has no examples/ folder: point at a checkout of upstream Iris")
    missing = [e.script for e in EXAMPLES if not (examples / e.script).is_file()]
    if missing:
        parser.error(f"{examples} lacks {', '.join(missing)}: this runner knows upstream's examples as of abd3f2ad")
    import torch

    gpus = torch.cuda.device_count()
    if gpus == 0:
        parser.error("no CUDA GPU visible: upstream's examples need one (they call torch.cuda)")
    elsewhere = iris_imported_from(args.upstream, examples)
    if elsewhere is not None:
        parser.error(f"the examples would import iris from {elsewhere}, "
                     "not from this project: install it, or run this script from its checkout")
    chosen = [e for e in EXAMPLES if not args.only or any(e.script.startswith(p) for p in args.only.split(","))]
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: run at least one example at a time")
    sharing = f"; ranks share GPUs ({HERE / 'example_shim' / 'sitecustomize.py'})" if gpus < args.ranks else ""
    print(f"{len(chosen)} examples, {args.ranks} ranks, {gpus} GPU(s) ({torch.cuda.get_device_name(0)}){sharing}"
          f"{f', {args.jobs} at once' if args.jobs > 1 else ''}", flush=True)
    free_slots = list(range(args.jobs))  # each running example holds a slot, and the slot's rendezvous port
    slots_lock = threading.Lock()

    def run(example: Example) -> Outcome:
        with slots_lock:
            slot = free_slots.pop()
        try:
            outcome = run_one(example, examples, args.ranks, gpus, args.timeout, args.log, slot * PORT_STRIDE)
        finally:
            with slots_lock:
                free_slots.append(slot)
        print(f"{outcome.example}: {outcome.result} ({outcome.seconds:.1f} s) {outcome.note}", flush=True)
        return outcome

    with ThreadPoolExecutor(args.jobs) as pool:
        outcomes = list(pool.map(run, chosen))  # in the table's order, whatever order they finish in
    print(table(outcomes))
    if args.markdown:
        args.markdown.write_text(table(outcomes, markdown=True) + "\n")
    # An example without a check of its own can only run to its end; the table says that it has none.
    settled = ("passed", "ran, no check", "AMD-only", "check wrong upstream")
    return 0 if all(o.result in settled for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
