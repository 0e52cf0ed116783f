"""A training step on the ``iris`` torch.distributed backend, seen by the workbench's four instruments (issue 56,
item 4): real engines, 2 CPU ranks, one DDP model whose gradients go in two buckets, each collective named by
:func:`iris.distributed.name_collectives`.

* ``%%iris_kernel --traffic``: a row per named all-reduce, its bytes the bucket's, beside the minimum;
* ``%%iris_kernel --trace``: each named all-reduce on the timeline's operations lane of each rank;
* ``workbench.step``: the step stepped to the second bucket's all-reduce, then to its end, each held access saying
  which bucket's all-reduce it is in;
* ``%%iris_kernel --check races``: no race in the step; with the collectives' releases weakened, races named after the
  bucket whose all-reduce raced.

Each view's static form (what shows where widgets do not render) and text say the same names.
"""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

import workbench
from workbench.races import RaceReport
from workbench.widgets.static import static_html
from workbench.widgets.timeline import TimelineView
from workbench.widgets.traffic_view import OperationsTrafficView, TrafficView

from .multirank import our_heap_files

pytestmark = [pytest.mark.slow]

# fc1 (16 -> 64) holds 1088 floats, fc2 (64 -> 16) 1040: a bucket cap of fc2's bytes puts each layer in a bucket of
# its own (DDP fills buckets in reverse order of the parameters and closes one once it reaches the cap).
FC1_BYTES, FC2_BYTES = (16 * 64 + 64) * 4, (64 * 16 + 16) * 4
SETUP = f"""
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 64), nn.Linear(64, 16)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

torch.manual_seed(0)
group = iris.distributed.group_of(ctx)
model = DistributedDataParallel(Net(), process_group=group, bucket_cap_mb={FC2_BYTES} / 2**20)
iris.distributed.name_collectives(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 16, generator=torch.Generator().manual_seed(rank))

def train_step():
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()

train_step(); train_step()   # the second step broadcasts the buckets DDP rebuilt after the first
"""
BUCKETS = {"all_reduce · DDP bucket 0": ("fc2.bias, fc2.weight", FC2_BYTES),
           "all_reduce · DDP bucket 1": ("fc1.bias, fc1.weight", FC1_BYTES)}


@pytest.fixture(scope="module")
def shell():
    before = our_heap_files()
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "workbench")
    ip.run_line_magic("iris", "start -n 2 --backend cpu --heap 16MiB --timeout 120")
    report = workbench.current().run(SETUP)
    assert report.ok, report.render()
    yield ip
    workbench.current().stop()
    assert our_heap_files() <= before


@pytest.fixture
def displayed(monkeypatch):
    shown = []
    monkeypatch.setattr("workbench.magics.display", shown.append)
    return shown


def run(shell, displayed, line: str, body: str, kind) -> list:
    displayed.clear()
    result = shell.run_cell(f"%%iris_kernel {line}\n{body}", store_history=False)
    assert result.error_in_exec is None, result.error_in_exec
    return [d for d in displayed if isinstance(d, kind)]


def test_traffic_of_a_ddp_step_per_named_all_reduce(shell, displayed):
    (view,) = run(shell, displayed, "--traffic", "train_step()", OperationsTrafficView)
    found = {entry.label: entry for entry in view.operations}
    assert list(found) == list(BUCKETS), list(found)  # two buckets, nothing else launched
    for label, (names, nbytes) in BUCKETS.items():
        entry = found[label]
        assert entry.operation.detail == names and entry.operation.nbytes == nbytes
        assert entry.matrix.kernel == "one_shot_kernel"
        # Two ranks: the least an all-reduce moves is each rank's whole bucket to the other; the one-shot kernel moves
        # that plus a flag word per program.
        assert entry.matrix.minimum.tolist() == [[0, nbytes], [nbytes, 0]]
        crossed = entry.matrix.crossing()
        assert nbytes <= crossed[0, 1] <= nbytes + 64 and nbytes <= crossed[1, 0] <= nbytes + 64, crossed
    twin, text = static_html(view), view.summary()
    for label, (names, _) in BUCKETS.items():
        assert label in twin and names in twin and label in text and names in text
    assert "× minimum" in text and "0→1" in text
    assert twin.count("<svg") == 4  # the chosen operation's heat maps, drawn in the static form too
    # One operation alone, by its number in the table or its label, beside its minimum.
    displayed.clear()
    shell.run_line_magic("iris", "traffic --operation 1")
    (alone,) = displayed
    assert isinstance(alone, TrafficView) and alone.matrix.label == "all_reduce · DDP bucket 1"
    assert alone.matrix.headline().startswith("traffic of one_shot_kernel (all_reduce · DDP bucket 1) on 2 ranks")
    assert workbench.traffic(operation="all_reduce · DDP bucket 0").matrix.needed() == 2 * FC2_BYTES


