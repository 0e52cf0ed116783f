"""Collectives on the CUDA backend: the CPU suite's rank cases with IRIS_TEST_BACKEND=cuda, plus larger
tensors on the GPUs' default launch shapes (persistent grids, wide remote accesses) and CUDA graph capture.

Run with ``IRIS_GPU_WORLD=N python3 -m pytest -q tests/gpu/test_ccl_cuda.py`` (default: every GPU, at
least 2 ranks; ranks share GPUs when there are more ranks than GPUs).
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu import WORLD
from tests.multirank import run_ranks
from tests.rank_cases_ccl import back_to_back_cases, every_variant_checks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = "tests.rank_cases_ccl"
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}


def test_all_reduce_every_variant_odd_shapes_small_blocks():
    results = run_ranks(WORLD, f"{CASES}:all_reduce_every_variant", [[5, 37], [1, 1000]], 32, env=CUDA)
    assert all(r["checked"] == 2 * 3 * every_variant_checks(2) for r in results)


def test_all_reduce_every_variant_default_launch_shape():
    # 1M + 3 elements: many 4096-element blocks per program, tails, two_shot chunks of unequal length
    shapes = [[1025, 1023], [64, 1024]]
    results = run_ranks(WORLD, f"{CASES}:all_reduce_every_variant", shapes, None, 3, env=CUDA, timeout=600)
    assert all(r["checked"] == 2 * 3 * every_variant_checks(3) for r in results)


def test_back_to_back_calls_without_host_synchronisation():
    # 1M + 5 elements over the default launch shapes; 40 calls queued for each case, or 10 where ranks take turns
    # on shared GPUs: each call there waits out every sharer's time slice (40 calls at 8 ranks on 2 GPUs ran
    # past 150 s), and a reuse too early shows up in the first calls already
    calls = 40 if WORLD <= torch.cuda.device_count() else 10
    results = run_ranks(WORLD, f"{CASES}:back_to_back", (1 << 20) + 5, calls, env=CUDA, timeout=300)
    assert all(r["checked"] == calls * back_to_back_cases() for r in results)


def test_all_gather_all_to_all_reduce_scatter():
    run_ranks(WORLD, f"{CASES}:other_collectives", 32, env=CUDA)


def test_device_barrier_async_op_and_errors():
    run_ranks(WORLD, f"{CASES}:barrier_async_and_errors", env=CUDA)


def test_cuda_graph_capture_and_replay():
    assert all(r["replays"] == 3 for r in run_ranks(WORLD, f"{CASES}:graph_capture", 300_001, env=CUDA))


def test_repeated_calls_launch_the_compiled_kernel_directly():
    # on a GPU a replay calls the compiled kernel's launcher (BoundLaunch.direct), with addresses
    results = run_ranks(WORLD, f"{CASES}:repeated_calls_replay", 100_003, env=CUDA)
    assert all(r["reused_address"] for r in results)


# -- the Gluon collectives (Config(use_gluon=True)): tests/rank_cases_ccl_gluon.py --------------------------------

GLUON = "tests.rank_cases_ccl_gluon"


def test_gluon_all_gather_all_to_all_default_launch_shape():
    # 1025 x 1023 inputs over every SM in 4096-element blocks (push and pull by turns), all_to_all chunks of 1000
    # columns in 32 x 64 and 4 x 16 tiles, every dtype; replays call the compiled Gluon kernels directly
    results = run_ranks(WORLD, f"{GLUON}:all_gather_and_all_to_all_against_torch", [1025, 1023], 1000, None, None,
                        env=CUDA, timeout=600)
    assert all(r["checked"] == 2 * 6 + 2 * 3 for r in results)


def test_gluon_upstream_calls_async_op_workspace_shared_with_triton_and_errors():
    assert {r["context"] for r in run_ranks(WORLD, f"{GLUON}:host_context_async_and_errors", env=CUDA)} == {"IrisGluon"}


def test_gluon_over_strided_process_groups():
    run_ranks(4, f"{GLUON}:over_strided_groups", env=CUDA)  # 4 ranks: they share GPUs where fewer
