"""The lessons' exercises: checks whose failure says what was expected and where to look, and the solutions,
kept out of sight in ``notebooks/solutions/`` until ``%iris solution NN`` asks for one.

A lesson's exercise is three cells: a skeleton (tagged ``exercise``: the part to write marked ``# YOUR CODE
HERE``; run as it is, it leaves its result unset), a check (tagged ``exercise-check``) that calls :func:`require`,
and ``%iris solution NN`` (tagged ``solution``). Run All stops at the failing check, so the solution cell runs only
when asked for: it then loads the solution into itself, as ``%load`` does. Where no one reads (the tests, the docs
build: :func:`execute_lesson`), it prints the solution and runs it.

Examples
--------
A check cell::

    from workbench.exercises import mismatch, require
    for r, inbox in enumerate(wb.pull("inbox")):
        require("00", mismatch(inbox, 10.0 * ((r + 1) % n), f"rank {r}'s inbox"),
                read="'The first remote store' above, and help(iris.store)")

which, with the skeleton left as it is, fails with::

    ExerciseNotSolved: lesson 00's exercise is not solved yet: rank 0's inbox: element [0] is 2.0, expected
    10.0 (16 of 16 elements differ).
    Read: 'The first remote store' above, and help(iris.store).
    Stuck? The cell after this check, `%iris solution 00`, loads one solution into itself: run it, run what
    it loaded, then this check again.
"""

from __future__ import annotations

import os
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parent.parent / "notebooks" / "solutions"


class ExerciseNotSolved(AssertionError):
    """An exercise's check found the result not (yet) right: what was expected, and where to read."""

    def _render_traceback_(self) -> list[str]:
        """IPython shows the message alone: the check's own lines would only hide what it says."""
        first, *rest = str(self).splitlines()
        return [f"{type(self).__name__}: {first}", *rest]


def require(lesson: str, problem: str | None, *, read: str) -> None:
    """Raise :class:`ExerciseNotSolved` when ``problem`` says what is wrong (None: nothing is).

    Parameters
    ----------
    lesson
        The lesson's number, ``"00"`` to ``"15"``: the message names the magic that loads its solution.
    problem
        What was found against what was expected, e.g. from :func:`mismatch`; None when the result is right.
    read
        Where to look: the lesson's section, the API (``help(iris.store)``).

    Examples
    --------
    >>> require("03", None, read="'A counter every rank increments'")    # right: nothing happens
    """
    if problem is not None:
        raise ExerciseNotSolved(f"lesson {lesson}'s exercise is not solved yet: {problem}.\nRead: {read}.\n"
                                f"Stuck? The cell after this check, `%iris solution {lesson}`, loads one solution "
                                "into itself: run it, run what it loaded, then this check again.")


def mismatch(actual, expected, where: str, *, atol: float = 0.0, rtol: float = 0.0) -> str | None:
    """Where a tensor first differs from what was expected, in words; None when every element matches.

    Parameters
    ----------
    actual
        A tensor (as pulled from a rank).
    expected
        A tensor of the same shape, or a number every element should hold.
    where
        What ``actual`` is, e.g. ``"rank 1's gathered"``.
    atol, rtol
        The tolerance, as :func:`torch.isclose`'s (0: exactly equal). NaN never matches.

    Examples
    --------
    >>> import torch
    >>> mismatch(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([1.0, 2.0, 3.0]), "rank 0's out")
    "rank 0's out: element [1] is 0.0, expected 2.0 (2 of 3 elements differ)"
    >>> mismatch(torch.zeros(2, 2), 0.0, "rank 1's out") is None
    True
    """
    import torch

    expected = torch.as_tensor(expected, dtype=actual.dtype).expand_as(actual) if not torch.is_tensor(
        expected) else expected
    if expected.shape != actual.shape:
        return f"{where} has shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    wrong = ~torch.isclose(actual, expected.to(actual.dtype), rtol=rtol, atol=atol)
    if not wrong.any():
        return None
    if actual.dim() == 0:
        return f"{where} is {actual.item()!r}, expected {expected.item()!r}"
    first = tuple(int(i) for i in wrong.nonzero()[0])
    return (f"{where}: element [{', '.join(map(str, first))}] is {actual[first].item()!r}, expected "
            f"{expected[first].item()!r} ({int(wrong.sum())} of {wrong.numel()} elements differ)")


def solution_path(lesson: str) -> Path:
    """The file holding lesson ``lesson``'s solution, ``notebooks/solutions/NN_*.py``.

    Examples
    --------
    >>> solution_path("7").name
    '07_gemm_all_scatter.py'
    """
    number = f"{int(lesson):02d}" if str(lesson).isdigit() else str(lesson)
    found = sorted(SOLUTIONS.glob(f"{number}_*.py"))
    if not found:
        have = sorted(p.name[:2] for p in SOLUTIONS.glob("[0-9][0-9]_*.py"))
        raise ValueError(f"no solution for lesson {lesson!r} in {SOLUTIONS}: the lessons with one are {have}")
    return found[0]


def solution_source(lesson: str) -> str:
    """The text of lesson ``lesson``'s solution: one notebook cell, its magic line included.

    Examples
    --------
    >>> solution_source("00").splitlines()[0]
    '%%iris_kernel'
    """
    return _without_header(solution_path(lesson).read_text())


def _without_header(text: str) -> str:
    """A solutions file's cell: the file's docstring (what it solves, for someone browsing the folder) dropped."""
    if text.startswith('"""'):
        text = text[text.index('"""', 3) + 3:].lstrip("\n")
    return text


