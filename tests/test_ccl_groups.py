"""Collectives over torch.distributed process groups (iris.ccl.groups) on 4 CPU ranks, against gloo.

One 4-rank run checks every collective and variant over WORLD, consecutive ([0, 1], [2, 3]) and strided
([0, 2], [1, 3]) groups, two groups at once, bit for bit against torch.distributed on the same groups, and
the errors for bad groups (tests/rank_cases_ccl_groups.py).
"""

from __future__ import annotations

import pytest

from iris.ccl import ALL_GATHER_VARIANTS, ALL_REDUCE_VARIANTS
from iris.ccl.config import REDUCE_SCATTER_VARIANTS

from .multirank import run_ranks

CASES = "tests.rank_cases_ccl_groups"


@pytest.fixture(autouse=True)
def _no_heap_files(no_heap_files_left_behind):
    yield


def test_every_collective_over_world_consecutive_and_strided_groups_and_bad_groups():
    results = run_ranks(4, f"{CASES}:every_collective_over_groups", timeout=300)
    # per group kind and dtype: all_reduce (variants + size rule) x sync/async, all_gather variants x
    # sync/async, reduce_scatter; plus all_to_all; then 9 interleaved calls and 3 concurrent ones
    per_kind = 2 * (2 * (len(ALL_REDUCE_VARIANTS) + 1) + 2 * len(ALL_GATHER_VARIANTS)
                    + len(REDUCE_SCATTER_VARIANTS)) + 1
    assert all(r["checked"] == 3 * per_kind + 9 + 3 for r in results)
    for r in results:  # upstream's (rank_in_group, rank_global, world_size, rank_start, rank_stride)
        rank = r["rank"]
        assert r["info"]["world"] == [rank, rank, 4, 0, 1]
        assert r["info"]["consecutive"] == [rank % 2, rank, 2, rank // 2 * 2, 1]
        assert r["info"]["strided"] == [rank // 2, rank, 2, rank % 2, 2]
        # a group this rank is not in, not a group, unevenly spaced ranks: refused, naming the rank
        assert len(r["messages"]) == (3 if rank < 2 else 4), r["messages"]
        assert all(f"rank {rank}:" in message for message in r["messages"]), r["messages"]
