"""StepperView: a stepped run (:class:`workbench.stepping.SteppedRun`) as one panel per rank, the heaps its steps
touch, and the transcript of the steps taken; buttons take the next steps.

A rank's panel shows the kernel's source around the line it is held at (that line marked; a long line wraps under
its own indentation), its program id, the operation and its target (``store to mailbox[0..3] of rank 1``, written
as the transcript writes it), the values it will write or compare, the values there now, its state (held, in a host
barrier, ended) and, for a held rank that keeps reading the same values, what it waits for and who could release it.
The panels share the width the notebook gives them (side by side where each gets :data:`PANEL_MIN`, else one under
the other). Under the panels, every heap that a step taken or a held operation targets, on each rank it targets,
one heap to a line in the order of their allocation (the same every run), drawn as
:class:`~workbench.widgets.BufferView` draws a buffer (one colour scale per name, a table of values beside the
pictures for small tensors). Red is what the last steps changed: it stays until steps are taken again (saving the
order, a failed click or a stop leave it); a heap first shown after steps were taken (a run to the end) is marked
where those steps wrote. Under the heaps, the transcript, growing.

Every action (a button here, or a method of the run called from Python) redraws the view and its static form
(:mod:`.static`): an export shows the transcript and each rank's state as of the last step. An action that fails
(a rank that cannot step, a timeout, an order that diverged) says why in the view, above the panels; the view is
redrawn all the same, never left as it was before the click. What it says stays until the run moves on (a step
taken, the run's end or stop), from the view or from Python.

Examples
--------
>>> run = workbench.step(MESSAGE_PASSING)          # doctest: +SKIP
>>> view = StepperView(run)                         # what displaying the run shows  # doctest: +SKIP
>>> view.panels[1].step.click()                     # rank 1 takes a step  # doctest: +SKIP
>>> view.panels[1].title.value                      # doctest: +SKIP
'<b>rank 1</b> · held before tl.atomic_cas (atomic_cas) at line 14'
"""

from __future__ import annotations

import html
import linecache
import math
from pathlib import Path

import ipywidgets as widgets
import numpy as np
import torch

from iris.instruments.stepping.transcript import element_phrase

from . import panels, reduce, render
from .static import StaticForm

CONTEXT = 3  # source lines shown above and below the held line
SHOWN = 8  # values shown of an operation's operands and of what is there now
ORDER_FILE = "stepped.order.json"
HELD_LINE = "background:#fff2a8"  # the line a rank is held at
NUMBERS = 8  # characters before a source line's text: the marker and the line number
WAITING = "color:#a55a00"
PANEL_MIN = "440px"  # a rank's panel is at least this wide, else the panels go one under the other
# The rank panels share the row: as many columns as fit PANEL_MIN, each an equal share (never wider than the row).
RANK_COLUMNS = f"repeat(auto-fit, minmax(min({PANEL_MIN}, 100%), 1fr))"
TEXT = "line-height:1.4"  # lines of text, not the height of a widget's row that ipywidgets gives an HTML widget
ERROR = "color:#b00"
MARKED = "color:#c00"
MAX_SIDE = 256  # blocks per side of a heap's picture
# The report's time column, for a stepped cell: the cell ran while a person (or a script) took the steps.
STEPPED_TIME = "time from start to end, waits for the steps included"


