"""The lessons as the site's sources: ``notebooks/NN_*.ipynb`` copied into ``docs/lessons/`` (stored without
outputs, as in the repository), and jupyter-cache holding each lesson's executed outputs, so that myst-nb
(``nb_execution_mode = "cache"``) renders them without running anything.

Where the outputs come from, for each lesson whose code the cache does not hold yet: the copy that
``tests/test_notebooks.py`` left in ``.cache/executed/<stem>.ipynb`` when its code cells are the stored
lesson's (the suite ran it already: it is not run again); otherwise the lesson is run here, on the CPU backend
in a temporary folder, by :func:`workbench.exercises.execute_lesson`, as the test runs it (the exercise's check
also seen failing as the student gets it; the site shows the run with the solution in). An unchanged staged file
is not rewritten, so Sphinx does not read it again, unless the cache took new outputs for it (the same code run
anew: its views drawn by changed workbench code); then it is touched, and its page is made again.

Examples
--------
>>> import stage_lessons                     # doctest: +SKIP
>>> stage_lessons.stage()                    # before Sphinx reads its sources (docs/conf.py)
"""

from __future__ import annotations

import copy
import tempfile
from datetime import timezone
from pathlib import Path

import nbformat
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from sphinx.errors import ConfigError

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
LESSONS = ROOT / "notebooks"
STAGED = DOCS / "lessons"
EXECUTED = ROOT / ".cache" / "executed"  # written by tests/test_notebooks.py (see its docstring)
CACHE = DOCS / "_build" / ".jupyter_cache"


def lesson_paths() -> list[Path]:
    """The lessons, in order: ``notebooks/NN_*.ipynb``."""
    return sorted(LESSONS.glob("[0-9]*.ipynb"))


def code_sources(notebook) -> list[str]:
    """The sources of a notebook's code cells, in order: what decides whether two runs are of one lesson."""
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def with_outputs_of(stored, executed):
    """``stored`` with the outputs and execution counts of ``executed``'s code cells (same code, in order);
    the widget state is left out: the site draws no widget, only each view's static twin."""
    merged = copy.deepcopy(stored)
    ran = [cell for cell in executed.cells if cell.cell_type == "code"]
    for cell, done in zip([c for c in merged.cells if c.cell_type == "code"], ran, strict=True):
        cell.outputs, cell.execution_count = done.outputs, done.execution_count
    return merged


def stage() -> None:
    """Copy the lessons into ``docs/lessons/`` and fill the cache: from ``.cache/executed/``, else by running the
    lessons whose code it does not hold."""
    STAGED.mkdir(exist_ok=True)
    stems = {path.stem for path in lesson_paths()}
    for old in STAGED.glob("*.ipynb"):
        if old.stem not in stems:
            old.unlink()  # a lesson renamed or removed
    cache = get_cache(str(CACHE))
    for path in lesson_paths():
        staged = STAGED / path.name
        if not staged.exists() or staged.read_bytes() != path.read_bytes():
            staged.write_bytes(path.read_bytes())
        executed = EXECUTED / path.name
        if not (executed.exists() and prime(cache, staged, executed)) and not cached(cache, staged):
            execute_into(cache, staged)


def cached(cache, staged: Path) -> bool:
    """Whether ``cache`` holds a run of ``staged``'s code."""
    try:
        cache.match_cache_notebook(nbformat.read(staged, as_version=4))
    except KeyError:
        return False
    return True


def execute_into(cache, staged: Path) -> None:
    """Run the lesson ``staged`` (solutions in) in a temporary folder and put its outputs into ``cache``."""
    from workbench.exercises import execute_lesson

    print(f"[docs] running {staged.stem} (no run of its code in the cache or in .cache/executed/)", flush=True)
    stored = nbformat.read(staged, as_version=4)
    with tempfile.TemporaryDirectory(prefix=f"docs-{staged.stem}-") as workdir:
        try:
            ran, _ = execute_lesson(copy.deepcopy(stored), workdir, timeout=300)
        except Exception as error:  # a lesson that fails fails the build, saying which and why (not as a crash)
            raise ConfigError(f"lesson {staged.stem} failed when run for the site (notebooks/{staged.name}; run "
                              f"it in JupyterLab or with tests/test_notebooks.py to see it fail):\n{error}") from error
    cache_outputs(cache, staged, with_outputs_of(stored, ran))


def prime(cache, staged: Path, executed: Path) -> bool:
    """Put ``executed``'s outputs into ``cache`` for ``staged`` when their code is the same and the cache holds
    nothing newer for it; True when the cache then holds that run."""
    stored, ran = nbformat.read(staged, as_version=4), nbformat.read(executed, as_version=4)
    if code_sources(stored) != code_sources(ran):
        return False
    try:
        created = cache.match_cache_notebook(stored).created
        if created.replace(tzinfo=created.tzinfo or timezone.utc).timestamp() >= executed.stat().st_mtime:
            return True  # jupyter-cache records UTC times without saying so
    except KeyError:
        pass
    cache_outputs(cache, staged, with_outputs_of(stored, ran))
    return True


def cache_outputs(cache, staged: Path, executed) -> None:
    """Put ``executed`` (``staged`` with outputs) into ``cache``, and mark ``staged`` as changed: Sphinx reads a page
    again only when its source is newer than its last reading, and new outputs of unchanged code (the views drawn
    anew by the workbench's code) must reach the site too."""
    cache.cache_notebook_bundle(CacheBundleIn(executed, str(staged)), check_validity=False, overwrite=True)
    staged.touch()
