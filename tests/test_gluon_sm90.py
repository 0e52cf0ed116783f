"""Kernels compiled for sm_90 without a GPU, by Triton's own compiler (tests/sm90_compile.py, one subprocess):
Gluon kernels as upstream Iris writes them (layout-less ranges, AMD's 64-wide warps) compile; what NVIDIA refuses
(a layout that fits no warp width, a volatile load with a cache modifier) is refused with advice. tests/gpu/ runs
them on GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest
from iris.device import VOLATILE_WITH_CACHE_MODIFIER

from .multirank import ROOT

COALESCED_4_WARPS = "sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4]"


@pytest.fixture(scope="module")
def sm90():
    # The GPU compiler, not the interpreter that importing iris here switched on (TRITON_INTERPRET=1); and
    # a temporary directory that goes away, since ptxas's failed compile leaves its PTX there.
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory() as scratch:
        # A cache of its own: a compile cached by another checkout (or another version of iris) is not this one.
        env.update(IRIS_BACKEND="cuda", PYTHONPATH=str(ROOT), TMPDIR=scratch, TRITON_CACHE_DIR=scratch)
        done = subprocess.run([sys.executable, "-m", "tests.sm90_compile"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_layoutless_kernels_compile_and_explicit_layouts_stay(sm90):
    # DESIGN.md's as_remote example, verbatim, and every IrisDeviceCtx method: anchored to a coalesced layout
    for kernel in ("read_from_peer", "every_method"):
        assert len(sm90[kernel]) == 1 and COALESCED_4_WARPS in sm90[kernel][0], sm90[kernel]
    # an explicit BlockedLayout([2], ...) is the user's and comes through unchanged
    assert sm90["blocked_copy"] == [
        "#blocked = #ttg.blocked<{sizePerThread = [2], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>"]
    # nothing to anchor in a kernel without iris calls: the real compiler error becomes advice
    assert sm90["no_iris_call"]["compiler"] == "PassManager::run failed"
    assert "gluon_auto_layout_kernels.py:" in sm90["no_iris_call"]["advice"]
    assert "gl.CoalescedLayout()" in sm90["no_iris_call"]["advice"]


def test_amd_warp_width_compiles_for_32_wide_warps_and_what_fits_no_warp_gets_advice(sm90):
    widths = sm90["warp_width"]
    # upstream's BlockedLayout([1], [64], [num_warps], [0]): re-expressed with 32 threads, said once per process
    assert widths["amd_layout_load"] == [
        "#blocked = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [1], order = [0]}>"]
    assert widths["amd_layout_copy"] == [
        "#blocked = #ttg.blocked<{sizePerThread = [1], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>"]
    assert len(widths["notes"]) == 1, widths["notes"]  # two kernels re-expressed, said once per process
    assert "written for 64-wide warps (AMD); compiled with threads_per_warp=[32]" in widths["notes"][0]
    assert widths["note_sites"] == ["sm90_compile.py"]  # the compile's caller, not iris, Triton or ast.py
    assert widths["cache_key_salted"]  # Triton's cache never mixes compiles made with iris and without
    # 16 threads per warp fits neither width: Triton refuses it, and iris.language.hints names the line and the fix
    hint = widths["narrow_layout_copy"]
    assert hint["compiler"] == "error encountered during parsing"  # all Triton raises; MLIR's reason is on fd 2
    where, advice = hint["advice"].split(": ", 1)
    source = (ROOT / "tests" / "portability_kernels.py").read_text().splitlines()
    start = next(n for n, text in enumerate(source, 1) if text.startswith("def narrow_layout_copy("))
    line = next(n for n, text in enumerate(source[start:], start + 1) if "gl.arange(0, BLOCK, layout=layout)" in text)
    assert f"tests/portability_kernels.py:{line}:" in where, where  # the gl.arange that uses the layout
    assert advice.startswith("this Gluon layout has 16 threads per warp, but a warp has 32 threads")
    assert "gl.BlockedLayout([1], [32], [num_warps], [0])" in advice and "gl.CoalescedLayout()" in advice


def test_volatile_load_with_cache_modifier_refused_by_iris_and_explained_for_plain_loads(sm90):
    for api in ("functional", "device_context", "gluon"):
        for modifier in (".ca", ".cg"):
            refusal = sm90["volatile_load"][f"{api} {modifier}"]
            assert refusal == VOLATILE_WITH_CACHE_MODIFIER.format(modifier=modifier), refusal
    assert sm90["volatile_load"]["gluon .cv"] == "compiled"  # PTX takes ld.volatile for .cv
    plain = sm90["volatile_load_plain"]  # tl.load: iris cannot see it, ptxas refuses it
    assert "Modifier '.volatile' cannot be combined with modifier '.cg'" in plain["compiler"]
    assert plain["advice"] == VOLATILE_WITH_CACHE_MODIFIER.format(modifier=".cg")


def test_tracing_off_compiles_to_the_untraced_code(sm90):
    # DeviceContext with tracing off: the functional API's instructions, no clock read, no extra atomic
    cost = sm90["tracing"]
    assert cost["off_equals_functional"], cost
    assert cost["globaltimer"] == {"off": 0, "on": 2 * 15}  # start and end of each of the kernel's 15 events
    assert cost["atomics"] == {"off": 9, "on": 9 + 2 * 15}  # its own 9; per event: the slot and the op index


def test_gluon_collectives_compile_to_the_memory_instructions_of_their_triton_twins(sm90):
    # Config(use_gluon=True)'s kernels: 16 bytes per thread and access, and the very loads, stores, atomics and
    # barriers of the Triton kernels of the same algorithms, in PTX of about the same length (GPUs time them:
    # benchmarks/allreduce.py --gluon)
    compiled = sm90["ccl_gluon"]
    for name in ("pull", "push", "all_to_all"):
        for dtype, vector in (("bf16", 8), ("fp32", 4)):
            gluon, triton = compiled[f"gluon {name} {dtype}"], compiled[f"triton {name} {dtype}"]
            wide = (f"sizePerThread = [{vector}]", f"sizePerThread = [1, {vector}]")
            assert any(size in layout for layout in gluon["layouts"] for size in wide), gluon["layouts"]
            assert gluon["memory"] == triton["memory"], (name, dtype, gluon["memory"], triton["memory"])
            assert gluon["memory"]["ld.global.v4.b32"] > 0 and gluon["memory"]["st.global.v4.b32"] > 0
            assert abs(gluon["ptx_lines"] - triton["ptx_lines"]) <= 0.05 * triton["ptx_lines"], (name, dtype)


def test_kernels_over_per_allocation_tables_compile(sm90):
    # ctx.allocate_symmetric's and torch symmetric memory's tables under every spelling of the device API (the GPU
    # runs them: tests/gpu/test_symmetric_memory_cuda.py): each kernel keeps its remote stores and atomics
    compiled = sm90["symmetric_memory"]
    assert set(compiled) == {"put_by_hand", "store_to_every_rank", "scale_peer_functional",
                             "scale_peer_device_context", "scale_peer_gluon", "atomic_add_everywhere"}
    for name, counts in compiled.items():
        if name == "atomic_add_everywhere":
            assert counts["atomics"] >= 2, counts  # one per target rank (world=2, unrolled)
        else:
            assert counts["stores"] >= 1, (name, counts)