RUN_SOLUTIONS = "IRIS_WORKBENCH_SOLUTIONS"
"""Set to ``run`` in a kernel's environment, ``%iris solution NN`` runs the solution instead of loading it."""


def load_solution(shell, lesson: str, run: bool = False) -> None:
    """``%iris solution NN``: put lesson ``NN``'s solution into the cell, as ``%load`` does (the frontend replaces
    the cell's text with it, to read and run); with ``run`` (or ``IRIS_WORKBENCH_SOLUTIONS=run`` in the kernel's
    environment: a headless run), print the solution and run it.

    Examples
    --------
    ::

        %iris solution 07          # the cell now holds one solution: read it, run it, then the check
        %iris solution 07 --run    # print it and run it (e.g. to move on to the next section)
    """
    text = solution_source(lesson)
    where = solution_path(lesson).relative_to(SOLUTIONS.parent.parent)
    if run or os.environ.get(RUN_SOLUTIONS) == "run":
        print(f"one solution ({where}):\n\n{text}")
        shell.run_cell(text, store_history=False).raise_error()
        return
    shell.set_next_input(text, replace=True)
    print(f"lesson {lesson}'s solution ({where}) is in this cell now: run it, then the check. Where no editor "
          f"shows it, `%iris solution {lesson} --run` prints it and runs it.")


class LessonFailed(AssertionError):
    """A lesson did not run as its exercise promises: its check passed with the skeleton (the exercise came
    solved), or its cells are not the skeleton, check and solution cells in that order."""


def exercise_cells(notebook) -> tuple[int, int]:
    """The indices of a lesson's check cell and of its solution cell, which comes right after it.

    Examples
    --------
    >>> import nbformat                                                     # doctest: +SKIP
    >>> exercise_cells(nbformat.read("notebooks/00_quickstart.ipynb", 4))  # doctest: +SKIP
    (13, 14)
    """
    tagged = {tag: [i for i, cell in enumerate(notebook.cells) if tag in cell.metadata.get("tags", [])]
              for tag in ("exercise", "exercise-check", "solution")}
    if any(len(found) != 1 for found in tagged.values()):
        raise LessonFailed(f"a lesson needs one cell tagged each of exercise, exercise-check and solution; found "
                           f"{tagged}")
    skeleton, check, solution = (tagged[tag][0] for tag in ("exercise", "exercise-check", "solution"))
    if not skeleton < check == solution - 1:
        raise LessonFailed(f"the skeleton (cell {skeleton}), its check (cell {check}) and the solution cell (cell "
                           f"{solution}) must come in that order, the solution right after the check")
    return check, solution


def execute_lesson(path, workdir, timeout: float = 180, **options):
    """Run a lesson both ways in one kernel, as the tests and the docs build do: every stored cell in order, the
    exercise's check first as the student gets it (the skeleton as it is: it must fail with
    :class:`ExerciseNotSolved`), then, right after the solution cell has run the solution, again (it must pass).

    Parameters
    ----------
    path
        The lesson's ``.ipynb``, or the lesson read with :func:`nbformat.read` (executed in place: its outputs are
        there even when a cell fails).
    workdir
        The kernel's working directory (what the lesson's ``%%writefile`` cells write).
    timeout
        Seconds one cell may run.
    options
        More :class:`nbclient.NotebookClient` options (e.g. ``store_widget_state=False``).

    Returns
    -------
    notebook, failure
        The executed notebook, its cells the stored ones (the check's outputs are its passing run's), and the
        student's failure message (the check's, with the skeleton). A cell that fails otherwise raises
        :class:`nbclient.exceptions.CellExecutionError`; a check that passes with the skeleton, LessonFailed.

    Examples
    --------
    >>> notebook, failure = execute_lesson("notebooks/00_quickstart.ipynb", "/tmp")   # doctest: +SKIP
    >>> failure.splitlines()[0]                                                       # doctest: +SKIP
    "lesson 00's exercise is not solved yet: rank 0's inbox (rank 1 stores 10 x 1 there): element [0] is ..."
    """
    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError

    notebook = path if isinstance(path, nbformat.NotebookNode) else nbformat.read(str(path), as_version=4)
    name = Path(path).name if not isinstance(path, nbformat.NotebookNode) else "the lesson"
    check_at, solution_at = exercise_cells(notebook)
    failures = []

    class LessonClient(nbclient.NotebookClient):
        async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
            if cell_index == check_at and not failures:  # the student's run: the skeleton as it is
                try:
                    await super().async_execute_cell(cell, cell_index, execution_count, store_history)
                except CellExecutionError as error:
                    if error.ename != ExerciseNotSolved.__name__:
                        raise
                    failures.append(error.evalue)
                    return cell
                raise LessonFailed(f"{name}: the exercise's check passed with the skeleton as it is: the "
                                   "student finds the exercise solved")
            await super().async_execute_cell(cell, cell_index, execution_count, store_history)
            if cell_index == solution_at:  # the solution has run: the check again, which must pass now
                await super().async_execute_cell(notebook.cells[check_at], check_at, self.code_cells_executed + 1)
            return cell

    client = LessonClient(notebook, timeout=timeout, kernel_name="python3",
                          resources={"metadata": {"path": str(workdir)}}, **options)
    client.execute(env={**os.environ, RUN_SOLUTIONS: "run"})
    return notebook, failures[0]
