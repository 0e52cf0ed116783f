"""Compile Gluon kernels for an H100/H200 (sm_90) on a machine without a GPU, with Triton's own compiler.

Run as a script with ``IRIS_BACKEND=cuda`` (so that importing iris does not switch Triton to its CPU
interpreter); it prints one JSON object: per kernel, the ``#blocked`` layouts of the compiled TTGIR, or the
error. tests/test_gluon_sm90.py runs it.

Examples
--------
>>> ttgir = compile_for_sm90(every_method, {"src": "*fp32", ...}, {"BLOCK": 128})   # doctest: +SKIP
"""

from __future__ import annotations

import json

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

from iris.gluon import IrisDeviceCtx, layout_hints
from tests import gluon_auto_layout_kernels as kernels
from tests.rank_cases_device import read_from_peer

SM90 = GPUTarget("cuda", 90, 32)
CONTEXT = {"IrisDeviceCtx": "constexpr", "context_tensor": "*i64"}


def compile_for_sm90(fn, signature: dict, constexprs: dict) -> str:
    """The TTGIR of ``fn`` compiled for sm_90 (the cubin is built too, by ptxas)."""
    source = GluonASTSource(fn=fn, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=SM90).asm["ttgir"]


def layouts(ttgir: str) -> list[str]:
    return [line for line in ttgir.splitlines() if line.startswith("#blocked")]


def main() -> dict:
    with_ctx = {"IrisDeviceCtx": IrisDeviceCtx, "BLOCK": 128}
    results = {
        "read_from_peer": layouts(compile_for_sm90(read_from_peer, {
            **CONTEXT, "buf": "*fp32", "out": "*fp32", "peer": "constexpr", "BLOCK": "constexpr"},
            {**with_ctx, "peer": 1})),
        "every_method": layouts(compile_for_sm90(kernels.every_method, {
            **CONTEXT, "src": "*fp32", "dst": "*fp32", "counters": "*i32", "out": "*fp32", "peer": "i32",
            "BLOCK": "constexpr"}, with_ctx)),
        "blocked_copy": layouts(compile_for_sm90(kernels.blocked_copy, {
            **CONTEXT, "src": "*fp32", "out": "*fp32", "peer": "i32", "BLOCK": "constexpr"}, with_ctx)),
    }
    try:
        with layout_hints():
            compile_for_sm90(kernels.no_iris_call, {"src": "*fp32", "out": "*fp32", "BLOCK": "constexpr"},
                             {"BLOCK": 128})
    except RuntimeError as error:
        results["no_iris_call"] = {"advice": str(error), "compiler": str(error.__cause__)}
    return results


if __name__ == "__main__":
    print(json.dumps(main()))
