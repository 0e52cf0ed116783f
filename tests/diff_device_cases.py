"""Randomized cases of every iris device op, run on the ranks, and their independent host reference.

Used by tests/test_device_diff.py (CPU ranks, checked against the reference) and
tests/gpu/test_device_diff_cuda.py (the same cases on GPUs and on the interpreter on one machine, compared bit
for bit). A case is one op through one route on one element type: the functional API (``iris.load``...,
``iris.atomic_*``), ``DeviceContext`` methods, ``DeviceContext.as_remote`` with plain ``tl.load``/``tl.store``/
``tl.atomic_*``, Gluon's ``IrisDeviceCtx``, or ``ctx.as_remote`` tensors on the host; masks, ``other=``, every
``sem``/``scope``, blocks at the ends of an allocation, one or two programs, the peer's heap, one's own, or both
ranks (and both programs) on one element of rank 0's heap, where the old values the atomics return must come
from one order of their updates. Ops Triton's atomics refuse for a type must be refused with
:class:`iris.device.UnsupportedAtomicError` on every backend.

:func:`make_cases` derives every case from ``(seed, number)`` alone, so the ranks and the checking process agree
and a case runs alone by its number. :func:`run_cases` runs on each rank and returns the bits it saw;
:func:`check_case` computes what they must be from the case's numbers alone (torch on the host, never the code
under test).

Examples
--------
>>> cases = make_cases(seed=123, count=2000)
>>> results = run_ranks(2, "tests.diff_device_cases:run_cases", 123, 2000, None)   # doctest: +SKIP
>>> [check_case(case, results) for case in cases]                                   # doctest: +SKIP
"""

from __future__ import annotations

import itertools
import os
import random

import torch
import triton
import triton.language as tl
from iris.device import UnsupportedAtomicError, atomic_element_types
from iris.gluon import IrisDeviceCtx
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris

BACKEND = os.environ.get("IRIS_TEST_BACKEND", "cpu")
N = 32  # elements of each per-case buffer
DTYPES = {  # torch dtype -> (Triton's name, the integer type of its bits)
    torch.float64: ("fp64", torch.int64), torch.float32: ("fp32", torch.int32),
    torch.float16: ("fp16", torch.int16), torch.bfloat16: ("bf16", torch.int16),
    torch.int64: ("int64", torch.int64), torch.int32: ("int32", torch.int32),
    torch.int16: ("int16", torch.int16), torch.int8: ("int8", torch.int8), torch.uint8: ("uint8", torch.uint8),
}
RMA_OPS = ("load", "store", "get", "put", "copy_in", "copy_out")
ATOMIC_OPS = ("add", "sub", "xchg", "and", "or", "xor", "min", "max", "cas")
ROUTES = ("functional", "device_context", "as_remote", "gluon", "host")
SEMS = ("acquire", "release", "acq_rel", "relaxed", None)
SCOPES = ("gpu", "cta", "sys", None)
REFUSED = "refused"


def takes(op: str, dtype) -> bool:
    """Whether Triton's atomic ``op`` takes ``dtype`` (iris.device's table, checked against triton by a test)."""
    return DTYPES[dtype][0] in atomic_element_types(op)


# ------------------------------------------------------------------ cases


