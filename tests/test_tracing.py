"""Device tracing (iris.tracing) on the CPU backend, 2 and 3 real ranks: every op recorded with its ranks and
payload, per-rank and merged export with aligned timestamps, overflow dropped and counted, user events.

The rank cases (tests/rank_cases_tracing.py) check each rank's events on the host; these tests judge what
only all ranks together show. The sm_90 compile (tests/test_gluon_sm90.py) checks that tracing off is free.
"""

from __future__ import annotations

import inspect
import json

import pytest

import iris
from iris.instruments.tracing import EVENT_NAMES
from iris.language.trace_events import BUFFERS, TRACING_SLOTS

from .multirank import run_ranks

CASES = "tests.rank_cases_tracing"

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


def test_upstream_names_ids_and_layout():
    event = iris.TraceEvent()
    assert (event.load, event.put, event.atomic_cas, event.atomic_max) == (0, 3, 7, 13)
    assert (event.fetch, event.compute, event.reduce, event.wait, event.barrier) == (1024, 2048, 2049, 3072, 3073)
    assert EVENT_NAMES[5] == "atomic_add" and EVENT_NAMES[3073] == "barrier"
    assert TRACING_SLOTS == 17 and [name for name, _ in BUFFERS][-3:] == ["duration_cycles", "op_index",
                                                                         "payload_size"]
    assert list(inspect.signature(iris.DeviceContext.initialize.fn).parameters) == [
        "context_tensor", "rank", "world_size", "tracing"]
    assert list(inspect.signature(iris.tracing.DeviceTracing.record_event_start.fn).parameters) == [
        "self", "event_id", "target_rank", "address", "pid_m", "pid_n", "mask"]
    assert list(inspect.signature(iris.tracing.Tracing.export).parameters) == ["self", "filename", "merge"]


@pytest.mark.parametrize("world", [2, 3])
def test_every_op_and_user_event_recorded(world):
    results = run_ranks(world, f"{CASES}:every_op_traced")
    assert [r["events"] for r in results] == [{"device_context": 2 * 15, "gluon": 2 * 15}] * world


def test_merge_aligns_ranks_on_one_timeline(tmp_path):
    world = 3
    results = run_ranks(world, f"{CASES}:merged_trace", str(tmp_path / "run.json"))
    merged = json.loads((tmp_path / "run.json").read_text())
    assert merged == results[0]["merged"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"] + [f"run_rank{r}.json" for r in range(world)]
    timed = [e for e in merged["traceEvents"] if e["ph"] in ("X", "i")]
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e["name"] == "process_name"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in merged["traceEvents"] if e["name"] == "thread_name"}
    assert tracks == {(r, p): f"program {p}" for r in range(world) for p in range(2)}  # a track per program
    assert all(e["tid"] == e["args"]["program_id"] for e in timed)
    assert names == {r: f"Rank {r}" for r in range(world)}
    assert min(e["ts"] for e in timed) == 0 and merged["metadata"]["total_events"] == len(timed) == world * 30
    origin = merged["metadata"]["timestamp_offset_ns"]
    for r, result in enumerate(results):
        before, after = result["bracket"]
        mine = [e for e in timed if e["pid"] == r]
        assert len(mine) == 30 and result["mine_events"] == 30 + 3 and result["mine_metadata"]["rank"] == r
        # On the host's clock, inside its bracket (ts is in µs to the ns: 1 ns of rounding either way).
        assert all(before - 1 <= round(e["ts"] * 1000) + origin <= after + 1 for e in mine), r
    assert merged["metadata"]["dropped_events"] == {str(r): 0 for r in range(world)}  # JSON keys
    assert merged["metadata"]["clock_offset_error_ns"] == 0  # CPU: the device clock is the host's


def test_overflow_is_dropped_and_counted_never_written():
    results = run_ranks(2, f"{CASES}:overflow")
    assert [r["dropped"] for r in results] == [2 * 2 * 15 - 5] * 2


def test_user_events_in_an_untraced_kernel_touch_nothing():
    # tracing=False points the device tracing at the context tensor itself: a user event recorded there once
    # read the heap bases as buffer addresses and crashed the rank (SIGSEGV under the race checker).
    results = run_ranks(2, f"{CASES}:user_events_when_tracing_is_compiled_out")
    assert results == [{"rank": r, "recorded": [0, 0], "races": 0} for r in range(2)]


def test_tracing_before_enable_says_what_to_do():
    ctx = iris.iris("1MiB", backend="cpu")
    with pytest.raises(RuntimeError, match=r"rank 0: tracing.export before tracing.enable\(\)"):
        ctx.tracing.export()
    with pytest.raises(ValueError, match="max_events >= 1"):
        ctx.tracing.enable(max_events=0)
    context = ctx.get_device_context()
    assert context[2 + 1:2 + 1 + TRACING_SLOTS].tolist() == [0] * TRACING_SLOTS
    ctx.tracing.enable(max_events=3)
    slots = context[2 + 1:2 + 1 + TRACING_SLOTS].tolist()
    assert slots[:2] == [1, 3] and all(slots[2:])
    assert slots[-1] == ctx.tracing.trace_buffers["payload_size"].data_ptr()
    assert context[-1].item() == ctx.heap_size  # ours, after upstream's slots
