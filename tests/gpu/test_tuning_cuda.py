"""The tuner on the CUDA backend, ranks sharing GPUs (``IRIS_GPU_WORLD`` more ranks than GPUs, or 2 ranks on a
one-GPU machine): a tuning asked for is refused there, saying why; made to run anyway (IRIS_AUTOTUNE_ANYWAY), it
times every collective's candidates as CUDA-graph replays, every rank runs rank 0's winner, and the results stay
right. Where the shipped table has no row for the world size, the row of the nearest one is used and said. Timings
are not asserted.
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_the_tuner_on_ranks_sharing_gpus(tmp_path):
    if WORLD <= torch.cuda.device_count():
        pytest.skip("for ranks that share GPUs (IRIS_GPU_WORLD above the GPU count); benchmarks/tune_ccl.py tunes "
                    "on one GPU per rank")
    results = run_ranks(WORLD, "tests.rank_cases_tuning:autotune_on_gpu_ranks_sharing_one_gpu", timeout=480,
                        env={"IRIS_BACKEND": "cuda", "IRIS_AUTOTUNE_CACHE": str(tmp_path / "cache.json"),
                             "IRIS_AUTOTUNE_BUDGET": "30"})
    for collective in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        mine = [r[collective] for r in results]
        assert all(m["ok"] for m in mine), collective
        for said in (m["refused"] for m in mine):
            # the refusal; and at a world size the table lacks, the nearest one's row used (its words repeat why)
            nearest = [s for s in said if "nearest world size" in s]
            refusals = [s for s in said if s not in nearest]
            assert len(refusals) == 1 and "share GPUs" in refusals[0] and len(nearest) <= 1, said
        assert all(m["key"] == mine[0]["key"] for m in mine), f"{collective}: every rank runs rank 0's winner"
