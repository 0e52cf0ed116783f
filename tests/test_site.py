"""The documentation site and the lessons' HTML exports, opened offline in a real browser (Debian's Chromium,
driven by Playwright, every request that is not a local file refused).

- The site: ``bash scripts/docs.sh`` (Sphinx with myst-nb, warnings as errors) builds ``docs/_build/html``; the
  pages of lessons 00 and 09 show each rank's picture and lesson 09's timeline drawn; lesson 00's solution is
  folded until asked for; lessons 03 and 08 show their stepped runs (each heap's picture drawing its values, the
  target written as the panels write it, lesson 08's race marked in its transcript and its exercise's run shown as
  a stepper view), with screenshots in test-artifacts/site/. On every lesson's page, in a wide window and a narrow
  one, every view and race report
  is laid out right (tests/browser/layout.py: inside the article's column, its title once, its tables lined up,
  short cells on one line, no rank picture titled twice), and traffic views of different launches have different
  titles.
- The exports: lessons 00 and 09 executed with nbclient's defaults, which is what ``jupyter nbconvert --execute``
  does (the widgets' state stored in the notebook: what made nbconvert's HTML draw the widgets from a CDN script,
  and so draw nothing offline), then ``jupyter nbconvert --to html``; every view's static twin is shown.

This file sorts after test_notebooks.py on purpose: that test leaves each lesson it ran in ``.cache/executed/``,
and both the site and the exports take a lesson from there when its code is the stored lesson's, instead of
running it again (docs/stage_lessons.py; the contract is in test_notebooks.py's docstring).
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from .browser.jupyter import CHROMIUM, CHROMIUM_ARGS, ROOT
from .browser.layout import layout_problems, untitled_picture_problem
from .test_browser import require_chromium

nbformat = pytest.importorskip("nbformat")
playwright = pytest.importorskip("playwright.sync_api")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_heap_files_left_behind")]

SITE = ROOT / "docs" / "_build" / "html"
EXECUTED = ROOT / ".cache" / "executed"
QUICKSTART, TIMELINE = "00_quickstart", "09_where_does_the_time_go"
ATOMICS, RACES = "03_atomics_and_synchronisation", "08_finding_races_and_hangs"  # the lessons that step kernels
ARTIFACTS = ROOT / "test-artifacts" / "site"
BUILD_SECONDS = 1500  # every lesson run when none is cached (a fresh clone, this file alone); minutes otherwise


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


WIDTHS = (1400, 1000)  # the windows the lessons' pages are laid out in: the article's column 848 and 656 pixels


def open_offline(browser, page_file: Path, check, width: int = WIDTHS[0]) -> list[str]:
    """Open ``page_file`` from file:// in a window ``width`` pixels wide with every other request refused, run
    ``check(page)``; return the URLs that were refused (what the page would have fetched from the network)."""
    context = browser.new_context(offline=True, viewport={"width": width, "height": 1000})
    refused: list[str] = []
    context.route(lambda url: not url.startswith(("file:", "data:")),
                  lambda route: (refused.append(route.request.url), route.abort()))
    try:
        page = context.new_page()
        page.goto(page_file.as_uri(), wait_until="load")
        check(page)
    finally:
        context.close()
    return refused


def not_blank(png: bytes) -> bool:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).std() > 10


def check_rank_pictures(page) -> None:
    """Lesson 00's views drawn: each rank's panel a visible picture that is not blank, twins not hidden."""
    twins = page.locator(".iris-static")
    assert twins.count() >= 1 and all(twins.nth(i).is_visible() for i in range(twins.count())), "a twin hidden"
    panels = page.locator(".iris-static .iris-rank-panel img")
    assert panels.count() >= 2, f"{panels.count()} rank pictures"
    for i in range(panels.count()):
        panel = panels.nth(i)
        panel.scroll_into_view_if_needed()
        assert panel.is_visible() and panel.bounding_box()["width"] > 50, f"rank picture {i} not drawn"
        assert not_blank(panel.screenshot()), f"rank picture {i} is blank"


def check_timeline(page) -> None:
    """Lesson 09's timeline drawn: its picture visible, wide, with bars in it, and its table of events."""
    timelines = page.locator(".iris-static .iris-timeline")
    assert timelines.count() >= 1, "no timeline"
    timeline = timelines.first
    timeline.scroll_into_view_if_needed()
    picture = timeline.locator("svg").first
    assert picture.is_visible() and picture.bounding_box()["width"] > 300, "the timeline's picture is not drawn"
    assert picture.locator("rect").count() >= 4, "no bars in the timeline"
    assert not_blank(picture.screenshot())
    assert timeline.locator("table.iris-timeline-table tr").count() >= 2