class StepperView(StaticForm, widgets.VBox):
    """A stepped run, with controls to step it (see the module docstring).

    Parameters
    ----------
    run : workbench.stepping.SteppedRun
        The run to show and step (its ``ranks``, ``transcript``, ``step``, ``values``...). A kernel's source is read
        from ``linecache`` under the file name the ranks report: a file's, or a cell's that the workbench registered
        there as the ranks do (see :func:`workbench.engine.register_source`).

    Attributes
    ----------
    panels : list of RankStepPanel
        One per rank, each with its ``step`` button.
    message : ipywidgets.HTML
        What the last action said when it failed (or where it saved the order); empty otherwise.
    heap_rows : dict of str to HeapRow
        The heaps drawn, by allocation name.

    Examples
    --------
    >>> view = StepperView(run)                                           # doctest: +SKIP
    >>> view.step_each.click(); view.summary()                            # doctest: +SKIP
    'stepped run on 2 ranks, 2 steps taken: rank 0 held before iris.store (store) at line 9, rank 1 held ...'
    """

    def __init__(self, run):
        self.run = run
        self.heaps_shown: dict[str, set[int]] = {}  # allocation name -> the ranks whose copy is drawn, kept once seen
        self.heap_offsets: dict[str, int] = {}  # allocation name -> its offset in the heap: the heaps' order
        self.heap_rows: dict[str, HeapRow] = {}  # allocation name -> its copies drawn
        self.last_values: dict[tuple[str, int], torch.Tensor | str] = {}  # each heap at the last redraw
        self._read_at_end = False  # the heaps were read once the cell had ended: they change no more
        self._acting = False
        self._drawn_steps = 0  # steps in the transcript at the last redraw
        self._snapshots: dict[tuple[str, int], dict] = {}  # each copy's snapshot at the last steps, and its marks:
        self._marks: dict[tuple[str, int], tuple] = {}  # (changed blocks, changed values, "changed"/"written"/None)
        self._looked_at: dict[tuple[str, int], int] = {}  # the steps taken when each copy's marks were made
        self._said_at: tuple | None = None  # where the run was when the message was written

        self.header = widgets.HTML()
        self.message = widgets.HTML()
        self.step_each = _button("step every rank once", "every held rank takes one step, in rank order")
        self.run_all = _button("run all to the end", "the held ranks take turns until every rank has ended")
        # Shown while a rank is held in a named operation (a collective of a training step): a collective at a time.
        self.next_operation = _button("run all to the next operation", "the held ranks take turns until each is in "
                                      "the next named operation (a training step's next collective) or has ended")
        self.next_operation.layout.display = "none"
        self.stop = _button("stop", "end the run now: every held rank's kernel raises SteppingStopped",
                            style="danger")
        self.order_file = widgets.Text(value=run.order_file or ORDER_FILE, description="order file",
                                       layout=widgets.Layout(width="280px"))
        self._order_file_seen = run.order_file  # the run's replayed file the box last took
        self.save = _button("save the order", "write the steps taken so far to the order file, to replay later")
        self.replay = _button("replay the order", "take the steps of the order file, from where the ranks are now")
        self.step_each.on_click(lambda _: self._act(self.run.step_each))
        self.run_all.on_click(lambda _: self._act(self.run.run_to_end))
        self.next_operation.on_click(lambda _: self._act(self.run.run_to_operation))
        self.stop.on_click(lambda _: self._act(self.run.stop))
        self.save.on_click(lambda _: self._act(self._save_order))
        self.replay.on_click(lambda _: self._act(self._replay_order))
        controls = widgets.HBox([self.step_each, self.run_all, self.next_operation, self.stop, self.order_file,
                                 self.save, self.replay],
                                layout=widgets.Layout(flex_flow="row wrap"))

        self.panels = [RankStepPanel(rank, len(run.ranks), self._act, run) for rank in range(len(run.ranks))]
        rank_row = widgets.GridBox(self.panels, layout=widgets.Layout(grid_template_columns=RANK_COLUMNS, width="100%",
                                                                      grid_gap="12px", margin="0 0 12px 0"))
        rank_row.add_class("iris-stepper-ranks")
        self.heaps = widgets.VBox()
        self.transcript = widgets.HTML()
        super().__init__([self.header, self.message, controls, rank_row, self.heaps, self.transcript])
        self.add_class("iris-stepper-view")
        self.redraw()

    # -- what a display shows ---------------------------------------------------------------------------------------
    def summary(self) -> str:
        """One line: the run and where each rank is (the widget output's ``text/plain``)."""
        states = ", ".join(f"rank {s.rank} {rank_phrase(self.run, s)}" for s in self.run.ranks)
        return f"stepped run on {len(self.run.ranks)} ranks, {_steps(len(self.run.transcript))} taken: {states}"

    def twin_text(self) -> str:
        """The static form's ``text/plain``: where every rank is (what it waits for), how the run ended, then the
        transcript as a Markdown table (what a text export of the notebook keeps)."""
        lines = []
        for state in self.run.ranks:
            waiting = self.run.waiting_on(state.rank)
            lines.append(f"rank {state.rank}: {rank_phrase(self.run, state)}" + (f" ({waiting})" if waiting else ""))
        if self.run.done:
            lines.append(_ending(self.run))
        return "\n".join(lines) + f"\n\n{self.run.transcript}"

    # -- acting -----------------------------------------------------------------------------------------------------
    def _act(self, action) -> None:
        """Do ``action`` (a step, a run, a save), then redraw; a failure is said in the view, not raised: a button's
        exception would reach only the kernel's log, and the view would stay as it was."""
        self._acting = True
        self.message.value = ""
        try:
            said = action()
            if isinstance(said, str):
                self.message.value = f"<span>{html.escape(said)}</span>"
        except Exception as exc:  # every failure: a step refused, a timeout, OrderDiverged, a file not written
            self.message.value = f"<pre style='{ERROR};white-space:pre-wrap'>{html.escape(_error(exc))}</pre>"
        finally:
            self._acting = False
            self._said_at = self._moment()
            self.redraw()

    def _moment(self) -> tuple:
        """Where the run is, as far as a message about it goes: the steps taken, and whether it has ended."""
        return len(self.run.transcript), self.run.done

    def _save_order(self) -> str:
        path = self.run.order.save(self._order_path())
        return f"saved the order ({_steps(len(self.run.order))}) to {path.resolve()}"

    def _replay_order(self) -> str:
        before = len(self.run.transcript)
        self.run.replay(self._order_path())
        return f"replayed {self._order_path()}: {_steps(len(self.run.transcript) - before)} taken"

    def _order_path(self) -> Path:
        return Path(self.order_file.value.strip() or ORDER_FILE)

    # -- drawing ----------------------------------------------------------------------------------------------------
    def redraw(self) -> None:
        """Draw where every rank is, the heaps and the transcript now, and send the static form to the view's
        outputs. The run calls it after every step taken from Python; during a button's action, the action's
        end redraws once."""
        if self._acting:
            return
        run = self.run
        if self.message.value and self._moment() != self._said_at:  # said of a moment the run has moved on from
            self.message.value = ""
        if run.order_file != self._order_file_seen:  # a file replayed from Python: the box names it
            self.order_file.value = self._order_file_seen = run.order_file
        self.header.value = self._header()
        for control in (self.step_each, self.run_all, self.next_operation, self.stop, self.replay):
            control.disabled = run.done
        within = any(state.held and (state.operation or {}).get("within") for state in run.ranks)
        self.next_operation.layout.display = None if within else "none"
        self._grow_heaps()
        values = self._read_heaps()
        for panel in self.panels:
            panel.draw(run, values)
        self._draw_heaps(values)
        self._drawn_steps = len(run.transcript)
        self.transcript.value = ("<b>transcript</b>" + run.transcript.html() if len(run.transcript)
                                 else "<i>no step taken yet</i>")
        self.update_displays()

    def _header(self) -> str:
        run = self.run
        text = f"<b>stepped run</b> on {len(run.ranks)} ranks · {_steps(len(run.transcript))} taken"
        if run.done:
            # A run stopped part way: every rank's error is the stop itself, said in a line, not its tracebacks.
            report = "" if _stopped(run) else run.report.render(time_label=STEPPED_TIME) + "\n"
            outputs = "".join(f"[rank {rank}] {line}\n" for rank, result in sorted(run.report.results.items())
                              for line in result.stdout.splitlines())
            text += f" · {html.escape(_ending(run))}"
            if report or outputs:
                text += f"<pre style='margin:4px 0;white-space:pre-wrap'>{html.escape(report + outputs)}</pre>"
        return text

    def _grow_heaps(self) -> None:
        """Add the heaps the steps taken and the held operations target (a run to the end steps past operations
        that were never drawn held); a heap once shown stays, so the panels do not jump about."""
        operations = [step.operation for step in self.run.transcript.steps]
        operations += [state.operation for state in self.run.ranks if state.state == "paused"]
        for operation in operations:
            for target in operation["targets"]:
                if "allocation" in target:  # inside a named allocation (not a bare heap offset)
                    self.heaps_shown.setdefault(target["name"], set()).add(target["rank"])
                    self.heap_offsets.setdefault(target["name"], target["allocation"])

    def _read_heaps(self) -> dict[tuple[str, int], torch.Tensor | str]:
        """Each heap shown, read now: a tensor, or why it could not be read. Once the cell has ended no gate is
        left to read through: the ranks' variables of those names are read instead (named allocations are named
        after them), else what the heap held at the last step; a run stopped part way keeps what it last read."""
        # A stopped run's heaps tell nothing new, and its cluster may be stopping: what was last read stays.
        if self.run.done and (self._read_at_end or _stopped(self.run)):
            return dict(self.last_values)
        values: dict[tuple[str, int], torch.Tensor | str] = {}
        for name, ranks in self.heaps_shown.items():
            pulled = None
            for rank in sorted(ranks):
                try:
                    if not self.run.done:
                        values[name, rank] = self.run.values(name, rank)
                    else:
                        pulled = pulled or self.run.wb.pull(name)
                        values[name, rank] = pulled[rank].cpu()
                except Exception as exc:  # a heap without a variable of its name, a cluster stopping
                    values[name, rank] = self.last_values.get((name, rank), _error(exc))
                self.last_values[name, rank] = values[name, rank]
        self._read_at_end = self.run.done
        return values

    def _draw_heaps(self, values) -> None:
        """Each heap shown, in the widgets made for it the first time (a redraw per step makes no new widgets), one
        to a line, in the order of their allocation: the same every run, whichever rank's step showed one first."""
        order = sorted(self.heaps_shown, key=lambda name: (self.heap_offsets.get(name, math.inf), name))
        for name in order:
            if name not in self.heap_rows:
                self.heap_rows[name] = HeapRow(name)
            snapshots = [self._snapshot(name, rank, values[name, rank]) for rank in sorted(self.heaps_shown[name])]
            self.heap_rows[name].draw(snapshots, self._held_at)
        if self.heaps_shown and not self.heaps.children:
            self.heaps.children = [widgets.HTML(f"<div style='{TEXT}'><b>the heaps the steps touch</b> (red: what "
                                                "the last steps changed; a heap first shown after steps: what they "
                                                "wrote there)</div>"),
                                   widgets.VBox()]
        if self.heaps.children:
            self.heaps.children[1].children = [self.heap_rows[name] for name in order]

    def _snapshot(self, name: str, rank: int, value) -> dict:
        """``rank``'s copy of ``name`` reduced for its picture (or why there is none), with the marks of the last
        steps: what changed since the copy's look before them, or for a copy first shown after steps, the elements
        those steps wrote. Marks are made once per steps taken: a redraw without a step keeps them."""
        if isinstance(value, str):
            return {"status": "error", "rank": rank, "message": value}
        snapshot = {"status": "ok", "rank": rank, **reduce.summarize_tensor(value, None, MAX_SIDE, 0)}
        key, steps = (name, rank), len(self.run.transcript)
        if self._looked_at.get(key) != steps:
            before = self._snapshots.get(key)
            if before is not None and (before["shape"], before["dtype"]) == (snapshot["shape"], snapshot["dtype"]):
                self._marks[key] = (reduce.changed(before, snapshot),
                                    reduce.changed(before, snapshot, ("values",)) if "values" in snapshot else None,
                                    "changed")
            else:
                self._marks[key] = self._written(name, rank, snapshot)
            self._snapshots[key], self._looked_at[key] = snapshot, steps
        snapshot["changed"], snapshot["values_changed"], snapshot["marked"] = self._marks[key]
        return snapshot

    def _written(self, name: str, rank: int, snapshot: dict) -> tuple:
        """The marks of a copy first shown: the elements the steps since the last redraw wrote (stores, and atomics
        that changed a value), as block and value masks; no marks when they wrote none."""
        plane_shape = tuple(snapshot["plane_shape"])
        count = math.prod(plane_shape)
        written = np.zeros(math.prod(snapshot["shape"]) or 1, dtype=bool)
        for step in self.run.transcript.steps[self._drawn_steps:]:
            op = step.operation
            unchanged = op["kind"].startswith("atomic") and step.before == step.after  # a poll that found no match
            if op["kind"] in ("load", "host barrier") or unchanged:
                continue
            for target in op["targets"]:
                if target.get("name") == name and target["rank"] == rank and "allocation" in target:
                    itemsize = getattr(torch, target["dtype"]).itemsize
                    start = (target["offset"] - target["allocation"]) // itemsize
                    written[start:start + math.ceil(target["nbytes"] / itemsize)] = True
        if not written.any():
            return None, None, None
        plane = written[:count].reshape(plane_shape)  # above 2-D, the picture is slice 0: the first elements
        blocks = plane
        for axis, size in enumerate(snapshot["block"]):
            blocks = np.logical_or.reduceat(blocks, np.arange(0, plane_shape[axis], size), axis=axis)
        return blocks, (written if "values" in snapshot else None), "written"

    def _held_at(self, name: str, heap_rank: int) -> list[str]:
        """Which held ranks' next operation targets ``name`` on ``heap_rank``, in words."""
        said = []
        for state in self.run.ranks:
            if state.state == "paused":
                for target in state.operation["targets"]:
                    if target.get("name") == name and target["rank"] == heap_rank:
                        said.append(f"rank {state.rank} is held before {html.escape(state.operation['label'])} of "
                                    f"{html.escape(element_phrase(target))}")
        return said


