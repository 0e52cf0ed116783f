"""Run upstream Iris's pytest files, unchanged, against this project's ``iris``, on N ranks, and say per test
how every rank fared.

Usage::

    python tests/gpu/run_upstream_tests.py UPSTREAM_DIR tests/ccl/test_process_groups.py [--ranks 4]
                                           [--timeout 900] [--max-heap 1GiB] [--markdown table.md]
                                           [-- PYTEST_ARGS...]

``UPSTREAM_DIR`` is the user's own checkout (or an export) of upstream Iris; nothing of upstream is part of
this repository. As upstream's ``tests/run_tests_distributed.py`` does, ``torchrun`` starts one process per
rank and each runs pytest on the files, with torch.distributed initialised; ``PYTHONPATH`` holds this checkout
first, and each rank imports this project's ``iris`` before pytest collects anything (checked: the run stops if
another ``iris`` was imported).

Where the machine lacks what upstream's tests assume (one GPU per rank, placed with ``device=f"cuda:{rank}"``),
each rank changes torch, never the tests or iris:

* no GPU (the CPU backend): factory calls with ``device="cuda:k"`` make CPU tensors, ``torch.cuda.synchronize``
  waits for nothing (the Triton interpreter runs kernels synchronously), and torch.distributed runs on gloo;
* fewer GPUs than ranks: ``cuda:k`` becomes ``cuda:(k % gpus)`` (iris places rank r there too) and
  torch.distributed runs on gloo (NCCL refuses two ranks on one GPU).

One change of a test's call, only when asked: ``--max-heap SIZE`` makes ``iris.iris(heap_size)`` ask for at
most SIZE per rank (upstream's tests ask for 8 GiB per rank; on the CPU backend every rank's heap is a file in
/dev/shm, and iris refuses heaps that /dev/shm cannot hold: 4 ranks need 32 GiB). The run's output says so.

Each rank writes a JUnit report; the table says, per test, the outcome on every rank (``passed`` only when
every rank passed). Exit status 0 when every test passed or was skipped on every rank.

Examples
--------
>>> git -C ~/src/iris archive abd3f2ad tests | tar -x -C /tmp/upstream                       # doctest: +SKIP
>>> python tests/gpu/run_upstream_tests.py /tmp/upstream tests/ccl/test_process_groups.py --ranks 4  # doctest: +SKIP
test                                                             result   ranks
test_all_reduce_with_groups[consecutive-atomic]                  passed   4/4
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

HERE = Path(__file__).resolve().parent
OURS = HERE.parents[1]
WORKER = "IRIS_UPSTREAM_TESTS_WORKER"  # set in the ranks' environment: this file then runs as a rank
REPORTS = "IRIS_UPSTREAM_TESTS_REPORTS"  # where each rank writes its JUnit report
MAX_HEAP = "IRIS_UPSTREAM_TESTS_MAX_HEAP"  # --max-heap
PR_SET_PDEATHSIG = 1  # prctl(2)


# ---------------------------------------------------------------------------------------------- one rank

def place_ranks_on_this_machine(local_rank: int) -> str:
    """Make upstream's one-GPU-per-rank placement work here (see the module's docstring); return the
    torch.distributed backend to use."""
    import torch
    from torch.overrides import TorchFunctionMode

    gpus = torch.cuda.device_count()
    if gpus:
        torch.cuda.set_device(local_rank % gpus)

    def here(device):
        spec = torch.device(device) if isinstance(device, str | torch.device) else None
        if spec is None or spec.type != "cuda":
            return device
        return torch.device("cuda", (spec.index or 0) % gpus) if gpus else torch.device("cpu")

    class PlaceOnThisMachine(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if "device" in kwargs:
                kwargs = dict(kwargs, device=here(kwargs["device"]))
            return func(*args, **kwargs)

    if gpus == 0 or gpus < int(os.environ["LOCAL_WORLD_SIZE"]):
        PlaceOnThisMachine().__enter__()  # for the whole run: every test's torch calls
    if gpus == 0:
        torch.cuda.synchronize = lambda device=None: None  # the interpreter ran every kernel to completion
        return "gloo"
    return "nccl" if gpus >= int(os.environ["LOCAL_WORLD_SIZE"]) else "gloo"


def cap_heap_size(iris, max_heap: str) -> None:
    """Make ``iris.iris(heap_size, ...)`` ask for at most ``max_heap`` (a size iris parses, e.g. "1GiB")."""
    from iris.sizes import parse_size

    limit, make_context = parse_size(max_heap), iris.iris

    def capped(heap_size=1 << 30, *args, **kwargs):
        if parse_size(heap_size) > limit:
            heap_size = limit
        return make_context(heap_size, *args, **kwargs)

    iris.iris = capped


def die_with_parent() -> None:
    """Be killed when torchrun, this rank's parent, dies: torchrun starts each rank in a session of its own, so
    the launcher's kill of torchrun's process group on a timeout would not reach the ranks (Linux only)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before the request
            os._exit(1)


