"""Upstream Iris's ``allocator_type="vmem_chunked"`` (its PR #516) on the CPU backend, with real ranks: a heap of
chunks of one size that grows a chunk at a time at fixed bases (a sparse /dev/shm mapping taken a chunk at a time:
:class:`iris.heap.cpu.ShmChunkedHeapMemory` says why that is the honest equivalent of mapping CUDA chunks), with
upstream's ``chunk_size``, ``granularity``, ``get_num_chunks`` and ``get_stats``. The GPU's (CUDA virtual memory):
tests/gpu/test_vmem_chunked_cuda.py.
"""

from __future__ import annotations

import mmap

import pytest

from iris.heap.chunks import DEFAULT_CHUNK_SIZE, chunk_size_for
from iris.runtime.heap_choice import choose_allocator, chunk_size

from .multirank import run_ranks

CASES = "tests.rank_cases_vmem_chunked"

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


def test_the_choice_and_the_chunk(monkeypatch):
    monkeypatch.delenv("IRIS_ALLOCATOR", raising=False)
    assert choose_allocator("vmem_chunked", "cpu") == "vmem_chunked"
    monkeypatch.setenv("IRIS_ALLOCATOR", "vmem_chunked")
    assert choose_allocator(None, "cpu") == "vmem_chunked"
    with pytest.raises(NotImplementedError, match="allocator_type='vmem_chunked'"):  # vmem's refusal names it
        choose_allocator("vmem", "cpu")
    # upstream's: 256 MiB, capped at the heap, at least a granule; a power of two (upstream refuses others)
    assert DEFAULT_CHUNK_SIZE == 256 << 20
    assert chunk_size_for(1 << 30, 2 << 20) == 256 << 20 and chunk_size_for(1 << 20, 2 << 20) == 2 << 20
    assert chunk_size_for(3 << 20, mmap.PAGESIZE) == 4 << 20 and chunk_size_for(5000, 4096, 4096) == 4096
    with pytest.raises(ValueError, match="power of two"):
        chunk_size_for(1 << 20, 3000)
    monkeypatch.setenv("IRIS_VMEM_CHUNK_SIZE", "64MiB")
    assert chunk_size() == 64 << 20 and chunk_size(4096) == 4096
    monkeypatch.delenv("IRIS_VMEM_CHUNK_SIZE")
    assert chunk_size() is None


@pytest.mark.slow
def test_a_chunked_heap_on_cpu_ranks():
    results = run_ranks(2, f"{CASES}:chunked_heap", timeout=240)
    for done in results:
        assert done["allocator_type"] == "vmem_chunked" and done["granularity"] == mmap.PAGESIZE
        assert done["chunk_size"] == done["heap_size"] == 1 << 20  # upstream's chunk, capped at the heap
        assert done["chunks"] == [1, 2] and done["peer_read"]


@pytest.mark.slow
def test_the_chunk_size_from_the_environment():
    results = run_ranks(2, f"{CASES}:chunk_size_from_the_environment", timeout=240,
                        env={"IRIS_VMEM_CHUNK_SIZE": "256KiB"})
    for done in results:
        assert done["chunk_size"] == 256 << 10 and done["chunks"] == 4  # 1 MiB in whole chunks
        assert done["after"] == 12 and done["heap_size"] == 3 << 20  # grown by what three 1 MiB tensors need
