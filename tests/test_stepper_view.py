"""The stepper view (workbench.widgets.stepper_view) over a real stepped run on 2 CPU ranks: its buttons step the
ranks and its panels, heaps and transcript follow; failures are said in the view; the static form (what an export
keeps) follows every step, taken from the view or from Python; a notebook with stepped cells, executed by nbclient
and exported by nbconvert, shows the transcript as a table, in HTML and as text; and in JupyterLab, a click on a
rank's button moves its panel to the next line.

Lesson 03's message passing, 4 floats: rank 0 stores them into rank 1's mailbox and raises rank 1's flag; rank 1
polls its flag, then copies the mailbox.
"""

from __future__ import annotations

import re
import textwrap
import time
import weakref

import nbformat
import pytest

import workbench
from iris.instruments.stepping import Order
from workbench.widgets import static
from workbench.widgets.panels import RankPanel
from workbench.widgets.static import WIDGET_VIEW, replace_live_views, static_html

from .browser.jupyter import ROOT, notebook_page
from .browser.layout import layout_problems

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_heap_files_left_behind")]

MESSAGE_PASSING = """
mailbox = ctx.zeros(4, name="mailbox")
flag = ctx.zeros(1, dtype=torch.int32, name="flag")
received = ctx.zeros(4, name="received")

@triton.jit
def produce(mailbox, flag, cur_rank, consumer, heap_bases, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.store(mailbox + offs, offs.to(tl.float32) * 0.5 + 42, cur_rank, consumer, heap_bases)
    iris.atomic_xchg(flag, 1, cur_rank, consumer, heap_bases, sem="release", scope="sys")

@triton.jit
def consume(mailbox, flag, received, BLOCK: tl.constexpr):
    while tl.atomic_cas(flag, 1, 1, sem="acquire", scope="sys") != 1:
        pass
    offs = tl.arange(0, BLOCK)
    tl.store(received + offs, tl.load(mailbox + offs))

ctx.barrier()
if rank == 0:
    produce[(1,)](mailbox, flag, rank, 1, ctx.get_heap_bases(), BLOCK=4)
else:
    consume[(1,)](mailbox, flag, received, BLOCK=4)
ctx.barrier()
"""
STORE_LINE, CAS_LINE, LOAD_LINE = 9, 14, 17  # lines of MESSAGE_PASSING (its first line is empty)
STEPS_TO_THE_END = 12  # with rank 1 polling three times before the message lands, as the tests below step it
TRANSCRIPT = r"""<table class=["']iris-step-transcript["'].*?</table>"""  # nbconvert writes attributes with "
NOTEBOOK = ROOT / "tests" / "browser" / "stepper.ipynb"
REPLAY_CELL = 4  # its cell that replays the order the test saves (%%iris_kernel --step --replay message.order.json)
ARTIFACTS = ROOT / "test-artifacts" / "browser"


@pytest.fixture(scope="module")
def wb():
    wb = workbench.start(n=2, backend="cpu", heap_size="16MiB", progress=False)
    yield wb
    report = wb.stop()
    assert report.ok, str(report)


@pytest.fixture
def run(wb):
    run = workbench.step(MESSAGE_PASSING)
    yield run
    run.stop("the test ended")  # nothing left held, whatever the test did


