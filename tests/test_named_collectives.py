"""Named operations (iris.instruments.operations) and the collectives of a training step named after what they carry
(iris.distributed.name_collectives): DDP's buckets, FSDP2's modules, tensor parallelism's modules, each recorded by
the traffic recorder (one matrix per operation, beside its minimum) and by tracing (a span per operation), in a
torchrun-style program on 2 ranks; then the pieces alone: the operation context, the minimum of an operation, the
grouping of launches, the timeline's operation spans, a race's operation.

The rank code is in tests/rank_cases_named_collectives.py; the workbench's views of the same are tested in
tests/test_workbench_training.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch.nn as nn

import iris
from iris.instruments import operations
from iris.instruments.checking import Access, Race, races_html_table, races_text_table
from iris.instruments.operations import Operation
from iris.instruments.tracing.timeline import OPERATION_CATEGORY, OPERATIONS_TRACK, Timeline
from iris.instruments.traffic import LaunchTraffic, minimum, per_operation

from .multirank import run_ranks

FSDP = ["all_gather_into_tensor · FSDP root", "all_gather_into_tensor · FSDP block",
        "all_gather_into_tensor · FSDP block (backward)",  # gathered again: freed after its forward
        "reduce_scatter_tensor · FSDP block", "reduce_scatter_tensor · FSDP root"]
TP = ["all_reduce · TP down (forward)",  # RowwiseParallel: its partial sums all-reduced
      "all_reduce · TP up (backward)"]  # ColwiseParallel: the gradient of its replicated input all-reduced
ACTIVATIONS = 4 * 8 * 16 * 4  # a batch of 4 x 8 tokens, 16 features of float32


@pytest.mark.slow
def test_ddp_fsdp_and_tp_steps_name_each_collective():
    results = run_ranks(2, "tests.rank_cases_named_collectives:named_steps", timeout=300)
    for rank, found in enumerate(results):
        ddp, fsdp, tp = found["ddp"], found["fsdp2"], found["tp"]
        assert ddp["losses"] == ddp["unnamed_losses"]  # the hook all-reduces as DDP's own does
        # DDP: two buckets (bucket_cap_mb=0.01), each all-reduce's bytes its parameters' bytes, every parameter once.
        assert [op["label"] for op in ddp["operations"]] == ["all_reduce · DDP bucket 0", "all_reduce · DDP bucket 1"]
        names = [n for op in ddp["operations"] for n in op["detail"].split(", ")]
        assert sorted(names) == sorted(ddp["parameters"]), names
        for op in ddp["operations"]:
            assert op["nbytes"] == sum(ddp["parameters"][n] for n in op["detail"].split(", ")), op
            assert op["needed"] == 2 * op["nbytes"] and op["kernel"] == "one_shot_kernel"
        # FSDP2: each module's all-gather (twice for the inner one), then the reduce-scatters in backward's order.
        assert [op["label"] for op in fsdp["operations"]] == FSDP
        for op in fsdp["operations"]:
            group = sum(fsdp["parameters"][n] for n in op["detail"].split(", "))
            shard = op["nbytes"] if op["label"].startswith("all_gather") else op["nbytes"] // 2
            assert 2 * shard >= group and op["needed"] == (2 * op["nbytes"] if shard == op["nbytes"]
                                                           else op["nbytes"]), op
        # Tensor parallelism: the activations' all-reduces, named after their modules.
        assert [op["label"] for op in tp["operations"]] == TP
        assert all(op["nbytes"] == ACTIVATIONS and op["detail"] in ("down.weight, down.bias", "up.weight, up.bias")
                   for op in tp["operations"])
        for kind in (ddp, fsdp, tp):
            for op in kind["operations"]:  # what crossed: the minimum, and a few flag words
                assert op["ranks"] == [0, 1]
                moved = np.array(op["crossing"])
                assert op["needed"] <= moved.sum() <= 1.02 * op["needed"], op
            # The trace holds one span per operation, on the operations track, in the order they ran.
            assert kind["traced"] == [[op["label"], op["nbytes"], OPERATIONS_TRACK] for op in kind["operations"]]
            assert "× minimum" in kind["text"], kind["text"]
        assert results[0]["tp"]["losses"] == found["tp"]["losses"], rank  # one batch everywhere


def test_an_operation_carries_the_innermost_about_and_tells_its_listeners():
    heard = []

    class Listener:
        def operation_finished(self, op, start, end):
            heard.append((op.label, end >= start))

    listener = Listener()
    operations.add_listener(listener)
    try:
        outer = operations.push_about("TP up (backward)")
        with operations.about("DDP bucket 3", detail="fc.weight"):
            with operations.operation("all_reduce", nbytes=64, ranks=(0, 1)) as op:
                assert operations.current() is op and operations.current_label() == "all_reduce · DDP bucket 3"
        with operations.operation("barrier"):
            assert operations.current_label() == "barrier · TP up (backward)"
        operations.pop_about(outer)
        operations.pop_about(outer)  # once gone, gone: nothing happens
        with operations.operation("send", nbytes=8, ranks=(1, 0)) as bare:
            pass
    finally:
        operations.remove_listener(listener)
    assert operations.current() is None and operations.current_label() == ""
    assert heard == [("all_reduce · DDP bucket 3", True), ("barrier · TP up (backward)", True), ("send", True)]
    assert op.detail == "fc.weight" and bare.number > op.number
    assert op.describe() == "all_reduce · DDP bucket 3 (fc.weight): 64 B per rank over ranks 0, 1"


def test_the_minimum_of_an_operation_over_its_own_ranks():
    gather = Operation("all_gather_into_tensor", nbytes=16, ranks=(1, 3))
    assert minimum.of_operation(gather, world=4).tolist() == [[0] * 4, [0, 0, 0, 16], [0] * 4, [0, 16, 0, 0]]
    broadcast = Operation("broadcast", nbytes=8, ranks=(2, 0, 1), root=0)  # the root is the group's first: rank 2
    assert minimum.of_operation(broadcast, world=3).tolist() == [[0, 0, 0], [0, 0, 0], [8, 8, 0]]
    assert minimum.of_operation(Operation("send", nbytes=4, ranks=(1, 0)), 2).tolist() == [[0, 0], [4, 0]]
    for unknown in (Operation("recv", nbytes=4, ranks=(1, 0)), Operation("barrier", ranks=(0, 1)),
                    Operation("all_to_all_single", nbytes=64, ranks=(0, 1)),
                    Operation("reduce_scatter_tensor", nbytes=6, ranks=(0, 1, 2, 3))):  # 6 B in 4 blocks
        assert minimum.of_operation(unknown, world=4) is None, unknown


def test_launches_group_per_operation_across_ranks_and_steps():
    def launch(rank, op, nbytes, kernel="one_shot_kernel"):
        t = LaunchTraffic.empty(kernel, rank, 2, op)
        t.add("store", 1 - rank, nbytes)
        return t

    per_rank = []
    for rank in range(2):
        steps = [Operation("all_reduce", "DDP bucket 0", nbytes=32, ranks=(0, 1), number=10 * step + rank)
                 for step in range(2)]  # the same bucket in two steps: two entries
        user = launch(rank, None, 4, kernel="my_kernel")
        per_rank.append([launch(rank, steps[0], 32), launch(rank, steps[0], 0, "barrier_kernel"), user,
                         launch(rank, steps[1], 32)])
    found = per_operation(per_rank)
    assert [e.label for e in found] == ["all_reduce · DDP bucket 0", "my_kernel", "all_reduce · DDP bucket 0"]
    first = found[0]
    assert first.matrix.kernel == "one_shot_kernel + barrier_kernel" and first.matrix.ratio() == 1.0
    assert found[1].operation is None and found[1].matrix.minimum is None and len(found.named()) == 2
    assert found["my_kernel"] is found[1]
    with pytest.raises(KeyError, match="no operation labelled 'nope'.*all_reduce · DDP bucket 0, my_kernel"):
        found["nope"]
    text = found.text()
    assert "2 named operations, 1 other launches, 136 B crossed ranks" in text and "0→1 32 B, 1→0 32 B" in text
    assert "<table" in found.html() and "all_reduce · DDP bucket 0" in found.html()


def test_the_timeline_puts_operations_on_a_lane_of_their_own():
    from workbench.widgets.static import static_html
    from workbench.widgets.timeline import TimelineView, timeline_svg

    def span(rank, name, ts, dur, **args):
        return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": rank, "tid": args.get("program_id", 0),
                "args": {"target_rank": rank, **args}, **({"cat": OPERATION_CATEGORY} if "detail" in args else {})}

    events = [span(rank, "all_reduce · DDP bucket 0", 1.0, 50.0, program_id=OPERATIONS_TRACK, payload_size=4160,
                   detail="fc2.bias, fc2.weight") for rank in (0, 1)]
    events.append(span(0, "put", 2.0, 1.0, program_id=0, payload_size=64))
    timeline = Timeline.from_trace({"traceEvents": events, "metadata": {"world_size": 2}})
    assert [(s.rank, s.kind) for s in timeline.operations()] == [(0, "operation"), (1, "operation")]
    rows = timeline.table()
    assert rows[0]["events"] == 1 and rows[0]["operations"] == {"count": 1, "time": 50.0}
    text = timeline.text()
    assert text.startswith("timeline of 1 events and 2 named operations on 2 ranks")
    assert "rank 1: all_reduce · DDP bucket 0 (fc2.bias, fc2.weight), 4160 B per rank" in text
    svg = timeline_svg(timeline, (0.0, 60.0))
    assert "rank 0 · operations" in svg and ">all_reduce · DDP bucket 0<" in svg  # labelled: the bar is wide
    assert "rank 1 · operations" in timeline_svg(timeline, (0.0, 60.0), mode="program")
    twin = static_html(TimelineView(timeline))
    assert "named operations" in twin and "fc2.bias, fc2.weight" in twin


def test_a_race_says_which_operation_each_access_ran_in():
    first = Access(0, (0, 0, 0), "store", "/x/inbox.py", 105, "one_shot_kernel", "all_reduce · DDP bucket 1")
    second = Access(1, (0, 0, 0), "load", "/x/all_reduce.py", 83, "one_shot_kernel")
    race = Race("one_shot_kernel", "scratch", 0, 2, (2,), 1, first, second)
    assert str(first) == ("store at inbox.py:105 (rank 0, program (0, 0, 0), kernel one_shot_kernel, in all_reduce · "
                          "DDP bucket 1)")
    assert str(second).endswith("kernel one_shot_kernel)")
    assert "in all_reduce · DDP bucket 1" in races_text_table([race])
    assert "in all_reduce · DDP bucket 1)" in races_html_table([race])


def test_name_collectives_refuses_what_it_cannot_name():
    with pytest.raises(ValueError, match="has no fully_shard module and no tensor-parallel module: pass modules="):
        iris.distributed.name_collectives(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="the model has no module 'nope'"):
        iris.distributed.name_collectives(nn.Sequential(nn.Linear(2, 2)), modules=["nope"])
    with pytest.raises(ValueError, match="ddp_hook is for a DistributedDataParallel model"):
        iris.distributed.name_collectives(nn.Linear(2, 2), ddp_hook=lambda state, bucket: None)
    model = nn.Sequential(nn.Linear(2, 2))
    assert iris.distributed.name_collectives(model, modules=["0"]) is model
