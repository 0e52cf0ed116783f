"""iris.interpret.bf16: bfloat16 on the Triton CPU interpreter computes what a GPU computes.

References are computed the way a GPU computes: torch bf16 upcast to fp32, computed, rounded with
``.to(torch.bfloat16)``; compared bit for bit for element-wise operations (NaN: any NaN), with a tolerance where
the order of a summation is the GPU's business (``tl.dot``, and ``tl.sum`` against an fp32 sum). Where torch's CPU
rounds twice (float64 or large integers to bf16, through float32) and a GPU once, the expected value is worked out
in the test. The kernels live in tests/bf16_kernels.py, which activates the interpreter before defining them.
"""

import inspect

import numpy as np
import pytest
import torch
import triton.language as tl
from triton.language.semantic import TritonSemantic
from triton.runtime.interpreter import InterpreterBuilder

import iris
from iris.base.patching import INSTALLED_MARK
from iris.interpret import UnsupportedOnInterpreter, bf16

from . import bf16_kernels as k
from .multirank import run_ranks

SPECIALS = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-39, -3e-40, 3e38, -3e38, 1.5, 1.0]


def _bits(t):
    return t.contiguous().view(torch.int16)


def assert_same_bf16(actual, expected, what=""):
    """Bit for bit, but any NaN matches any NaN (torch's CPU makes 0x7FC0, NVIDIA GPUs 0x7FFF)."""
    assert actual.dtype == expected.dtype == torch.bfloat16
    nan = torch.isnan(expected)
    assert torch.equal(torch.isnan(actual), nan), (what, actual, expected)
    mismatch = (_bits(actual) != _bits(expected)) & ~nan
    assert not mismatch.any(), f"{what}: {actual[mismatch].tolist()} != {expected[mismatch].tolist()} at " \
                               f"{mismatch.nonzero().flatten().tolist()}"


def _randn(n, seed, scale=1.0):
    return (torch.randn(n, generator=torch.Generator().manual_seed(seed)) * scale).bfloat16()


def _operands(n=64):
    x, y, z = _randn(n, 1), _randn(n, 2), _randn(n, 3)
    x[:len(SPECIALS)] = torch.tensor(SPECIALS)
    y[:len(SPECIALS)] = torch.tensor(SPECIALS[::-1])  # inf + -inf, nan with numbers, overflow of 3e38 + 3e38...
    x[-4:] = y[-4:]  # equal operands, for the comparisons
    return x, y, z


def _source(function):
    return inspect.getsource(getattr(function, "fn", function))


# What Triton's language does with bf16 differs between releases; the references follow the installed one.
NEGATES_THE_SIGN_BIT = "create_fneg" in _source(TritonSemantic.minus)  # triton 3.8+; before: 0 - x (0 - 0 is +0)
SCANS_IN_FP32 = "_promote_bfloat16_to_float32" in _source(tl.standard.cumsum)  # triton 3.6 to 3.8


def _pairwise_bf16_sum(t, dim):
    """bf16 sum adding halves element-wise, each addition rounded (torch's bf16 add rounds each one)."""
    t = t.movedim(dim, -1)
    while t.shape[-1] > 1:
        half = t.shape[-1] // 2
        t = t[..., :half] + t[..., half:]
    return t[..., 0]


# ---------------------------------------------------------------- arithmetic