class HeapRow(widgets.HBox):
    """One allocation's copies on the ranks a stepped run touches, on one colour scale, as a BufferView draws a
    buffer: a :class:`~workbench.widgets.panels.RankPanel` per rank, then the values table of a small tensor beside
    them. A heap has a line of its own: its table growing wider moves no other heap.

    Examples
    --------
    >>> row = HeapRow("mailbox")                                             # doctest: +SKIP
    >>> row.draw([{"status": "error", "rank": 1, "message": "gone"}], lambda name, rank: [])   # doctest: +SKIP
    """

    def __init__(self, name: str):
        self.name = name
        self.pictures: dict[int, panels.RankPanel] = {}
        self.table = widgets.HTML(layout=widgets.Layout(margin="24px 0 0 8px"))
        super().__init__([self.table], layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start",
                                                             margin="0 0 8px 0"))
        self.add_class("iris-stepper-heap")

    def draw(self, snapshots: list[dict], held_at) -> None:
        """Draw the copies of ``snapshots`` (from the view's ``_snapshot``: a tensor's reduction with its marks, or
        why there is none); ``held_at(name, rank)`` says which held ranks target a copy."""
        data = {s["rank"]: panels.displayed(s, "mean") for s in snapshots if s["status"] == "ok"}
        vmin, vmax = render.scale(list(data.values()))
        for snapshot in snapshots:
            rank = snapshot["rank"]
            if rank not in self.pictures:
                self.pictures[rank] = panels.RankPanel(rank, title=f"{self.name} on rank {rank}")
            if snapshot["status"] != "ok":
                self.pictures[rank].show_message(html.escape(snapshot["message"]))
                continue
            png = panels.picture(snapshot, data[rank], vmin, vmax, snapshot["changed"])
            lines = [panels.stats_line(snapshot), mark_line(snapshot), *held_at(self.name, rank)]
            self.pictures[rank].show(png, f"<div style='{TEXT}'>{'<br>'.join(lines)}</div>")
        self.children = [*(self.pictures[s["rank"]] for s in snapshots), self.table]
        self.table.value = panels.values_table(snapshots, mark_changes=True)


