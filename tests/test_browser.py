"""The widgets in a real browser: JupyterLab on loopback, Debian's headless Chromium driven by Playwright.

tests/browser/widgets.ipynb (stored without outputs) starts 2 CPU ranks and shows each widget once; the
test runs all its cells and checks what the page shows: a panel per rank, pictures that are not blank,
the diff marks of a later cell drawn into the earlier view (refreshed in place, not shown again), the heap
bars, the as_remote panels marked equal, a traffic matrix, a timeline and a race report; and of every view,
its layout (tests/browser/layout.py): inside its output, its title once, its tables lined up, no picture
titled twice. Screenshots go to test-artifacts/browser/. The notebook's last cell stops the cluster, which
leaves each view's static twin in its place; the notebook, saved then and reopened (no kernel holds the widgets'
models any more), shows the twins and no "model not found". The server is stopped by pid, and no process of either
may be left.

Chromium comes from Debian (scripts/browser_deps.sh); Playwright's own browser download cannot work here.
Without Chromium the test fails, except when it could not have been installed (not root, outside CI).
"""

from __future__ import annotations

import io
import os
import re
import time

import numpy as np
import pytest
from PIL import Image

from .browser.jupyter import ROOT, chromium_problem, notebook_page
from .browser.layout import layout_problems, untitled_picture_problem

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_heap_files_left_behind")]

NOTEBOOK = ROOT / "tests" / "browser" / "widgets.ipynb"
ARTIFACTS = ROOT / "test-artifacts" / "browser"
RUN_SECONDS = 240


def require_chromium() -> None:
    problem = chromium_problem()
    if problem is None:
        return
    if os.environ.get("CI") or os.geteuid() == 0:
        pytest.fail(problem)  # CI and root can install it: a missing browser is a broken set-up
    pytest.skip(f"{problem}; not root, so it could not be installed here")


def pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(np.int16)


def red_pixels(image: np.ndarray) -> int:
    """Pixels of the diff marks' red (drawn at 60% over the colour map)."""
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    return int(((r > 150) & (r - g > 100) & (r - b > 100)).sum())


def run_all_cells(page, but_the_last: bool = False) -> None:
    """Run > Run All Cells (or, ``but_the_last``, all above the last) once the kernel is connected: the notebook's
    own indicator says idle before its kernel even started, and cells sent then are lost; the status bar says Idle
    only once connected."""
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\| Idle$")).wait_for(timeout=60_000)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=60_000)
    if but_the_last:
        page.locator(".jp-Cell").last.locator(".jp-InputPrompt").click()
    page.get_by_role("menuitem", name="Run", exact=True).click()
    name = r"^Run All Above Selected Cell" if but_the_last else r"^Run All Cells"
    page.get_by_role("menuitem", name=re.compile(name)).click()


def test_widgets_render_in_jupyterlab(tmp_path):
    require_chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with notebook_page(NOTEBOOK, tmp_path, {"width": 1400, "height": 1000}) as (page, left):
        try:
            run_all_cells(page, but_the_last=True)
            page.locator(".jp-OutputArea-output", has_text="CLUSTER_PIDS").wait_for(timeout=RUN_SECONDS * 1000)
        finally:
            page.screenshot(path=ARTIFACTS / "notebook.png")
        check_page(page)
        cluster = page.locator(".jp-OutputArea-output", has_text="CLUSTER_PIDS").inner_text()
        left += [int(pid) for pid in re.findall(r"\d+", cluster)]
        assert len(left) >= 5  # the controller's processes and two engines
        page.locator(".jp-Cell").last.locator(".jp-InputPrompt").click()
        page.keyboard.press("Shift+Enter")  # %iris stop
        page.get_by_text("stopped 2 ranks").wait_for(timeout=120_000)
        check_twins_replace_the_views(page)
        page.locator(".jp-mod-dirty").first.wait_for(timeout=30_000)  # outputs not saved yet
        page.keyboard.press("Control+s")
        page.locator(".jp-mod-dirty").first.wait_for(state="detached", timeout=30_000)  # saved
        page.reload()  # the notebook reopened: a new kernel, no widget model
        page.locator(".jp-OutputArea-output").first.wait_for(timeout=60_000)
        page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=60_000)
        page.wait_for_timeout(3000)  # the widget manager's restore, which says "model not found" when it fails
        check_twins_replace_the_views(page)
        page.screenshot(path=ARTIFACTS / "notebook-reopened.png")
    print(f"browser test: {time.monotonic() - started:.1f} s from server start to everything stopped")


