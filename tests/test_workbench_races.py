"""The race checker in the workbench, with real engines in a real IPython shell: ``%iris start --check races``
shows each cell's races as a table (named after variables), says nothing after a clean cell, and
``%%iris_kernel --check races`` turns the checker on for a cluster started without it. No false positive
across cells: the cell boundary is a host synchronisation the checker is told about.
"""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

import workbench
from workbench.races import RaceReport

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_heap_files_left_behind")]

# Rank 0 fills rank 1's inbox, then raises rank 1's flag; rank 1 polls the flag, then reads the inbox.
# SEM "relaxed" is the classic bug; "release"/"acquire" the fix.
MESSAGE = """
@triton.jit
def message(context, inbox, flag, out, rank: tl.constexpr, world: tl.constexpr, RELEASE: tl.constexpr,
            ACQUIRE: tl.constexpr):
    dctx = DeviceContext.initialize(context, rank, world)
    offs = tl.arange(0, 8)
    if rank == 0:
        dctx.store(inbox + offs, offs.to(tl.float32) + 1, 1)
        dctx.atomic_xchg(flag, 1, 1, sem=RELEASE, scope="sys")
    if rank == 1:
        while dctx.atomic_cas(flag, 1, 1, 1, sem=ACQUIRE, scope="sys") != 1:
            pass
        tl.store(out + offs, tl.load(inbox + offs))

inbox = ctx.zeros(8)
flag = ctx.zeros(1, dtype=torch.int32)
out = ctx.zeros(8)
ctx.barrier()
message[(1,)](ctx.get_device_context(), inbox, flag, out, rank, world_size, "{release}", "{acquire}")
ctx.barrier()
"""

# Rank 0 bumps a counter in rank 1's heap with an atomic while rank 1 reads it plainly: a race whose atomic side
# reaches the checker through the hang report's observer too; its line must still be the kernel's.
COUNT = """
@triton.jit
def count(context, counter, seen, rank: tl.constexpr, world: tl.constexpr):
    dctx = DeviceContext.initialize(context, rank, world)
    if rank == 0:
        dctx.atomic_add(counter, 1, 1, sem="relaxed", scope="sys")
    if rank == 1:
        tl.store(seen, tl.load(counter))

counter = ctx.zeros(1, dtype=torch.int32)
seen = ctx.zeros(1, dtype=torch.int32)
ctx.barrier()
count[(1,)](ctx.get_device_context(), counter, seen, rank, world_size)
ctx.barrier()
"""


@pytest.fixture
def displayed(monkeypatch):
    shown = []
    monkeypatch.setattr("workbench.magics.display", shown.append)
    return shown


def run(shell, displayed, line: str, body: str) -> list:
    displayed.clear()
    result = shell.run_cell(f"%%iris_kernel {line}\n{body}", store_history=False)
    assert result.error_in_exec is None, result.error_in_exec
    return [d for d in displayed if isinstance(d, RaceReport)]


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "workbench")
    yield ip
    if workbench.session._current is not None and workbench.session._current.running:
        workbench.session._current.stop()


def test_checked_cluster_shows_a_relaxed_flag_race_named_after_variables(shell, displayed):
    shell.run_line_magic("iris", "start -n 2 --backend cpu --heap 16MiB --timeout 60 --check races")
    wb = workbench.current()
    assert wb.check == "races" and wb.pull("ctx.check") == ["races", "races"]
    (report,) = run(shell, displayed, "", MESSAGE.format(release="relaxed", acquire="relaxed"))
    elements = {race.element_name for race in report.races}
    assert "inbox[0]" in elements, elements  # the variable's name: the allocation has no name= label
    race = next(r for r in report.races if r.element_name == "inbox[0]")
    assert {race.first.kind, race.second.kind} == {"store", "load"} and {race.first.rank, race.second.rank} == {0, 1}
    lines = {race.first.line, race.second.line}
    assert lines == {9, 14}, lines  # the store into the inbox and the load of it, as the notebook numbers them
    bundle = report._repr_mimebundle_()
    assert "iris-races" in bundle["text/html"] and "inbox[0]" in bundle["text/plain"]
    # The fix: release and acquire. Nothing is shown after a clean cell of a checked cluster.
    assert run(shell, displayed, "", MESSAGE.format(release="release", acquire="acquire")) == []
    # Cells follow each other on every rank: no race between one cell's kernels and the next cell's.
    assert run(shell, displayed, "", "out.fill_(0.0)\nctx.barrier()\n" + MESSAGE.format(
        release="release", acquire="acquire")) == []
    # An atomic's side of a race is named at its line in the cell, as a load's or a store's is.
    (report,) = run(shell, displayed, "", COUNT)
    race = next(r for r in report.races if r.element_name == "counter[0]")
    sides = {race.first.kind: race.first.line, race.second.kind: race.second.line}
    assert sides == {"atomic_add": 7, "load": 9}, sides


def test_check_races_on_a_cell_turns_the_checker_on_and_reports_none(shell, displayed):
    shell.run_line_magic("iris", "start -n 2 --backend cpu --heap 16MiB --timeout 60")
    wb = workbench.current()
    assert wb.check is None and wb.pull("ctx.check") == [None, None]
    (report,) = run(shell, displayed, "--check races", MESSAGE.format(release="release", acquire="acquire"))
    assert not report and report.text() == "race check: no races in this cell"
    assert wb.pull("ctx.check") == ["races", "races"]
    (report,) = run(shell, displayed, "--check races", MESSAGE.format(release="release", acquire="relaxed"))
    assert any(r.element_name == "inbox[0]" for r in report.races)  # a release nobody acquires orders nothing


def test_a_lock_an_interrupt_left_held_does_not_block_the_next_barrier(shell):
    wb = workbench.current()
    assert wb.check == "races"
    # What a SIGINT landing between taking the checker's lock and its try (or in its finally) leaves: rank 1
    # holding the lock with no kernel running. Rank 0 needs it in the barrier; before the fix it waited forever.
    wb.run("import fcntl\nif rank == 1:\n    fcntl.flock(ctx._race_detector.shadow._lock_fd, fcntl.LOCK_EX)"
           ).raise_on_failure()
    report = wb.run("ctx.barrier()", timeout=10)
    assert report.ok, report.render()
