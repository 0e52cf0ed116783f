"""The tutorials run top to bottom, as a newcomer would run them: a real Jupyter kernel, the backend iris picks.

Each lesson runs both ways in one kernel (:func:`workbench.exercises.execute_lesson`): each exercise's check as the
student gets it (right after the skeleton: the check fails, saying what it expected and where to look), then every
stored cell in order as ``nbconvert --execute`` runs them (each solution cell runs its solution: every cell passes).
Running the student's way costs one check more, not a second run of the lesson. The executed lesson is kept in
``.cache/executed/<stem>.ipynb`` for the docs build, which then does not run it again (the hand-off H15 and H16
agreed on).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

from workbench.exercises import (  # noqa: E402  (after the importorskips: nbformat is optional)
    ExerciseNotSolved,
    LessonFailed,
    execute_lesson,
    exercise_cells,
    solution_source,
)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
EXECUTED = ROOT / ".cache" / "executed"


def test_there_are_lessons():
    assert len(NOTEBOOKS) >= 8, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_without_outputs(path):
    cells = json.loads(path.read_text())["cells"]
    assert not [c for c in cells if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]


def exercise_keys(path, count: int) -> list[str]:
    """The keys of a lesson's exercises: its number, then its number and b, c... (``03``, ``03b``)."""
    return [path.name[:2] + letter for letter in ["", *"bcdefgh"][:count]]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercise_is_a_skeleton_and_its_solution_is_out_of_sight(path):
    """The part to write is marked; the solution is in notebooks/solutions/, not in the lesson, and the cell
    that shows it is folded on the docs site (myst-nb's hide-output). The same for each exercise of a lesson."""
    notebook = nbformat.read(path, as_version=4)
    exercises = exercise_cells(notebook)
    for key, (skeleton_at, solution_at, _) in zip(exercise_keys(path, len(exercises)), exercises, strict=True):
        skeleton = notebook.cells[skeleton_at]
        assert "# YOUR CODE HERE" in skeleton.source
        assert notebook.cells[solution_at].source == f"%iris solution {key}"
        assert "hide-output" in notebook.cells[solution_at].metadata["tags"]
        solution = solution_source(key)
        assert "# YOUR CODE HERE" not in solution and solution.strip() != skeleton.source.strip()
    assert solution_source(path.name[:2]).startswith("%%iris_kernel")  # the lesson's first: a kernel to write
    everything = "\n".join(cell.source for cell in notebook.cells)
    assert "One solution" not in everything and "one solution is below" not in everything.lower()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_lesson_runs_top_to_bottom(path, tmp_path, no_heap_files_left_behind):
    """Both ways: each student's check fails with its clear message, then everything passes with the solutions in;
    the executed lesson goes to .cache/executed/ only when all of that held (never a stale one)."""
    saved = EXECUTED / f"{path.stem}.ipynb"
    saved.unlink(missing_ok=True)
    try:
        notebook, failures = execute_lesson(path, tmp_path)
    except (nbclient.exceptions.CellExecutionError, LessonFailed) as error:
        pytest.fail(f"{path.name} failed:\n{error}", pytrace=False)
    exercises = exercise_cells(notebook)
    assert len(failures) == len(exercises), failures
    for key, failure, (_, _, check_at) in zip(exercise_keys(path, len(exercises)), failures, exercises, strict=True):
        print(f"{path.name}: the student's check says:\n{failure}")  # shown with -s, and with a failure
        first, *rest = failure.splitlines()
        assert first.startswith(f"lesson {key}'s exercise is not solved yet: ") and "expected" in first, failure
        assert rest[0].startswith("Read: ") and f"`%iris solution {key}`" in rest[1], failure
        assert "exercise solved" in "".join(out.get("text", "") for out in notebook.cells[check_at].outputs)
    start = next(cell for cell in notebook.cells if cell.cell_type == "code" and "%iris start" in cell.source)
    summary = "".join(out.get("text", "") for out in start.outputs)  # the ranks' backend and device, in words
    assert "rank 0: alive; kernels run on the CPU (backend cpu: Triton's interpreter" in summary, summary
    EXECUTED.mkdir(parents=True, exist_ok=True)
    partial = saved.with_name(saved.name + ".tmp")
    nbformat.write(notebook, partial)
    os.replace(partial, saved)


