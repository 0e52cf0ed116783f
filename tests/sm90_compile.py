"""Compile Gluon and Triton kernels for an H100/H200 (sm_90) on a machine without a GPU, with Triton's own compiler.

Run as a script with ``IRIS_BACKEND=cuda`` (so that importing iris does not switch Triton to its CPU
interpreter); it prints one JSON object as its last line: per kernel, the ``#blocked`` layouts of the compiled
TTGIR, the advice :func:`iris.gluon.layout_hints` gave, or iris's refusal; and for device tracing, how the PTX
of a kernel with tracing off and on compares with its untraced twin (:func:`tracing_cost`).
tests/test_gluon_sm90.py runs it (ptxas leaves the PTX of a failed compile in the temporary directory: run it
with a ``TMPDIR`` of its own).

Examples
--------
>>> ttgir = compile_for_sm90(every_method, {"src": "*fp32", ...}, {"BLOCK": 128})   # doctest: +SKIP
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import triton
from iris.gluon import IrisDeviceCtx, layout_hints
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.errors import CompilationError
from triton.experimental.gluon._runtime import GluonASTSource

from iris.language.warp_width import WarpWidthNote
from tests import gluon_auto_layout_kernels as kernels
from tests import portability_kernels as portability
from tests.rank_cases_device import read_from_peer
from tests.rank_cases_tracing import functional_ops, traced_ops, traced_ops_gluon

SM90 = GPUTarget("cuda", 90, 32)
CONTEXT = {"IrisDeviceCtx": "constexpr", "context_tensor": "*i64"}
VOLATILE_LOADS = {  # the same load through each iris API, and its signature
    "functional": (portability.volatile_load_functional, {
        "src": "*fp32", "out": "*fp32", "heap_bases": "*i64", "rank": "i32", "peer": "i32"}, {}),
    "device_context": (portability.volatile_load_device_context, {
        "context": "*i64", "src": "*fp32", "out": "*fp32", "peer": "i32", "rank": "constexpr", "world": "constexpr"},
        {"rank": 0, "world": 2}),
    "gluon": (portability.volatile_load_gluon, {**CONTEXT, "src": "*fp32", "out": "*fp32", "peer": "i32"},
              {"IrisDeviceCtx": IrisDeviceCtx}),
}


def compile_for_sm90(fn, signature: dict, constexprs: dict, num_warps: int = 4) -> str:
    """The TTGIR of ``fn`` (``@gluon.jit`` or ``@triton.jit``) compiled for sm_90; ptxas builds the cubin too."""
    source = (GluonASTSource if fn.is_gluon() else ASTSource)(fn=fn, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=SM90, options={"num_warps": num_warps}).asm["ttgir"]


def layouts(ttgir: str) -> list[str]:
    return [line for line in ttgir.splitlines() if line.startswith("#blocked")]


def advice(fn, signature: dict, constexprs: dict, num_warps: int = 4) -> dict:
    """What :func:`layout_hints` says about compiling ``fn``, and the compiler's own error under it."""
    try:
        with layout_hints():
            compile_for_sm90(fn, signature, constexprs, num_warps)
    except RuntimeError as error:
        return {"advice": str(error), "compiler": str(error.__cause__)}
    return {"advice": None, "compiler": None}


