"""broadcast, reduce, gather, scatter and point-to-point on the CUDA backend: the CPU suite's rank cases with
IRIS_TEST_BACKEND=cuda (the copy-engine variant too), larger tensors on the GPUs' default launch shapes, and CUDA
graph capture of every one of them.

Run with ``IRIS_GPU_WORLD=N python3 -m pytest -q tests/gpu/test_ccl_rooted_cuda.py`` (default: every GPU, at least
2 ranks; ranks share GPUs when there are more ranks than GPUs).
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = "tests.rank_cases_rooted"
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}


def test_rooted_collectives_small_blocks_odd_shapes():
    run_ranks(WORLD, f"{CASES}:rooted_collectives", 32, env=CUDA, timeout=600)


def test_rooted_collectives_default_launch_shape():
    # 1M + 3 elements: many 4096-element blocks a program, tails, two_shot chunks of unequal length
    run_ranks(WORLD, f"{CASES}:rooted_collectives", None, [[1025, 1023]], env=CUDA, timeout=600)


def test_groups_refusals_and_point_to_point():
    if WORLD == 4:
        run_ranks(WORLD, f"{CASES}:rooted_in_groups", env=CUDA)
    run_ranks(WORLD, f"{CASES}:rooted_refusals", env=CUDA)
    run_ranks(WORLD, f"{CASES}:point_to_point", None, env=CUDA)


def test_cuda_graph_capture_and_replay():
    assert all(r["replays"] == 3 for r in run_ranks(WORLD, f"{CASES}:rooted_graph_capture", 300_001, env=CUDA))


def test_gluon_twins_and_all_to_all_v():
    run_ranks(WORLD, f"{CASES}:rooted_collectives", None, [[1025, 1023]], True, env=CUDA, timeout=600)
    run_ranks(WORLD, f"{CASES}:point_to_point", None, True, env=CUDA)
    run_ranks(WORLD, f"{CASES}:all_to_all_v_cases", 32, 64, env=CUDA)
