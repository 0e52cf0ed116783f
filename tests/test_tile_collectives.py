"""The tile-level collectives of ``iris.DeviceContext`` (iris.language.tile_collectives, over iris.tiles) on the CPU
backend.

Every collective against torch on 2 real ranks, the reductions and all_to_all on 3 ranks with the race checker on
(no race may be reported on a correct use), bad input refused with a message naming the call and the rank, and
every kernel (and benchmarks/tile_all_reduce.py's GEMM with each variant in its epilogue) compiled for sm_90 by
Triton's own compiler (no GPU needed). The rank cases are in
tests/rank_cases_tile_collectives.py; tests/gpu/test_tile_collectives_cuda.py runs the same on GPUs, with more
shapes and dtypes.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile

import pytest

import iris
import iris.language.tiles

from .multirank import ROOT, run_ranks

CASES = "tests.rank_cases_tile_collectives"

pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")

# upstream Iris's signatures (abd3f2ad, iris/mem/triton/context.py), after ``self``
UPSTREAM_SIGNATURES = {
    "all_reduce_atomic": ["tile", "dst_view"],
    "all_reduce_spinlock": ["tile", "dst_view", "locks"],
    "all_reduce_one_shot": ["tile", "src_view", "dst_view", "locks"],
    "all_reduce_two_shot": ["tile", "src_view", "dst_view", "locks"],
    "all_reduce_ring": ["tile", "src_view", "dst_view"],
    "all_gather": ["tile", "dst_view", "dim"],
    "gather": ["tile", "src_view", "source_rank", "hint"],
    "all_to_all": ["tile", "src_view", "dst_view", "N_per_rank"],
    "reduce_scatter": ["tile", "src_view", "dst_view", "locks"],
}


@pytest.fixture(scope="module", autouse=True)
def sm90_compile():
    """The sm_90 compile of every kernel, started before this module's rank tests (it waits mostly on the
    compiler's own processes, so it overlaps them) and read by :func:`test_every_kernel_compiles_for_sm90`."""
    # The GPU compiler, not the interpreter that importing iris here switched on; a cache and a temporary
    # directory of its own (ptxas leaves a failed compile's PTX there).
    scratch = tempfile.TemporaryDirectory()
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    env.update(IRIS_BACKEND="cuda", PYTHONPATH=str(ROOT), TMPDIR=scratch.name, TRITON_CACHE_DIR=scratch.name)
    process = subprocess.Popen([sys.executable, "-m", CASES], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    yield process
    if process.poll() is None:
        process.kill()
    process.communicate()
    scratch.cleanup()


def test_upstream_names_and_signatures():
    for name in ("Tile", "TileView", "TensorView", "AllReduceConfig", "make_tensor_view"):
        assert getattr(iris, name) is getattr(iris.tiles, name) and name in iris.__all__
    for method, parameters in UPSTREAM_SIGNATURES.items():
        assert list(inspect.signature(getattr(iris.DeviceContext, method).fn).parameters) == ["self", *parameters]
    assert iris.Context is iris.DeviceContext  # upstream's name, with the same methods
    assert list(inspect.signature(iris.make_tensor_view.fn).parameters) == ["ptr", "M", "N", "stride_m", "stride_n"]
    assert iris.tiles.ALL_REDUCE_VARIANT_CODES == {"atomic": 0, "ring": 1, "one_shot": 2, "two_shot": 3,
                                                   "spinlock": 4}


def test_every_collective_against_torch_on_two_ranks():
    for result in run_ranks(2, f"{CASES}:every_collective", timeout=300):
        assert result["checked"] == 24  # each check raised in the rank on a mismatch
        refusals, rank = result["refusals"], result["rank"]
        # 2 x 2 tiles: the atomic all-reduce adds each into both ranks, all_gather stores each into the peer
        assert result["traced"] == {"atomic_add -> 0": 4, "atomic_add -> 1": 4, f"store -> {1 - rank}": 4}
        assert {what: refusal["type"] for what, refusal in refusals.items()} == {
            "dim": "TileCollectiveError", "shape": "TileCollectiveError", "source_rank": "TileCollectiveError",
            "rows": "IrisDebugError"}
        assert refusals["dim"]["message"].startswith(f"all_gather (rank {rank}): dim must be 0")
        assert "tile.data has shape [16, 16], the tile is 16 x 32" in refusals["shape"]["message"]
        assert f"(rank {rank})" in refusals["shape"]["message"]
        assert "source_rank 2 is not a rank of this world (0 to 1)" in refusals["source_rank"]["message"]
        assert f"kernel `refused_kernel` on rank {rank}: all_gather: dst_view's size" in refusals["rows"]["message"]


def test_three_ranks_under_the_race_checker_report_no_race():
    results = run_ranks(3, f"{CASES}:three_ranks_under_the_race_checker", timeout=300)
    assert all(result["check"] == "races" for result in results)
    found = {(result["rank"], name): races for result in results for name, races in result["races"].items() if races}
    assert found == {}, found
    assert set(results[0]["races"]) == {"atomic", "spinlock", "one_shot", "two_shot", "ring", "push",
                                        "reduce_scatter", "all_to_all"}


def test_every_kernel_compiles_for_sm90(sm90_compile):
    out, err = sm90_compile.communicate(timeout=300)
    assert sm90_compile.returncode == 0, err[-3000:]
    results = json.loads(out.splitlines()[-1])
    failed = {name: result["error"] for name, result in results.items() if not result["compiled"]}
    refused = {name: failed.pop(name) for name in list(failed) if name.startswith("refused ")}
    assert failed == {}, failed
    # the collectives' kernels (one traced), benchmarks/tile_all_reduce.py's, the refused
    assert len(results) == 16 + 3 + 3
    # what the CPU refuses when the kernel runs, a GPU compile refuses with the same error (the rank is unknown here)
    assert refused["refused dim"].startswith("TileCollectiveError: all_gather: dim must be 0"), refused
    assert refused["refused shape"].startswith("TileCollectiveError: tile.data has shape [16, 16]"), refused
    assert refused["refused source_rank"].startswith("TileCollectiveError: gather: source_rank 2"), refused
    # ring (bf16, 64 x 64 tiles, 128 threads): the local load, the peer's load and the store each take 4 128-bit
    # accesses a thread; the peer's is vectorised only because the collective re-applied a true alignment hint
    assert results["all_reduce ring bf16"]["vector_accesses"] >= 12