def test_buttons_step_the_ranks_and_the_panels_heaps_and_transcript_follow(run, tmp_path):
    view = run.view
    rank0, rank1 = view.panels
    assert all("held before a host barrier (ctx.barrier) at line 19" in p.title.value for p in view.panels)
    assert "▶   19  ctx.barrier()</div>" in rank0.source.value

    view.step_each.click()
    assert "held before iris.store (store) at line 9" in rank0.title.value
    assert "iris.store</b>: store to <b>mailbox[0..3] of rank 1</b>" in rank0.details.value
    assert "writes 42, 42.5, 43, 43.5" in rank0.details.value and "there now: 0, 0, 0, 0" in rank0.details.value
    assert re.search(r"background:#fff2a8'>▶ +9 +iris\.store\(mailbox", rank0.source.value), rank0.source.value
    assert "kernel produce, its cell, line 9" in rank0.source.value
    assert "atomic_cas on <b>flag[0] of rank 1</b>" in rank1.details.value
    assert "compares with 1, writes 1 where equal" in rank1.details.value
    assert heap_titles(view) == ["mailbox on rank 1", "flag on rank 1"]

    for _ in range(3):
        rank1.step.click()
    assert "held before tl.atomic_cas (atomic_cas) at line 14" in rank1.title.value
    assert "rank 1 waits on flag[0] of rank 1" in rank1.details.value, rank1.details.value
    rank0.step.click()  # the message lands in rank 1's mailbox; rank 0 is held before raising the flag
    assert "rank 0 next writes there" in rank1.details.value, rank1.details.value
    mailbox = view.heap_rows["mailbox"].pictures[1]
    assert "4 of 4 elements changed" in mailbox.caption.value
    assert "rank 0 is held before iris.atomic_xchg" not in mailbox.caption.value
    flag = view.heap_rows["flag"].pictures[1]
    assert "rank 0 is held before iris.atomic_xchg of flag[0] of rank 1" in flag.caption.value
    assert ">42.5<" in view.heap_rows["mailbox"].table.value and ">42.5<" in static_html(view.heaps)
    assert transcript_rows(view.transcript.value) == 6 == len(run.transcript)
    assert ">mailbox[0..3] of rank 1<" in view.transcript.value  # the target as the panel writes it
    marked = view.heap_rows["mailbox"].table.value.count("background:#f88")
    view.order_file.value = str(tmp_path / "part.order.json")
    view.save.click()  # no step taken: the last step's marks stay
    assert "saved the order (6 steps)" in view.message.value
    assert "4 of 4 elements changed" in mailbox.caption.value, mailbox.caption.value
    assert view.heap_rows["mailbox"].table.value.count("background:#f88") == marked == 4

    rank0.until.value = "rank 1"
    rank0.run_until.click()  # rank 0 raises the flag, then waits in the host barrier: it can go no further
    assert "rank 0 took 2 steps; it is in a host barrier" in view.message.value, view.message.value
    assert rank1.line.layout.display == "none"  # the line box only once a line is chosen
    rank1.until.value = "line"
    assert rank1.line.layout.display is None
    rank1.line.value = LOAD_LINE
    rank1.run_until.click()  # one poll finds the flag raised
    assert "held before tl.load (load) at line 17" in rank1.title.value and rank1.step.disabled is False
    assert rank0.step.disabled and "in a host barrier" in rank0.title.value

    view.order_file.value = str(tmp_path / "message.order.json")
    view.save.click()
    assert "saved the order (9 steps)" in view.message.value
    assert Order.load(tmp_path / "message.order.json") == run.order

    view.run_all.click()
    assert run.done and view.message.value == ""
    assert all("ended: at the end of its cell" in p.title.value for p in view.panels)
    assert "the cell has ended on every rank, after 12 steps" in view.header.value and view.step_each.disabled
    assert "time from start to end, waits for the steps included" in view.header.value  # not a kernel's time
    assert heap_titles(view) == ["mailbox on rank 1", "flag on rank 1", "received on rank 1"]
    assert ">42.5<" in view.heap_rows["received"].table.value  # read from the ranks' variables once the cell ended
    received = view.heap_rows["received"]  # first shown now: marked where the run wrote it
    assert "first shown now: 4 of 4 elements written by the last steps" in received.pictures[1].caption.value
    assert received.table.value.count("background:#f88") == 4
    assert transcript_rows(view.transcript.value) == STEPS_TO_THE_END

    static = static_html(view)
    assert transcript_rows(static) == STEPS_TO_THE_END
    assert static.count("ended: at the end of its cell") == 2
    assert "<button" not in static and "order file" not in static  # controls do nothing without a kernel
    assert not [c for c in static if glyph_a_font_may_lack(c)], "plain characters only"

    replayed = workbench.step(MESSAGE_PASSING, order=tmp_path / "message.order.json")
    try:  # the file a replay took its order from is the one the view's box names
        assert replayed.view.order_file.value == str(tmp_path / "message.order.json")
    finally:
        replayed.stop()