def make_case(seed: int, number: int) -> dict:
    """Case ``number`` of the run seeded ``seed``: what runs and every value it starts from, from those two alone."""
    rng = random.Random(f"{seed}:{number}")
    route = rng.choice(ROUTES)
    moves = ("load", "store") if route in ("host", "as_remote") else RMA_OPS
    op = rng.choice(moves + (ATOMIC_OPS if route != "host" else ()))
    dtype = rng.choice(list(DTYPES))
    if op in ATOMIC_OPS and not takes(op, dtype) and (route == "as_remote" or rng.random() < 0.8):
        # Mostly accepted types; some refusals, which iris's atomics must explain (as_remote uses tl.atomic_*)
        dtype = rng.choice([d for d in DTYPES if takes(op, d)])
    block = rng.choice((1, 4, 8, 16)) if route != "gluon" else rng.choice((4, 8, 16))
    programs = rng.choice((1, 2)) if route != "host" else 1
    shared = op in ATOMIC_OPS and rng.random() < 0.4  # both ranks and every program on one block of rank 0
    span = block if shared else block * programs
    start = rng.choice((0, N - span, rng.randrange(N - span + 1)))  # the allocation's ends, or anywhere
    masked = op != "cas" and rng.random() < 0.5
    case = {
        "number": number, "route": route, "op": op, "dtype": str(dtype).removeprefix("torch."), "block": block,
        "programs": programs, "shared": shared, "start": start,
        "n": rng.randrange(block + 1) if masked else None,
        "has_other": op == "load" and masked and route != "host" and rng.random() < 0.7,
        "literal_other": rng.random() < 0.3,  # other=-7 written in the kernel, else loaded from a tensor
        # Atomics of two GPUs on one element are atomic with scope "sys" only (iris.device says so); alone, any scope.
        "sem": rng.choice(SEMS), "scope": "sys" if shared else rng.choice(SCOPES),
        "target": "rank0" if shared else rng.choice(("peer", "self")),
    }
    drawn = "add_alone" if op in ("add", "sub") and not shared else op  # one update per element: any float
    case["values"] = {name: [_value(rng, dtype, drawn, name) for _ in range(N)] for name in ("buf0", "buf1", "src0",
                                                                                             "src1")}
    case["values"]["other"] = -7 if case["literal_other"] else _value(rng, dtype, "load", "other")
    if op == "cas":  # about half the lanes compare equal to what they find
        for r in (0, 1):
            target = 0 if shared else (1 - r if case["target"] == "peer" else r)
            case["values"][f"cmp{r}"] = [b if rng.random() < 0.5 else _value(rng, dtype, op, "cmp")
                                         for b in case["values"][f"buf{target}"]]
    return case


def make_cases(seed: int, count: int, only=None) -> list:
    """The run's ``count`` cases, numbered from 0, or those numbered in ``only`` alone."""
    return [make_case(seed, number) for number in (only if only is not None else range(count))]


def run_selection(default_count: int) -> tuple[int, int, list | None]:
    """``(seed, count, only)`` of this run: ``IRIS_DIFF_SEED`` (else a fresh seed, which the tests print),
    ``IRIS_DIFF_COUNT`` (else ``default_count``) and ``IRIS_DIFF_CASE``'s comma-separated numbers (else None)."""
    seed = int(os.environ.get("IRIS_DIFF_SEED") or random.randrange(1 << 31))
    count = int(os.environ.get("IRIS_DIFF_COUNT", str(default_count)))
    only = [int(n) for n in os.environ["IRIS_DIFF_CASE"].split(",")] if os.environ.get("IRIS_DIFF_CASE") else None
    return seed, count, only


def _value(rng, dtype, op, name):
    """A value of ``dtype`` for ``op`` as a Python number: exact sums for float adds that race, specials (subnormals
    among them: PTX's atom.add.f32 flushes them) for one add per element and for moves, any bits for integers."""
    if dtype.is_floating_point:
        if op in ("add", "sub"):
            return float(rng.randint(-8, 8))  # every order of a few of these sums exactly
        if op == "add_alone" and rng.random() < 0.2:
            tiny = torch.finfo(dtype).smallest_normal
            return rng.choice((tiny / 4, -tiny / 2, tiny, float("inf"), -0.0, 1e-7, 3e4))
        if op in RMA_OPS + ("xchg", "and", "or", "xor", "cas") and rng.random() < 0.15:
            return rng.choice((float("inf"), float("-inf"), float("nan"), -0.0, 0.0, 65504.0, 1e-7))
        if op in ("min", "max") and rng.random() < 0.1:
            return rng.choice((-0.0, 0.0, float("inf"), float("-inf"), float("nan")))  # ordered as their bits
        return float(torch.tensor(rng.uniform(-100, 100), dtype=dtype).item())
    info = torch.iinfo(dtype)
    if op in ("add", "sub"):
        return rng.randint(-1000, 1000) if info.min < 0 else rng.randint(0, 100)
    if rng.random() < 0.3:
        return rng.randint(info.min, info.max)
    return rng.randint(max(info.min, -(1 << 40)), min(info.max, 1 << 40))


