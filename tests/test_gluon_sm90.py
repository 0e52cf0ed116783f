"""Gluon kernels as upstream Iris writes them (layout-less ranges) compile for sm_90, checked here without a
GPU by Triton's own compiler (tests/sm90_compile.py); tests/gpu/ runs them on GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .multirank import ROOT

COALESCED_4_WARPS = "sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4]"


def test_layoutless_kernels_compile_for_sm90_and_explicit_layouts_stay():
    env = {**os.environ, "IRIS_BACKEND": "cuda", "PYTHONPATH": str(ROOT)}  # cuda: no interpreter, GPU compiler
    done = subprocess.run([sys.executable, "-m", "tests.sm90_compile"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    # DESIGN.md's as_remote example, verbatim, and every IrisDeviceCtx method: anchored to a coalesced layout
    for kernel in ("read_from_peer", "every_method"):
        assert len(results[kernel]) == 1 and COALESCED_4_WARPS in results[kernel][0], results[kernel]
    # an explicit BlockedLayout([2], ...) is the user's and comes through unchanged
    assert results["blocked_copy"] == [
        "#blocked = #ttg.blocked<{sizePerThread = [2], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>"]
    # nothing to anchor in a kernel without iris calls: the real compiler error becomes advice
    assert results["no_iris_call"]["compiler"] == "PassManager::run failed"
    assert "gluon_auto_layout_kernels.py:" in results["no_iris_call"]["advice"]
    assert "gl.CoalescedLayout()" in results["no_iris_call"]["advice"]
