"""broadcast, reduce, gather, scatter and point-to-point (iris.ccl) on the CPU backend with 2, 3 and 4 real ranks,
against torch.distributed and seeded references (the rank cases in tests/rank_cases_rooted.py check inside each rank).
"""

from __future__ import annotations

import inspect

import pytest

import iris
from iris.ccl.rules import choose_reduce_variant, choose_rooted_variant

from .multirank import run_ranks

CASES = "tests.rank_cases_rooted"


@pytest.fixture(autouse=True)
def _no_heap_files(no_heap_files_left_behind):
    yield


def test_methods_have_upstreams_names_and_both_spellings():
    ccl = iris.ccl.CCL
    assert list(inspect.signature(ccl.gather).parameters)[1:4] == ["output_tensor", "input_tensor", "dst"]
    assert list(inspect.signature(ccl.scatter).parameters)[1:4] == ["output_tensor", "input_tensor", "src"]
    for name in ("broadcast", "reduce", "reduce_preamble"):
        assert "tensors" in inspect.signature(getattr(ccl, name)).parameters  # (tensor) or (output, input)
    assert {"dst", "root", "op"} <= set(inspect.signature(ccl.reduce).parameters)
    for name in ("send", "recv", "isend", "irecv"):
        assert "p2p_state" in inspect.signature(getattr(ccl, name)).parameters
    assert iris.ccl.p2p.P2POp._fields == ("op", "tensor", "peer", "group", "tag")


def test_size_rules():
    assert choose_rooted_variant(None, 64 << 20, 2) == "push"  # no copy engines on the CPU
    assert choose_rooted_variant(None, 4 << 20, 2, copy_engines=True) == "copy_engines"
    assert choose_rooted_variant(None, 1 << 20, 2, copy_engines=True) == "push"
    assert choose_reduce_variant(None, 4 << 20, 2) == "push" and choose_reduce_variant(None, 2 << 20, 4) == "two_shot"
    assert choose_reduce_variant("one_shot", 1 << 30, 2) == "push"  # upstream's name for it


@pytest.mark.parametrize("world", [2, 3])
def test_rooted_collectives_every_root_variant_and_spelling(world):
    shapes = [[5, 37], [1000]] if world == 2 else [[5, 37]]  # 3 ranks: the odd 2-D shape, every root
    results = run_ranks(world, f"{CASES}:rooted_collectives", 32, shapes, timeout=400)
    assert len({r["calls"] for r in results}) == 1


def test_rooted_collectives_in_groups_and_point_to_point_on_4_ranks():
    run_ranks(4, f"{CASES}:rooted_in_groups", timeout=240)
    run_ranks(4, f"{CASES}:point_to_point", 256, timeout=240)


def test_refusals_say_what_and_where():
    results = run_ranks(2, f"{CASES}:rooted_refusals", timeout=120)
    assert "rank 1" in results[1]["said"][0]


def test_point_to_point_on_2_ranks():
    results = run_ranks(2, f"{CASES}:point_to_point", 32, timeout=240)
    assert "got a message of 40 bytes" in results[1]["said"]


def test_gluon_twins_on_2_ranks():
    run_ranks(2, f"{CASES}:rooted_collectives", 32, [[5, 37]], True, timeout=400)
    run_ranks(2, f"{CASES}:point_to_point", 256, True, timeout=240)


@pytest.mark.parametrize("world", [2, 3])
def test_all_to_all_v_equal_and_unequal_widths(world):
    results = run_ranks(world, f"{CASES}:all_to_all_v_cases", 4, 4, timeout=300)
    assert all(f"rank {r}: all_to_all_v: output_split_sizes[{(r + 1) % world}] differs" in result["said"]
               for r, result in enumerate(results))


def test_upstreams_function_forms():
    run_ranks(2, f"{CASES}:upstream_function_forms", timeout=120)