def torch_dtype(case: dict):
    return getattr(torch, case["dtype"])


def as_tensor(values, dtype) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64 if dtype.is_floating_point else torch.int64).to(dtype)


def bits(tensor: torch.Tensor) -> list:
    """The bit patterns of ``tensor``'s elements, as Python ints (what the ranks return)."""
    return tensor.detach().cpu().contiguous().view(DTYPES[tensor.dtype][1]).tolist()


# ------------------------------------------------------------------ kernels


@triton.jit
def triton_case(buf, src, cmp, out, other_ptr, heap_bases, context, rank, target, start, n,
                ROUTE: tl.constexpr, OP: tl.constexpr, BLOCK: tl.constexpr, MASKED: tl.constexpr,
                HAS_OTHER: tl.constexpr, LITERAL_OTHER: tl.constexpr, SEM: tl.constexpr, SCOPE: tl.constexpr,
                SHARED: tl.constexpr, RANK: tl.constexpr, WORLD: tl.constexpr):
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    if SHARED:
        offs = start + lanes
    else:
        offs = start + pid * BLOCK + lanes
    outs = pid * BLOCK + lanes
    if MASKED:
        mask = lanes < n
    else:
        mask = None
    ctx = iris.DeviceContext.initialize(context, RANK, WORLD)
    if LITERAL_OTHER:
        fill = -7
    else:
        fill = tl.load(other_ptr)
    if OP == "load":
        if ROUTE == "functional":
            if HAS_OTHER:
                x = iris.load(buf + offs, rank, target, heap_bases, mask=mask, other=fill)
            else:
                x = iris.load(buf + offs, rank, target, heap_bases, mask=mask)
        elif ROUTE == "device_context":
            if HAS_OTHER:
                x = ctx.load(buf + offs, target, mask=mask, other=fill)
            else:
                x = ctx.load(buf + offs, target, mask=mask)
        else:
            if HAS_OTHER:
                x = tl.load(ctx.as_remote(buf + offs, target, mask), mask=mask, other=fill)
            else:
                x = tl.load(ctx.as_remote(buf + offs, target, mask), mask=mask)
        if HAS_OTHER:
            tl.store(out + outs, x)
        else:
            tl.store(out + outs, x, mask=mask)
    elif OP == "store":
        value = tl.load(src + offs, mask=mask)
        if ROUTE == "functional":
            iris.store(buf + offs, value, rank, target, heap_bases, mask=mask)
        elif ROUTE == "device_context":
            ctx.store(buf + offs, value, target, mask=mask)
        else:
            tl.store(ctx.as_remote(buf + offs, target, mask), value, mask=mask)
    elif OP == "get":
        if ROUTE == "functional":
            iris.get(buf + offs, out + outs, rank, target, heap_bases, mask=mask)
        else:
            ctx.get(buf + offs, out + outs, target, mask=mask)
    elif OP == "put":
        if ROUTE == "functional":
            iris.put(src + offs, buf + offs, rank, target, heap_bases, mask=mask)
        else:
            ctx.put(src + offs, buf + offs, target, mask=mask)
    elif OP == "copy_in":
        if ROUTE == "functional":
            iris.copy(buf + offs, out + outs, target, rank, rank, heap_bases, mask=mask)
        else:
            ctx.copy(buf + offs, out + outs, target, RANK, mask=mask)
    elif OP == "copy_out":
        if ROUTE == "functional":
            iris.copy(src + offs, buf + offs, rank, target, rank, heap_bases, mask=mask)
        else:
            ctx.copy(src + offs, buf + offs, RANK, target, mask=mask)
    elif OP == "cas":
        compare, value = tl.load(cmp + offs), tl.load(src + offs)
        if ROUTE == "functional":
            old = iris.atomic_cas(buf + offs, compare, value, rank, target, heap_bases, sem=SEM, scope=SCOPE)
        elif ROUTE == "device_context":
            old = ctx.atomic_cas(buf + offs, compare, value, target, sem=SEM, scope=SCOPE)
        else:
            old = tl.atomic_cas(ctx.as_remote(buf + offs, target), compare, value, sem=SEM, scope=SCOPE)
        tl.store(out + outs, old)
    else:
        old = triton_atomic(buf + offs, tl.load(src + offs, mask=mask), mask, rank, target, heap_bases, ctx, ROUTE,
                            OP, SEM, SCOPE)
        tl.store(out + outs, old, mask=mask)


