"""The heap and host API on the CUDA backend: the CPU suite's multi-rank cases, run with IRIS_TEST_BACKEND=cuda.

Run on a GPU machine by tests/gpu/run_gpu_checks.sh; ranks share GPUs when there are more ranks than GPUs.
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = "tests.rank_cases_heap"
# The IPC heap's tests: allocator "torch" (the default on cuda is the VMM heap: tests/gpu/test_vmm_heap_cuda.py)
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda", "IRIS_ALLOCATOR": "torch"}


def test_creation_family_and_offsets_agree():
    results = run_ranks(WORLD, f"{CASES}:creation_family", env=CUDA)
    assert all(r["offsets"] == results[0]["offsets"] for r in results)


def test_as_remote_host_reads_and_writes_on_gpu():
    run_ranks(WORLD, f"{CASES}:as_remote_host", env=CUDA)


def test_free_and_reuse():
    results = run_ranks(WORLD, f"{CASES}:free_and_reuse", env=CUDA)
    assert len(set(results[0]["offsets"])) <= 2


def test_divergence_and_oom():
    for r in run_ranks(2, f"{CASES}:divergence_and_oom", env=CUDA):
        assert "diverged" in r["divergence"] and "out of memory" in r["oom"]


def test_broadcast():
    for r in run_ranks(WORLD, f"{CASES}:broadcast_values", env=CUDA):
        assert r["tensor"] == ["ndarray", [0, 1, 2, 3]] and r["obj"]["r"] == 1


def test_kernel_reads_peer_heap_through_translation():
    results = run_ranks(WORLD, "tests.gpu.rank_cases_cuda:kernel_ring_exchange", env=CUDA)
    assert all(r["ok"] for r in results), results


def test_upstream_host_api_on_gpu():
    """ctx.device is "cuda:N", heap_bases and the barrier flags on the GPU, channels-last strides on the heap."""
    for rank, r in enumerate(run_ranks(WORLD, "tests.rank_cases_upstream_host:upstream_host_api", env=CUDA)):
        assert r["as_remote_messages"][0] == (f"rank {rank}: as_remote rank {WORLD} is out of range: "
                                              f"the valid ranks are 0 to {WORLD - 1}")


def test_dropped_heaps_are_freed_before_a_new_one():
    """Ten heaps of an eighth of the GPU each, every one dropped in a reference cycle: the collector runs before
    each new heap (upstream's tests make an 8 GiB heap per test; the ninth failed on an 80 GiB H100)."""
    results = run_ranks(WORLD, f"{CASES}:dropped_heaps_are_freed", env=CUDA, timeout=300)
    assert all(result["size"] > 0 for result in results)
