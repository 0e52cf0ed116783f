"""Ranks on two hosts simulated on one GPU machine (``IRIS_HOST`` per rank, one rank per GPU): ``ctx.ccl``'s
collectives across the "hosts" (our kernels inside each, NCCL between them) against torch, and what cannot cross.

Run on a GPU machine by tests/gpu/run_gpu_checks.sh (or alone: python3 -m pytest tests/gpu/test_hosts_cuda.py).
Two ranks only: NCCL takes one rank per GPU in a communicator, and these machines have two GPUs.
"""

from __future__ import annotations

import pytest
import torch

from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")

CASES = "tests.rank_cases_hosts"
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda", "NCCL_NVLS_ENABLE": "0"}


def two_hosts(rank: int) -> dict:
    return {"IRIS_HOST": f"gpu-host-{rank}"}


def test_collectives_across_two_simulated_hosts_match_torch():
    results = run_ranks(2, f"{CASES}:collectives_across_hosts", env=CUDA, rank_env=two_hosts)
    for rank, result in enumerate(results):
        assert result["checked"] == ["torch.float32", "torch.bfloat16"]
        assert result["domains"] == [[0], [1]] and result["hosts"] == ["gpu-host-0", "gpu-host-1"]
        assert result["near_store"]  # its own heap; a store masked off everywhere touched the other host's nothing
        far = 1 - rank
        assert f"rank {rank} (gpu-host-{rank}) cannot address rank {far}'s heap (gpu-host-{far})" in result["as_remote"]
        assert "matmul_all_reduce runs over every rank" in result["ops"]


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_a_kernel_storing_to_the_other_host_faults_loudly(debug):
    results = run_ranks(2, f"{CASES}:far_store_on_gpu", debug, env=CUDA, rank_env=two_hosts)
    for result in results:
        print(result["error"][:300])
        expected = "device-side assert" if debug else "illegal memory access"
        assert expected in result["error"], result["error"]
