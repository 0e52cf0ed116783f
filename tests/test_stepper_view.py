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

import nbformat
import pytest

import workbench
from iris.instruments.stepping import Order
from workbench.widgets.static import static_html

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

    rank0.until.value = "rank 1"
    rank0.run_until.click()  # rank 0 raises the flag, then waits in the host barrier: it can go no further
    assert "rank 0 took 2 steps; it is in a host barrier" in view.message.value, view.message.value
    rank1.until.value = "line"
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
    assert heap_titles(view) == ["mailbox on rank 1", "flag on rank 1", "received on rank 1"]
    assert ">42.5<" in view.heap_rows["received"].table.value  # read from the ranks' variables once the cell ended
    assert transcript_rows(view.transcript.value) == STEPS_TO_THE_END

    static = static_html(view)
    assert transcript_rows(static) == STEPS_TO_THE_END
    assert static.count("ended: at the end of its cell") == 2
    assert "<button" not in static and "order file" not in static  # controls do nothing without a kernel


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
    assert "OrderDiverged: the order diverged at step 1" in view.message.value, view.message.value
    assert "held before tl.atomic_cas" in view.panels[1].title.value and transcript_rows(view.transcript.value) == 2

    view.stop.click()
    assert run.done and all("stopped part way" in p.title.value for p in view.panels)
    assert "stopped part way, where it was held: before tl.atomic_cas at line 14" in view.panels[1].title.value
    assert "▶   14      while tl.atomic_cas" in view.panels[1].source.value  # where it was, still to read
    assert "stopped part way, after 2 steps: no rank is left held" in view.header.value
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
    from the host barrier to the flag's poll (the marked line follows), and rank 0's to its store."""
    from .test_browser import require_chromium

    require_chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with notebook_page(NOTEBOOK, tmp_path, {"width": 1400, "height": 1200}) as (page, left):
        run_all_but_the_last_cell(page)
        view = page.locator(".iris-stepper-view >> visible=true")
        view.wait_for(timeout=180_000)
        rank1 = view.locator(".iris-stepper-rank").nth(1)
        assert "held before a host barrier (ctx.barrier) at line 19" in rank1.inner_text()
        assert page.locator(".iris-static >> visible=true").count() == 0  # the widget hides its twin
        view.get_by_role("button", name="step every rank once").click()
        marked(rank1).filter(has_text="while tl.atomic_cas").wait_for(timeout=60_000)
        rank1.get_by_role("button", name="step rank 1").click()  # one poll: held at the same line again
        view.locator(".iris-step-transcript tr").nth(3).wait_for(timeout=60_000)
        assert "held before tl.atomic_cas (atomic_cas) at line 14" in rank1.inner_text()
        rank0 = view.locator(".iris-stepper-rank").nth(0)
        rank0.get_by_role("button", name="step rank 0").click()  # the store: rank 0 moves to the flag
        marked(rank0).filter(has_text="iris.atomic_xchg(flag").wait_for(timeout=60_000)
        assert view.locator(".iris-rank-panel img").count() == 2  # mailbox and flag on rank 1
        view.screenshot(path=ARTIFACTS / "stepper-view.png")
        problems = layout_problems(view, ".jp-OutputArea-output")
        assert not problems, "\n".join(problems)
        cluster = page.locator(".jp-OutputArea-output", has_text="CLUSTER_PIDS").inner_text()
        left += [int(pid) for pid in re.findall(r"\d+", cluster)]
        assert len(left) >= 5  # the controller's processes and two engines
        page.locator(".jp-Cell").last.click()
        page.keyboard.press("Shift+Enter")  # the last cell: %iris stop
        page.get_by_text("stopped 2 ranks").wait_for(timeout=120_000)
        assert page.locator("[data-mime-type='application/vnd.jupyter.error']").count() == 0


# -- reading the view -----------------------------------------------------------------------------------------------

def heap_titles(view) -> list[str]:
    """The titles of the heaps' pictures, in the order shown."""
    rows = view.heaps.children[1].children if view.heaps.children else []
    return [re.sub(r"<.*?>", "", panel.title.value) for row in rows for panel in row.row.children]


def transcript_rows(page: str) -> int:
    """Steps in the transcript table of ``page`` (its rows less the header)."""
    table = re.search(TRANSCRIPT, page, re.S)
    return table.group(0).count("<tr>") - 1 if table else 0


def marked(panel):
    """The source line a rank panel marks as the one it is held at."""
    return panel.locator("div[style*='background']")


def run_all_but_the_last_cell(page) -> None:
    """Run > Run All Above Selected Cell, the last cell selected, once the kernel is connected (see
    tests/test_browser.py's run_all_cells: an idle indicator before that means nothing)."""
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\| Idle$")).wait_for(timeout=60_000)
    page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=60_000)
    page.locator(".jp-Cell").last.click()
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Above Selected Cell")).click()