def run_rank(pytest_args: list[str]) -> int:
    """One rank: torch.distributed up, this project's iris imported, then pytest on upstream's files."""
    die_with_parent()
    import pytest
    import torch.distributed as dist

    import iris

    if OURS not in Path(iris.__file__).resolve().parents:
        raise SystemExit(f"rank {os.environ['RANK']}: imported iris from {iris.__file__}, not from {OURS}")
    if os.environ.get(MAX_HEAP):
        cap_heap_size(iris, os.environ[MAX_HEAP])
    backend = place_ranks_on_this_machine(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend=backend)
    report = Path(os.environ[REPORTS]) / f"rank{os.environ['RANK']}.xml"
    try:
        return pytest.main([*pytest_args, "-p", "no:cacheprovider", f"--junitxml={report}"])
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------- launcher

def outcomes(report: Path) -> dict[str, str]:
    """Test name -> passed / failed / skipped, from one rank's JUnit report."""
    results = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        results[case.get("name")] = "failed" if failed else "skipped" if case.find("skipped") is not None \
            else "passed"
    return results


def table(per_rank: list[dict[str, str]], ranks: int, markdown: bool) -> tuple[str, bool]:
    """The per-test table, and whether every test passed or was skipped on every rank."""
    names = sorted({name for results in per_rank for name in results})
    rows, ok = [], bool(names)
    for name in names:
        seen = [results.get(name, "missing") for results in per_rank]
        result = seen[0] if len(set(seen)) == 1 else "failed"
        ok &= result in ("passed", "skipped") and len(per_rank) == ranks
        rows.append((name, result, f"{seen.count(result)}/{ranks}"))
    if markdown:
        lines = ["| test | result | ranks |", "|---|---|---|"] + [f"| {n} | {r} | {c} |" for n, r, c in rows]
    else:
        lines = [f"{'test':64} {'result':8} ranks"] + [f"{n:64} {r:8} {c}" for n, r, c in rows]
    return "\n".join(lines), ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", type=Path, help="upstream Iris's checkout (or an export of its tests/)")
    parser.add_argument("files", nargs="+", help="test files, relative to UPSTREAM_DIR")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=900, help="seconds for the whole run")
    parser.add_argument("--max-heap", help="ask iris.iris for at most this heap per rank (e.g. 1GiB)")
    parser.add_argument("--markdown", type=Path, help="also write the table here, as Markdown")
    args, pytest_args = parser.parse_known_args()
    from upstream_programs import run_in_own_group

    upstream = args.upstream.resolve()
    with tempfile.TemporaryDirectory(prefix="iris-upstream-tests-") as reports:
        paths = os.pathsep.join(filter(None, [str(OURS), os.environ.get("PYTHONPATH", "")]))
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=paths,
                   **{WORKER: "1", REPORTS: reports, MAX_HEAP: args.max_heap or ""})
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.ranks}",
                   str(Path(__file__).resolve()), *args.files, *[a for a in pytest_args if a != "--"]]
        returncode, output, seconds = run_in_own_group(command, upstream, env, args.timeout)
        per_rank = [outcomes(path) for path in sorted(Path(reports).glob("rank*.xml"))]
    print(output[-20000:])
    text, ok = table(per_rank, args.ranks, markdown=False)
    if not per_rank:  # pytest writes its report when it ends
        text = "(no rank wrote a report: the run did not finish; its output is above)"
    status = "timed out" if returncode is None else f"exit status {returncode}"
    heap = f", iris.iris heap_size capped at {args.max_heap} per rank (--max-heap)" if args.max_heap else ""
    print(f"\n{' '.join(args.files)} on {args.ranks} ranks: {status}, {seconds:.0f} s{heap}\n{text}")
    if args.markdown:
        args.markdown.write_text(table(per_rank, args.ranks, markdown=True)[0] + "\n")
    return 0 if ok and returncode == 0 else 1


if __name__ == "__main__":
    if os.environ.get(WORKER) == "1" and "RANK" in os.environ:
        raise SystemExit(run_rank(sys.argv[1:]))
    sys.path.insert(0, str(HERE))  # upstream_programs, beside this file
    raise SystemExit(main())
