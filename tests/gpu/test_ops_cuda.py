"""GEMM + communication ops (ctx.ops) on the CUDA backend: the CPU suite's rank cases with IRIS_TEST_BACKEND=cuda
on 2 ranks (3 and 4 for the chunked path's pieces, and ``IRIS_GPU_WORLD`` too for the one-kernel path; ranks share
GPUs where there are fewer), at shapes of a few hundred, fp32, bf16 and fp16.

Run on a GPU machine by tests/gpu/run_gpu_checks.sh (or ``pytest tests/gpu/test_ops_cuda.py``).
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = "tests.rank_cases_ops"
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}


def test_every_op_matches_torch_on_gpu():
    results = run_ranks(2, f"{CASES}:every_op", 300, 260, 514, ["float32", "bfloat16", "float16"], env=CUDA)
    assert [r["paths"] for r in results] == [["chunked", "sequential"]] * 2
    assert all(r["replays"] > 0 for r in results), "repeated eager calls replay their CUDA graphs"


def test_errors_on_gpu():
    results = run_ranks(2, f"{CASES}:errors", env=CUDA)
    assert all(message is not None for message in results[0]["messages"].values()), results[0]["messages"]


def test_views_as_inputs_and_alternating_shapes_on_gpu():
    errors = run_ranks(2, f"{CASES}:odd_layouts", env=CUDA)[0]["errors"]
    assert all(error < 1e-3 for error in errors.values()), errors  # (TF32 may round float32 GEMMs)



@pytest.mark.parametrize("world", sorted({2, 4, WORLD}))
def test_matmul_reduce_scatter_in_one_kernel_on_gpu(world):
    results = run_ranks(world, f"{CASES}:peers_first_path", env=CUDA, timeout=300)
    assert all(r["checked"] == 2 * 2 * 2 + 3 for r in results), results


@pytest.mark.parametrize("world", [2, 3, 4])
def test_pieces_that_grow_or_shrink_on_gpu(world):
    """Every op on the chunked path, cut three ways and called repeatedly (replayed graphs), against the
    sequential path; from 3 ranks a rank pushes to several peers in turn, and stages its reductions' pieces."""
    results = run_ranks(world, f"{CASES}:uneven_pieces", env=CUDA)
    for result in results:
        assert all(error < 1e-3 for error in result["errors"].values()), result["errors"]  # (TF32)


def test_all_gather_matmul_staging_on_gpu():
    """all_gather_matmul's gathered A on GPUs: the layout the ranks agree on, the staged A and the product, and
    each element rounded once in bf16, with row-major and column-major shards."""
    for results in run_ranks(2, f"{CASES}:gathered_layouts", env=CUDA):
        assert all(error < 1e-3 for _, error in results.values()), results  # (TF32)
    for errors in run_ranks(2, f"{CASES}:gathered_product_rounded_once", env=CUDA):
        assert all(error == 0.0 for error in errors.values()), errors


def test_a_call_interrupted_while_queueing_is_not_trusted_again_on_gpu():
    first, second = run_ranks(2, f"{CASES}:interrupted_call", env=CUDA)
    assert first["interrupted"] and first["refused"].startswith("rank 0: an earlier call of matmul_all_gather stopped")
    assert first["error"] < 1e-3 and second["error"] < 1e-3, (first, second)  # (TF32)
