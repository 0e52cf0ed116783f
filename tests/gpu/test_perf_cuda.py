"""iris.perf on GPUs: ceilings measured here are sane beside the spec sheet, a capturable call is graph-timed and
one that synchronises is timed eagerly (and the report says why), ranks sharing a GPU are refused a timing.

No speed is asserted (a busy or throttled GPU is slow, not wrong): a ceiling is only checked to be above 0 and
at most 1.1x the spec sheet's figure, which no machine exceeds and a wrong unit (1000x) or formula would.
Run on a GPU machine by tests/gpu/run_gpu_checks.sh (or ``pytest tests/gpu/test_perf_cuda.py``).
"""

from __future__ import annotations

import pytest
import torch

from iris.perf.peers import PEERS
from tests.gpu import WORLD
from tests.multirank import run_ranks

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = "tests.rank_cases_perf"
CUDA = {"IRIS_TEST_BACKEND": "cuda", "IRIS_BACKEND": "cuda"}
one_per_gpu = pytest.mark.skipif(torch.cuda.device_count() < WORLD, reason="needs a GPU per rank")


@one_per_gpu
def test_ceilings_are_sane_beside_the_spec():
    results = run_ranks(WORLD, f"{CASES}:ceilings_on_gpu", env=CUDA, timeout=300)
    assert all(r == {**results[0]} for r in results), "every rank holds the same (slowest-rank) ceilings"
    result = results[0]
    assert result["cached"] and result["fresh"]
    assert len(result["links"]) == WORLD * (WORLD - 1) and result["peer_bytes"] >= 1 << 20
    assert result["spec"] is not None, "the GPUs we are lent are in the spec table"
    peak, hbm, peer = result["spec"]
    assert 0 < result["matmul_tflops"] < 1.1 * peak
    assert 0 < result["copy_gbs"] < 1.1 * hbm
    assert 0 < result["peer_gbs"] < 1.1 * peer


@one_per_gpu
def test_graph_where_capturable_eager_where_not():
    results = run_ranks(WORLD, f"{CASES}:graph_and_eager_on_gpu", env=CUDA, timeout=300)
    for result in results:
        rows = result["rows"]
        assert rows["mm"]["mode"] == "graph" and rows["all_reduce"]["mode"] == "graph", result["text"]
        assert rows["mm + sync"]["mode"] == "eager" and "rank" in rows["mm + sync"]["why"], result["text"]
        assert len(result["roofs"]) == 2 and result["roofs"][1] == "measured"
        assert set(rows["mm"]["of_spec"]) == {"compute", "memory", "roof"} and rows["mm"]["of_measured"]["roof"] > 0
        assert set(rows["all_reduce"]["of_spec"]) == {"memory", "peer"}
        assert result["preamble_mode"] == "graph"
        assert "could not be captured in a CUDA graph" in result["strict"] and "graph=True" in result["strict"]
        assert result["sum_ok"]


@one_per_gpu
def test_sweep_times_every_all_reduce_peer_beside_iris():
    results = run_ranks(WORLD, f"{CASES}:sweep_on_gpu", env=CUDA, timeout=300)
    for result in results:
        # every peer of iris.perf.peers is either timed or named with the reason it is missing
        assert set(result["peers"]) | set(result["unavailable"]) == set(PEERS), result["text"]
        assert "NCCL" in result["peers"] and "torch two_shot" in result["peers"], result["text"]
        assert result["ran"][0] == "one_shot" and result["scatter_ran"] in ("two_shot", "push")
        assert result["scatter_peers"] == ["NCCL"]


def test_ranks_sharing_a_gpu_are_refused():
    results = run_ranks(2, f"{CASES}:shared_gpu_refused", env={**CUDA, "CUDA_VISIBLE_DEVICES": "0"}, timeout=300)
    for result in results:
        assert "ranks 0, 1 share one GPU" in result["refused"] and "allow_shared_gpu=True" in result["refused"]
        assert any("not meaningful" in note for note in result["notes"]) and not result["ceilings"]
        assert result["mode"] == "graph"
