"""Run upstream Iris's pytest folders or files, unchanged, against this project's ``iris``, on N ranks, and say
per test how every rank fared, and per folder how many tests passed, failed, skipped, errored or could not be
collected.

Usage::

    python tests/gpu/run_upstream_tests.py UPSTREAM_DIR tests/ops tests/unittests [--ranks 4]
                                           [--timeout 900] [--max-heap 1GiB] [--markdown summary.md]
                                           [-- PYTEST_ARGS...]

Each folder or file given (or glob, quoted: ``'tests/unittests/test_atomic_*'``) runs alone (its own ranks, its own
``--timeout``), one after the other, so that a hang in one leaves the others' results. A module that cannot be
imported counts as "not collected" and the rest of its folder still runs. ``--markdown`` writes the per-folder
summary, then each test that did not pass or skip with the first line of its error (from the first rank where it
failed): the form of the tables in benchmarks/RESULTS.md. It is rewritten after each folder.

``UPSTREAM_DIR`` is the user's own checkout (or an export) of upstream Iris; nothing of upstream is part of
this repository. As upstream's ``tests/run_tests_distributed.py`` does, ``torchrun`` starts one process per
rank and each runs pytest on the files, with torch.distributed initialised; ``PYTHONPATH`` holds this checkout
first, and each rank imports this project's ``iris`` before pytest collects anything (checked: the run stops if
another ``iris`` was imported).

Where the machine lacks what upstream's tests assume (one GPU per rank, placed with ``device=f"cuda:{rank}"``),
each rank changes torch, never the tests or iris:

* no GPU (the CPU backend): factory calls and ``.to`` with ``device="cuda:k"`` (by name or position, or under
  ``torch.set_default_device("cuda")``) make CPU tensors, ``tensor.cuda()`` is the tensor itself,
  ``torch.cuda.synchronize`` waits for nothing (the Triton interpreter runs kernels synchronously), a test that
  creates a CUDA stream or graph (``torch.cuda.Stream``, ``CUDAGraph``, ``graph``) is skipped (it needs a GPU),
  and torch.distributed runs on gloo;
* fewer GPUs than ranks: ``cuda:k`` becomes ``cuda:(k % gpus)`` (iris places rank r there too) and
  torch.distributed runs on gloo (NCCL refuses two ranks on one GPU).

One change of a test's call, only when asked: ``--max-heap SIZE`` makes ``iris.iris(heap_size)`` ask for at
most SIZE per rank (upstream's tests ask for 8 GiB per rank; on the CPU backend every rank's heap is a file in
/dev/shm, and iris refuses heaps that /dev/shm cannot hold: 4 ranks need 32 GiB). The run's output says so.

``--shards n`` runs each folder's tests as n torchruns at once (each keeps every n-th of the tests collected,
in pytest's order, the same on every rank): on the CPU backend a rank keeps one core busy, so a many-core
machine runs a slow folder n times sooner.

Each rank writes a JUnit report; the table says, per test, the outcome on every rank (``passed`` only when
every rank passed; ranks that disagree make it ``failed``). Exit status 0 when every test passed or was skipped
on every rank.

Examples
--------
>>> git -C ~/src/iris archive abd3f2ad tests | tar -x -C /tmp/upstream                       # doctest: +SKIP
>>> python tests/gpu/run_upstream_tests.py /tmp/upstream tests/ccl/test_process_groups.py --ranks 4  # doctest: +SKIP
test                                                                     result        ranks
tests.ccl.test_process_groups::test_all_reduce_with_groups[consecutive-atomic] passed  4/4
>>> python tests/gpu/run_upstream_tests.py /tmp/upstream tests/ops tests/unittests --ranks 2 \\
...        --markdown /tmp/upstream-tests.md                                                   # doctest: +SKIP
| folder | passed | failed | skipped | errors | not collected | seconds | run (2 ranks) |
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
SHARD = "IRIS_UPSTREAM_TESTS_SHARD"  # "k/n" with --shards n: this run keeps every n-th test from the k-th
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
            # a device passed by position (tensor.to(torch.device("cuda:1")), upstream's MoE example)
            args = tuple(here(a) if isinstance(a, torch.device) or (isinstance(a, str) and a.startswith("cuda"))
                         else a for a in args)
            return func(*args, **kwargs)

    if gpus == 0 or gpus < int(os.environ["LOCAL_WORLD_SIZE"]):
        PlaceOnThisMachine().__enter__()  # for the whole run: every test's torch calls
        # torch keeps the default device's mode beneath every other, so the mode above never sees the device it
        # adds: place it when it is set (upstream's flash-decode test sets "cuda" for the rest of the process).
        set_default_device = torch.set_default_device
        torch.set_default_device = lambda device: set_default_device(here(device))
    if gpus == 0:
        torch.cuda.synchronize = lambda device=None: None  # the interpreter ran every kernel to completion
        torch.Tensor.cuda = lambda tensor, device=None, *args, **kwargs: tensor  # already where iris works
        for name in ("Stream", "CUDAGraph", "graph"):  # a test that asks for these needs a GPU: it skips
            setattr(torch.cuda, name, skip_when_a_test_asks(f"torch.cuda.{name}", getattr(torch.cuda, name)))
        return "gloo"
    return "nccl" if gpus >= int(os.environ["LOCAL_WORLD_SIZE"]) else "gloo"


def skip_when_a_test_asks(name: str, cuda_only):
    """``cuda_only`` (a CUDA stream or graph class), which skips the test when upstream's code calls it: the CPU
    backend has no streams to capture on and no graphs to replay. Called from this project's code, it is left as it
    is (torch's own refusal), so that a call of iris's on the CPU is not hidden as a skip."""

    def skip_or_call(*args, **kwargs):
        caller = Path(sys._getframe(1).f_code.co_filename).resolve()
        if OURS not in caller.parents:
            import pytest

            pytest.skip(f"{name} needs a GPU (CUDA streams and graphs): the CPU backend has none")
        return cuda_only(*args, **kwargs)

    return skip_or_call


def cap_heap_size(iris, max_heap: str) -> None:
    """Make ``iris.iris(heap_size, ...)`` ask for at most ``max_heap`` (a size iris parses, e.g. "1GiB")."""
    from iris.base.sizes import parse_size

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


class KeepShard:
    """A pytest plugin: keep the collected tests whose position is ``shard`` modulo ``shards``. Every rank
    collects the same tests in the same order, so the ranks of one shard run the same tests together."""

    def __init__(self, shard: int, shards: int):
        self.shard, self.shards = shard, shards

    def pytest_collection_modifyitems(self, config, items):
        kept = [item for position, item in enumerate(items) if position % self.shards == self.shard]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


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
    plugins = [KeepShard(*map(int, os.environ[SHARD].split("/")))] if os.environ.get(SHARD) else []
    try:
        return pytest.main([*pytest_args, "-p", "no:cacheprovider", f"--junitxml={report}"], plugins=plugins)
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------- launcher

OUTCOMES = ("passed", "failed", "skipped", "errors", "not collected")


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """Test id (``module::name``) -> (one of :data:`OUTCOMES`, the first line of its failure or error, else "")
    from one rank's JUnit report. A file pytest could not import is one entry, ``not collected``."""
    results = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        failure, error = case.find("failure"), case.find("error")
        if not classname and error is not None:  # pytest names an uncollectable module by its dotted path
            results[name] = ("not collected", _first_line(error))
        elif failure is not None:
            results[f"{classname}::{name}"] = ("failed", _first_line(failure))
        elif error is not None:  # a fixture's setup or teardown failed
            results[f"{classname}::{name}"] = ("errors", _first_line(error))
        else:
            results[f"{classname}::{name}"] = ("skipped" if case.find("skipped") is not None else "passed", "")
    return results


def _first_line(element) -> str:
    """The first line of a JUnit failure/error: the exception's own line from its text when there is one (pytest's
    ``E   ValueError: ...``), else the element's message."""
    text = element.text or ""
    raised = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    line = raised[0] if raised else (element.get("message") or text).strip().split("\n")[0]
    return line[:200]


def combine(per_rank: list[dict[str, tuple[str, str]]], ranks: int) -> dict[str, tuple[str, str, int]]:
    """Test id -> (outcome on every rank, first failure line, ranks with that outcome). A test whose ranks
    disagree, or that a rank did not report, is failed; its line names the first rank that did not pass."""
    combined = {}
    for name in sorted({name for results in per_rank for name in results}):
        seen = [results.get(name, ("missing", "this rank did not report it")) for results in per_rank]
        seen += [("missing", "this rank wrote no report")] * (ranks - len(seen))
        kinds = [kind for kind, _ in seen]
        if len(set(kinds)) == 1:
            kind = kinds[0]
        else:
            kind = next((k for k in kinds if k in ("not collected", "errors", "failed")), "failed")
        rank, line = next(((r, line) for r, (k, line) in enumerate(seen) if k not in ("passed", "skipped")),
                          (None, ""))
        where = f"rank {rank}: " if rank is not None and len(set(kinds)) > 1 else ""
        combined[name] = (kind, where + line, kinds.count(kind))
    return combined


def table(combined: dict[str, tuple[str, str, int]], ranks: int) -> str:
    """The per-test table (text)."""
    return "\n".join([f"{'test':72} {'result':13} ranks"] + [f"{name:72} {kind:13} {count}/{ranks}"
                                                              for name, (kind, _, count) in combined.items()])


def summary(runs: list[dict], ranks: int, heap: str) -> str:
    """Markdown: a row per folder or file run (counts of each outcome, time, how the run ended), then each
    folder's tests that did not pass or skip, with the first line of their first failing rank's error."""
    lines = [f"| folder | {' | '.join(OUTCOMES)} | seconds | run ({ranks} ranks{heap}) |",
             "|---" * (len(OUTCOMES) + 3) + "|"]
    failures = []
    for run in runs:
        counts = [sum(kind == outcome for kind, _, _ in run["tests"].values()) for outcome in OUTCOMES]
        lines.append(f"| `{run['path']}` | {' | '.join(map(str, counts))} | {run['seconds']:.0f} | {run['status']} |")
        by_line = {}  # tests that failed alike are one line: a folder's 8 refusals of the same option, say
        for name, (kind, line, _) in run["tests"].items():
            if kind not in ("passed", "skipped"):
                by_line.setdefault(f"{kind}: {line or '(no message)'}", []).append(name)
        if by_line:
            failures.append(f"\n`{run['path']}`:\n")
            failures += [f"- {_names(names)}: {line}" for line, names in by_line.items()]
    return "\n".join(lines + failures) + "\n"


def _names(names: list[str], shown: int = 3) -> str:
    """``names`` in Markdown, the first ``shown`` of a longer list and how many more."""
    listed = ", ".join(f"`{name}`" for name in names[:shown])
    return listed if len(names) <= shown else f"{len(names)} tests: {listed} and {len(names) - shown} more"


def run_path(path: str, upstream: Path, args, pytest_args: list[str]) -> dict:
    """Pytest over ``path`` (a folder or file of upstream's, or a glob of them: one run for all it matches) in
    ``args.shards`` torchruns at once, each keeping every n-th test; its tests' outcomes and status."""
    from concurrent.futures import ThreadPoolExecutor

    from upstream_programs import run_in_own_group

    targets = sorted(str(match.relative_to(upstream)) for match in upstream.glob(path)) or [path]

    def shard(k: int, reports: str) -> tuple[int | None, str, float, list[dict]]:
        paths = os.pathsep.join(filter(None, [str(OURS), os.environ.get("PYTHONPATH", "")]))
        env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=paths,
                   **{WORKER: "1", REPORTS: reports, MAX_HEAP: args.max_heap or "",
                      SHARD: f"{k}/{args.shards}" if args.shards > 1 else ""})
        # Upstream's rootdir and no ini file: a checkout inside another project (this one) must not get that
        # project's pytest settings; a module that fails to import is reported and the others still run.
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.ranks}",
                   str(Path(__file__).resolve()), *targets, f"--rootdir={upstream}", "-c", os.devnull,
                   "--continue-on-collection-errors", *pytest_args]
        returncode, output, seconds = run_in_own_group(command, upstream, env, args.timeout)
        return returncode, output, seconds, [outcomes(report) for report in sorted(Path(reports).glob("rank*.xml"))]

    with tempfile.TemporaryDirectory(prefix="iris-upstream-tests-") as reports:
        folders = [Path(reports) / f"shard{k}" for k in range(args.shards)]
        for folder in folders:
            folder.mkdir()
        with ThreadPoolExecutor(args.shards) as pool:
            shards = list(pool.map(shard, range(args.shards), map(str, folders)))
    # pytest's 5, "no tests ran", from a shard left without tests (fewer tests than shards) is no failure
    returncodes = [0 if args.shards > 1 and returncode == 5 else returncode for returncode, *_ in shards]
    if None in returncodes:
        status = f"timed out ({returncodes.count(None)} of {args.shards} shards)" if args.shards > 1 else "timed out"
    else:
        status = f"exit status {max(returncodes, key=abs)}"
    silent = sum(args.ranks - len(per_rank) for *_, per_rank in shards)
    if silent:  # pytest writes its report when it ends
        status += f", {silent} rank(s) wrote no report"
    # each rank's tests: the union of its reports from every shard (a shard's tests are its own)
    per_rank = [{name: result for *_, reports_of in shards if rank < len(reports_of)
                 for name, result in reports_of[rank].items()} for rank in range(args.ranks)]
    per_rank = [results for results in per_rank if results]
    output = "\n".join(f"--- shard {k} of {args.shards}\n{text}" if args.shards > 1 else text
                       for k, (_, text, _, _) in enumerate(shards))
    return {"path": path, "output": output, "seconds": max(seconds for _, _, seconds, _ in shards), "status": status,
            "returncode": None if None in returncodes else max(returncodes, key=abs),
            "tests": combine(per_rank, args.ranks) if per_rank else {}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream", type=Path, help="upstream Iris's checkout (or an export of its tests/)")
    parser.add_argument("paths", nargs="+", help="test folders, files or globs of them (quoted), relative to "
                        "UPSTREAM_DIR; each runs alone")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=900, help="seconds for each folder or file")
    parser.add_argument("--max-heap", help="ask iris.iris for at most this heap per rank (e.g. 1GiB)")
    parser.add_argument("--shards", type=int, default=1, help="run each folder's tests as this many torchruns at "
                        "once, each keeping every n-th test (a many-core machine; the CPU backend's interpreter "
                        "uses one core per rank)")
    parser.add_argument("--markdown", type=Path, help="also write the per-folder summary here, as Markdown")
    args, pytest_args = parser.parse_known_args()
    pytest_args = [a for a in pytest_args if a != "--"]
    upstream = args.upstream.resolve()
    heap = f", iris.iris heap_size capped at {args.max_heap} per rank (--max-heap)" if args.max_heap else ""
    runs, ok = [], True
    for path in args.paths:
        run = run_path(path, upstream, args, pytest_args)
        print(run["output"][-20000:])
        print(f"\n{path} on {args.ranks} ranks: {run['status']}, {run['seconds']:.0f} s{heap}")
        print(table(run["tests"], args.ranks) if run["tests"] else "(no rank wrote a report: its output is above)")
        ok &= run["returncode"] == 0 and bool(run["tests"]) and all(
            kind in ("passed", "skipped") and count == args.ranks for kind, _, count in run["tests"].values())
        runs.append(run)
        if args.markdown:  # after each folder: a later folder's hang leaves the earlier ones' rows
            args.markdown.write_text(summary(runs, args.ranks, ", --max-heap " + args.max_heap if args.max_heap
                                             else ""))
    print("\n" + summary(runs, args.ranks, heap))
    return 0 if ok else 1


if __name__ == "__main__":
    if os.environ.get(WORKER) == "1" and "RANK" in os.environ:
        raise SystemExit(run_rank(sys.argv[1:]))
    sys.path.insert(0, str(HERE))  # upstream_programs, beside this file
    raise SystemExit(main())