def test_student_run_all_stops_at_the_check_and_leaves_nothing_when_the_kernel_stops(tmp_path,
                                                                                    no_heap_files_left_behind):
    """Run All as the student gets lesson 00, in a frontend that takes input() as JupyterLab does: the solution
    cell shows the solution folded and runs nothing, so Run All stops at the check, with ExerciseNotSolved; the
    lesson's ``%iris stop`` never runs, and closing the notebook (its kernel shut down) still ends every rank."""
    notebook = nbformat.read(NOTEBOOKS[0], as_version=4)
    _, solution_at, check_at = exercise_cells(notebook)[0]
    client = nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        client.kc.allow_stdin = True  # as JupyterLab's and VS Code's requests say (nbclient's say False)
        for index, cell in enumerate(notebook.cells[:check_at]):
            client.execute_cell(cell, index)
        with pytest.raises(nbclient.exceptions.CellExecutionError) as stopped:
            client.execute_cell(notebook.cells[check_at], check_at)
        probe = nbformat.v4.new_code_cell("print(workbench.current().local_pids())")
        notebook.cells.append(probe)
        client.execute_cell(probe, len(notebook.cells) - 1)
        pids = json.loads(probe.outputs[0]["text"])
    assert stopped.value.ename == ExerciseNotSolved.__name__, stopped.value
    folded = [out for out in notebook.cells[solution_at].outputs if out.get("output_type") == "display_data"]
    assert folded[0]["data"]["text/html"].startswith("<details><summary>One solution to lesson 00's exercise")
    assert "iris.store(inbox + offs" in folded[0]["data"]["text/html"]
    assert len(pids) >= 3  # the controller's processes and the engines
    # Within the time the engines' watchdog takes where the kernel's own stop did not finish (jupyter_client kills a
    # kernel that takes over 5 s to shut down; on 2 loaded cores the stop can take longer).
    started = time.monotonic()
    left = wait_gone(pids, 60)
    print(f"the ranks had ended {time.monotonic() - started:.1f} s after the kernel's shutdown")
    assert left == [], f"ranks left running 60 s after the notebook's kernel stopped: {left}"


def test_a_frontend_that_takes_input_is_told_from_one_that_does_not(tmp_path):
    """Whether someone can answer (the solution cell folds its solution, or runs it) is what the cell's execute
    request says: allow_stdin, True from JupyterLab and VS Code, False from nbclient (nbconvert --execute)."""
    cell = nbformat.v4.new_code_cell("from workbench.exercises import _someone_can_answer\n"
                                     "print(_someone_can_answer(get_ipython()))")
    client = nbclient.NotebookClient(nbformat.v4.new_notebook(cells=[cell]), timeout=60, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    answers = []
    with client.setup_kernel():
        for allow_stdin in (True, False, True):
            client.kc.allow_stdin = allow_stdin
            client.execute_cell(cell, 0)
            answers.append(cell.outputs[0]["text"].strip())
    assert answers == ["True", "False", "True"]


def wait_gone(pids, seconds: float) -> list[int]:
    """The processes of ``pids`` still alive (zombies count as gone) after waiting up to ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def test_check_messages_say_where_what_and_what_to_read():
    import torch

    from workbench.exercises import mismatch, require

    require("03", None, read="anything")  # right: nothing raised
    found = mismatch(torch.tensor([[1.0, 2.0], [float("nan"), 4.0]]), torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
                     "rank 1's out")
    assert found == "rank 1's out: element [1, 0] is nan, expected 3.0 (1 of 4 elements differ)"
    assert mismatch(torch.zeros(3), torch.zeros(2), "x") == "x has shape (3,), expected (2,)"
    assert mismatch(torch.full((2,), 1.0 + 1e-6), 1.0, "x", atol=1e-5) is None
    with pytest.raises(ExerciseNotSolved) as error:
        require("07", found, read="'The kernel' above")
    assert str(error.value).splitlines() == [
        f"lesson 07's exercise is not solved yet: {found}.", "Read: 'The kernel' above.",
        "Stuck? The cell above this check, `%iris solution 07`, shows one solution, folded; `%iris solution 07 --load` "
        "puts it into a cell to run."]
    with pytest.raises(ValueError, match=r"no solution for lesson '99'.*the lessons with one are \['00', '01'"):
        solution_source("99")


def test_solution_magic_loads_the_solution_into_the_cell(capsys, monkeypatch):
    """``%iris solution NN --load`` asks the frontend to replace the cell with the solution (what %load does); it
    runs nothing, so it needs no ranks."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.delenv("IRIS_WORKBENCH_SOLUTIONS", raising=False)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "workbench")
    shell.run_line_magic("iris", "solution 5 --load")
    assert shell.rl_next_input == solution_source("05") and solution_source("05").startswith("%%iris_kernel\n")
    assert "notebooks/solutions/05_gluon.py) is in this cell now" in capsys.readouterr().out