@triton.jit
def triton_atomic(pointer, value, mask, rank, target, heap_bases, ctx, ROUTE: tl.constexpr, OP: tl.constexpr,
                  SEM: tl.constexpr, SCOPE: tl.constexpr):
    if ROUTE == "functional":
        if OP == "add":
            old = iris.atomic_add(pointer, value, rank, target, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "sub":
            old = iris.atomic_sub(pointer, value, rank, target, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "xchg":
            old = iris.atomic_xchg(pointer, value, rank, target, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "and":
            old = iris.atomic_and(pointer, value, rank, target, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "or":
            old = iris.atomic_or(pointer, value, rank, target, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "xor":
            old = iris.atomic_xor(pointer, value, rank, target, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "min":
            old = iris.atomic_min(pointer, value, rank, target, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
        else:
            old = iris.atomic_max(pointer, value, rank, target, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
    elif ROUTE == "device_context":
        if OP == "add":
            old = ctx.atomic_add(pointer, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "sub":
            old = ctx.atomic_sub(pointer, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "xchg":
            old = ctx.atomic_xchg(pointer, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "and":
            old = ctx.atomic_and(pointer, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "or":
            old = ctx.atomic_or(pointer, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "xor":
            old = ctx.atomic_xor(pointer, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "min":
            old = ctx.atomic_min(pointer, value, target, mask=mask, sem=SEM, scope=SCOPE)
        else:
            old = ctx.atomic_max(pointer, value, target, mask=mask, sem=SEM, scope=SCOPE)
    else:  # as_remote, then Triton's own atomics (sub: add of the negation, as iris does)
        remote = ctx.as_remote(pointer, target, mask)
        if OP == "add":
            old = tl.atomic_add(remote, value, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "sub":
            old = tl.atomic_add(remote, -value, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "xchg":
            old = tl.atomic_xchg(remote, value, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "and":
            old = tl.atomic_and(remote, value, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "or":
            old = tl.atomic_or(remote, value, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "xor":
            old = tl.atomic_xor(remote, value, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "min":
            old = tl.atomic_min(remote, value, mask=mask, sem=SEM, scope=SCOPE)
        else:
            old = tl.atomic_max(remote, value, mask=mask, sem=SEM, scope=SCOPE)
    return old


LAYOUT = gl.constexpr(gl.CoalescedLayout())


@gluon.jit
def gluon_case(IrisDeviceCtx: gl.constexpr, context, buf, src, cmp, out, other_ptr, target, start, n,
               OP: gl.constexpr, BLOCK: gl.constexpr, MASKED: gl.constexpr, HAS_OTHER: gl.constexpr,
               LITERAL_OTHER: gl.constexpr, SEM: gl.constexpr, SCOPE: gl.constexpr, SHARED: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context)
    pid = gl.program_id(0)
    lanes = gl.arange(0, BLOCK, layout=LAYOUT)
    if SHARED:
        offs = start + lanes
    else:
        offs = start + pid * BLOCK + lanes
    outs = pid * BLOCK + lanes
    if MASKED:
        mask = lanes < n
    else:
        mask = lanes < BLOCK
    if OP == "load":
        if HAS_OTHER:
            if LITERAL_OTHER:
                x = ctx.load(buf + offs, target, mask=mask, other=-7)
            else:
                x = ctx.load(buf + offs, target, mask=mask, other=gl.load(other_ptr))
            gl.store(out + outs, x)
        else:
            x = ctx.load(buf + offs, target, mask=mask)
            gl.store(out + outs, x, mask=mask)
    elif OP == "store":
        ctx.store(buf + offs, gl.load(src + offs, mask=mask), target, mask=mask)
    elif OP == "get":
        ctx.get(buf + offs, out + outs, target, mask=mask)
    elif OP == "put":
        ctx.put(src + offs, buf + offs, target, mask=mask)
    elif OP == "copy_in":
        ctx.copy(buf + offs, out + outs, target, ctx.cur_rank, mask=mask)
    elif OP == "copy_out":
        ctx.copy(src + offs, buf + offs, ctx.cur_rank, target, mask=mask)
    elif OP == "cas":
        old = ctx.atomic_cas(buf + offs, gl.load(cmp + offs), gl.load(src + offs), target, sem=SEM, scope=SCOPE)
        gl.store(out + outs, old)
    else:
        value = gl.load(src + offs, mask=mask)
        if OP == "add":
            old = ctx.atomic_add(buf + offs, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "sub":
            old = ctx.atomic_sub(buf + offs, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "xchg":
            old = ctx.atomic_xchg(buf + offs, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "and":
            old = ctx.atomic_and(buf + offs, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "or":
            old = ctx.atomic_or(buf + offs, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "xor":
            old = ctx.atomic_xor(buf + offs, value, target, mask=mask, sem=SEM, scope=SCOPE)
        elif OP == "min":
            old = ctx.atomic_min(buf + offs, value, target, mask=mask, sem=SEM, scope=SCOPE)
        else:
            old = ctx.atomic_max(buf + offs, value, target, mask=mask, sem=SEM, scope=SCOPE)
        gl.store(out + outs, old, mask=mask)


# ------------------------------------------------------------------ on each rank


def target_of(case: dict, rank: int) -> int:
    return 0 if case["shared"] else (1 - rank if case["target"] == "peer" else rank)


def _launch(ctx, case, heap):
    r = ctx.cur_rank
    buf, src, cmp, out, other = heap
    target = target_of(case, r)
    n = case["n"] if case["n"] is not None else case["block"]
    if case["route"] == "host":
        remote = ctx.as_remote(buf, target)
        lanes = slice(case["start"], case["start"] + n)
        if case["op"] == "load":
            out[:n] = remote[lanes]
        else:
            remote[lanes] = src[lanes]
        return
    common = dict(OP=case["op"], BLOCK=case["block"], MASKED=case["n"] is not None, HAS_OTHER=case["has_other"],
                  LITERAL_OTHER=case["literal_other"], SEM=case["sem"], SCOPE=case["scope"], SHARED=case["shared"])
    grid = (case["programs"],)
    if case["route"] == "gluon":
        gluon_case[grid](IrisDeviceCtx, ctx.get_device_context(), buf, src, cmp, out, other, target,
                         case["start"], n, **common)
    else:
        triton_case[grid](buf, src, cmp, out, other, ctx.get_heap_bases(), ctx.get_device_context(), r, target,
                          case["start"], n, ROUTE=case["route"], RANK=r, WORLD=ctx.num_ranks, **common)


def refusal(error: BaseException):
    """The text of an :class:`iris.device.UnsupportedAtomicError` behind ``error`` (the interpreter wraps it in
    an InterpreterError, a GPU compile in a CompilationError), or None."""
    chain = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    ours = [e for e in chain if isinstance(e, UnsupportedAtomicError)]
    return str(ours[0]) if ours else None


def run_cases(seed: int, count: int, only=None) -> dict:
    """Run the run's cases on this rank (all ``count``, or the numbers in ``only``); see :func:`run_given`."""
    return run_given(make_cases(seed, count, only))


def run_given(cases: list, heap: str = "16MiB") -> dict:
    """Run ``cases`` (dicts as :func:`make_case` makes them) on this rank; return, per case number, the bits of this
    rank's buffer and output after it, or the refusal's text."""
    ctx = iris.iris(heap, backend=BACKEND)
    r = ctx.cur_rank
    buffers = {}
    results = {}
    for case in cases:
        dtype = torch_dtype(case)
        if dtype not in buffers:
            buffers[dtype] = [ctx.zeros(N, dtype=dtype) for _ in range(4)] + [ctx.zeros(1, dtype=dtype)]
        buf, src, cmp, out, other = buffers[dtype]
        values = case["values"]
        buf.copy_(as_tensor(values[f"buf{r}"], dtype).to(buf.device))
        src.copy_(as_tensor(values[f"src{r}"], dtype).to(buf.device))
        cmp.copy_(as_tensor(values.get(f"cmp{r}", values[f"src{r}"]), dtype).to(buf.device))
        out.zero_()
        other.copy_(as_tensor([values["other"]], dtype).to(buf.device))
        ctx.barrier()
        try:
            _launch(ctx, case, buffers[dtype])
            refused = None
        except Exception as error:  # noqa: BLE001 -- only our refusal is an expected outcome
            refused = refusal(error)
            if refused is None:
                raise RuntimeError(f"case {case['number']} ({describe(case)}) failed on rank {r}") from error
        ctx.barrier()
        results[case["number"]] = ({REFUSED: refused} if refused is not None
                                   else {"buf": bits(buf), "out": bits(out)})
    ctx.barrier()
    return {"rank": r, "results": results}


def by_rank(results) -> list:
    """:func:`run_given`'s answers of every rank, in rank order, each ``{case number: outcome}``."""
    ordered = sorted(results, key=lambda result: result["rank"])
    return [{int(number): outcome for number, outcome in result["results"].items()} for result in ordered]


# ------------------------------------------------------------------ reference (host, torch, from the case alone)


def describe(case: dict) -> str:
    keys = ("route", "op", "dtype", "block", "programs", "shared", "target", "start", "n", "has_other",
            "literal_other", "sem", "scope")
    return " ".join(f"{k}={case[k]}" for k in keys)


def _bits_of(values, dtype) -> list:
    return bits(as_tensor(values, dtype))


def _signed(bit_value: int, width: int) -> int:
    return bit_value - (1 << width) if bit_value >> (width - 1) else bit_value


def apply(op: str, dtype, old: int, value: int, compare: int | None = None) -> int:
    """The bits after atomic ``op`` of ``value`` on ``old``, as a GPU computes it (bits as :func:`bits` gives
    them: signed integers, but for uint8)."""
    if op == "cas":
        return value if old == compare else old
    if op == "xchg":
        return value
    if op in ("and", "or", "xor"):  # Python's bitwise ops on signed ints are two's complement ones
        return {"and": old & value, "or": old | value, "xor": old ^ value}[op]
    if op in ("min", "max"):
        width = torch.finfo(dtype).bits if dtype.is_floating_point else torch.iinfo(dtype).bits
        unsigned = {b: b & ((1 << width) - 1) for b in (old, value)}
        if dtype.is_floating_point and unsigned[value] >> (width - 1):
            # Triton: where the value's sign bit is set, an unsigned max (for min) or min (for max) of the bits;
            # elsewhere a signed min/max of the bits.
            return (max if op == "min" else min)(old, value, key=unsigned.get)
        key = (lambda b: b) if dtype == torch.uint8 else (lambda b: _signed(unsigned[b], width))
        return (min if op == "min" else max)(old, value, key=key)
    a, b = (torch.tensor([v], dtype=DTYPES[dtype][1]).view(dtype) for v in (old, value))
    if dtype != torch.float32:
        return bits(a + b if op == "add" else a - b)[0]
    # PTX's atom.add.f32 flushes subnormal operands and a subnormal result to a zero of their sign (seen on an
    # H200, seed 1477773179); float64 and the .noftz float16 add keep them.
    a, b = _flushed(a), _flushed(b)
    return bits(_flushed(a + b if op == "add" else a - b))[0]


def _flushed(single: torch.Tensor) -> torch.Tensor:
    """A float32 tensor with each subnormal made a zero of its sign."""
    return torch.where(single.abs() < torch.finfo(torch.float32).smallest_normal, single * 0.0, single)


def _expected_plain(case: dict):
    """Per rank, the expected buffer and output bits of a case with no two updates of one element."""
    dtype, op, block = torch_dtype(case), case["op"], case["block"]
    n = case["n"] if case["n"] is not None else block
    buf = {r: _bits_of(case["values"][f"buf{r}"], dtype) for r in (0, 1)}
    initial = {r: list(buf[r]) for r in (0, 1)}
    out = {r: [0] * N for r in (0, 1)}
    other = _bits_of([case["values"]["other"]], dtype)[0]
    for r in (0, 1):
        t = target_of(case, r)
        src = _bits_of(case["values"][f"src{r}"], dtype)
        compare = _bits_of(case["values"].get(f"cmp{r}", case["values"][f"src{r}"]), dtype)
        for p in range(case["programs"]):
            for lane in range(block):
                at, where = case["start"] + p * block + lane, p * block + lane
                on = lane < n or op == "cas"
                if op == "load":
                    if on:
                        out[r][where] = initial[t][at]
                    elif case["has_other"]:
                        out[r][where] = other
                elif op in ("get", "copy_in"):
                    if on:
                        out[r][where] = initial[t][at]
                elif op in ("store", "put", "copy_out"):
                    if on:
                        buf[t][at] = src[at]
                elif on:
                    out[r][where] = buf[t][at]
                    buf[t][at] = apply(op, dtype, buf[t][at], src[at], compare[at])
    return buf, out


def _shared_mismatch(case: dict, results) -> str | None:
    """For both ranks' programs on one block of rank 0: each element's updates in some order explain the old
    values every update returned and the final value; a description of the first element none explains."""
    dtype, op, block = torch_dtype(case), case["op"], case["block"]
    n = case["n"] if case["n"] is not None else block
    start = case["start"]
    final = results[0]["buf"]
    initial = _bits_of(case["values"]["buf0"], dtype)
    src = {r: _bits_of(case["values"][f"src{r}"], dtype) for r in (0, 1)}
    compare = {r: _bits_of(case["values"].get(f"cmp{r}", case["values"][f"src{r}"]), dtype) for r in (0, 1)}
    if results[1]["buf"] != _bits_of(case["values"]["buf1"], dtype):
        return f"rank 1's buffer changed: {results[1]['buf']}"
    for lane in range(block):
        at = start + lane
        if not (lane < n or op == "cas"):
            if final[at] != initial[at] or any(results[r]["out"][p * block + lane] for r in (0, 1)
                                                for p in range(case["programs"])):
                return f"masked-off lane {lane} changed"
            continue
        updates = [(r, p) for r in (0, 1) for p in range(case["programs"])]
        olds = {u: results[u[0]]["out"][u[1] * block + lane] for u in updates}
        if not any(_explains(order, op, dtype, initial[at], src, compare, at, olds, final[at])
                   for order in itertools.permutations(updates)):
            return (f"element {at}: no order of {updates} gives old values {olds} and final {final[at]} from "
                    f"{initial[at]} (values {[src[r][at] for r in (0, 1)]})")
    for at in range(N):
        if not start <= at < start + block and final[at] != initial[at]:
            return f"element {at} outside the block changed"
    return None


def _explains(order, op, dtype, word, src, compare, at, olds, final) -> bool:
    for r, p in order:
        if olds[(r, p)] != word:
            return False
        word = apply(op, dtype, word, src[r][at], compare[r][at])
    return word == final


def differing_lanes(case: dict, actual: list, expected: list) -> list:
    """Where two lists of element bits differ; for a float add or sub any NaN equals any NaN (arithmetic's NaN
    bits are the machine's: NVIDIA GPUs give 0x7FFFFFFF for float32, x86 0xFFC00000, torch 0x7FC0 for bf16);
    everything else, moves and bitwise atomics included, bit for bit."""
    lanes = [i for i in range(len(actual)) if actual[i] != expected[i]]
    dtype = torch_dtype(case)
    if not (lanes and dtype.is_floating_point and case["op"] in ("add", "sub")):
        return lanes
    int_type = DTYPES[dtype][1]
    nan = {i for i in lanes if all(torch.tensor([v[i]], dtype=int_type).view(dtype).isnan().item()
                                   for v in (actual, expected))}
    return [i for i in lanes if i not in nan]


def check_case(case: dict, results) -> str | None:
    """None if both ranks' results (``results[r]`` as :func:`run_cases` gave them) are what the case must give;
    else what differs."""
    dtype = torch_dtype(case)
    if case["op"] in ATOMIC_OPS and not takes(case["op"], dtype):
        texts = [results[r].get(REFUSED) for r in (0, 1)]
        if not all(texts):
            return f"not refused: {results}"
        name = DTYPES[dtype][0]
        bad = [t for t in texts if f"atomic_{case['op']} on {name}" not in t or "rank" not in t]
        return f"refusal names neither the op, the type nor the rank: {bad[0]}" if bad else None
    if any(REFUSED in results[r] for r in (0, 1)):
        return f"refused: {results[0].get(REFUSED) or results[1].get(REFUSED)}"
    if case["shared"]:
        return _shared_mismatch(case, results)
    buf, out = _expected_plain(case)
    for r in (0, 1):
        for name, expected in (("buffer", buf[r]), ("output", out[r])):
            actual = results[r]["buf" if name == "buffer" else "out"]
            lanes = differing_lanes(case, actual, expected)
            if lanes:
                return (f"rank {r}'s {name} differs at {lanes}: got {[actual[i] for i in lanes]}, expected "
                        f"{[expected[i] for i in lanes]} (bits)")
    return None


# ------------------------------------------------------------------ sm_90 (run with IRIS_BACKEND=cuda, no GPU needed)


def compile_sample_for_sm90() -> dict:
    """Compile one case of every route with a spread of ops and types for an H100/H200 with Triton's own
    compiler; ``{"route op type": "ok" or the error's last line}``, and an int8 ``atomic_sub``'s refusal text."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource

    target = GPUTarget("cuda", 90, 32)
    sample = (("load", "fp32"), ("store", "bf16"), ("get", "i16"), ("copy_out", "u8"), ("min", "fp64"),
              ("xchg", "fp32"), ("cas", "i16"), ("add", "fp16"), ("sub", "i32"), ("sub", "i8"))
    outcomes = {}
    for route in ("functional", "device_context", "as_remote", "gluon"):
        for op, element in sample:
            if (route == "as_remote" and op in ("get", "copy_out")) or (route != "functional" and element == "i8"):
                continue
            gluon_route = route == "gluon"
            constexprs = dict(OP=op, BLOCK=8, MASKED=op != "cas", HAS_OTHER=op == "load", LITERAL_OTHER=False,
                              SEM="acquire", SCOPE="sys", SHARED=False)
            signature = {"IrisDeviceCtx": "constexpr", "context": "*i64"} if gluon_route else {}
            signature.update({name: f"*{element}" for name in ("buf", "src", "cmp", "out", "other_ptr")})
            if gluon_route:
                constexprs["IrisDeviceCtx"] = IrisDeviceCtx
            else:
                signature.update(heap_bases="*i64", context="*i64", rank="i32")
                constexprs.update(ROUTE=route, RANK=0, WORLD=2)
            signature.update(target="i32", start="i32", n="i32", **{name: "constexpr" for name in constexprs})
            source = (GluonASTSource if gluon_route else ASTSource)(
                fn=gluon_case if gluon_route else triton_case, signature=signature, constexprs=constexprs)
            try:
                triton.compile(source, target=target, options={"num_warps": 4})
                outcomes[f"{route} {op} {element}"] = "ok"
            except Exception as error:  # noqa: BLE001 -- reported, and checked by the test
                outcomes[f"{route} {op} {element}"] = refusal(error) or str(error).strip().splitlines()[-1]
    return outcomes


if __name__ == "__main__":
    import json

    print(json.dumps(compile_sample_for_sm90()))
