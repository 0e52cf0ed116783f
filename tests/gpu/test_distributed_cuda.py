"""torch.distributed's ``iris`` backend on the CUDA backend: the CPU suite's rank cases with IRIS_TEST_BACKEND=cuda
(every operation against gloo, DDP/FSDP2/tensor parallelism against gloo), and CUDA-graph capture.

Run with ``IRIS_GPU_WORLD=N python3 -m pytest -q tests/gpu/test_distributed_cuda.py`` (default: every GPU, at least
2 ranks; ranks share GPUs when there are more ranks than GPUs).
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = "tests.rank_cases_distributed"
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}


def test_every_operation_matches_gloo():
    results = run_ranks(WORLD, f"{CASES}:every_operation", env=CUDA, timeout=600)
    assert results[0]["compared"] > 25


def test_training_loops_match_gloo():
    run_ranks(WORLD, f"{CASES}:training_loops", env=CUDA, timeout=600)


def test_cuda_graph_capture_and_replay():
    assert all(r["replays"] == 3 for r in run_ranks(WORLD, f"{CASES}:graph_capture", env=CUDA, timeout=300))