def test_what_cannot_be_done_is_said_in_the_view_which_is_redrawn_all_the_same(run, tmp_path):
    view = run.view
    view.panels[0].step.click()  # rank 0 enters the host barrier: it waits for rank 1 there
    assert "in a host barrier" in view.panels[0].title.value
    view.panels[0].step.click()  # disabled in a browser; a click here still reaches the handler
    assert "SteppingError: rank 0 cannot take a step: it is in a host barrier" in view.message.value
    assert transcript_rows(view.transcript.value) == 1

    view.order_file.value = str(tmp_path / "no such folder" / "x.order.json")
    view.save.click()
    assert "FileNotFoundError" in view.message.value

    wrong = tmp_path / "wrong.order.json"
    Order.parse([1, {"rank": 1, "signature": "load consume line 99"}]).save(wrong)
    view.order_file.value = str(wrong)
    view.replay.click()  # its first step fits (rank 1 through the barrier), its second does not
    assert "OrderDiverged: the order diverged at its step 1 (step 2 of this run)" in view.message.value
    assert "the replay began in the middle of the run, after 1 step already taken" in view.message.value
    assert "held before tl.atomic_cas" in view.panels[1].title.value and transcript_rows(view.transcript.value) == 2
    for _ in range(2):
        run.step(1)  # from Python: the run moves on, and what the view said of the replay goes
    assert view.message.value == ""
    assert "rank 1 waits on flag[0] of rank 1" in view.panels[1].details.value

    view.stop.click()
    assert "waits on" not in view.panels[1].details.value  # stopped: it waits for nothing any more
    assert run.done and all("stopped part way" in p.title.value for p in view.panels)
    assert "stopped part way, where it was held: before tl.atomic_cas at line 14" in view.panels[1].title.value
    assert "▶   14      while tl.atomic_cas" in view.panels[1].source.value  # where it was, still to read
    assert "stopped part way, after 4 steps: no rank is left held" in view.header.value
    assert "Traceback" not in view.header.value  # the stop is said in a line, not as every rank's traceback


def test_a_kernel_defined_in_an_earlier_cell_is_shown_with_its_source(wb):
    """Lesson 08's way: the kernels and a function are defined by a cell, and the stepped code only calls it."""
    definitions, launch = MESSAGE_PASSING.split("\nctx.barrier()\nif rank", 1)
    pass_message = "def pass_message():\n" + textwrap.indent("ctx.barrier()\nif rank" + launch, "    ")
    assert wb.run(f"{definitions}\n{pass_message}").ok
    run = workbench.step("pass_message()")
    try:
        run.view.step_each.click()
        source = run.view.panels[1].source.value
        assert "kernel consume, its cell, line 14" in source and "def consume(mailbox" in source, source
    finally:
        run.stop()


def test_the_heaps_keep_the_order_of_their_allocation_whichever_rank_reaches_one_first(wb):
    """The roles swapped: rank 0 polls its flag while rank 1 stores into rank 0's mailbox; drawn in the order the
    ranks reached them, the flag would come first here and second in the run above."""
    swapped = MESSAGE_PASSING.replace("if rank == 0:", "if rank == 1:").replace("rank, 1, ctx.", "rank, 0, ctx.")
    run = workbench.step(swapped)
    try:
        run.view.step_each.click()
        assert "atomic_cas on <b>flag[0] of rank 0</b>" in run.view.panels[0].details.value
        assert heap_titles(run.view) == ["mailbox on rank 0", "flag on rank 0"]
    finally:
        run.stop()


