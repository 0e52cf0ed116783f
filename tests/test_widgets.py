"""The widgets' state, checked from Python against a real IPython shell and a real 2-rank CPU cluster.

The cluster is started once for the module. What the widgets *draw* is checked in a browser by
tests/test_browser.py; here: which panels exist, what their captions, tables and addresses say, what
the engines sent (reduced blocks, change masks), and the static form each view's output carries beside the
widget (what nbconvert, GitHub and nbviewer show).
"""

from __future__ import annotations

import base64
import io
import re

import numpy as np
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from PIL import Image

import workbench
from workbench.widgets import BufferView, HeapInspector, RemoteView, TopologyView, panels, reduce, registry, render

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_heap_files_left_behind")]


@pytest.fixture(scope="module")
def shell():
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "workbench")
    ip.run_line_magic("iris", "start -n 2 --backend cpu --heap 64MiB --timeout 60")
    yield ip
    workbench.current().stop()


@pytest.fixture
def wb(shell):
    return workbench.current()


@pytest.fixture
def displayed(monkeypatch):
    """What the magics and the registry displayed during the test (nothing reaches the terminal)."""
    shown = []
    monkeypatch.setattr("workbench.magics.display", shown.append)
    monkeypatch.setattr("workbench.widgets.registry.display", shown.append)
    return shown


def run(shell, line: str, body: str) -> None:
    result = shell.run_cell(f"%%iris_kernel {line}\n{body}", store_history=False)
    assert result.error_in_exec is None, result.error_in_exec


