"""Stepped cells from the workbench (``%%iris_kernel --step``, ``workbench.step``): real engines, CPU ranks.

Lesson 08's missing barrier: every rank puts its ``mine`` into its right neighbour's inbox, then sums its own inbox.
The race checker finds the race; stepping with the summing rank first makes the wrong total appear, on the line
that reads the inbox; the fixed protocol under the same preference gives the right totals.
"""

from __future__ import annotations

import time

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import workbench
from iris.instruments.stepping import Order, OrderDiverged
from workbench.races import cell_races

from .multirank import our_heap_files

SHIFT_AND_SUM = """
mine = ctx.full((4,), float(rank + 1), name="mine")
inbox = ctx.zeros(4, name="inbox")
total = ctx.zeros(1, name="total")

@triton.jit
def put_right(mine, inbox, cur_rank, world, heap_bases, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.put(mine + offs, inbox + offs, cur_rank, (cur_rank + 1) % world, heap_bases)

@triton.jit
def sum_inbox(inbox, total, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(total, tl.sum(tl.load(inbox + offs)))

def shift_and_sum(barrier):
    inbox.zero_()
    total.zero_()
    ctx.barrier()
    put_right[(1,)](mine, inbox, rank, world_size, ctx.get_heap_bases(), BLOCK=4)
    if barrier:
        ctx.barrier()
    sum_inbox[(1,)](inbox, total, BLOCK=4)
    ctx.barrier()
"""
RIGHT_TOTALS = [8.0, 4.0]  # rank 0 sums rank 1's four 2s, rank 1 rank 0's four 1s


@pytest.fixture(scope="module")
def wb():
    before = our_heap_files()
    wb = workbench.start(n=2, backend="cpu", heap_size="16MiB", progress=False, check="races")
    report = wb.run(SHIFT_AND_SUM)
    assert report.ok, report.render()
    yield wb
    print(wb.stop())
    assert wb.last_stop.ok and our_heap_files() <= before


def test_a_race_found_by_the_checker_is_made_to_happen_and_the_fix_holds_under_the_same_order(wb, tmp_path):
    # The checker's run, stepped so that its order is known: rank 1 first, so on rank 0's heap rank 1's put comes
    # before rank 0's sum (rank 0's total is right) and on rank 1's heap the other way round.
    checked = workbench.step("shift_and_sum(barrier=False)")
    checked.run_first([1, 0])
    assert checked.done and [t.item() for t in wb.pull("total")] == [8.0, 0.0]
    race = next(r for r in cell_races(wb).races if r.heap_rank == 0)
    assert (race.first.rank, race.first.kind, race.second.rank, race.second.kind) == (1, "store", 0, "load")

    run = workbench.step("shift_and_sum(barrier=False)")
    held = run.hold_at_race(race)  # just before the race, the other way round: rank 0's sum goes first
    assert held.startswith("held before the race, the other way round from the checker's run: rank 0's load at "
                           "line 14"), held
    rank0, rank1 = run.ranks
    assert (rank0.state, rank0.operation["line"], rank0.operation["kind"]) == ("paused", 14, "load"), run.summary()
    assert not run.transcript.racing() and "rank 1 is held before" in held, held
    said = run.replay_race(race)  # the other order from there: rank 0's sum before rank 1's put
    assert run.done and run.report.ok, run.summary()
    marks = run.transcript.racing()  # the race's two steps, each naming the other
    (load, store) = sorted(marks)
    assert marks == {load: f"with step {store}", store: f"with step {load}"}, marks
    assert run.transcript.steps[load].rank == 0 and run.transcript.steps[store].rank == 1
    assert "| race " in run.transcript.text().splitlines()[0] and "background:#ffd9d9" in run.transcript.html()
    assert said.startswith("the other order than the checker saw: rank 0's load at line 14"), said
    assert "read 0, 0, 0, 0, then rank 1's store at line 9" in said and "wrote 2, 2, 2, 2" in said, said
    wrong = [t.item() for t in wb.pull("total")]
    assert wrong[0] == 0.0, wrong  # rank 0 summed its inbox before rank 1's put landed
    read = next(s for s in run.transcript.steps if s.rank == 0 and s.operation["line"] == 14)
    assert read.operation["source"] == "tl.store(total, tl.sum(tl.load(inbox + offs)))"
    saved = run.order.save(tmp_path / "race.order.json")

    # the recorded order replays exactly: the same steps, values and totals
    again = workbench.step("shift_and_sum(barrier=False)", order=saved)
    assert again.done and again.order == run.order
    assert [(s.rank, s.before, s.after) for s in again.transcript.steps] == [
        (s.rank, s.before, s.after) for s in run.transcript.steps]
    assert [t.item() for t in wb.pull("total")] == wrong

    # the fixed protocol, the same preference (rank 0 first until its read, then rank 1): the right totals
    fixed = workbench.step("shift_and_sum(barrier=True)")
    said = fixed.replay_race(race)
    assert fixed.done and fixed.report.ok
    assert said.startswith("the order the checker saw, still: rank 1's store at line 9"), said
    assert "then rank 0's load at line 14" in said and "read 2, 2, 2, 2" in said, said
    assert [t.item() for t in wb.pull("total")] == RIGHT_TOTALS

    # and the old order no longer fits the fixed code: it says at which step
    diverging = workbench.step("shift_and_sum(barrier=True)")
    with pytest.raises(OrderDiverged, match="diverged at step"):
        diverging.replay(Order.load(saved))
    report = diverging.stop()
    assert report.ranks_with("error"), report.render()
    assert wb.run("shift_and_sum(barrier=True)").ok, "no rank is left held"
    assert [t.item() for t in wb.pull("total")] == RIGHT_TOTALS