def test_the_static_form_follows_steps_taken_from_python(run, monkeypatch):
    shown, updated = [], []
    monkeypatch.setattr("workbench.widgets.static.display", lambda bundle, **kw: shown.append((bundle, kw)))
    monkeypatch.setattr("workbench.widgets.static.update_display", lambda bundle, **kw: updated.append((bundle, kw)))
    run._ipython_display_()  # what a cell whose value is the run shows
    (twin, where), (widget, _) = shown
    assert where["display_id"] == run.view.display_id and "held before a host barrier" in twin["text/html"]
    assert widget["text/plain"].startswith("stepped run on 2 ranks, 0 steps taken")
    assert "application/vnd.jupyter.widget-view+json" in widget

    run.step_each()
    run.step(1)
    bundle, where = updated[-1]
    assert where["display_id"] == run.view.display_id
    assert transcript_rows(bundle["text/html"]) == 3 and "tl.atomic_cas (atomic_cas)" in bundle["text/html"]
    assert "rank 1: held before tl.atomic_cas (atomic_cas) at line 14" in bundle["text/plain"]
    assert "|    2 |    1 | 14   | tl.atomic_cas (atomic_cas)" in bundle["text/plain"]

    run.stop()
    assert "stopped part way" in updated[-1][0]["text/html"]
    assert "stopped part way, after 3 steps: no rank is left held" in updated[-1][0]["text/plain"]

    # What %iris stop does: the twin in the view's place, the widget's outputs pointing at no model, the widgets
    # closed; a notebook saved now reopens without "model not found"
    monkeypatch.setattr(static, "_displayed", weakref.WeakSet([run.view]))  # this test's view alone
    assert replace_live_views() == 1
    (twin, at_twin), (gone, at_widget) = updated[-2:]
    assert at_twin["display_id"] == run.view.display_id and "stopped part way" in twin["text/html"]
    assert at_widget["display_id"] == f"{run.view.display_id}-widget" and gone[WIDGET_VIEW]["model_id"] == ""
    assert run.view.comm is None and all(panel.comm is None for panel in run.view.panels)
    assert replace_live_views() == 0


def test_an_exported_notebook_shows_the_transcript_as_a_table_in_html_and_text(tmp_path):
    """A notebook with a stepped cell (``%%iris_kernel --step``) and a run stepped from Python, executed by nbclient
    (as ``jupyter nbconvert --execute`` does) and exported to HTML and Markdown: each run as of its last step, the
    transcript a table in the HTML and a Markdown table in the output's text."""
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter, MarkdownExporter

    cells = ["%load_ext workbench\n%iris start -n 2 --backend cpu --heap 16MiB",
             f"%%iris_kernel --step{MESSAGE_PASSING}",
             f"import workbench\nMESSAGE_PASSING = {MESSAGE_PASSING!r}\nrun = workbench.step(MESSAGE_PASSING)\nrun",
             "run.step_each()\nfor _ in range(3):\n    run.step(1)\nrun.run_to_end();",
             "%iris stop"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                   ).execute()
    page, _ = HTMLExporter().from_notebook_node(notebook)
    tables = re.findall(TRANSCRIPT, page, re.S)
    steps = 13  # run_to_end lets the ranks take turns: rank 1 polls once more
    assert len(tables) == 1 and tables[0].count("<tr>") - 1 == steps, tables
    assert re.search(r">iris\.atomic_xchg \(atomic_xchg\)</td><td[^>]*>flag\[0\] of rank 1</td>", tables[0])
    stopped = notebook.cells[1].outputs[0]["data"]  # the magic's run, stopped by the next cell's
    assert "no step taken yet" in stopped["text/html"] and "stopped part way, after 0 steps" in stopped["text/html"]

    markdown, _ = MarkdownExporter().from_notebook_node(notebook)  # HTML first, as the HTML export
    assert len(re.findall(TRANSCRIPT, markdown, re.S)) == 1
    stepped = [out for out in notebook.cells[2].outputs if "data" in out]  # the twin, then the widget
    text = stepped[0]["data"]["text/plain"]  # what a frontend without HTML shows: a terminal
    assert "| step | rank | line | operation" in text, text
    assert re.search(r"\|\s+12 \|\s+1 \| 24\s+\| ctx\.barrier \(host barrier\)", text), text
    assert f"the cell has ended on every rank, after {steps} steps" in text