def mark_line(snapshot: dict) -> str:
    """What the red of a heap's picture means: what the last steps changed, or (a heap first shown after steps)
    what they wrote."""
    mask = snapshot.get("changed")
    if snapshot.get("marked") == "written" and mask is not None:
        unit = "element" if all(b == 1 for b in snapshot["block"]) else "block"
        return (f"<span style='{MARKED}'>first shown now: {int(mask.sum())} of {mask.size} {unit}"
                f"{'s' * (mask.size != 1)} written by the last steps</span>")
    return panels.change_line(snapshot)


class RankStepPanel(widgets.VBox):
    """One rank of a stepped run: title (state), source around the held line, what it is about to do, and its
    controls (step; run until its next access to a given rank, or until a given line).

    Parameters
    ----------
    rank, world : int
    act : callable
        The view's ``_act``: runs an action and redraws.
    run : workbench.stepping.SteppedRun

    Examples
    --------
    >>> panel = view.panels[0]                     # doctest: +SKIP
    >>> panel.until.value = "rank 1"; panel.run_until.click()   # doctest: +SKIP
    """

    def __init__(self, rank: int, world: int, act, run):
        self.rank = rank
        self.title = widgets.HTML()
        self.source = widgets.HTML()
        self.details = widgets.HTML()
        self.step = _button(f"step rank {rank}", f"rank {rank} takes its next step")
        self.run_until = _button(f"run rank {rank} until", f"step rank {rank} until the point chosen beside")
        choices = [(f"its next access to rank {r}'s heap", f"rank {r}") for r in range(world)]
        self.until = widgets.Dropdown(options=[*choices, ("a line", "line")], value="rank 0" if world else None,
                                      layout=widgets.Layout(width="250px"))
        # the line to run until: shown only while "a line" is chosen
        self.line = widgets.IntText(value=1, description="line", layout=widgets.Layout(width="130px", display="none"))
        self.until.observe(lambda _: self._show_line(), names="value")
        self.step.on_click(lambda _: act(lambda: run.step(rank)))
        self.run_until.on_click(lambda _: act(lambda: self._run_until(run)))
        controls = widgets.VBox([self.step, widgets.HBox([self.run_until, self.until, self.line],
                                                         layout=widgets.Layout(flex_flow="row wrap"))],
                                layout=widgets.Layout(align_items="flex-start"))
        super().__init__([self.title, self.source, self.details, controls],
                         layout=widgets.Layout(margin="0", padding="4px 8px", min_width="0", border="1px solid #ddd"))
        self.add_class("iris-stepper-rank")

    def _show_line(self) -> None:
        self.line.layout.display = None if self.until.value == "line" else "none"

    def target(self) -> dict:
        """The point chosen for ``run until``, as ``run.run``'s keyword arguments."""
        if self.until.value == "line":
            return {"until_line": int(self.line.value)}
        return {"until_rank": int(self.until.value.split()[1])}

    def _run_until(self, run) -> str:
        taken = run.run(self.rank, **self.target())
        return f"rank {self.rank} took {_steps(taken)}; it is {state_phrase(run.ranks[self.rank])}"

    def draw(self, run, values) -> None:
        state = run.ranks[self.rank]
        self.title.value = f"<b>rank {self.rank}</b> · {html.escape(rank_phrase(run, state))}"
        for control in (self.step, self.run_until):
            control.disabled = not state.held
        # where it is held, or where it was held when the run was stopped
        operation = state.operation if state.held or stopped_part_way(run, state) else None
        self.source.value = source_html(operation) if operation else ""
        lines = []
        if state.state == "paused":
            lines += operation_lines(operation, values)
        waiting = run.waiting_on(self.rank) if state.held and not run.done else None  # a stopped rank waits no more
        if waiting:
            lines.append(f"<span style='{WAITING}'>{html.escape(waiting)}</span>")
        self.details.value = f"<div style='{TEXT}'>{'<br>'.join(lines)}</div>" if lines else ""


