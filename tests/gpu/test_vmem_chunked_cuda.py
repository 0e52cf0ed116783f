"""Upstream Iris's ``allocator_type="vmem_chunked"`` on GPUs: CUDA virtual memory in chunks of one size
(:class:`iris.heap.cuda.vmm.CudaVmmChunkedHeapMemory`), each its own ``cuMemCreate`` allocation shared with the
host's other ranks through file descriptors; the CPU ranks' cases (tests/rank_cases_vmem_chunked.py) on the GPU.

Run on a GPU machine by tests/gpu/run_gpu_checks.sh (``IRIS_GPU_WORLD=2`` on one GPU: the ranks share it).
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}
CASES = "tests.rank_cases_vmem_chunked"


def test_a_chunked_heap_on_gpus():
    results = run_ranks(WORLD, f"{CASES}:chunked_heap", env=CUDA, timeout=600)
    for done in results:
        granule = done["granularity"]  # the driver's minimum (2 MiB on H100 and H200)
        assert done["allocator_type"] == "vmem_chunked" and granule >= 4096
        assert done["chunk_size"] == max(granule, 1 << 20) == done["heap_size"]  # capped at the heap, >= a granule
        assert done["chunks"] == [1, 2] and done["peer_read"]


def test_the_chunk_size_from_the_environment_on_gpus():
    results = run_ranks(WORLD, f"{CASES}:chunk_size_from_the_environment", env={**CUDA,
                        "IRIS_VMEM_CHUNK_SIZE": "256KiB"}, timeout=600)
    for done in results:
        chunk = max(256 << 10, done["granularity"])  # at least a granule
        assert done["chunk_size"] == chunk and done["chunks"] == -(-(1 << 20) // chunk)
        need = 3 << 20  # three tensors of 1 MiB, one after the other
        assert done["heap_size"] == -(-need // chunk) * chunk and done["after"] == done["heap_size"] // chunk
