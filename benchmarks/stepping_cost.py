"""What stepping costs a kernel that is not stepped, on the CPU backend: this tree against a baseline commit.

The stepper (:mod:`iris.instruments.stepping`) hears of every heap access through the interpreter's access hooks
(:mod:`iris.interpret.access_events`), which are installed by the first observer (a race checker, a traffic recorder,
a stepped cell) and stay. So a rank's kernels run in one of two states: the hooks never installed, or installed with
no observer left (after a stepped cell, a traced or checked one). Each is timed here in this tree and in a baseline
commit (checked out into a temporary git worktree), in one run: 2 CPU ranks, a kernel that puts 16 blocks of 256
floats into the next rank's heap (a load and a store per program), ``LAUNCHES`` launches after a warm-up, the mean
CPU time per launch on rank 0 (the process's own time: a shared machine's load barely moves it, where wall-clock time
doubled under it); each configuration ``ROUNDS`` times, rotated, the median kept.

Run::

    .venv/bin/python benchmarks/stepping_cost.py --baseline c9f06aa           # prints the table
    .venv/bin/python benchmarks/stepping_cost.py --baseline c9f06aa --write   # and puts it into RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCHES = 20
ROUNDS = 9
STATES = ("hooks never installed", "hooks installed, no observer")

RANK = r'''
import json, os, sys, time
import triton, triton.language as tl
import iris
from iris.interpret import access_events

@triton.jit
def put_next(src, dst, cur_rank, world, heap_bases, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iris.put(src + offs, dst + offs, cur_rank, (cur_rank + 1) % world, heap_bases)

ctx = iris.iris(1 << 22)
src, dst = ctx.ones(4096), ctx.zeros(4096)
if sys.argv[1] == "installed":  # as a rank is after a stepped (or checked) cell: the hooks stay, no observer
    class Nobody:
        def launch_started(self, kernel): pass
        def launch_finished(self): pass
        def program_started(self, program_id, grid): pass
        def access(self, kind, addresses, mask, itemsize): pass
        def atomic(self, kind, addresses, mask, itemsize, sem, perform): return perform()[0]
    nobody = Nobody()
    access_events.add_observer(nobody)
    access_events.remove_observer(nobody)
launch = lambda: put_next[(16,)](src, dst, ctx.cur_rank, ctx.num_ranks, ctx.get_heap_bases(), BLOCK=256)
for _ in range(3):
    launch()
ctx.barrier()
start = time.process_time()  # this rank's CPU time: what the kernel costs, whatever else the machine runs
for _ in range(int(sys.argv[2])):
    launch()
seconds = (time.process_time() - start) / int(sys.argv[2])
ctx.barrier()
assert float(dst.sum()) == 4096.0
print(json.dumps({"ms": seconds * 1e3}))
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_ranks(tree: Path, state: str) -> float:
    """Rank 0's mean CPU milliseconds per launch with ``tree``'s iris, in ``state`` (one of :data:`STATES`)."""
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(RANK)
    try:
        ranks = []
        for rank in range(2):
            env = {**os.environ, "IRIS_BACKEND": "cpu", "PYTHONPATH": str(tree), "RANK": str(rank), "WORLD_SIZE": "2",
                   "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port)}
            mode = "installed" if state == STATES[1] else "never"
            ranks.append(subprocess.Popen([sys.executable, f.name, mode, str(LAUNCHES)], cwd=tree, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outputs = [r.communicate(timeout=600) for r in ranks]
    finally:
        os.unlink(f.name)
    for r, (_, err) in zip(ranks, outputs, strict=True):
        if r.returncode != 0:
            raise RuntimeError(f"a rank failed in {tree}:\n{err[-3000:]}")
    return json.loads(outputs[0][0].strip().splitlines()[-1])["ms"]


def measure(baseline: str) -> dict:
    """``{(tree label, state): median ms}``; the baseline checked out into a temporary worktree for the run."""
    worktree = Path(tempfile.mkdtemp(prefix="iris-baseline-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), baseline], check=True,
                   capture_output=True)
    try:
        trees = {f"baseline {baseline}": worktree, "this tree": ROOT}
        runs = {(label, state): [] for label in trees for state in STATES}
        configurations = list(runs)
        for round_ in range(ROUNDS):
            for label, state in configurations[round_ % len(configurations):] + configurations[:round_ %
                                                                                              len(configurations)]:
                runs[(label, state)].append(time_ranks(trees[label], state))
        return {key: statistics.median(values) for key, values in runs.items()}
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=False,
                       capture_output=True)


def table(medians: dict, baseline: str) -> str:
    import torch
    import triton

    rows = ["| interpreter hooks | baseline, CPU ms/launch | this tree, CPU ms/launch | this tree / baseline |",
            "|---|---|---|---|"]
    for state in STATES:
        old, new = medians[(f"baseline {baseline}", state)], medians[("this tree", state)]
        rows.append(f"| {state} | {old:.2f} | {new:.2f} | {new / old:.3f} |")
    head = (f"2 CPU ranks, a 16-program put of 4096 floats per launch (a load and a store per program), {LAUNCHES} "
            f"launches after 3 warm-up ones, mean CPU time of rank 0's process, median of {ROUNDS} rotated rounds; "
            f"baseline commit {baseline}; {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, torch "
            f"{torch.__version__}, triton {triton.__version__}, Python {sys.version.split()[0]}.")
    return head + "\n\n" + "\n".join(rows)


def write(text: str) -> None:
    results = ROOT / "benchmarks" / "RESULTS.md"
    begin, end = "<!-- stepping cost begin (benchmarks/stepping_cost.py) -->", "<!-- stepping cost end -->"
    note = ("With the hooks never installed both trees run the same code (the stepper adds nothing to that path), so "
            "the spread of that row is the measurement's noise on the machine that ran it; the second row adds one "
            "empty-list check per access.")
    block = f"{begin}\n## stepping: the cost when off (CPU interpreter)\n\n{text}\n\n{note}\n{end}"
    current = results.read_text()
    if begin in current:
        current = current[:current.index(begin)] + block + current[current.index(end) + len(end):]
    else:
        current = current.rstrip("\n") + "\n\n" + block + "\n"
    results.write_text(current)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="the commit to compare with (before the stepper)")
    parser.add_argument("--write", action="store_true", help="put the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    text = table(measure(args.baseline), args.baseline)
    print(text)
    if args.write:
        write(text)


if __name__ == "__main__":
    main()