# -- words and source ---------------------------------------------------------------------------------------------

def rank_phrase(run, state) -> str:
    """Where a rank of ``run`` is (:func:`state_phrase`); once the cell has ended, how it ended as its report says
    (its gate saw the end of the cell, whether the cell had raised or not), and where a run stopped part way held it.
    """
    result = run.report.results.get(state.rank) if run.done else None
    if result is None or result.status == "ok":
        return state_phrase(state)
    if stopped_part_way(run, state):
        if state.operation is None:
            return "stopped part way"
        where = state.operation.get("label", "a host barrier")
        return f"stopped part way, where it was held: before {where} at line {state.operation['line']}"
    return f"ended: {result.label} ({result.error['type'] if result.error else 'no error reported'})"


def stopped_part_way(run, state) -> bool:
    """Whether the rank's cell ended with the run's stop (``SteppingStopped``)."""
    result = run.report.results.get(state.rank) if run.done else None
    return bool(result and result.error and result.error["type"] == "SteppingStopped")


def state_phrase(state) -> str:
    """Where a rank is, in words: ``held before iris.store (store) at line 9``, ``in a host barrier ...``, ``ended
    ...``.

    Examples
    --------
    >>> from iris.instruments.stepping import RankState
    >>> state_phrase(RankState(0, "in barrier"))
    'in a host barrier, waiting for the other ranks'
    """
    operation = state.operation or {}
    within = f" in {operation['within']}" if operation.get("within") else ""  # a collective of a training step
    return {
        "paused": lambda: f"held before {operation.get('label')} ({operation.get('kind')}) at line "
                          f"{operation.get('line')}{within}",
        "barrier": lambda: f"held before a host barrier (ctx.barrier) at line {operation.get('line')}",
        "in barrier": lambda: "in a host barrier, waiting for the other ranks",
        "running": lambda: "running to its next heap access",
        "finished": lambda: "ended: at the end of its cell",
        "failed": lambda: f"ended: failed ({state.error})",
        "gone": lambda: "ended: its connection closed",
        "connecting": lambda: "not connected yet",
    }[state.state]()