def test_a_click_in_jupyterlab_moves_the_rank_to_its_next_line(tmp_path):
    """tests/browser/stepper.ipynb holds a stepped cell; in JupyterLab, clicking rank 1's button moves its panel
    from the host barrier to the flag's poll (the marked line follows), and rank 0's to its store. In the same
    session, what issue 58 found in lessons 03 and 08, each checked where it can fail: the picture of a buffer of
    zeros draws its values; a values table's indices stand over their values; the panels share the width at 1600
    and 1000 px; a wrapped source line keeps its indentation; saving the order keeps the last step's red; a stop
    (by the next stepped cell) leaves no wait and no old error said; the order-file box of a ``--replay FILE`` cell
    names FILE; the line box of "run until" shows only for a line; a heap first shown after "run all to the end"
    is red where the run wrote it; and ``%iris stop`` leaves each view's static twin in its place."""
    from .test_browser import pixels, red_pixels, require_chromium

    require_chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with notebook_page(NOTEBOOK, tmp_path, {"width": 1600, "height": 1200}) as (page, left):
        run_all_above(page, page.locator(".jp-Cell").nth(REPLAY_CELL))
        view = page.locator(".iris-stepper-view >> visible=true").first
        view.wait_for(timeout=180_000)
        rank1 = view.locator(".iris-stepper-rank").nth(1)
        assert "held before a host barrier (ctx.barrier) at line 19" in rank1.inner_text()
        assert page.locator(".iris-static >> visible=true").count() == 0  # the widget hides its twin
        view.get_by_role("button", name="step every rank once").click()
        marked(rank1).filter(has_text="while tl.atomic_cas").wait_for(timeout=60_000)
        rank0 = view.locator(".iris-stepper-rank").nth(0)
        marked(rank0).filter(has_text="iris.store(mailbox").wait_for(timeout=60_000)
        heaps = view.locator(".iris-stepper-heap")
        heaps.nth(1).locator(".iris-rank-panel img").wait_for(timeout=60_000)  # new widgets: drawn a moment later
        assert heaps.count() == 2 and "mailbox on rank 1" in heaps.nth(0).inner_text()
        flag = heaps.nth(1).locator(".iris-rank-panel img")
        assert "flag on rank 1" in heaps.nth(1).inner_text() and blue_pixels(pixels(flag.screenshot())) > 20, (
            "a flag of 0 draws its value")
        assert column_offset(view.locator("table.iris-values").first) <= 1, "an index beside its values"
        assert wrap_offset(marked(rank0)) <= 2, "a wrapped source line lost its indentation"
        check_panels_share_the_row(view)

        for polls in range(1, 4):  # one poll each: held at the same line again
            rank1.get_by_role("button", name="step rank 1").click()
            view.locator(".iris-step-transcript tr").nth(2 + polls).wait_for(timeout=60_000)
        assert "held before tl.atomic_cas (atomic_cas) at line 14" in rank1.inner_text()
        assert "rank 1 waits on flag[0] of rank 1" in rank1.inner_text()
        assert not [c for c in view.inner_text() if glyph_a_font_may_lack(c)], "a glyph a font may lack"
        flag_at = flag.bounding_box()
        rank0.get_by_role("button", name="step rank 0").click()  # the store: rank 0 moves to the flag
        marked(rank0).filter(has_text="iris.atomic_xchg(flag").wait_for(timeout=60_000)
        assert view.locator(".iris-rank-panel img").count() == 2  # mailbox and flag on rank 1
        mailbox = heaps.nth(0).locator(".iris-rank-panel img")
        reddened = lambda: red_pixels(pixels(mailbox.screenshot())) > 200 and red_cells(heaps.nth(0)) == 4  # noqa: E731
        assert eventually(reddened), "the store's marks"
        moved = flag.bounding_box()  # the mailbox's values table widened ("0" to "42.5"): the flag stays put
        assert abs(moved["x"] - flag_at["x"]) < 1, f"the flag's picture moved sideways: {flag_at} -> {moved}"
        view.screenshot(path=ARTIFACTS / "stepper-view.png")
        problems = layout_problems(view, ".jp-OutputArea-output")
        assert not problems, "\n".join(problems)

        order_file = view.get_by_role("textbox")
        order_file.fill("message.order.json")
        order_file.press("Enter")
        view.get_by_role("button", name="save the order").click()
        view.get_by_text("saved the order (6 steps)").wait_for(timeout=60_000)
        page.wait_for_timeout(1000)  # the redraw after the save, had it changed the picture
        assert reddened(), "the save cleared the last step's red"
        order_file.fill("no-such.order.json")
        order_file.press("Enter")
        view.get_by_role("button", name="replay the order").click()
        view.get_by_text("FileNotFoundError").wait_for(timeout=60_000)

        cluster = page.locator(".jp-OutputArea-output", has_text="CLUSTER_PIDS").inner_text()
        left += [int(pid) for pid in re.findall(r"\d+", cluster)]
        assert len(left) >= 5  # the controller's processes and two engines
        run_cell(page, REPLAY_CELL)  # a new stepped run: it stops the first, and replays its saved order
        view.get_by_text("stopped part way").first.wait_for(timeout=120_000)
        replayed = page.locator(".iris-stepper-view >> visible=true").nth(1)
        replayed.locator(".iris-step-transcript").wait_for(timeout=120_000)
        assert "waits on" not in view.inner_text() and "FileNotFoundError" not in view.inner_text()
        assert replayed.get_by_role("textbox").input_value() == "message.order.json"
        assert "6 steps taken" in replayed.inner_text()

        replayed_rank1 = replayed.locator(".iris-stepper-rank").nth(1)
        line_box = replayed_rank1.get_by_role("spinbutton")
        assert line_box.count() == 0 or not line_box.is_visible(), "the line box before a line is chosen"
        replayed_rank1.get_by_role("combobox").select_option(label="a line")
        replayed_rank1.get_by_role("spinbutton").wait_for(timeout=30_000)
        replayed.get_by_role("button", name="run all to the end").click()
        replayed.get_by_text("waits for the steps included").wait_for(timeout=120_000)
        received = replayed.locator(".iris-stepper-heap").nth(2)
        received.locator(".iris-rank-panel img").wait_for(timeout=60_000)
        assert "received on rank 1" in received.inner_text() and "written by the last steps" in received.inner_text()
        assert eventually(lambda: red_pixels(pixels(received.locator(".iris-rank-panel img").screenshot())) > 200)
        replayed.screenshot(path=ARTIFACTS / "stepper-view-replayed.png")

        live = page.locator(".widget-box.iris-stepper-view")
        assert live.count() == 2
        run_cell(page, REPLAY_CELL + 1)  # %iris stop: each view's static twin in its place
        page.get_by_text("stopped 2 ranks").wait_for(timeout=120_000)
        page.locator(".iris-static .iris-stepper-view >> visible=true").nth(1).wait_for(timeout=30_000)
        assert live.count() == 0, "a live view left after the stop"
        assert page.locator("[data-mime-type='application/vnd.jupyter.error']").count() == 0