def test_the_magic_steps_and_refuses_what_it_cannot_do(wb, capsys):
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "workbench")
    with pytest.raises(UsageError, match="leave out --ranks, --trace"):
        shell.run_cell_magic("iris_kernel", "--step --ranks 0 --trace", "shift_and_sum(True)")
    with pytest.raises(UsageError, match="add --step"):
        shell.run_cell_magic("iris_kernel", "--replay x.json", "shift_and_sum(True)")
    run = shell.run_cell_magic("iris_kernel", "--step", "shift_and_sum(barrier=True)")  # the cell's value
    assert isinstance(run, workbench.stepping.SteppedRun) and [s.state for s in run.ranks] == ["barrier", "barrier"]
    run.step_each()
    assert all(s.operation["kind"] == "load" for s in run.ranks), run.summary()  # put_right reads mine
    run.run_to_end()
    assert run.done and [t.item() for t in wb.pull("total")] == RIGHT_TOTALS
    shell.run_cell_magic("iris_kernel", "--step", "x = 1 + 1")
    assert "nothing to step" in capsys.readouterr().out


def test_a_run_stopped_with_a_rank_in_a_host_barrier_leaves_no_rank_stuck_and_other_cells_are_refused(wb):
    run = workbench.step("shift_and_sum(barrier=True)")
    run.step(0)  # rank 0 goes into the host barrier; rank 1 is still held before it
    assert [s.state for s in run.ranks] == ["in barrier", "barrier"]
    with pytest.raises(workbench.WorkbenchError, match="the ranks are held by a stepped cell: step it to its end or "
                                                       "stop it first"):
        wb.run("x = 1")
    started = time.monotonic()
    report = run.stop()
    assert time.monotonic() - started < 10, "no rank waited in gloo's barrier for one that had stopped"
    assert report.ranks_with("error") == [0, 1] and not report.notes, report.render()
    assert wb.run("shift_and_sum(barrier=True)").ok, "the same cluster, every rank free"
    assert [t.item() for t in wb.pull("total")] == RIGHT_TOTALS


def test_a_run_left_held_is_stopped_by_a_new_one_and_by_the_stop_of_the_cluster():  # last: it starts ranks anew
    wb = workbench.start(n=2, backend="cpu", heap_size="16MiB", progress=False)
    try:
        assert wb.run(SHIFT_AND_SUM).ok
        first = workbench.step("shift_and_sum(barrier=True)")
        second = workbench.step("shift_and_sum(barrier=True)")  # stops the first
        assert first.done and first.report.ranks_with("error") == [0, 1]
        assert "the stepped run was stopped: a new stepped cell started" in first.report.results[0].error["message"]
        second.step(0)
    finally:
        report = wb.stop()  # second is still held: the stop lets it go first
    assert report.ok, str(report)