def check_stepped_runs(page) -> None:
    """Lessons 03 and 08: each stepped run on view (its static twin) screenshot; every heap picture draws its values
    (bars or their marks at 0, blue or red: never an empty frame); targets written as the panels write them; lesson
    08's race marked in its transcript (two shaded rows naming each other) and its exercise's run shown with its
    transcript."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    stem = page.url.rsplit("/", 1)[-1].removesuffix(".html")
    views = page.locator(".iris-static .iris-stepper-view >> visible=true")
    assert views.count() >= 2, f"{views.count()} stepped runs shown"
    size = page.viewport_size
    for i in range(views.count()):  # the window as tall as the view: a taller one is not drawn whole
        page.set_viewport_size({"width": size["width"], "height": int(views.nth(i).bounding_box()["height"]) + 200})
        views.nth(i).scroll_into_view_if_needed()
        views.nth(i).screenshot(path=ARTIFACTS / f"{stem}-stepper-{i}.png")
    page.set_viewport_size(size)
    pictures = page.locator(".iris-static .iris-stepper-heap .iris-rank-panel img >> visible=true")
    assert pictures.count() >= 2
    for i in range(pictures.count()):
        pictures.nth(i).scroll_into_view_if_needed()
        image = np.asarray(Image.open(io.BytesIO(pictures.nth(i).screenshot())).convert("RGB")).astype(int)
        r, g, b = image[..., 0], image[..., 1], image[..., 2]
        drawn = ((b > 140) & (r < 90) & (b - r > 80)) | ((r > 150) & (r - g > 100) & (r - b > 100))
        assert drawn.sum() > 20, f"{stem}: heap picture {i} draws no value"
    text = page.inner_text("main")
    assert "⏳" not in text and "..] of rank" not in text, "a target written another way, or a glyph fonts lack"
    if stem == RACES:
        race, exercise = views.first, views.last
        shaded = race.locator("table.iris-step-transcript tr:has(td[style*='#ffd9d9'])")
        assert shaded.count() == 2 and "with step" in shaded.first.inner_text(), "the race's two steps unmarked"
        assert exercise.locator("table.iris-step-transcript tr").count() > 20, "the exercise's run not shown"
    else:
        assert "mailbox[0..7] of rank 1" in text


def check_solution_folded(page) -> None:
    """The exercise's solution (the output of its ``%iris solution NN`` cell) is folded until asked for."""
    solution = page.locator(".cell.tag_solution")
    assert solution.count() == 1, "no solution cell"
    printed = solution.locator(".cell_output")
    assert not printed.is_visible(), "the solution is shown unfolded"
    solution.locator("summary").click()
    assert printed.is_visible() and "%%iris_kernel" in printed.inner_text()


def executed_lesson(stem: str, tmp_path: Path):
    """Lesson ``stem`` executed by nbclient with its defaults (widget state stored, as nbconvert --execute
    does): test_notebooks.py's run when its code is the stored lesson's, else a run here."""
    from workbench.exercises import execute_lesson

    stored = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
    saved = EXECUTED / f"{stem}.ipynb"
    if saved.exists():
        executed = nbformat.read(saved, as_version=4)
        if code_of(executed) == code_of(stored):
            return executed
    executed, _ = execute_lesson(stored, tmp_path)
    return executed


