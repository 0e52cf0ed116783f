"""The device API on the CUDA backend: the CPU suite's rank cases with IRIS_TEST_BACKEND=cuda, plus what
only a GPU can show (Gluon layouts compiled for real, device-side debug asserts).

Run on a GPU machine by tests/gpu/run_gpu_checks.sh; ranks share GPUs when there are more ranks than GPUs.
Gluon kernels here run as upstream writes them, with layout-less ``gl.arange`` (``IrisDeviceCtx`` anchors
them to ``gl.CoalescedLayout()``), with explicit layouts and with AMD's ``BlockedLayout([1], [64], [1], [0])``
(re-expressed for 32-wide warps by ``iris.language.warp_width``); what triton 3.6 still refuses on a GPU (a layout-less
kernel with no iris call, a ``BlockedLayout`` of 16 threads per warp, a plain volatile load with ``.cg``)
fails with the advice of ``iris.gluon.layout_hints()``. Upstream's ``IrisGluon`` host class
runs its CPU rank case here on GPUs.
"""

from __future__ import annotations

import pytest
import torch
from iris.device import OUT_OF_HEAP, VOLATILE_WITH_CACHE_MODIFIER

from tests.gpu import WORLD
from tests.multirank import run_ranks, start_ranks, stop

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = "tests.rank_cases_device"
GPU_CASES = "tests.gpu.rank_cases_device_cuda"
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}


def test_every_rma_op_every_dtype_every_api():
    assert all(r["checked"] == 12 for r in run_ranks(WORLD, f"{CASES}:every_rma_op", env=CUDA))


def test_every_atomic_every_sem_and_scope():
    # 20 (sem, scope) pairs x 3 APIs x int32/float32/float16/bfloat16
    assert all(r["launches"] == 20 * 3 * 4 for r in run_ranks(WORLD, f"{CASES}:every_atomic", env=CUDA))


def test_spin_lock_ring_messages_and_as_remote():
    run_ranks(WORLD, f"{CASES}:synchronisation_and_as_remote", env=CUDA)


def test_gluon_layoutless_kernels_run_and_what_nvidia_refuses_gets_advice():
    for r in run_ranks(WORLD, f"{GPU_CASES}:gluon_layouts_on_gpu", env=CUDA):
        layoutless, narrow, volatile = r["no_iris_call"], r["narrow_layout_copy"], r["volatile_load_plain"]
        assert "gluon_auto_layout_kernels.py:" in layoutless["advice"], layoutless
        assert "gl.CoalescedLayout()" in layoutless["advice"]
        assert layoutless["compiler"] == "PassManager::run failed"
        assert "portability_kernels.py:" in narrow["advice"] and "16 threads per warp" in narrow["advice"], narrow
        assert "gl.CoalescedLayout()" in narrow["advice"] and narrow["compiler"] == "error encountered during parsing"
        assert volatile["advice"] == VOLATILE_WITH_CACHE_MODIFIER.format(modifier=".cg"), volatile
        assert "Modifier '.volatile' cannot be combined with modifier '.cg'" in volatile["compiler"]


def test_iris_gluon_host_class():
    results = run_ranks(WORLD, "tests.rank_cases_gluon_host:every_documented_method", env=CUDA)
    assert all(r["seed"] == 1235 and r["world"] == WORLD for r in results)


def test_debug_mode_device_assert_names_the_check(tmp_path):
    debug = {**CUDA, "IRIS_DEBUG": "1"}
    ranks = start_ranks(2, f"{GPU_CASES}:debug_mode_stops_bad_pointer_on_gpu", env=debug, workdir=tmp_path)
    try:
        for r in ranks:
            r.process.wait(timeout=300)
        for r in ranks:
            assert r.process.returncode != 0, r.log()
            assert OUT_OF_HEAP in r.log() and f"[rank{r.rank}]" in r.log(), r.log()[-3000:]
    finally:
        stop(ranks)