def test_timeline_of_a_ddp_step_shows_each_named_all_reduce(shell, displayed):
    (view,) = run(shell, displayed, "--trace", "train_step()", TimelineView)
    timeline = view.timeline
    for rank in (0, 1):
        named = timeline.operations(rank)
        assert [s.name for s in named] == list(BUCKETS), [s.name for s in named]
        assert [s.payload for s in named] == [nbytes for _, nbytes in BUCKETS.values()]
        assert all(s.duration > 0 for s in named)
    assert [row["operations"]["count"] for row in timeline.table()] == [2, 2]
    twin, text = static_html(view), view.summary()
    assert "rank 0 · operations" in twin and "named operations" in twin
    for label, (names, _) in BUCKETS.items():
        assert label in twin and names in twin and label in text


def test_a_ddp_step_stepped_to_its_end_names_each_held_access(shell):
    run = workbench.step("train_step()")
    try:
        held = [state.operation for state in run.ranks]
        assert all(op and op["within"] == "all_reduce · DDP bucket 0" for op in held), run.summary()
        assert all(op["file"].endswith("all_reduce.py") or op["file"].endswith("inbox.py") for op in held), held
        assert "in all_reduce · DDP bucket 0" in run.summary()
        assert run.run_to_operation("bucket 0") == 0  # there already
        view = run.view
        assert view.next_operation.layout.display is None  # shown: the ranks are held in a named operation
        view.next_operation.click()  # every rank held at its first access of the next collective: the second bucket
        first = len(run.transcript)
        assert all(state.operation["within"] == "all_reduce · DDP bucket 1" for state in run.ranks), run.summary()
        assert "program (0, 0, 0) of <b>all_reduce · DDP bucket 1</b>" in static_html(view)
        steps = first + run.run_to_end()
        assert view.next_operation.disabled
    finally:
        run.stop()
    assert run.done and run.report.ok, run.summary()
    within = [step.operation.get("within") for step in run.transcript.steps]
    assert within[:first] == ["all_reduce · DDP bucket 0"] * first and within[first] == "all_reduce · DDP bucket 1"
    assert set(within) == set(BUCKETS) and steps == len(within) < 100, (steps, set(within))
    assert "in all_reduce · DDP bucket 1" in str(run.transcript)


def test_race_check_of_a_ddp_step(shell, displayed):
    (report,) = run(shell, displayed, "--check races", "train_step()", RaceReport)
    assert not report, report.text()
    # The collectives' flags signalled without release: the checker finds the races, each named after its bucket.
    weakened = "import warnings\nwith iris.language.sync.relaxed_signals(), warnings.catch_warnings():\n" \
               "    warnings.simplefilter('ignore', iris.RaceWarning)\n    train_step()"
    (report,) = run(shell, displayed, "--check races", weakened, RaceReport)
    assert report, "no race found with the releases weakened"
    named = {race.second.operation for race in report.races}
    assert named == set(BUCKETS), named
    bundle = report._repr_mimebundle_()
    assert "in all_reduce · DDP bucket 0" in bundle["text/plain"] and "in all_reduce · DDP bucket 0" in \
        bundle["text/html"]