def decoded(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def static_form(view) -> str:
    """The text/html of the view's output, after checking that the output holds the widget too."""
    bundle = view._repr_mimebundle_()
    assert bundle[WIDGET_VIEW]["model_id"] == view.model_id
    return bundle["text/html"]


def inlined_pictures(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in re.findall(r'<img src="data:image/png;base64,([^"]+)"', page)]


# -- reduction on the engines ------------------------------------------------------------------------

def test_block_reduction_matches_numpy_on_ragged_blocks():
    x = torch.randn(1000, 777)
    r = reduce.reduce_blocks(x, max_side=256)
    assert r["block"] == (4, 4) and r["mean"].shape == (250, 195)
    a = x.numpy()
    assert np.allclose(r["mean"][-1, -1], a[996:, 776:].mean(), atol=1e-6)  # last block: 4 x 1 elements
    assert np.allclose(r["max"][10, 20], a[40:44, 80:84].max()) and np.allclose(r["min"][3, 0], a[12:16, :4].min())
    assert r["stats"]["min"] == a.min() and r["stats"]["max"] == a.max()
    assert abs(r["stats"]["mean"] - a.mean(dtype=np.float64)) < 1e-5


def test_slices_above_two_dimensions_are_views():
    t = torch.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    plane = reduce.plane_of(t, 4)  # leading index (1, 1)
    assert torch.equal(plane, t[1, 1]) and plane.data_ptr() == t[1, 1].data_ptr()
    with pytest.raises(IndexError, match="6 slices"):
        reduce.plane_of(t, 6)


# -- pictures ----------------------------------------------------------------------------------------

def test_a_picture_of_zeros_draws_its_values_clear_of_the_frame():
    zeros = np.zeros(8, dtype=np.float32)
    vmin, vmax = render.scale([zeros])
    image = decoded(render.bars(zeros, vmin, vmax)).astype(int)
    blue = (image[..., 2] > 120) & (image[..., 0] < 100) & (image[..., 2] - image[..., 0] > 60)  # tab:blue's marks
    rows = np.flatnonzero(blue.sum(axis=1) > 20)
    assert rows.size and rows.max() - rows.min() < 6, "a flat line of marks at 0"
    assert blue[rows].sum() > 8 * 8, "a mark per element"
    frame = np.flatnonzero((image.sum(axis=2) < 200).mean(axis=1) > 0.5)  # the axes' edges: rows mostly dark
    assert frame.size and frame.max() - rows.max() > 5, "the 0 line stands clear of the frame's bottom edge"


def test_element_indices_on_the_x_axis_are_whole_numbers(monkeypatch):
    drawn = []
    monkeypatch.setattr(render, "_png", lambda figure: drawn.append(figure) or b"")
    render.bars(np.zeros(4, dtype=np.float32), 0.0, 1.0)
    render.bars(np.ones(1, dtype=np.float32), 0.5, 1.5)
    render.line(np.zeros(300, dtype=np.float32), 0.0, 1.0, 300, 1)
    for figure in drawn:
        axes = figure.axes[0]
        low, high = axes.get_xlim()
        ticks = [t for t in axes.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        bottom, top = axes.get_ylim()
        assert bottom < 0 <= top and -bottom / (top - bottom) > 0.04, "0 is inside the axis, off its edge"


def test_a_values_tables_headers_are_bordered_as_its_cells():
    snapshot = {"status": "ok", "rank": 1, "shape": (3,), "values": np.array([0.0, 42.5, 1.0]),
                "values_changed": np.array([False, True, False])}
    table = panels.values_table([snapshot], mark_changes=True)
    headers = re.findall(r"<th style='([^']*)'>(\d)</th>", table)
    cells = re.findall(r"<td style='([^']*)'>", table)
    assert len(headers) == len(cells) == 3
    assert all("border:1px solid" in style for style, _ in headers) and all("border:1px solid" in c for c in cells)


# -- BufferView --------------------------------------------------------------------------------------

def test_buffer_view_has_a_panel_per_rank_on_one_colour_scale(shell, wb, displayed):
    run(shell, "", "grid = ctx.zeros(32, 48)\ngrid += torch.arange(48.0) / 47 + 10 * rank")
    shell.run_line_magic("iris", "show grid")
    [view] = displayed
    assert isinstance(view, BufferView)
    assert [p.rank for p in view.panels.children] == [0, 1]
    assert "float32 [32 × 48]" in view.header.value and "colour scale 0 … 11" in view.header.value
    for panel, snapshot in zip(view.panels.children, view.snapshots, strict=True):
        assert snapshot["block"] == (1, 1) and snapshot["mean"].shape == (32, 48)
        pixels = decoded(panel.image.value)
        assert pixels.shape[0] > 100 and pixels.std() > 10  # a picture, not a blank
        assert "min " in panel.caption.value and "first look" in panel.caption.value
    assert view.panels.children[1].caption.value.startswith("min 10 · max 11 · mean 10.5")
    assert view.table.value == ""  # 1536 elements: stats, no values table
    page = static_form(view)
    assert inlined_pictures(page) == [panel.image.value for panel in view.panels.children]  # one per rank
    assert view.header.value in page and "min 10 · max 11" in page
    assert view._repr_mimebundle_()["text/plain"] == "BufferView of 'grid' on 2 ranks, float32[32, 48]"


def test_large_tensors_are_reduced_on_the_engines(shell, wb):
    run(shell, "", "big = ctx.randn(2048, 2048)")
    view = workbench.show("big", reduction="maxabs")
    full = wb.pull("big")
    for snapshot, tensor in zip(view.snapshots, full, strict=True):
        assert snapshot["block"] == (8, 8) and snapshot["mean"].shape == (256, 256)
        reference = torch.nn.functional.avg_pool2d(tensor[None, None], 8)[0, 0].numpy()
        assert np.allclose(snapshot["mean"], reference, atol=1e-5)
        assert snapshot["stats"]["max"] == float(tensor.max())
        assert "values" not in snapshot
    assert "blocks of 8 × 8 (max |x| per block)" in view.header.value


def test_diff_marks_what_the_last_cell_changed_and_the_view_refreshes_in_place(shell, wb, displayed):
    run(shell, "", "field = ctx.zeros(64, 64)")
    view = workbench.show("field")
    run(shell, "--show field", "field[8:16, 0:4] = rank + 1.0")
    assert displayed == []  # the live view was refreshed, nothing new was shown
    expected = np.zeros((64, 64), dtype=bool)
    expected[8:16, 0:4] = True
    for panel, snapshot in zip(view.panels.children, view.snapshots, strict=True):
        assert np.array_equal(snapshot["changed"], expected)
        assert "32 of 4096 elements changed" in panel.caption.value
    run(shell, "--show field", "pass")
    assert "unchanged since the last look" in view.panels.children[0].caption.value
    view.diff.value = False  # no round trip: the marks just go
    assert "changed" not in view.panels.children[0].caption.value


def test_diff_of_a_reduced_tensor_marks_blocks(shell, wb):
    run(shell, "", "wide = ctx.zeros(1024, 1024)")
    view = workbench.show("wide")
    run(shell, "--show wide", "wide[100, 1000] = 1.0")
    for snapshot in view.snapshots:
        assert snapshot["block"] == (4, 4)
        assert np.argwhere(snapshot["changed"]).tolist() == [[25, 250]]


def test_small_tensor_gets_a_values_table_with_changes_marked(shell, wb, displayed):
    run(shell, "--show small", "small = ctx.arange(6, dtype=torch.float32) * (rank + 1)")
    [view] = displayed  # no live view of small: --show displayed one
    assert ">rank 1</th>" in view.table.value and ">10</td>" in view.table.value
    run(shell, "--show small", "small[2] = -1")
    assert len(displayed) == 1
    for snapshot in view.snapshots:
        assert snapshot["values_changed"].tolist() == [False, False, True, False, False, False]
    assert view.table.value.count("background:#f88") == 2  # one cell per rank


def test_a_views_outputs_get_its_static_form_again_when_a_cell_refreshes_it(shell, wb):
    run(shell, "", "follow = ctx.zeros(4)")
    with capture_output() as captured:
        shell.run_line_magic("iris", "show follow")
        run(shell, "--show follow", "follow[1] = 7")
    shown, widget, updated = captured.outputs  # the static twin, the widget, then the twin updated
    assert not shown.update and updated.update and set(widget.data) == {WIDGET_VIEW, "text/plain"}
    assert shown.transient["display_id"] == updated.transient["display_id"]  # the view's own twin
    assert "first look" in shown.data["text/html"] and "max 7" not in shown.data["text/html"]
    assert "max 7" in updated.data["text/html"] and updated.data["text/html"].count("background:#f88") == 2


def test_slice_slider_above_two_dimensions(shell, wb):
    run(shell, "", "cube = ctx.zeros(3, 4, 8, 8)\ncube[2, 1] = 7")
    view = workbench.show("cube")
    assert view.slice.max == 11 and view.slice.layout.display is None
    assert view.snapshots[0]["stats"]["max"] == 0
    view.slice.value = 2 * 4 + 1
    assert view.snapshots[0]["stats"]["max"] == 7 and "(slice 9)" in view.panels.children[0].caption.value


def test_show_names_the_ranks_that_lack_the_variable(shell, wb):
    with pytest.raises(workbench.WorkbenchError, match="no variable 'nope' on ranks 0, 1"):
        workbench.show("nope")
    run(shell, "--ranks 1", "lonely = torch.ones(3)\nnot_a_tensor = 5")
    view = workbench.show("lonely")
    assert "no variable &#x27;lonely&#x27; on rank 0" in view.header.value
    assert view.panels.children[0].image.value == b"" and view.panels.children[1].image.value
    with pytest.raises(workbench.WorkbenchError, match="a int, not a tensor on rank 1"):
        workbench.show("not_a_tensor")


# -- HeapInspector -----------------------------------------------------------------------------------

def test_topology_magic_shows_who_reaches_whom(shell, wb, displayed):
    shell.run_line_magic("iris", "topology")
    [view] = displayed
    assert isinstance(view, TopologyView) and view.topology.domains() == [[0, 1]]
    assert view._repr_mimebundle_()["text/plain"] == f"TopologyView: {view.topology.headline()}"
    assert "rank 1 · " in view._repr_mimebundle_()["text/html"]


def test_heap_inspector_names_allocations_after_variables(shell, wb, displayed):
    run(shell, "", "alpha = ctx.zeros(1000, name='alpha_label')\nalias = alpha\n"
                   "gamma = ctx.ones(10, 10, dtype=torch.int32)\nunnamed = [ctx.zeros(5, name='in_a_list')]")
    shell.run_line_magic("iris", "heap")
    [inspector] = displayed
    assert isinstance(inspector, HeapInspector) and len(inspector.bars.children) == 2
    for heap in inspector.maps:
        by_names = {tuple(a["names"]): a for a in heap["allocations"]}
        assert by_names[("alias", "alpha")]["label"] == "alpha_label"
        assert by_names[("gamma",)]["shape"] == (10, 10) and by_names[("gamma",)]["dtype"] == "int32"
        assert by_names[()]["label"] == "in_a_list"
        assert heap["size"] == 64 << 20 and heap["free"] + heap["used"] == heap["size"]
    bar = inspector.bars.children[0].value
    assert ">alias, alpha</div>" in bar and ">name=&#x27;in_a_list&#x27;</div>" in bar
    assert "largest free block" in bar and "fragmentation" in bar
    gamma = next(a for a in inspector.maps[0]["allocations"] if a["names"] == ["gamma"])
    assert f"left:{100 * gamma['offset'] / (64 << 20):.4f}%" in bar  # offsets to scale
    assert "alias, alpha on ranks 0, 1" in inspector.table.value
    page = static_form(inspector)
    assert inspector.table.value in page and all(bar.value in page for bar in inspector.bars.children)
    assert "choose a tensor" not in page  # the dropdown needs a kernel
    assert re.fullmatch(r"HeapInspector of 2 heaps of 64.0 MiB, \d+ live tensors each",
                        inspector._repr_mimebundle_()["text/plain"])

    inspector.select.value = "gamma"
    opened = inspector.buffer_view
    assert opened.name == "gamma" and [p.rank for p in opened.panels.children] == [0, 1]
    run(shell, "--show gamma", "gamma[0, 0] = 3")  # the opened view is live: refreshed in place
    assert int(opened.snapshots[0]["changed"].sum()) == 1
    run(shell, "", "del gamma")
    inspector.refresh()
    assert inspector.select.value is None and inspector.buffer_view is None
    assert all("gamma" not in a["names"] for heap in inspector.maps for a in heap["allocations"])


# -- RemoteView --------------------------------------------------------------------------------------

def test_remote_view_reads_the_same_memory_through_as_remote(shell, wb, displayed):
    run(shell, "", "shared = ctx.arange(40, dtype=torch.float32)\nshared += 100 * rank")
    shell.run_line_magic("iris", "remote shared --rank 1")
    [view] = displayed
    assert isinstance(view, RemoteView)
    bases = wb.pull("[int(b) for b in ctx.get_heap_bases()]")
    offsets = wb.pull("shared.data_ptr() - ctx.get_heap_bases()[rank].item()")
    assert offsets[0] == offsets[1]  # symmetric: the same offset on every rank
    own = wb.pull("shared")[1]
    for rank, row in enumerate(view.rows):
        assert row["bases"] == bases[rank] and row["offset"] == offsets[rank]
        assert row["translated"] == bases[rank][1] + offsets[rank] == row["remote_address"]
        assert row["equal"] and row["values"].tolist() == own.tolist()
        assert "✓ equal to rank 1's own values" in view.panels.children[rank + 1].caption.value
    assert view.own["rank"] == 1 and view.own["values"].tolist() == own.tolist()
    assert [p.title.value for p in view.panels.children][:2] == ["<b>rank 1&#x27;s own shared</b>",
                                                                "<b>rank 0: as_remote(shared, 1)</b>"]
    assert f"<code>{bases[0][1] + offsets[0]:#x}</code>" in view.addresses.value
    page = static_form(view)
    assert view.addresses.value in page and view.table.value in page
    assert inlined_pictures(page) == [panel.image.value for panel in view.panels.children]  # own, then 2 reads
    assert view._repr_mimebundle_()["text/plain"] == ("RemoteView of rank 1's 'shared' through as_remote on 2 "
                                                      "ranks, float32[40]")
    run(shell, "--show shared", "if rank == 0:\n    ctx.as_remote(shared, 1)[0] = -5.0\nctx.barrier()")
    assert len(displayed) == 1 and all(row["equal"] for row in view.rows)
    assert view.own["values"][0] == -5.0 and view.rows[0]["values"][0] == -5.0


def test_remote_view_errors_say_what_to_do(shell, wb):
    run(shell, "", "plain = torch.ones(4)")
    with pytest.raises(workbench.WorkbenchError, match="is not on the symmetric heap: create it with the "
                                                       r"context .* on ranks 0, 1"):
        workbench.remote("plain", 0)
    with pytest.raises(workbench.WorkbenchError, match="no variable 'absent' on rank 1. Create it on every rank"):
        workbench.remote("absent", 1)
    with pytest.raises(ValueError, match="rank must be one of 0..1"):
        workbench.remote("plain", 2)


def test_registry_forgets_closed_views(shell, wb):
    run(shell, "", "temp = ctx.zeros(4)")
    view = workbench.show("temp")
    assert [v for _, v, _ in registry.views_of("temp")] == [view]
    view.close()
    assert registry.views_of("temp") == []


def test_show_redisplays_only_views_the_rerun_cell_itself_had_shown(shell, wb, displayed, monkeypatch):
    cell = {"id": "cell-a"}
    monkeypatch.setattr(registry, "current_cell", lambda: cell["id"])
    run(shell, "--show rerun", "rerun = ctx.zeros(8)")
    [view] = displayed
    run(shell, "--show rerun", "rerun[0] = 1")  # the same cell again: its output, and the view, were cleared
    assert displayed == [view, view] and view.snapshots[0]["values_changed"][0]
    cell["id"] = "cell-b"
    run(shell, "--show rerun", "rerun[1] = 1")  # another cell: the view in cell-a's output is refreshed
    assert displayed == [view, view] and view.snapshots[0]["values_changed"].tolist()[:2] == [False, True]