def operation_lines(operation: dict, values) -> list[str]:
    """What a held rank is about to do, as HTML lines: program, operation and target, operands, values there now."""
    verb = {"load": "from", "store": "to"}.get(operation["kind"], "on")
    targets = ", ".join(element_phrase(t) for t in operation["targets"]) or "no heap"
    lines = [f"program {tuple(operation['program'])}"
             + (f" of <b>{html.escape(operation['within'])}</b>" if operation.get("within") else ""),
             f"<b>{html.escape(operation['label'])}</b>: {html.escape(operation['kind'])} {verb} "
             f"<b>{html.escape(targets)}</b>"]
    if "compare" in operation:
        lines.append(f"compares with {_values(operation['compare'])}, writes {_values(operation.get('value'))} "
                     "where equal")
    elif "value" in operation:
        lines.append(f"writes {_values(operation['value'])}" if operation["kind"] == "store"
                     else f"{operation['kind'].removeprefix('atomic_')} with {_values(operation['value'])}")
    for target in operation["targets"]:
        now = _there_now(target, values) if _read_as_held(operation, target) else None
        lines.append(f"there now: {_values(now if now is not None else operation.get('before'))}")
    return lines


def source_html(operation: dict) -> str:
    """The source around the line ``operation`` is held at, numbered, that line marked; the line alone when the
    file's text is not on this machine (a kernel defined in another cell)."""
    file, line = operation.get("file", ""), operation["line"]
    lines = linecache.getlines(file)
    if not lines:
        shown = [(line, operation.get("source", ""))]
        where = f"{html.escape(file)} (only the held line: its file's text is on the ranks)"
    else:
        low, high = max(1, line - CONTEXT), min(len(lines), line + CONTEXT)
        shown = [(n, lines[n - 1].rstrip("\n")) for n in range(low, high + 1)]
        where = "its cell" if file.startswith("<") else html.escape(file)  # "<iris-cell-...>": not a file
    rows = []
    for number, text in shown:
        held = number == line
        text = text.expandtabs(8)
        # A long line wraps under its own text, not under its number, and keeps its indentation: nothing is cut
        # off, nothing scrolls, and a wrapped line of a loop's body stays inside the loop.
        hang = NUMBERS + len(text) - len(text.lstrip(" "))
        style = f"white-space:pre-wrap;padding-left:{hang}ch;text-indent:-{hang}ch" + (f";{HELD_LINE}" if held
                                                                                          else "")
        rows.append(f"<div style='{style}'>{'▶' if held else ' '} {number:4d}  {html.escape(text)}</div>")
    kernel = operation.get("kernel")
    caption = f"{'kernel ' + html.escape(kernel) + ', ' if kernel else ''}{where}, line {line}"
    return (f"<div style='font-size:11px;color:#555'>{caption}</div>"
            f"<div style='font-family:monospace;font-size:12px;line-height:1.35'>{''.join(rows)}</div>")


