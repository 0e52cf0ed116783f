"""The tile-level collectives of ``iris.DeviceContext`` on the CUDA backend: the CPU suite's rank cases
(tests/rank_cases_tile_collectives.py) with IRIS_TEST_BACKEND=cuda, on every float dtype and on more shapes
(aligned rows, where remote tiles carry a vectorisation hint; several tiles per program; upstream's block sizes),
column-major destinations (where no hint may apply), and bad input refused when the kernel is compiled.

Run on a GPU machine (one rank per GPU, or ``IRIS_GPU_WORLD`` ranks sharing GPUs) by tests/gpu/run_gpu_checks.sh,
or alone: ``python3 -m pytest -q tests/gpu/test_tile_collectives_cuda.py``.
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = "tests.rank_cases_tile_collectives"
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}


def test_every_collective_every_dtype_against_torch():
    for result in run_ranks(WORLD, f"{CASES}:every_collective", True, env=CUDA, timeout=900):
        # 4 shapes x 3 floats x 11 collectives, 4 x 3 int32 reductions, 3 column-major reductions and a gather
        assert result["checked"] == 4 * 3 * 11 + 4 * 3 + 4
        # device tracing sees the collectives' remote accesses: 2 x 2 tiles, atomics into both ranks, stores to peers
        other = [r for r in range(WORLD) if r != result["rank"]]
        assert result["traced"] == {**{f"atomic_add -> {r}": 4 for r in range(WORLD)},
                                    **{f"store -> {r}": 4 for r in other}}
        refusals = result["refusals"]  # compile-time refusals: the CompilationError's cause is iris's
        assert {what: refusal["type"] for what, refusal in refusals.items()} == {
            "dim": "TileCollectiveError", "shape": "TileCollectiveError", "source_rank": "TileCollectiveError"}
        assert f"(rank {result['rank']})" in refusals["dim"]["message"]