def check_twins_replace_the_views(page) -> None:
    """After %iris stop (and in the notebook reopened): every view's twin shown, no live view, no widget error."""
    twins = page.locator(".iris-static")
    assert twins.count() >= 6 and all(twins.nth(i).is_visible() for i in range(twins.count())), "a twin hidden"
    assert page.locator(".widget-box.iris-buffer-view, .widget-box.iris-heap-inspector").count() == 0
    assert page.get_by_text("model not found").count() == 0 and page.get_by_text("Error displaying widget").count() == 0
    assert page.locator(".iris-static .iris-rank-panel img >> visible=true").count() >= 7  # field, small, remote


def check_page(page) -> None:
    assert page.locator("[data-mime-type='application/vnd.jupyter.error']").count() == 0, "a cell raised"

    # Each view's static twin is in the page, hidden by its widget: one picture per view, not two.
    twins = page.locator(".iris-static")
    assert twins.count() >= 4 and not [i for i in range(twins.count()) if twins.nth(i).is_visible()]
    views = page.locator(".iris-buffer-view >> visible=true")
    assert views.count() == 2, "field and small; the --show cell must refresh field's view, not show another"
    field, small = views.nth(0), views.nth(1)
    field.screenshot(path=ARTIFACTS / "buffer-view-field.png")
    small.screenshot(path=ARTIFACTS / "buffer-view-small.png")
    for view in (field, small):
        images = view.locator(".iris-rank-panel img")
        assert images.count() == 2
        for i in range(2):
            assert pixels(images.nth(i).screenshot()).std() > 10, "a blank panel"
    for i in range(2):  # the later cell's change, drawn into this earlier view
        assert red_pixels(pixels(field.locator(".iris-rank-panel img").nth(i).screenshot())) > 200
    assert "changed" in field.inner_text() and "800 of 12288 elements changed" in field.inner_text()
    assert small.locator("table.iris-values tr").count() == 3  # header + a row per rank

    heap = page.locator(".iris-heap-inspector >> visible=true")
    heap.screenshot(path=ARTIFACTS / "heap-inspector.png")
    ranks = heap.locator(".iris-heap-rank")
    assert ranks.count() == 2
    for i in range(2):
        assert ranks.nth(i).locator(".iris-heap-bar").bounding_box()["width"] > 300
        zoomed = ranks.nth(i).locator(".iris-heap-zoom .iris-heap-allocation")  # 48 KiB of 32 MiB: enlarged
        assert zoomed.count() == 2 and zoomed.first.bounding_box()["width"] > 100
        assert zoomed.all_inner_texts()[0] == "field"

    remote = page.locator(".iris-remote-view >> visible=true")
    remote.screenshot(path=ARTIFACTS / "remote-view.png")
    images = remote.locator(".iris-rank-panel img")
    assert images.count() == 3  # rank 1's own, then ranks 0 and 1 through as_remote
    for i in range(3):
        assert pixels(images.nth(i).screenshot()).std() > 10
    assert remote.get_by_text("✓ equal to rank 1's own values").count() == 2
    assert remote.locator("table.iris-remote-addresses tr").count() == 3

    traffic = page.locator(".iris-traffic-view >> visible=true")
    traffic.screenshot(path=ARTIFACTS / "traffic-view.png")
    assert traffic.locator("svg").count() == 4 and traffic.locator("table").count() == 4
    page.locator(".iris-timeline >> visible=true").screenshot(path=ARTIFACTS / "timeline.png")
    races = page.locator("div.iris-races")
    assert races.count() == 1 and races.locator("table.iris-races tr").count() >= 2, "no race reported"
    check_layout(page)


VIEWS = (".iris-buffer-view", ".iris-heap-inspector", ".iris-remote-view", ".iris-traffic-view", ".iris-timeline",
         "div.iris-races")


def check_layout(page) -> None:
    """Every view inside its output, its title once, its tables lined up, its rank pictures untitled."""
    problems = []
    for selector in VIEWS:
        views = page.locator(f"{selector} >> visible=true")
        assert views.count() >= 1, f"no {selector} on the page"
        for i in range(views.count()):
            problems += layout_problems(views.nth(i), ".jp-OutputArea-output")
    pictures = page.locator(".iris-rank-panel img >> visible=true")
    problems += [problem for i in range(pictures.count()) if (problem := untitled_picture_problem(pictures.nth(i)))]
    assert not problems, "\n".join(problems)