def check_panels_share_the_row(view) -> None:
    """At 1600 px the two rank panels stand side by side, each wider than the old fixed 470 px; at 1000 px and at
    1600, the panels of each line of them fill it, in equal shares."""
    page = view.page
    for width in (1000, 1600):
        page.set_viewport_size({"width": width, "height": 1200})
        page.wait_for_timeout(500)  # JupyterLab lays the page out again
        row = view.locator(".iris-stepper-ranks").bounding_box()
        boxes = [view.locator(".iris-stepper-rank").nth(i).bounding_box() for i in range(2)]
        lines: dict[int, list] = {}
        for box in boxes:
            lines.setdefault(round(box["y"]), []).append(box)
        for line in lines.values():
            filled = sum(b["width"] for b in line) + 12 * (len(line) - 1)
            assert abs(filled - row["width"]) <= 3, f"at {width} px the panels fill {filled:.0f} of {row['width']:.0f}"
            assert max(b["width"] for b in line) - min(b["width"] for b in line) <= 2, f"unequal shares at {width}"
        view.screenshot(path=ARTIFACTS / f"stepper-view-{width}px.png")
        if width == 1600:
            assert len(lines) == 1 and min(b["width"] for b in boxes) > 470, f"at 1600 px: {boxes}"


def eventually(check, seconds: float = 30.0) -> bool:
    """Whether ``check()`` comes true within ``seconds`` (a picture is redrawn a moment after its widget changes)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return True


def blue_pixels(image) -> int:
    """Pixels of matplotlib's first colour (tab:blue, the bars and their value marks)."""
    r, b = image[..., 0], image[..., 2]
    return int(((b > 140) & (r < 90) & (b - r > 80)).sum())


