"""The tuner on the CUDA backend, ranks sharing one GPU (what a one-GPU machine allows): a tuning asked for is
refused there, saying why; made to run anyway (IRIS_AUTOTUNE_ANYWAY), it times every collective's candidates as
CUDA-graph replays, every rank runs rank 0's winner, and the results stay right. Timings are not asserted.
"""

from __future__ import annotations

import pytest
import torch

from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_the_tuner_on_ranks_sharing_a_gpu(tmp_path):
    if torch.cuda.device_count() > 1:
        pytest.skip("for a GPU shared by the ranks; benchmarks/tune_ccl.py tunes on one GPU per rank")
    results = run_ranks(2, "tests.rank_cases_tuning:autotune_on_gpu_ranks_sharing_one_gpu", timeout=480,
                        env={"IRIS_BACKEND": "cuda", "IRIS_AUTOTUNE_CACHE": str(tmp_path / "cache.json"),
                             "IRIS_AUTOTUNE_BUDGET": "30"})
    for collective in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        mine = [r[collective] for r in results]
        assert all(m["ok"] for m in mine), collective
        assert all(len(m["refused"]) == 1 and "share GPUs" in m["refused"][0] for m in mine), mine
        assert mine[0]["key"] == mine[1]["key"], f"{collective}: every rank runs rank 0's winner"
