"""Upstream Iris's ``ctx.allocate_symmetric`` (#549-#551), ``iris.experimental.symmetric_memory.SymmetricAddressMap``
and ``iris.experimental.torch_symm_mem_provider.TorchSymmMemProvider``: per-allocation tables that every spelling of
the device API translates with, debug checks included; on CPU ranks (real processes) at 2 and 3 ranks. The provider
over torch's symmetric memory needs CUDA: here its refusal is checked, on GPUs the rest
(tests/gpu/test_symmetric_memory_cuda.py).
"""

from __future__ import annotations

import pytest
import torch
from iris.experimental.symmetric_memory import SymmetricAddressMap

from iris.heap.reach import UNMAPPED_BASE
from iris.runtime.symmetric_memory import device_context, peer_table

from .multirank import run_ranks

CASES = "tests.rank_cases_symmetric_memory"

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


def test_tables_carry_the_allocation_size_before_them():
    table = peer_table([4096, 8192, 12288], 512, "cpu")
    assert table.tolist() == [4096, 8192, 12288] and table.dtype == torch.int64
    assert table._base.tolist() == [512, 4096, 8192, 12288]  # what debug mode reads at table[-1]
    context = device_context(2, [4096, 8192, 12288], 512, "cpu")
    assert context[:5].tolist() == [2, 3, 4096, 8192, 12288] and int(context[-1]) == 512


def test_the_address_map_checks_its_invariant_and_says_who_is_direct():
    amap = SymmetricAddressMap.from_bases([4096, 0, UNMAPPED_BASE], 0, 4096, 256, "cpu")
    assert amap.direct == (True, False, False) and amap.indirect_peers() == [1, 2] and not amap.all_direct()
    with pytest.raises(ValueError, match="the table's own entry 0x2000 is not the allocation's address 0x1000"):
        SymmetricAddressMap.from_bases([4096, 8192], 1, 4096, 256, "cpu")
    with pytest.raises(ValueError, match="local_rank 2 is not a rank"):
        SymmetricAddressMap.from_bases([4096, 8192], 2, 4096, 256, "cpu")
    with pytest.raises(ValueError, match="direct has 1 entries"):
        SymmetricAddressMap.from_bases([4096, 8192], 0, 4096, 256, "cpu", direct=[True])


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3])
def test_allocate_symmetric_drives_the_device_api(world):
    results = run_ranks(world, f"{CASES}:tables_and_kernels", timeout=300)
    for done in results:
        assert done == {"view": True, "dtypes": True, "functional": True, "device_context": True, "gluon": True,
                        "atomics": True, "provider_refused": True}


@pytest.mark.slow
def test_debug_mode_checks_pointers_against_the_allocation():
    results = run_ranks(2, f"{CASES}:debug_checks_with_tables", env={"IRIS_DEBUG": "1"}, timeout=300)
    for rank, r in enumerate(results):
        for message in (r["wrong_table"], r["wrong_context"]):
            assert message.startswith("iris debug: kernel `scale_peer_") and f"on rank {rank}" in message
            assert "not in [0, 1024)" in message  # the allocation's bytes, not the heap's
