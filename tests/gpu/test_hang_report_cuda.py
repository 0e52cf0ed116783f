"""The hang report on CUDA ranks: a kernel that waits forever for a flag, and what the timeout says about it.

On a GPU the rank's main thread waits in a CUDA call (here ``torch.cuda.synchronize()``), which SIGINT cannot
interrupt, so the cluster is restarted after the report; before that, each rank's answering thread names the
cell line, the last kernel launched and whether its stream is still busy, and the heap's small allocations as
read on a stream of its own (the spinning kernel must not stop that copy). Run on the GPU machine like the other
workbench GPU tests::

    source tests/gpu/install_wheels.sh && bash tests/gpu/run_gpu_checks.sh -k hang
"""

from __future__ import annotations

import time

import pytest
import torch

from tests.gpu import WORLD

pytest.importorskip("ipyparallel", reason="needs the carried Jupyter wheels (tests/gpu/install_wheels.sh)")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

import workbench  # noqa: E402

# Rank 1 spins on flags[2], which no rank raises; flags[1] holds 5 so that the copy is seen to be real.
WAIT_FOREVER = """
flags = ctx.zeros(4, dtype=torch.int32)
flags[1] = 5
data = ctx.zeros(1 << 20, dtype=torch.float32)

@triton.jit
def wait_for_flag(flags, cur_rank):
    if cur_rank == 1:
        while tl.atomic_cas(flags + 2, 1, 1, sem="acquire", scope="sys") != 1:
            pass

ctx.barrier()
wait_for_flag[(1,)](flags, rank)
torch.cuda.synchronize()
"""


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "workbench")
    ip.run_line_magic("iris", f"start -n {WORLD} --backend cuda --heap 64MiB --timeout 120")
    workbench.current().interrupt_grace = 3.0
    yield ip
    print(workbench.current().stop())


def test_rank_spinning_on_a_flag_is_reported_before_the_restart(shell):
    wb = workbench.current()
    started = time.monotonic()
    result = shell.run_cell(f"%%iris_kernel --timeout 10\n{WAIT_FOREVER}", store_history=False)
    elapsed = time.monotonic() - started
    error = result.error_in_exec
    assert error is not None
    report = error.report
    print(report.render(), f"\n({elapsed:.1f} s)")
    hang = report.hang
    assert [hang.rank(r).state for r in range(WORLD) if r != 1] == ["finished"] * (WORLD - 1)
    waiting = hang.rank(1)
    assert waiting.state == "kernel" and waiting.kernel == "wait_for_flag", report.render()
    assert waiting.detail == "last kernel still running"
    # The magic's own line counts: torch.cuda.synchronize() is the cell's 15th line.
    assert waiting.line == "cell line 15" and waiting.source == "torch.cuda.synchronize()"
    # The heap's small allocations, copied on a stream of the report's own while the kernel spins.
    assert isinstance(waiting.flags, list), waiting.flags
    assert {"name": "flags", "dtype": "int32", "values": [0, 5, 0, 0]} in waiting.flags
    assert all(f["name"] != "data" for f in waiting.flags)  # 4 MiB: data, not a flag
    assert "rank 1 flags: flags = [0, 5, 0, 0]" in str(error)
    # A kernel ignores SIGINT: the cluster was restarted, and works.
    assert report.ranks_with("unresponsive") == [1]
    assert "the cluster was restarted" in str(error)
    assert wb.pull("rank") == list(range(WORLD))


def test_a_users_launch_hook_runs_beside_the_reports(shell):
    wb = workbench.current()
    wb.run("""
from triton import knobs
seen = []
knobs.runtime.launch_enter_hook.add(lambda metadata: seen.append(metadata.data["name"]))

@triton.jit
def tiny(x):
    tl.store(x, 1)

t = ctx.zeros(1, dtype=torch.int32)
tiny[(1,)](t)
torch.cuda.synchronize()
""", timeout=120).raise_on_failure()
    assert wb.pull("seen") == [["tiny"]] * WORLD
    assert wb.pull("len(knobs.runtime.launch_enter_hook.calls)") == [2] * WORLD  # the report's hook and this one