def test_x_plus_x_of_one_and_a_half_is_three():
    x = torch.full((4,), 1.5, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    k.double[(1,)](x, out, BLOCK=4)
    assert out.tolist() == [3.0] * 4


def test_elementwise_bf16_and_mixed_fp32_match_the_gpu_bit_for_bit():
    x, y, z = _operands()
    f = torch.randn(64, generator=torch.Generator().manual_seed(4))
    f[:3] = torch.tensor([float("nan"), 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8])  # ties: to even, both ways
    out = torch.empty(len(k.BINARY_OPS), 64, dtype=torch.bfloat16)
    compared = torch.empty(len(k.COMPARISONS), 64, dtype=torch.int8)
    k.elementwise[(1,)](x, y, z, f, out, compared, BLOCK=64)
    X, Y, Z = x.float(), y.float(), z.float()
    expected = {
        "add": X + Y, "sub": X - Y, "mul": X * Y, "div": X / Y, "min": torch.fmin(X, Y),
        "max": torch.fmax(X, Y), "fma": X.double() * Y.double() + Z.double(),
        "neg": -X if NEGATES_THE_SIGN_BIT else 0.0 - X, "abs": X.abs(),
        "where": torch.where(X > Y, X, Z), "mixed_add": X + f, "mixed_mul": X * f,
        "plus_constant": X + torch.tensor(0.1).bfloat16().float(), "to_bf16": f,
    }
    for row, name in enumerate(k.BINARY_OPS):
        # tl.minimum/maximum of a NaN and a number: the number, as the GPU's minnum (iris.interpret.number_min_max)
        assert_same_bf16(out[row], expected[name].bfloat16(), name)
    ops = {"lt": torch.lt, "le": torch.le, "eq": torch.eq, "ne": torch.ne, "gt": torch.gt, "ge": torch.ge}
    for row, name in enumerate(k.COMPARISONS):
        assert compared[row].bool().tolist() == ops[name](X, Y).tolist(), name
    assert out[0, :3].tolist()[:2] == [float("inf"), float("-inf")] and torch.isnan(out[0, 2])  # inf + 1.5...
    assert out[k.BINARY_OPS.index("to_bf16"), 1:3].tolist() == [1.0, 1.015625]


def test_fma_rounds_once():
    # 37/32 * 7/8 = 259/256 is a tie between bf16 neighbours 1 + 2^-7 and 1 + 2^-6; minus 2^-40 it is below the
    # tie, so fma.rn.bf16 gives 1 + 2^-7. Rounding to fp32 first would land on the tie and round to even.
    x = torch.tensor([37 / 32] * 64, dtype=torch.bfloat16)
    y = torch.tensor([7 / 8] * 64, dtype=torch.bfloat16)
    z = torch.tensor([-(2.0 ** -40)] * 64, dtype=torch.bfloat16)
    out = torch.empty(len(k.BINARY_OPS), 64, dtype=torch.bfloat16)
    k.elementwise[(1,)](x, y, z, torch.zeros(64), out, torch.empty(6, 64, dtype=torch.int8), BLOCK=64)
    assert out[k.BINARY_OPS.index("fma")].tolist() == [1 + 2 ** -7] * 64


def test_unary_math_of_bf16_values():
    x = _randn(64, 5).abs() + 0.25
    out = torch.empty(len(k.UNARY_OPS), 64, dtype=torch.bfloat16)
    k.unary[(1,)](x, out, BLOCK=64)
    X = x.float()
    expected = {"exp": X.exp(), "log": X.log(), "sqrt": X.sqrt(), "sin": X.sin(), "cos": X.cos(),
                "exp2": X.exp2(), "log2": X.log2(), "rsqrt": X.rsqrt(), "floor": X.floor(), "ceil": X.ceil()}
    for row, name in enumerate(k.UNARY_OPS):
        want = expected[name].bfloat16()
        if name in ("sqrt", "floor", "ceil"):  # correctly rounded: bit for bit
            assert_same_bf16(out[row], want)
        else:  # numpy's and torch's fp32 libm may differ in the last fp32 bit: at most one bf16 step
            assert (_bits(out[row]).int() - _bits(want).int()).abs().max() <= 1, name


def test_conversions_into_and_out_of_bf16_round_once():
    n = 64
    f32 = torch.randn(n, generator=torch.Generator().manual_seed(6)) * 100
    f32[:4] = torch.tensor([float("nan"), float("-inf"), 0.0, -1.0 - 2 ** -8])
    f32[2:3] = torch.tensor([0x7F7F8000], dtype=torch.int32).view(torch.float32)  # bf16's max + half a step: inf
    f64 = f32.double()
    f64[4] = 1 + 2 ** -8 + 2 ** -40  # just above a tie: up to 1 + 2^-7 (through fp32 it would tie, to 1.0)
    i32 = torch.randint(-(2 ** 24), 2 ** 24, (n,), dtype=torch.int32, generator=torch.Generator().manual_seed(7))
    i32[0] = 2 ** 30 + 2 ** 22 + 1  # just above a tie: 2^30 + 2^23 (through fp32 it would tie, to 2^30)
    i64 = i32.long()
    i64[1] = 2 ** 62 + 2 ** 54 + 1  # likewise 2^62 + 2^55 (float64 would tie, too)
    bf = _randn(n, 8, scale=50.0)
    out_bf = torch.empty(5, n, dtype=torch.bfloat16)
    out_f32, out_i32, out_f16 = torch.empty(n), torch.empty(n, dtype=torch.int32), torch.empty(n, dtype=torch.half)
    k.casts[(1,)](f32, f64, i32, i64, bf, out_bf, out_f32, out_i32, out_f16, BLOCK=n)

    assert_same_bf16(out_bf[0], f32.bfloat16())
    assert torch.isinf(out_bf[0, 2]) and out_bf[0, 3].item() == -1.0  # -(1 + 2^-8): a tie, to even
    assert out_bf[1, 4].item() == 1 + 2 ** -7
    assert_same_bf16(out_bf[1, 5:], f64[5:].float().bfloat16())  # these sit far from ties: one rounding is two
    assert out_bf[2, 0].item() == 2 ** 30 + 2 ** 23
    assert_same_bf16(out_bf[2, 1:], i32[1:].float().bfloat16())  # |i| < 2^24: exact in fp32
    assert out_bf[3, 1].item() == 2 ** 62 + 2 ** 55
    assert_same_bf16(out_bf[3, 2:], i32[2:].float().bfloat16())
    toward_zero = (f32.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)
    assert_same_bf16(out_bf[4], toward_zero)
    assert torch.equal(out_f32, bf.float())
    assert torch.equal(out_i32, bf.float().to(torch.int32))
    assert torch.equal(out_f16, bf.float().half())


# ---------------------------------------------------------------- reductions and dot


def test_sum_max_min_argmax_cumsum_of_bf16():
    M, N = 8, 16
    x = _randn(M * N, 9).reshape(M, N)
    total, row_sum = torch.empty(1, dtype=torch.bfloat16), torch.empty(M, dtype=torch.bfloat16)
    row_max, col_min = torch.empty(M, dtype=torch.bfloat16), torch.empty(N, dtype=torch.bfloat16)
    argmax, cumsum = torch.empty(M, dtype=torch.int32), torch.empty(M, N, dtype=torch.bfloat16)
    k.reductions[(1,)](x, total, row_sum, row_max, col_min, argmax, cumsum, M=M, N=N)

    # tl.sum of bf16 adds in bf16 on every triton 3.6-3.9 (_pick_sum_dtype keeps float types), each addition
    # rounded, in the halving order; and it is close to the fp32 sum.
    assert_same_bf16(total, _pairwise_bf16_sum(x.reshape(-1), 0).reshape(1))
    assert_same_bf16(row_sum, _pairwise_bf16_sum(x, 1))
    torch.testing.assert_close(total.float(), x.float().sum().reshape(1), atol=0.1, rtol=2e-2)
    torch.testing.assert_close(row_sum.float(), x.float().sum(1), atol=0.05, rtol=2e-2)
    assert torch.equal(row_max, x.max(1).values) and torch.equal(col_min, x.min(0).values)
    assert argmax.tolist() == x.float().argmax(1).tolist()
    if SCANS_IN_FP32:  # tl.cumsum promotes bf16 to fp32: one rounding, on the store
        expected = x.float().cumsum(1).bfloat16()
    else:
        expected, running = torch.empty_like(x), x[:, 0]
        for col in range(N):  # each step rounded to bf16
            running = x[:, 0] if col == 0 else running + x[:, col]
            expected[:, col] = running
    assert_same_bf16(cumsum, expected)


def test_dot_of_bf16_tiles_accumulates_in_fp32():
    M = N = K = 32
    a, b = _randn(M * K, 10).reshape(M, K), _randn(K * N, 11).reshape(K, N)
    c, c_bf = torch.empty(M, N), torch.empty(M, N, dtype=torch.bfloat16)
    k.matmul[(1,)](a, b, c, c_bf, M=M, N=N, K=K)
    expected = a.double() @ b.double()  # products of bf16 values are exact; fp32 sums differ only in order
    torch.testing.assert_close(c.double(), expected, rtol=1e-5, atol=1e-5)
    assert (_bits(c_bf).int() - _bits(c.bfloat16()).int()).abs().max() == 0
    assert (_bits(c_bf).int() - _bits(expected.float().bfloat16()).int()).abs().max() <= 1


# ---------------------------------------------------------------- Gluon


def test_gluon_kernel_computes_bf16_as_the_gpu_does():
    x, y = _randn(128, 12), _randn(128, 13)
    out, total = torch.empty(128, dtype=torch.bfloat16), torch.empty(1, dtype=torch.bfloat16)
    k.gluon_axpy[(1,)](x, y, out, total, 0.75, BLOCK=128)
    assert_same_bf16(out, (0.75 * x.float() + y.float()).bfloat16())
    assert_same_bf16(total, _pairwise_bf16_sum(x * y, 0).reshape(1))


# ---------------------------------------------------------------- atomics


def test_atomic_add_of_bf16_from_many_lanes_on_one_address():
    counter = torch.zeros(1, dtype=torch.bfloat16)
    values = torch.full((64,), 0.5, dtype=torch.bfloat16)
    values[:16] = 2.0  # partial sums stay exact: multiples of 0.5 below 64
    old = torch.full((64,), -1.0, dtype=torch.bfloat16)
    k.add_everywhere[(1,)](counter, values, old, BLOCK=64)
    assert counter.item() == 56.0
    # Each lane saw the sum of the lanes before it (the interpreter runs them in order): an atomic add each.
    assert old.tolist() == (torch.cumsum(values.float(), 0) - values.float()).tolist()
    for _ in range(3):
        k.add_scalar_constant[(1,)](counter)  # atomic_add(ptr, 1.0): a bf16 constant (get_bf16)
    assert counter.item() == 59.0


def test_atomic_cas_on_bf16_words_compares_bits():
    words = torch.tensor([1.0, 2.0, 1.0, -1.0, 0.0, -0.0, 1.0, 3.0], dtype=torch.bfloat16)
    old = torch.empty_like(words)
    k.swap_if_equal[(1,)](words, old, 1.0, BLOCK=8)
    assert old.tolist() == [1.0, 2.0, 1.0, -1.0, 0.0, -0.0, 1.0, 3.0]
    assert words.tolist() == [2.5, 2.0, 2.5, -1.0, 0.0, -0.0, 2.5, 3.0]
    k.swap_if_equal[(1,)](words, old, 0.0, BLOCK=8)  # +0.0 and -0.0 differ in their bits, as atom.cas.b16 sees
    assert _bits(words)[4:6].tolist() == [_bits(torch.tensor([2.5], dtype=torch.bfloat16)).item(), -32768]


@pytest.mark.usefixtures("no_heap_files_left_behind")
def test_the_race_checker_sees_one_bf16_atomic():
    ctx = iris.iris("1MiB", backend="cpu", check="races")
    counter = ctx.zeros(1, dtype=torch.bfloat16, name="counter")
    k.adds_or_stores[(4,)](counter, STORE=False)  # atomics of four programs: ordered among themselves
    assert counter.item() == 4.0 and ctx.races() == []
    with pytest.warns(iris.RaceWarning, match=r"race on counter\[0\]"):
        k.adds_or_stores[(4,)](counter, STORE=True)
    assert {race.element_name for race in ctx.races()} == {"counter[0]"}
    del ctx, counter


def test_bf16_fp16_and_fp32_atomic_adds_are_atomic_across_processes():
    results = run_ranks(2, "tests.rank_cases_bf16:atomic_adds_into_rank_zero", timeout=120)
    for seen in ("seen", "seen_halves", "seen_singles"):
        # 256 adds of 1.0 by two processes: each saw a different count, 0 to 255, none was lost.
        assert sorted(results[0][seen] + results[1][seen]) == list(range(256)), seen
    assert results[0]["counter"] == results[0]["halves"] == results[0]["singles"] == 256.0


# ---------------------------------------------------------------- what is not emulated, and new Triton methods


def test_every_builder_method_of_this_triton_is_classified():
    # A method a newer Triton adds shows up here: look at what it does with bf16 bits and classify it.
    assert bf16.unclassified() == []
    categories = list(bf16.CATEGORIES.values())
    assert sum(len(names) for names in categories) == len(frozenset().union(*categories))  # no overlaps
    names = [name for name in dir(InterpreterBuilder) if name.startswith("create_")]
    for name in names:
        category = bf16.classification(name)
        wrapped = bf16.__name__ in " ".join(getattr(getattr(InterpreterBuilder, name), INSTALLED_MARK, ()))
        assert wrapped == (category != "bit_exact"), name  # everything but plain data movement is wrapped
    assert "get_bf16" in dir(InterpreterBuilder)
    assert inspect.signature(InterpreterBuilder.get_bf16).parameters.keys() == {"self", "value"}


def test_a_bf16_operation_that_is_not_emulated_raises_naming_it():
    x = torch.ones(1, dtype=torch.bfloat16)
    with pytest.raises(UnsupportedOnInterpreter, match=r"inline_asm on bfloat16 values.*create_inline_asm"):
        k.inline_asm_on_bf16[(1,)](x)
    assert x.item() == 1.0


def test_rounding_helpers():
    values = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -9), 3.3895e38, 3.3962e38, np.inf, np.nan,
                       1e-40], dtype=np.float32)
    expected = torch.from_numpy(values).bfloat16()
    assert_same_bf16(torch.from_numpy(bf16.round_fp32(values).view(np.int16)).view(torch.bfloat16), expected)
    assert np.array_equal(bf16.to_fp32(bf16.round_fp32(values))[:-3], expected.float().numpy()[:-3])
