"""The Gluon collectives (``iris.ccl.Config(use_gluon=True)``: all_gather and all_to_all) on CPU ranks, run by the
Triton interpreter, against torch (tests/rank_cases_ccl_gluon.py); their layouts; tests/gpu/test_ccl_cuda.py
runs the same cases on GPUs, and tests/test_gluon_sm90.py compiles the kernels for sm_90."""

from __future__ import annotations

import pytest

from iris.ccl import Config
from iris.ccl.gluon_layouts import flat_layout, tile_layout

from .multirank import run_ranks

CASES = "tests.rank_cases_ccl_gluon"


@pytest.fixture(autouse=True)
def _no_heap_files(no_heap_files_left_behind):
    yield


def test_layouts_give_each_thread_16_contiguous_bytes():
    assert flat_layout(2, 4096, 8, 32).size_per_thread == [8]  # bf16: 8 x 2 bytes
    assert flat_layout(8, 4096, 8, 32).size_per_thread == [2]
    assert flat_layout(1, 4096, 4, 32).size_per_thread == [16]
    assert flat_layout(4, 64, 8, 32).size_per_thread == [1]  # a block smaller than the threads: one each
    tile = tile_layout(2, 32, 64, 8, 32)  # 8 bf16 per thread, 8 threads along a row of 64, 4 rows per warp
    assert (tile.size_per_thread, tile.threads_per_warp, tile.warps_per_cta) == ([1, 8], [4, 8], [8, 1])
    narrow = tile_layout(4, 4, 16, 2, 32)  # a row of 16 fp32: 4 threads of 4 elements, 8 rows per warp
    assert (narrow.size_per_thread, narrow.threads_per_warp) == ([1, 4], [8, 4])


def test_config_takes_use_gluon():
    assert Config(use_gluon=True).use_gluon
    with pytest.raises(TypeError, match="use_gluon"):
        Config(use_gluon=1)


@pytest.mark.parametrize("world, dtypes", [(2, None), (3, ["float32", "bfloat16", "int8"])])
def test_every_dtype_and_variant_against_torch(world, dtypes):
    # 5 x 37 inputs: blocks of 32 (the last one partial) over 3 programs; all_to_all chunks of 19 columns. Two
    # ranks: every dtype (8, 4, 2 and 1 bytes, floats and integers); three ranks: one of each size
    results = run_ranks(world, f"{CASES}:all_gather_and_all_to_all_against_torch", [5, 37], 19, 32, 3, dtypes,
                        timeout=120)
    assert all(r["checked"] == 2 * len(dtypes or range(6)) + 2 * 3 for r in results)


def test_upstream_calls_async_op_a_workspace_shared_with_triton_and_errors():
    results = run_ranks(2, f"{CASES}:host_context_async_and_errors", timeout=120)
    for r in results:
        assert r["context"] == "IrisGluon"  # upstream's tests and example 25 on upstream's Gluon host context
        assert len(r["messages"]) == 8
        # the rank is named, except in Config's own check (made before any rank is known)
        assert all(f"rank {r['rank']}:" in message for message in r["messages"][:7]), r["messages"]
        assert "use_gluon=False" in r["messages"][0] and "all_gather and all_to_all" in r["messages"][0]


def test_over_strided_process_groups():
    results = run_ranks(4, f"{CASES}:over_strided_groups", timeout=120)
    assert [r["member"] for r in results] == [0, 0, 1, 1]


def test_race_checker_finds_no_race_in_the_gluon_collectives():
    results = run_ranks(2, f"{CASES}:race_free_under_the_checker", timeout=120)
    assert [r["collectives"] for r in results] == [0, 0]
    assert results[0]["control"] > 0  # the control race, on the rank that ran it: the checker was watching