def _read_as_held(operation: dict, target: dict) -> bool:
    """Whether ``target``'s allocation holds elements of the type the access reads or writes (the iris backend's
    staging buffers are bytes, which its kernels access as float32 or bfloat16 words: their values are the gate's)."""
    element = operation.get("dtype", "")
    element = {"bf16": "bfloat16"}.get(element, element.replace("fp", "float"))
    return target.get("dtype") == element


def _there_now(target: dict, values) -> list | None:
    """The values at ``target``'s elements now (from the heaps read for the drawing), or None if not read."""
    tensor = values.get((target.get("name"), target["rank"]))
    if not isinstance(tensor, torch.Tensor) or "allocation" not in target:
        return None
    start = (target["offset"] - target["allocation"]) // tensor.element_size()
    return tensor.flatten()[start:start + max(1, target["nbytes"] // tensor.element_size())][:SHOWN].tolist()


def _values(values) -> str:
    if values is None:
        return "-"
    shown = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in values[:SHOWN])
    return shown + (", ..." if len(values) > SHOWN else "")


def _stopped(run) -> bool:
    """Whether the run was stopped part way: every rank that did not end well ended by the stop."""
    failed = [state for state in run.ranks if run.report.results[state.rank].status != "ok"]
    return bool(failed) and all(stopped_part_way(run, state) for state in failed)


def _ending(run) -> str:
    if _stopped(run):
        return f"stopped part way, after {_steps(len(run.transcript))}: no rank is left held"
    return f"the cell has ended on every rank, after {_steps(len(run.transcript))}"


def _steps(count: int) -> str:
    return f"{count} step{'s' * (count != 1)}"


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _button(description: str, tooltip: str, style: str = "") -> widgets.Button:
    return widgets.Button(description=description, tooltip=tooltip, button_style=style,
                          layout=widgets.Layout(width="auto"))
