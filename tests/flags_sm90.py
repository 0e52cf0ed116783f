"""Compile tests/flags_kernels.py for sm_90 (an H100/H200) with Triton's own compiler, on a machine without a GPU.

Run as ``IRIS_BACKEND=cuda python -m tests.flags_sm90`` (not under the interpreter); prints one JSON object, per
kernel the number of release and acquire atomics and bar.sync instructions in its PTX.
"""

from __future__ import annotations

import json

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from tests import flags_kernels as k

SM90 = GPUTarget("cuda", 90, 32)
CONTEXT = {"context": "*i64", "rank": "constexpr", "world": "constexpr"}
KERNELS = {
    "all_gather_sum": (k.all_gather_sum, {**CONTEXT, "inp": "*fp32", "inbox": "*fp32", "out": "*fp32",
                                          "flags": "*i32", "epochs": "*i32", "BLOCK": "constexpr",
                                          "WAIT": "constexpr"}, {"BLOCK": 128, "WAIT": True}),
    "send_and_arrive": (k.send_and_arrive, {**CONTEXT, "inp": "*fp32", "inbox": "*fp32", "done": "*i32",
                                            "epochs": "*i32", "BLOCK": "constexpr"}, {"BLOCK": 128}),
    "wait_and_sum": (k.wait_and_sum, {**CONTEXT, "inbox": "*fp32", "out": "*fp32", "done": "*i32", "epochs": "*i32",
                                      "senders": "i32", "N": "constexpr"}, {"N": 256}),
}


def ptx(fn, signature, constexprs, world):
    source = ASTSource(fn=fn, signature=signature, constexprs={"rank": 0, "world": world, **constexprs})
    return triton.compile(source, target=SM90, options={"num_warps": 4}).asm["ptx"]


def main() -> dict:
    result = {}
    for world in (2, 3):
        for name, (fn, signature, constexprs) in KERNELS.items():
            lines = ptx(fn, signature, constexprs, world).splitlines()
            result[f"{name} world={world}"] = {
                "release": sum(".release" in line for line in lines),
                "acquire": sum(".acquire" in line for line in lines),  # an atomic read of 0 may become ld.acquire
                "bar_sync": sum("bar.sync" in line or "barrier.sync" in line for line in lines),
            }
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
