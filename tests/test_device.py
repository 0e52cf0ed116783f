"""The device API (functional ops, DeviceContext, Gluon IrisDeviceCtx) on the CPU backend, 2 and 3 real ranks.

Each multi-rank run is broad (process start dominates on small machines): the rank cases in
tests/rank_cases_device.py check every result against torch references on the host and raise on a
mismatch; these tests add what can only be judged across ranks.
"""

from __future__ import annotations

import inspect
import os
import re

import iris.experimental.iris_gluon
import iris.gluon
import iris.iris_gluon
import pytest

import iris

from .multirank import run_ranks

CASES = "tests.rank_cases_device"


pytestmark = pytest.mark.usefixtures("no_heap_files_left_behind")


# -- single-process: the public surface ------------------------------------------------------------

def _parameters(jit_function):
    return list(inspect.signature(jit_function.fn).parameters)


def test_functional_signatures_match_upstream_positionally():
    common = ["mask", "sem", "scope", "hint"]
    assert _parameters(iris.load) == ["pointer", "to_rank", "from_rank", "heap_bases", "mask", "other",
                                      "cache_modifier", "volatile", "hint"]
    assert _parameters(iris.store) == ["pointer", "value", "from_rank", "to_rank", "heap_bases", "mask",
                                       "hint", "cache_modifier"]
    for op in (iris.get, iris.put):
        assert _parameters(op) == ["from_ptr", "to_ptr", "from_rank", "to_rank", "heap_bases", "mask",
                                   "other", "load_cache_modifier", "store_cache_modifier", "hint"]
    assert _parameters(iris.copy) == ["src_ptr", "dst_ptr", "from_rank", "to_rank", "cur_rank", "heap_bases",
                                      "mask", "other", "load_cache_modifier", "store_cache_modifier", "hint"]
    for name in ("add", "sub", "xchg", "xor", "and", "or", "min", "max"):
        op = getattr(iris, f"atomic_{name}")
        assert _parameters(op) == ["pointer", "val", "from_rank", "to_rank", "heap_bases", *common], name
    assert _parameters(iris.atomic_cas) == ["pointer", "cmp", "val", "from_rank", "to_rank", "heap_bases",
                                            "sem", "scope", "hint"]


def test_device_context_and_gluon_context_have_the_same_methods():
    names = ["as_remote", "load", "store", "get", "put", "copy", "atomic_cas"] + [
        f"atomic_{op}" for op in ("add", "sub", "xchg", "xor", "and", "or", "min", "max")]
    for name in names:
        triton_method = getattr(iris.DeviceContext, name).fn
        gluon_method = getattr(iris.gluon.IrisDeviceCtx, name).fn
        assert inspect.signature(triton_method) == inspect.signature(gluon_method), name
    assert list(inspect.signature(iris.DeviceContext.load.fn).parameters) == [
        "self", "pointer", "from_rank", "mask", "other", "cache_modifier", "volatile", "hint"]


def test_aliases_for_older_iris_docs():
    for alias in (iris.iris_gluon, iris.experimental.iris_gluon):
        assert alias.iris is iris.iris_gluon.iris  # upstream's factory: an IrisGluon (tests/test_gluon_host.py)
        assert alias.IrisDeviceCtx is iris.gluon.IrisDeviceCtx


def _advice(compiler_stderr: bytes, error: Exception) -> RuntimeError:
    """What layout_hints raises for a block that wrote ``compiler_stderr`` to fd 2 and then raised ``error``."""
    with pytest.raises(RuntimeError) as caught:
        with iris.gluon.layout_hints():
            os.write(2, compiler_stderr)
            raise error
    assert caught.value.__cause__ is error
    return caught.value


def test_layout_hints_turns_the_gpu_layout_error_into_advice():
    advice = _advice(b"/x/kernel.py:9:51: error: 'tt.make_range' op Failed to infer return type\n",
                     RuntimeError("PassManager::run failed"))
    assert re.match(r"/x/kernel\.py:9:51: .*gl\.CoalescedLayout\(\)", str(advice))
    with pytest.raises(KeyError):  # anything else passes through untouched
        with iris.gluon.layout_hints():
            raise KeyError("unrelated")


def test_layout_hints_explains_amd_warps_and_volatile_cache_modifiers():
    # MLIR's words (triton 3.6); the first error is the user's line, later ones are inside iris
    layout = b"#ttg.blocked<{sizePerThread = [1], threadsPerWarp = [64], warpsPerCTA = [1], order = [0]}>"
    width = _advice(b"<iris-cell-3>:5:24: error: Result has an invalid layout: " + layout + b".\n"
                    b"Layout has 64 threads per warp, but the module specifies 32 threads per warp.\n"
                    b"/x/iris/gluon.py:1:2: error: Operand 0 has an invalid layout: " + layout + b".\n"
                    b"Layout has 64 threads per warp, but the module specifies 32 threads per warp.\n",
                    RuntimeError("error encountered during parsing"))
    assert str(width).startswith("<iris-cell-3>:5:24: this Gluon layout has 64 threads per warp, but a warp has 32")
    assert "gl.BlockedLayout([1], [32], [num_warps], [0])" in str(width) and "gl.CoalescedLayout()" in str(width)
    warps = _advice(b"k.py:3:4: error: Result has an invalid layout: #ttg.blocked<{}>.\n"
                    b"Layout has 1 warps per CTA, but the context requires 4 warps per CTA.\n",
                    RuntimeError("error encountered during parsing"))
    assert str(warps).startswith("k.py:3:4: this Gluon layout spreads over 1 warps") and "num_warps=1" in str(warps)
    ptxas = RuntimeError("PTXAS error: Internal Triton PTX codegen error\n`ptxas` stderr:\nptxas /tmp/k.ptx, line 41; "
                         "error   : Modifier '.volatile' cannot be combined with modifier '.ca'\n")
    assert str(_advice(b"", ptxas)) == iris.device.VOLATILE_WITH_CACHE_MODIFIER.format(modifier=".ca")


# -- multi-rank, real processes --------------------------------------------------------------------

@pytest.mark.parametrize("world", [2, 3])
def test_every_rma_op_every_dtype_every_api(world):
    results = run_ranks(world, f"{CASES}:every_rma_op")
    assert [r["rank"] for r in results] == list(range(world))
    assert all(r["checked"] == 12 for r in results)


@pytest.mark.parametrize("world", [2, 3])
def test_every_atomic_every_sem_and_scope(world):
    results = run_ranks(world, f"{CASES}:every_atomic")
    # 20 (sem, scope) pairs x 3 APIs x int32/float32/float16 (bf16 atomics: GPU only)
    assert all(r["launches"] == 20 * 3 * 3 for r in results)


def test_spin_lock_ring_messages_as_remote_and_read_from_peer():
    run_ranks(3, f"{CASES}:synchronisation_and_as_remote")


def test_debug_mode_names_kernel_and_rank():
    results = run_ranks(2, f"{CASES}:debug_mode_catches_bad_pointers", env={"IRIS_DEBUG": "1"})
    for r in results:
        rank = r["rank"]
        assert f"kernel `put_block` on rank {rank}" in r["put"]
        assert f"outside rank {rank}'s heap on its way to rank {(rank + 1) % 2}" in r["put"]
        assert "not in [0, 1048576)" in r["put"] and "10 of 16 lanes bad" in r["put"]
        assert f"kernel `read_last_bytes` on rank {rank}" in r["wrong_rank"]
        assert "DeviceContext.initialize got a rank or world_size" in r["wrong_rank"]
