"""Collectives (iris.ccl) on the CPU backend with 2 and 3 real ranks, against torch references.

The rank cases in tests/rank_cases_ccl.py check results inside each rank and raise on a mismatch; each
multi-rank run is broad because process start-up dominates on small machines.
"""

from __future__ import annotations

import inspect

import pytest

import iris
from iris.ccl import Config, choose_variant, owned_range
from iris.ccl.rules import choose_gather_variant, choose_scatter_variant

from .multirank import run_ranks
from .rank_cases_ccl import back_to_back_cases, every_variant_checks

CASES = "tests.rank_cases_ccl"
ODD_SHAPES = [[5, 37], [1, 1000]]  # 185 and 1000 elements: neither a multiple of the 32-element blocks


@pytest.fixture(autouse=True)
def _no_heap_files(no_heap_files_left_behind):
    yield


# -- single-process: the public surface ------------------------------------------------------------

def test_ccl_methods_have_upstream_signatures():
    expected = {
        "all_reduce": ["output_tensor", "input_tensor", "op", "group", "async_op", "config", "workspace"],
        "all_gather": ["output_tensor", "input_tensor", "group", "async_op", "config", "workspace"],
        "all_gather_preamble": ["output_tensor", "input_tensor", "group", "config", "workspace"],
        "all_to_all": ["output_tensor", "input_tensor", "group", "async_op", "config"],
        "reduce_scatter": ["output_tensor", "input_tensor", "op", "group", "async_op", "config"],
        "all_reduce_preamble": ["output_tensor", "input_tensor", "config", "workspace"],
    }
    for name, parameters in expected.items():
        assert list(inspect.signature(getattr(iris.ccl.CCL, name)).parameters)[1:] == parameters, name
    assert list(inspect.signature(iris.Iris.device_barrier).parameters) == ["self", "group"]
    assert int(iris.ccl.ReduceOp.SUM) == 0 and int(iris.ccl.ReduceOp.BXOR) == 6


def test_config_checks_its_fields():
    assert Config().all_reduce_variant is None
    assert Config(all_gather_variant="persistent").all_gather_variant == "persistent"  # upstream's name
    assert Config(all_gather_variant="ring").all_gather_variant == "ring"  # upstream's ring (tests/test_ccl_rooted.py)
    with pytest.raises(ValueError, match="all_gather_variant"):
        Config(all_gather_variant="tree")
    for bad in (dict(all_reduce_variant="tree"), dict(block_size=100), dict(block_size_n=48),
                dict(comm_sms=0), dict(reduce_scatter_variant="ring"), dict(all_reduce_distribution=2)):
        with pytest.raises(ValueError):
            Config(**bad)
    assert Config(use_gluon=True).use_gluon  # all_gather and all_to_all run Gluon kernels (tests/test_ccl_gluon.py)


def test_size_rule_and_reduce_scatter_ownership():
    assert choose_variant(256 << 10, 2) == "one_shot"
    assert choose_variant(4 << 20, 2) == "one_shot" and choose_variant((4 << 20) + 2, 2) == "two_shot_push"
    assert choose_variant(256 << 10, 4) == "one_shot" and choose_variant(1 << 20, 4) == "two_shot_push"
    assert choose_variant(1 << 20, 8) == "two_shot_push" and choose_variant(64 << 20, 3) == "two_shot_push"
    assert choose_scatter_variant(None, 16 << 20, 4) == "push"
    assert choose_scatter_variant(None, 64 << 20, 2) == "two_shot"
    assert choose_scatter_variant("two_shot", 8, 2) == "two_shot"
    assert choose_gather_variant(None, 4 << 20, 2) == "push" and choose_gather_variant(None, 2 << 20, 4) == "pull"
    assert choose_gather_variant("partitioned", 1024, 2) == "push" and choose_gather_variant("pull", 8, 2) == "pull"
    # the copy engines where the backend has them (GPUs), from input bytes of 4 MiB x (world - 1)^2
    assert choose_gather_variant(None, 4 << 20, 2, copy_engines=True) == "copy_engines"
    assert choose_gather_variant(None, 2 << 20, 2, copy_engines=True) == "push"
    assert choose_gather_variant(None, 36 << 20, 4, copy_engines=True) == "copy_engines"
    assert choose_gather_variant(None, 16 << 20, 4, copy_engines=True) == "pull"
    assert choose_gather_variant(None, 64 << 20, 4) == "pull"  # no copy engines (the CPU, or Gluon)
    ranges = [owned_range(185, r, 3) for r in range(3)]
    assert ranges == [(0, 64), (64, 128), (128, 185)]
    assert [owned_range(20, r, 4) for r in range(4)] == [(0, 16), (16, 20), (20, 20), (20, 20)]