def warp_width() -> dict:
    """Gluon layouts for 64-wide warps compiled for sm_90 (32-wide): their ``#blocked`` layouts and the
    :class:`iris.language.warp_width.WarpWidthNote` messages of the whole process (one, though two kernels are
    re-expressed) and the files they point at (the caller of the compile); and the advice for a layout that
    fits no warp width (16 threads), which stays refused; whether iris salted the Gluon cache key."""
    copy_signature = {"src": "*fp32", "out": "*fp32", "BLOCK": "constexpr"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load = layouts(compile_for_sm90(portability.amd_layout_load, {
            **CONTEXT, "src": "*fp32", "out": "*fp32", "peer": "i32", "BLOCK": "constexpr"},
            {"IrisDeviceCtx": IrisDeviceCtx, "BLOCK": 64}, num_warps=1))
        copy = layouts(compile_for_sm90(portability.amd_layout_copy, copy_signature, {"BLOCK": 256}))
        narrow = advice(portability.narrow_layout_copy, copy_signature, {"BLOCK": 64}, num_warps=1)
    notes = [w for w in caught if issubclass(w.category, WarpWidthNote)]
    source = GluonASTSource(fn=portability.amd_layout_copy, signature=copy_signature, constexprs={"BLOCK": 256})
    return {"amd_layout_load": load, "amd_layout_copy": copy, "notes": [str(w.message) for w in notes],
            "note_sites": [Path(w.filename).name for w in notes], "narrow_layout_copy": narrow,
            "cache_key_salted": source.hash() != ASTSource.hash(source)}


def volatile_load(api: str, cache_modifier: str) -> str:
    """``"compiled"``, or the message of iris's refusal of a volatile load with ``cache_modifier``."""
    fn, signature, constexprs = VOLATILE_LOADS[api]
    signature = {**signature, "CM": "constexpr", "BLOCK": "constexpr"}
    try:
        compile_for_sm90(fn, signature, {**constexprs, "CM": cache_modifier, "BLOCK": portability.BLOCK})
    except CompilationError as error:
        refusal = portability.volatile_refusal(error)
        if refusal is None:
            raise
        return str(refusal)
    return "compiled"


def instructions(fn, signature: dict, constexprs: dict) -> list[str]:
    """The PTX of ``fn`` for sm_90 without its name and debug information (source lines differ between files)."""
    source = (GluonASTSource if fn.is_gluon() else ASTSource)(fn=fn, signature=signature, constexprs=constexprs)
    return ptx_lines(triton.compile(source, target=SM90, options={"num_warps": 4}).asm["ptx"], fn.__name__)


def ptx_lines(ptx: str, name: str) -> list[str]:
    """The lines of ``ptx`` without the kernel's ``name`` and debug information."""
    ptx = ptx[:ptx.find(".section\t.debug")] if ".section\t.debug" in ptx else ptx
    return [line.replace(name, "KERNEL") for line in ptx.splitlines()
            if line.strip() and not line.lstrip().startswith((".loc", ".file", "//", "$L__tmp"))]


def tracing_cost() -> dict:
    """tests/rank_cases_tracing.py's kernel with tracing off and on, and its untraced twin in the functional API."""
    signature = {"context": "*i64", "src": "*fp32", "dst": "*fp32", "counters": "*i32", "rank": "constexpr",
                 "world": "constexpr", "BLOCK": "constexpr", "VALID": "constexpr"}
    sizes = {"rank": 0, "world": 2, "BLOCK": 16, "VALID": 13}
    off, on = (instructions(traced_ops, {**signature, "TRACE": "constexpr"}, {**sizes, "TRACE": trace})
               for trace in (False, True))
    twin = instructions(functional_ops, signature, sizes)
    gluon_signature = {**CONTEXT, "context": "*i64", "src": "*fp32", "dst": "*fp32", "counters": "*i32",
                       "TRACE": "constexpr", "BLOCK": "constexpr", "VALID": "constexpr"}
    del gluon_signature["context_tensor"]
    gluon_off, gluon_on = (instructions(traced_ops_gluon, gluon_signature, {
        "IrisDeviceCtx": IrisDeviceCtx, "TRACE": trace, "BLOCK": 16, "VALID": 13}) for trace in (False, True))
    # compared as multisets: the two APIs' put schedules one load differently (so does the code before tracing)
    return {"off_equals_functional": sorted(off) == sorted(twin), "lines": {"off": len(off), "on": len(on)},
            "atomics": {"off": _count("atom.", off), "on": _count("atom.", on)},
            "globaltimer": {"off": _count("%globaltimer", off), "on": _count("%globaltimer", on)},
            "gluon_globaltimer": {"off": _count("%globaltimer", gluon_off), "on": _count("%globaltimer", gluon_on)},
            "gluon_atomics": {"off": _count("atom.", gluon_off), "on": _count("atom.", gluon_on)}}


def _count(text: str, lines: list[str]) -> int:
    return sum(text in line for line in lines)


def ccl_gluon() -> dict:
    """The Gluon collectives (``Config(use_gluon=True)``) and their Triton twins, bf16 and fp32, specialised as a
    launch specialises them (16-byte aligned pointers, sizes multiple of 16): per kernel, its ``#blocked``
    layouts, its PTX's memory instructions and barriers (counted by kind) and its PTX's length in lines."""
    import collections
    import importlib
    import re

    from iris.ccl import gluon_all_gather, gluon_all_to_all
    from iris.ccl.gluon_layouts import flat_layout, tile_layout

    triton_gather, triton_all_to_all = (importlib.import_module(f"iris.ccl.{name}") for name in ("all_gather",
                                                                                                 "all_to_all"))
    group = {"rank": 0, "world": 2, "rank_start": 0, "rank_stride": 1, "num_ranks": 2}
    gather = {"context": "*i64", "src": "*{}", "src_step": "i32", "out": "*{}", "flags": "*i32", "epochs": "*i32",
              "n": "i32"}
    push = {"context": "*i64", "inp": "*{}", "out": "*{}", "inbox": "*{}", "flags": "*i32", "epochs": "*i32",
            "n": "i32", "stride": "i32"}
    exchange = {"context": "*i64", "inp": "*{}", "out": "*{}", "flags": "*i32", "epochs": "*i32", "M": "i32",
                "N": "i32", "stride_m": "i32"}
    results = {}
    for dtype, size in (("bf16", 2), ("fp32", 4)):
        flat, tile = flat_layout(size, 4096, 8, 32), tile_layout(size, 32, 64, 8, 32)
        kernels = {  # name: (Gluon kernel, Triton twin, signature, constexprs, Gluon's layout)
            "pull": (gluon_all_gather.gluon_pull_kernel, triton_gather.pull_kernel, gather,
                     {"BLOCK": 4096, "WAIT_DONE": True, "HINT": 16}, flat),
            "push": (gluon_all_gather.gluon_push_kernel, triton_gather.push_kernel, push,
                     {"BLOCK": 4096, "HINT": 16}, flat),
            "all_to_all": (gluon_all_to_all.gluon_all_to_all_kernel, triton_all_to_all.all_to_all_kernel, exchange,
                           {"BLOCK_M": 32, "BLOCK_N": 64, "WAIT_DONE": True, "WIDE": True}, tile),
        }
        for name, (gluon_kernel, twin, signature, constexprs, layout) in kernels.items():
            signature = {key: kind.format(dtype) for key, kind in signature.items()}
            for fn, extra in ((gluon_kernel, {"LAYOUT": layout}), (twin, {})):
                values = {**group, **constexprs, **extra}
                compiled = _compile_specialised(fn, {**signature, **dict.fromkeys(values, "constexpr")}, values)
                ptx = compiled.asm["ptx"]
                results[f"{'gluon' if fn is gluon_kernel else 'triton'} {name} {dtype}"] = {
                    "layouts": layouts(compiled.asm["ttgir"]),
                    "memory": collections.Counter(re.findall(r"\b((?:ld|st)\.global[\w.]*|atom\.[\w.]*|bar\.sync)",
                                                             ptx)),
                    "ptx_lines": len(ptx_lines(ptx, fn.__name__))}
    return results


def _compile_specialised(fn, signature: dict, constexprs: dict):
    """``fn`` compiled for sm_90 with every pointer and int argument 16-divisible, as a launch with such
    arguments specialises it (``tt.divisibility``)."""
    aligned = {(index,): [["tt.divisibility", 16]] for index, kind in enumerate(signature.values())
               if kind.startswith("*") or kind == "i32"}
    source = (GluonASTSource if fn.is_gluon() else ASTSource)(fn=fn, signature=signature, constexprs=constexprs,
                                                              attrs=aligned)
    return triton.compile(source, target=SM90, options={"num_warps": 8})


def symmetric_memory() -> dict:
    """The kernels that translate through per-allocation tables (tests/symmetric_memory_kernels.py) compiled for sm_90:
    per kernel, its count of global stores and atomics in the PTX (each must reach memory)."""
    from tests import symmetric_memory_kernels as tables

    kernels = {
        "put_by_hand": (tables.put_by_hand, {"src": "*fp32", "dst": "*fp32", "dst_peers": "*i64", "n": "i32",
                                             "target": "i32", "CUR_RANK": "constexpr", "BLOCK": "constexpr"},
                        {"CUR_RANK": 0, "BLOCK": 256}),
        "store_to_every_rank": (tables.store_to_every_rank, {
            "data": "*fp32", "results": "*fp32", "results_peers": "*i64", "n": "i32", "rank": "i32",
            "world": "constexpr", "BLOCK": "constexpr"}, {"world": 4, "BLOCK": 256}),
        "scale_peer_functional": (tables.scale_peer_functional, {
            "a": "*fp32", "a_peers": "*i64", "b": "*fp32", "b_peers": "*i64", "n": "i32", "peer": "i32",
            "rank": "i32", "BLOCK": "constexpr"}, {"BLOCK": 256}),
        "scale_peer_device_context": (tables.scale_peer_device_context, {
            "a_context": "*i64", "a": "*fp32", "b_context": "*i64", "b": "*fp32", "n": "i32", "peer": "i32",
            "rank": "constexpr", "world": "constexpr", "BLOCK": "constexpr"}, {"rank": 0, "world": 2, "BLOCK": 256}),
        "scale_peer_gluon": (tables.scale_peer_gluon, {
            "IrisDeviceCtx": "constexpr", "a_context": "*i64", "a": "*fp32", "b_context": "*i64",
            "b": "*fp32", "n": "i32", "peer": "i32", "BLOCK": "constexpr", "WARP": "constexpr"},
            {"IrisDeviceCtx": IrisDeviceCtx, "BLOCK": 256, "WARP": 32}),
        "atomic_add_everywhere": (tables.atomic_add_everywhere, {
            "counter": "*i32", "counter_peers": "*i64", "rank": "i32", "world": "constexpr"}, {"world": 2}),
    }
    results = {}
    for name, (fn, signature, constexprs) in kernels.items():
        source = (GluonASTSource if fn.is_gluon() else ASTSource)(fn=fn, signature=signature, constexprs=constexprs)
        ptx = triton.compile(source, target=SM90, options={"num_warps": 1 if fn.is_gluon() else 4}).asm["ptx"]
        # an atomic whose old value is unused is a reduction (red.) from triton 3.9 on, atom. before it
        results[name] = {"stores": ptx.count("st.global"), "atomics": ptx.count("atom.") + ptx.count("red.global")}
    return results


def main() -> dict:
    with_ctx = {"IrisDeviceCtx": IrisDeviceCtx, "BLOCK": 128}
    return {
        "read_from_peer": layouts(compile_for_sm90(read_from_peer, {
            **CONTEXT, "buf": "*fp32", "out": "*fp32", "peer": "constexpr", "BLOCK": "constexpr"},
            {**with_ctx, "peer": 1})),
        "every_method": layouts(compile_for_sm90(kernels.every_method, {
            **CONTEXT, "src": "*fp32", "dst": "*fp32", "counters": "*i32", "out": "*fp32", "peer": "i32",
            "BLOCK": "constexpr"}, with_ctx)),
        "blocked_copy": layouts(compile_for_sm90(kernels.blocked_copy, {
            **CONTEXT, "src": "*fp32", "out": "*fp32", "peer": "i32", "BLOCK": "constexpr"}, with_ctx)),
        "no_iris_call": advice(kernels.no_iris_call, {"src": "*fp32", "out": "*fp32", "BLOCK": "constexpr"},
                               {"BLOCK": 128}),
        "warp_width": warp_width(),
        "volatile_load": {f"{api} {cm}": volatile_load(api, cm) for api in VOLATILE_LOADS for cm in (".ca", ".cg")}
        | {"gluon .cv": volatile_load("gluon", ".cv")},
        "tracing": tracing_cost(),
        "ccl_gluon": ccl_gluon(),
        "symmetric_memory": symmetric_memory(),
        "volatile_load_plain": advice(portability.volatile_load_plain, {
            "src": "*fp32", "out": "*fp32", "CM": "constexpr", "BLOCK": "constexpr"},
            {"CM": ".cg", "BLOCK": portability.BLOCK}),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