def code_of(notebook) -> list[str]:
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def test_site_builds_and_shows_the_pictures_offline(browser):
    build = subprocess.run(["bash", str(ROOT / "scripts" / "docs.sh")], capture_output=True, text=True,
                           timeout=BUILD_SECONDS)
    assert build.returncode == 0, f"the docs build failed:\n{build.stdout[-4000:]}\n{build.stderr[-8000:]}"
    assert (SITE / "index.html").exists() and (SITE / "api" / "host.html").exists()
    refused = open_offline(browser, SITE / "lessons" / f"{QUICKSTART}.html",
                           lambda page: (check_rank_pictures(page), check_solution_folded(page)))
    refused += open_offline(browser, SITE / "lessons" / f"{TIMELINE}.html", check_timeline)
    refused += open_offline(browser, SITE / "lessons" / f"{ATOMICS}.html", check_stepped_runs)
    refused += open_offline(browser, SITE / "lessons" / f"{RACES}.html", check_stepped_runs)
    refused += open_offline(browser, SITE / "architecture.html", check_architecture)
    problems = []

    def at_every_width(page, lesson) -> None:  # one load, laid out again at each width (a load costs more)
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 1000})
            problems.extend(f"{lesson.stem} at {width} px: {problem}" for problem in view_problems(page))

    for lesson in sorted((SITE / "lessons").glob("[0-9]*.html")):
        refused += open_offline(browser, lesson, lambda page, lesson=lesson: at_every_width(page, lesson))
    assert not refused, f"the site's pages asked the network for {refused}"
    assert not problems, "\n".join(problems)


def view_problems(page) -> list[str]:
    """What is wrong with how a lesson's page shows its views (each view's static twin) and race reports: their
    layout in the article's column, rank pictures titled twice, two traffic views of one name."""
    problems = []
    views = page.locator(".iris-static > div, div.iris-races")
    for i in range(views.count()):
        problems += layout_problems(views.nth(i), "article.bd-article")
    # (a folded solution's output is not on view until it is opened: what a reader sees is checked)
    pictures = page.locator(".iris-static .iris-rank-panel img >> visible=true")
    problems += [problem for i in range(pictures.count()) if (problem := untitled_picture_problem(pictures.nth(i)))]
    # A launch may be shown twice in a row (the cell's matrix, then beside its minimum), but two launches apart
    # must be told apart by their titles (lesson 15's variants of one kernel: --traffic one_shot).
    titles = page.locator(".iris-static .iris-traffic-view > div:first-child b").all_inner_texts()
    names = [title.split(" on ")[0] for title in titles]  # "traffic of gemm_all_reduce (one_shot)"
    shown = [name for i, name in enumerate(names) if i == 0 or names[i - 1] != name]
    problems += [f"two traffic views apart both named {name!r}" for name in sorted(set(shown))
                 if shown.count(name) > 1]
    return problems


def check_architecture(page) -> None:
    """The architecture page: its picture of the layers drawn, and every layer of pyproject.toml's contract named."""
    import tomllib

    picture = page.locator("img[src*='layers']")
    assert picture.count() == 1 and picture.evaluate("img => img.complete && img.naturalWidth > 0"), "no picture"
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c.get("containers") == ["iris"])
    text = page.inner_text("main")
    assert all(f"iris.{layer}" in text for layer in layers), [layer for layer in layers if f"iris.{layer}" not in text]


@pytest.mark.parametrize("stem,check", [(QUICKSTART, check_rank_pictures), (TIMELINE, check_timeline)],
                         ids=[QUICKSTART, TIMELINE])
def test_an_executed_export_shows_every_view_offline(stem, check, browser, tmp_path):
    executed = executed_lesson(stem, tmp_path)
    assert "widgets" in executed.metadata, "no widget state stored: not what nbconvert --execute makes"
    notebook = tmp_path / f"{stem}.ipynb"
    nbformat.write(executed, notebook)
    export = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", str(notebook)],
                            capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    open_offline(browser, tmp_path / f"{stem}.html", check)  # its widget scripts from a CDN are refused: fine
