"""Device tracing on the CUDA backend: the CPU suite's tracing rank cases with IRIS_TEST_BACKEND=cuda on 2 ranks,
plus what tracing costs on a GPU (printed: run with ``pytest -s``).

Run on a GPU machine by tests/gpu/run_gpu_checks.sh (or ``pytest tests/gpu/test_tracing_cuda.py -s``); ranks
share a GPU when there is only one. On a GPU the clock is ``%globaltimer``, tied to the host's monotonic clock
at ``enable`` to within ``clock_offset_error_ns``, which the merged timeline's check allows for.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = "tests.rank_cases_tracing"
WORLD = 2
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}


def test_every_op_and_user_event_recorded_on_gpu():
    results = run_ranks(WORLD, f"{CASES}:every_op_traced", env=CUDA)
    assert [r["events"] for r in results] == [{"device_context": 2 * 15, "gluon": 2 * 15}] * WORLD


def test_merged_timeline_on_gpu(tmp_path):
    results = run_ranks(WORLD, f"{CASES}:merged_trace", str(tmp_path / "gpu.json"), env=CUDA)
    merged = json.loads((tmp_path / "gpu.json").read_text())
    timed = [e for e in merged["traceEvents"] if e["ph"] in ("X", "i")]
    assert min(e["ts"] for e in timed) == 0 and len(timed) == WORLD * 30
    error = merged["metadata"]["clock_offset_error_ns"]
    assert error < 1_000_000, error  # a kernel launch and a sync: microseconds, not milliseconds
    origin = merged["metadata"]["timestamp_offset_ns"]
    for r, result in enumerate(results):
        before, after = result["bracket"]
        assert all(before - error - 1 <= round(e["ts"] * 1000) + origin <= after + error + 1
                   for e in timed if e["pid"] == r), r
    print(f"\nmerge alignment: within {error} ns")


def test_overflow_dropped_and_counted_on_gpu():
    assert [r["dropped"] for r in run_ranks(WORLD, f"{CASES}:overflow", env=CUDA)] == [2 * 2 * 15 - 5] * WORLD


def test_cost_of_tracing_on_gpu():
    results = run_ranks(WORLD, f"{CASES}:cost", env=CUDA)
    for r in results:
        print(f"\nrank {r['rank']}: traced_ops (15 ops, 2 programs) median {r['off'] * 1e6:.1f} us untraced, "
              f"{r['on'] * 1e6:.1f} us traced ({r['on'] / r['off']:.2f}x)")
    assert all(r["on"] > 0 and r["off"] > 0 for r in results)
