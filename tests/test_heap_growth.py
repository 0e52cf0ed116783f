"""A heap that grows (issue 30): the allocator's growth, descriptors handed between ranks (how the CUDA
virtual-memory heap shares its memory), and the CPU backend's answer to ``allocator_type="vmem"``.

The VMM heap itself needs a GPU: tests/gpu/test_vmm_heap_cuda.py.
"""

from __future__ import annotations

import pytest

from iris.heap import Allocator, OutOfHeap
from iris.runtime.heap_choice import choose_allocator
from tests.multirank import run_ranks


def test_allocator_grows_into_the_free_block_at_its_end():
    a = Allocator(4096, alignment=256)
    first = a.allocate(3000)  # 3072 reserved, 1024 free at the end
    with pytest.raises(OutOfHeap):
        a.allocate(2048)
    assert a.shortfall(2048) == 1024  # the free tail counts
    a.grow(4096 + 1024)
    assert a.allocate(2048) == 3072 and a.usage().free == 0
    assert a.shortfall(256) == 256  # nothing free at the end now
    a.release(first)
    assert a.shortfall(256) == 0  # a freed block fits it: no growth
    a.grow(a.size + 512)
    assert a.usage().largest_free == 3072 and a.usage().free == 3584  # the new bytes are a block of their own
    with pytest.raises(ValueError, match="grows only"):
        a.grow(1024)


def test_allocator_appends_a_taken_block_at_its_end():
    a = Allocator(1024, alignment=256)
    offset = a.append(2048)
    assert (offset, a.size, a.reserved(offset)) == (1024, 3072, 2048)
    assert a.allocate(1024) == 0  # the old bytes are still free, the appended ones taken
    with pytest.raises(OutOfHeap):
        a.allocate(256)
    a.release(offset)
    assert a.allocate(2048) == offset  # given back, they are the heap's like any other
    with pytest.raises(ValueError, match="multiple of 256"):
        a.append(100)


def test_descriptors_reach_the_other_ranks_and_none_leak():
    results = run_ranks(3, "tests.rank_cases_heap_growth:descriptors_reach_the_other_ranks")
    for rank, result in enumerate(results):
        others = {str(r): [f"rank {r}"] * 2 for r in range(3) if r != rank}
        assert result == {"read": others, "nothing": 0, "leaked": []}, result


def test_vmem_on_the_cpu_backend_says_what_to_use(monkeypatch):
    monkeypatch.delenv("IRIS_ALLOCATOR", raising=False)
    with pytest.raises(NotImplementedError, match="sparse /dev/shm file") as info:
        choose_allocator("vmem", "cpu")
    assert "is for the cuda backend" in str(info.value) and "allocator_type='torch'" in str(info.value)
    assert choose_allocator(None, "cpu") == "torch"
    with pytest.raises(ValueError, match="use 'torch'.*or 'vmem'"):
        choose_allocator("pool", "cpu")
