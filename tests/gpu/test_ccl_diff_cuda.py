"""The randomized differential test of the collectives and ``ctx.ops`` (tests/diff_ccl_cases.py) on GPUs: the
CPU suite's cases, one rank per GPU (``tests.gpu.WORLD``), against torch.distributed on gloo.

The cases of a seed and world size are the same on the CPU and here, so a case that fails on one backend alone
re-runs on the other by its number. A fresh seed each run, printed; ``IRIS_DIFF_SEED``, ``IRIS_DIFF_CASE=world:n``
and ``IRIS_DIFF_COUNT`` (default 300: each new block size, warp count and alignment compiles its kernels, and
a device command has 10 minutes) as on the CPU. The failures come back as a markdown table (case, rank,
what, detail) for RESULTS.md, also written to ``$IRIS_DIFF_TABLE`` when set.

Examples
--------
IRIS_DIFF_COUNT=2000 python3 -m pytest -q -s -o addopts="" tests/gpu/test_ccl_diff_cuda.py
"""

from __future__ import annotations

import datetime
import os

import pytest
import torch

from tests.diff_ccl_cases import case_numbers, run_seed
from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}
SEED = run_seed()


def table(results: list[dict]) -> str:
    """The failures as a markdown table, one row per (case, rank, what)."""
    device = torch.cuda.get_device_name(0)
    header = (f"seed {SEED}, {WORLD} ranks on {torch.cuda.device_count()} x {device}, "
              f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {results[0]['checked']} cases\n\n"
              "| case | rank | what | detail |\n|---|---|---|---|\n")
    rows = [f"| {WORLD}:{f['case']} | {f['rank']} | {f['what']} | {f['detail'].splitlines()[0][:200]} |"
            for result in results for f in result["failures"]]
    return header + "\n".join(rows)


def test_collectives_and_ops_agree_with_torch_on_gpus():
    cases = case_numbers(WORLD, 300)
    if not cases:
        pytest.skip(f"IRIS_DIFF_CASE names another world size than {WORLD}")
    print(f"IRIS_DIFF_SEED={SEED}: {len(cases)} cases on {WORLD} ranks")
    results = run_ranks(WORLD, "tests.diff_ccl_cases:run_cases", SEED, cases, env=CUDA, timeout=540)
    report = table(results)
    print(report)
    if os.environ.get("IRIS_DIFF_TABLE"):
        with open(os.environ["IRIS_DIFF_TABLE"], "w") as out:
            out.write(report + "\n")
    assert all(result["checked"] == len(cases) for result in results)
    assert not any(result["failures"] for result in results), report


def test_rank_differing_bias_gives_one_answer_on_every_path_on_gpus():
    results = run_ranks(2, "tests.diff_ccl_cases:issue_bias_example", env=CUDA)
    assert results[0] == results[1] == {"sequential": [[112.0], [112.0]], "chunked": [[112.0], [112.0]],
                                        "auto": [[112.0], [112.0]], "one_shot": [[112.0], [112.0]]}
