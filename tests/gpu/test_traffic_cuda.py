"""The traffic matrix on the CUDA backend: counted from device tracing (``iris.traffic.record(ctx)``'s default
there), on 2 ranks, against the hand count of what the trace records (tests/test_traffic.py, which checks the
same count on the CPU's trace).

Run on a GPU machine (``pytest tests/gpu/test_traffic_cuda.py``, or in tests/gpu/run_gpu_batch.sh); ranks share a
GPU when there is only one (counts do not depend on timing). The kernels compile for sm_90 (checked on a machine
without a GPU with tests/sm90_compile.py's ``compile_for_sm90``).
"""

from __future__ import annotations

import pytest
import torch

from tests.multirank import run_ranks
from tests.test_traffic import WORLD, traced_hand_count

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}


def test_traced_traffic_equals_the_hand_count_on_gpu():
    results = run_ranks(WORLD, "tests.rank_cases_traffic:traced_counts", env=CUDA)
    want = traced_hand_count()
    for result in results:
        assert result["source"] == "trace" and result["launches"] == 1 and result["dropped"] == 0
        assert result["bytes"] == want["bytes"], result["bytes"]
        assert result["atomic_ops"] == want["atomic_ops"], result["atomic_ops"]