# -- multi-rank ------------------------------------------------------------------------------------

@pytest.mark.parametrize("world", [2, 3])
def test_all_reduce_every_variant_dtype_and_odd_shape(world):
    shapes = ODD_SHAPES if world == 2 else ODD_SHAPES[:1]  # 3 ranks: the odd 2-D shape, every variant and dtype
    results = run_ranks(world, f"{CASES}:all_reduce_every_variant", shapes, 32, timeout=240)
    # per shape: 3 dtypes x (every variant and the size rule x 2 calls + those that run in place once more)
    assert all(r["checked"] == len(shapes) * 3 * every_variant_checks(2) for r in results)


def test_spinlock_all_reduce_has_a_lock_per_tile_and_refuses_too_few():
    results = run_ranks(2, f"{CASES}:spinlock_locks_per_tile", timeout=120)
    assert all(f"rank {r['rank']}: Lock array too small" in r["message"] for r in results), results


@pytest.mark.parametrize("world", [2, 3])
def test_all_gather_all_to_all_reduce_scatter(world):
    results = run_ranks(world, f"{CASES}:other_collectives", 32, timeout=240)
    assert [r["owned"] for r in results] == [hi - lo for lo, hi in (owned_range(185, r, world)
                                                                    for r in range(world))]


def test_back_to_back_calls_without_host_synchronisation():
    # 185 elements in 32-element blocks: several programs, each with its own flags and inbox rows;
    # 5 calls x (every all_reduce variant, one_shot in place, 4 all_gather cases, every reduce_scatter and all_to_all
    # variant)
    results = run_ranks(3, f"{CASES}:back_to_back", 185, 5, 32, timeout=240)
    assert all(r["checked"] == 5 * back_to_back_cases() for r in results)


def test_eight_ranks_every_variant_back_to_back():
    # Issue 44: the collectives take any world size. 8 CPU ranks (what a GPU machine of 8 runs): every all_reduce,
    # all_gather, reduce_scatter and all_to_all variant, two calls each queued without host synchronisation, 37
    # elements in 16-element blocks (chunks of 16, 16, 5 and empty ones: reduce_scatter's and two_shot_push's tails).
    results = run_ranks(8, f"{CASES}:back_to_back", 37, 2, 16, timeout=300)
    assert all(r["checked"] == 2 * back_to_back_cases() for r in results)


def test_repeated_calls_replay_without_the_host_path():
    results = run_ranks(2, f"{CASES}:repeated_calls_replay", 100, timeout=240)
    assert all("shape" in r["message"] and "rank " in r["message"] for r in results)
    assert all(r["reused_address"] for r in results)  # else the reused-address case checked nothing


def test_device_barrier_async_op_and_errors():
    results = run_ranks(3, f"{CASES}:barrier_async_and_errors", timeout=240)
    ranks_named = [all(f"rank {r['rank']}:" in m for m in r["messages"][:5]) for r in results]
    assert all(ranks_named), results[0]["messages"]


def test_an_inbox_that_does_not_fit_says_which_variant_needs_none():
    for r in run_ranks(2, f"{CASES}:inbox_out_of_heap", timeout=240):
        message = r["message"]
        assert message is not None and f"rank {r['rank']}:" in message, message
        assert "all_reduce 'two_shot_push' keeps a scratch (its inbox) of 4194304 bytes" in message, message
        assert "Config(all_reduce_variant='two_shot') needs none" in message, message
