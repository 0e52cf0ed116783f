"""The lessons' exercises: checks whose failure says what was expected and where to look, and the solutions,
kept out of sight in ``notebooks/solutions/`` until ``%iris solution NN`` asks for one.

A lesson's exercise is three cells: a skeleton (tagged ``exercise``: the part to write marked ``# YOUR CODE
HERE``; run as it is, it leaves its result unset), ``%iris solution NN`` (tagged ``solution``), and a check (tagged
``exercise-check``) that calls :func:`require`. In front of a student (a kernel that may ask for input: JupyterLab,
VS Code), the solution cell shows one solution folded, one click away, and runs nothing, so Run All stops at the
failing check. Where no one can answer (``nbconvert --execute``, nbclient, papermill: no stdin), it prints the
solution and runs it, so the lesson runs through and its export shows the solution.

A lesson may have more exercises, each three cells tagged the same way, one after the other; the second's key is
the lesson's number and ``b`` (``%iris solution 03b``, ``require("03b", ...)``, ``notebooks/solutions/03b_*.py``),
the third's ``c``.

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
    Stuck? The cell above this check, `%iris solution 00`, shows one solution, folded; `%iris solution 00
    --load` puts it into a cell to run.
"""

from __future__ import annotations

import copy
import html
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
        The exercise's key: the lesson's number, ``"00"`` to ``"17"``, with ``b`` for a lesson's second exercise
        (``"03b"``): the message names the magic that loads its solution.
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
                                f"Stuck? The cell above this check, `%iris solution {lesson}`, shows one solution, "
                                f"folded; `%iris solution {lesson} --load` puts it into a cell to run.")


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
    """The file holding the solution of exercise ``lesson`` (a lesson's number, or its number and a letter for a
    lesson's later exercise), ``notebooks/solutions/NN_*.py`` (``NNb_*.py``).

    Examples
    --------
    >>> solution_path("7").name
    '07_gemm_all_scatter.py'
    >>> solution_path("03b").name
    '03b_keep_rank_1_waiting.py'
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
"""Set to ``run`` in the environment, ``%iris solution NN`` runs the solution even where a student could read it
(a runner of the lessons in an IPython shell, e.g. tests/gpu/run_notebooks.py)."""


def show_solution(shell, lesson: str, mode: str = "auto") -> None:
    """``%iris solution NN [--load | --run]``.

    Parameters
    ----------
    shell
        The IPython shell.
    lesson
        The lesson's number.
    mode
        ``"load"``: put the solution into the cell, as ``%load`` does, to read and run. ``"run"``: print it and run
        it. ``"auto"``: run it where no one reads (no stdin: nbconvert, nbclient; or ``IRIS_WORKBENCH_SOLUTIONS=run``),
        else show it folded (an HTML ``<details>``, closed) and run nothing.

    Examples
    --------
    ::

        %iris solution 07          # one solution, folded under the cell; nothing runs
        %iris solution 07 --load   # the cell now holds it: read it, run it, then the check
        %iris solution 07 --run    # print it and run it (e.g. to move on to the next section)
    """
    text = solution_source(lesson)
    where = solution_path(lesson).relative_to(SOLUTIONS.parent.parent)
    if mode == "auto":
        mode = "run" if os.environ.get(RUN_SOLUTIONS) == "run" or not _someone_can_answer(shell) else "fold"
    if mode == "run":
        print(f"one solution ({where}):\n\n{text}")
        shell.run_cell(text, store_history=False).raise_error()
    elif mode == "load":
        shell.set_next_input(text, replace=True)
        print(f"lesson {lesson}'s solution ({where}) is in this cell now: run it, then the check.")
    else:
        from IPython.display import display

        folded = (f"<details><summary>One solution to lesson {lesson}'s exercise ({html.escape(str(where))}): click "
                  f"to read it</summary><pre>{html.escape(text)}</pre></details>")
        display({"text/html": folded, "text/plain": f"one solution to lesson {lesson}'s exercise is in {where}"},
                raw=True)
        print(f"`%iris solution {lesson} --load` puts it into this cell, to run.")


def _someone_can_answer(shell) -> bool:
    """Whether the cell runs in front of someone: its kernel's frontend accepts input() (JupyterLab, VS Code) or
    there is no kernel (a terminal); nbclient, and so nbconvert --execute and papermill, run cells without stdin.

    The frontend says so in each execute request (the messaging protocol's ``allow_stdin``), which ipykernel's
    public ``get_parent`` returns while the cell runs."""
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return True
    return bool(kernel.get_parent("shell").get("content", {}).get("allow_stdin", False))


class LessonFailed(AssertionError):
    """A lesson did not run as its exercises promise: a check passed with its skeleton (the exercise came solved),
    or the cells of an exercise are not the skeleton, solution and check cells in that order."""


def exercise_cells(notebook) -> list[tuple[int, int, int]]:
    """The indices of the skeleton, solution and check cells of each of a lesson's exercises, in order (each check
    right after its solution, before the next exercise's skeleton).

    Examples
    --------
    >>> import nbformat                                                     # doctest: +SKIP
    >>> exercise_cells(nbformat.read("notebooks/00_quickstart.ipynb", 4))  # doctest: +SKIP
    [(12, 13, 14)]
    """
    tagged = {tag: [i for i, cell in enumerate(notebook.cells) if tag in cell.metadata.get("tags", [])]
              for tag in ("exercise", "solution", "exercise-check")}
    counts = {len(found) for found in tagged.values()}
    if len(counts) != 1 or counts == {0}:
        raise LessonFailed(f"each exercise of a lesson is three cells, tagged exercise, solution and exercise-check; "
                           f"a lesson needs one exercise at least; found {tagged}")
    exercises = list(zip(tagged["exercise"], tagged["solution"], tagged["exercise-check"], strict=True))
    starts = [skeleton for skeleton, _, _ in exercises[1:]] + [len(notebook.cells)]
    for (skeleton, solution, check), next_skeleton in zip(exercises, starts, strict=True):
        if not (skeleton < solution == check - 1 and check < next_skeleton):
            raise LessonFailed(f"the skeleton (cell {skeleton}), the solution cell (cell {solution}) and the check "
                               f"(cell {check}) must come in that order, the check right after the solution and "
                               "before the next exercise")
    return exercises


def execute_lesson(path, workdir, timeout: float = 180, **options):
    """Run a lesson both ways in one kernel, as the tests and the docs build do: every stored cell in order, as
    ``nbconvert --execute`` does (each solution cell runs its solution), and before that, right after each skeleton,
    its check as the student gets it (the skeleton as it is: it must fail with :class:`ExerciseNotSolved`).

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
    notebook, failures
        The executed notebook, its cells the stored ones with the outputs of the run in order, and the student's
        failure message of each exercise, in order (its check's, with the skeleton). A cell that fails otherwise
        raises :class:`nbclient.exceptions.CellExecutionError`; a check that passes with its skeleton, LessonFailed.

    Examples
    --------
    >>> notebook, failures = execute_lesson("notebooks/00_quickstart.ipynb", "/tmp")  # doctest: +SKIP
    >>> failures[0].splitlines()[0]                                                   # doctest: +SKIP
    "lesson 00's exercise is not solved yet: rank 0's inbox (rank 1 stores 10 x 1 there): element [0] is ..."
    """
    import nbclient
    import nbformat
    from nbclient.exceptions import CellExecutionError

    notebook = path if isinstance(path, nbformat.NotebookNode) else nbformat.read(str(path), as_version=4)
    name = Path(path).name if not isinstance(path, nbformat.NotebookNode) else "the lesson"
    checks = {skeleton: check for skeleton, _, check in exercise_cells(notebook)}
    stored_checks = {check: notebook.cells[check] for check in checks.values()}
    failures = []

    class LessonClient(nbclient.NotebookClient):
        async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
            await super().async_execute_cell(cell, cell_index, execution_count, store_history)
            if cell_index in checks:  # the student's run: the check on the skeleton as it is (a copy of the
                check_at = checks[cell_index]  # cell: the stored one keeps its run in order)
                check = copy.deepcopy(notebook.cells[check_at])
                try:
                    await super().async_execute_cell(check, check_at, self.code_cells_executed + 1)
                except CellExecutionError as error:
                    if error.ename != ExerciseNotSolved.__name__:
                        raise
                    failures.append(error.evalue)
                else:
                    raise LessonFailed(f"{name}: the check in cell {check_at} passed with the skeleton as it is: "
                                       "the student finds the exercise solved")
                finally:
                    notebook.cells[check_at] = stored_checks[check_at]  # async_execute_cell stored the copy there
            return cell

    client = LessonClient(notebook, timeout=timeout, kernel_name="python3",
                          resources={"metadata": {"path": str(workdir)}}, **options)
    client.execute()
    return notebook, failures