def red_cells(heap) -> int:
    """Cells of a heap's values table painted as changed."""
    return heap.locator("table.iris-values td").evaluate_all(
        "cells => cells.filter(c => getComputedStyle(c).backgroundColor === 'rgb(255, 136, 136)').length")


def column_offset(table) -> float:
    """How far (pixels) an index of a values table stands from its values: the largest gap between a header
    cell's text and the text of the cell under it, each at its right edge."""
    return table.evaluate("""table => {
      const right = (cell) => { const r = document.createRange(); r.selectNodeContents(cell);
                                return r.getBoundingClientRect().right; };
      const [head, row] = table.rows;
      let worst = 0;
      for (let i = 1; i < head.cells.length; i++)
        worst = Math.max(worst, Math.abs(right(head.cells[i]) - right(row.cells[i])));
      return worst; }""")


def wrap_offset(line) -> float:
    """For a source line that wraps: how far (pixels) its second line starts from where its code starts on the
    first (past the marker, the number and the line's own indentation). Fails when the line does not wrap."""
    found = line.evaluate(r"""div => {
      const text = div.firstChild, s = text.textContent;
      const code = 8 + s.slice(8).search(/\S/);
      const at = (i) => { const r = document.createRange(); r.setStart(text, i); r.setEnd(text, i + 1);
                          return r.getBoundingClientRect(); };
      const whole = document.createRange(); whole.selectNodeContents(div);
      const lines = [...whole.getClientRects()].filter((r) => r.width > 0);
      const tops = [...new Set(lines.map((r) => Math.round(r.top)))];
      if (tops.length < 2) return null;
      const second = Math.min(...lines.filter((r) => Math.round(r.top) === tops[1]).map((r) => r.left));
      return Math.abs(second - at(code).left); }""")
    assert found is not None, "the held source line does not wrap"
    return found


# -- reading the view -----------------------------------------------------------------------------------------------

def heap_titles(view) -> list[str]:
    """The titles of the heaps' pictures, in the order shown."""
    rows = view.heaps.children[1].children if view.heaps.children else []
    return [re.sub(r"<.*?>", "", panel.title.value) for row in rows for panel in row.children
            if isinstance(panel, RankPanel)]


def glyph_a_font_may_lack(character: str) -> bool:
    """An emoji or a symbol that common fonts (DejaVu, Liberation) lack: drawn as a box without an emoji font."""
    code = ord(character)
    return code > 0xFFFF or 0x2300 <= code <= 0x23FF or 0x2600 <= code <= 0x27BF or code == 0xFE0F


def transcript_rows(page: str) -> int:
    """Steps in the transcript table of ``page`` (its rows less the header)."""
    table = re.search(TRANSCRIPT, page, re.S)
    return table.group(0).count("<tr>") - 1 if table else 0


def marked(panel):
    """The source line a rank panel marks as the one it is held at."""
    return panel.locator("div[style*='background']")


def run_all_above(page, cell) -> None:
    """Run > Run All Above Selected Cell, ``cell`` (a locator) selected, once the kernel is connected (see
    tests/test_browser.py's run_all_cells: an idle indicator before that means nothing)."""
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\| Idle$")).wait_for(timeout=60_000)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=60_000)
    cell.locator(".jp-InputPrompt").click()
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Above Selected Cell")).click()


def run_cell(page, index: int) -> None:
    """Run the notebook's cell ``index`` (selected from its prompt, then Shift+Enter)."""
    page.locator(".jp-Cell").nth(index).locator(".jp-InputPrompt").click()
    page.keyboard.press("Shift+Enter")
