"""Kernels for tests/test_interpret_bf16.py, and for tests/gpu/test_bf16_cuda.py, which runs them on a GPU too.

``TRITON_INTERPRET`` is read when ``@triton.jit``/``@gluon.jit`` decorate, so this module imports iris before its
first kernel: on a machine without a GPU (or with ``IRIS_BACKEND=cpu``) that switches Triton to the interpreter.
"""

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris

# Element-wise operations, in the order of their rows in ``elementwise``'s output.
BINARY_OPS = ("add", "sub", "mul", "div", "min", "max", "fma", "neg", "abs", "where", "mixed_add", "mixed_mul",
              "plus_constant", "to_bf16")
COMPARISONS = ("lt", "le", "eq", "ne", "gt", "ge")
UNARY_OPS = ("exp", "log", "sqrt", "sin", "cos", "exp2", "log2", "rsqrt", "floor", "ceil")


@triton.jit
def elementwise(x_ptr, y_ptr, z_ptr, f_ptr, out_ptr, cmp_ptr, BLOCK: tl.constexpr):
    """bf16 x, y, z and fp32 f in; one bf16 row per BINARY_OPS entry, one int8 row per comparison."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    z = tl.load(z_ptr + offs)
    f = tl.load(f_ptr + offs)
    tl.store(out_ptr + 0 * BLOCK + offs, x + y)
    tl.store(out_ptr + 1 * BLOCK + offs, x - y)
    tl.store(out_ptr + 2 * BLOCK + offs, x * y)
    tl.store(out_ptr + 3 * BLOCK + offs, (x / y).to(tl.bfloat16))  # bf16 / bf16 is fp32 in Triton
    tl.store(out_ptr + 4 * BLOCK + offs, tl.minimum(x, y))
    tl.store(out_ptr + 5 * BLOCK + offs, tl.maximum(x, y))
    tl.store(out_ptr + 6 * BLOCK + offs, tl.fma(x, y, z))
    tl.store(out_ptr + 7 * BLOCK + offs, -x)
    tl.store(out_ptr + 8 * BLOCK + offs, tl.abs(x))
    tl.store(out_ptr + 9 * BLOCK + offs, tl.where(x > y, x, z))
    tl.store(out_ptr + 10 * BLOCK + offs, (x + f).to(tl.bfloat16))  # bf16 + fp32 is fp32
    tl.store(out_ptr + 11 * BLOCK + offs, (x * f).to(tl.bfloat16))
    tl.store(out_ptr + 12 * BLOCK + offs, x + 0.1)  # a Python float constant becomes bf16
    tl.store(out_ptr + 13 * BLOCK + offs, f.to(tl.bfloat16))
    tl.store(cmp_ptr + 0 * BLOCK + offs, (x < y).to(tl.int8))
    tl.store(cmp_ptr + 1 * BLOCK + offs, (x <= y).to(tl.int8))
    tl.store(cmp_ptr + 2 * BLOCK + offs, (x == y).to(tl.int8))
    tl.store(cmp_ptr + 3 * BLOCK + offs, (x != y).to(tl.int8))
    tl.store(cmp_ptr + 4 * BLOCK + offs, (x > y).to(tl.int8))
    tl.store(cmp_ptr + 5 * BLOCK + offs, (x >= y).to(tl.int8))


@triton.jit
def double(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x + x)


@triton.jit
def unary(x_ptr, out_ptr, BLOCK: tl.constexpr):
    """Triton's math functions take fp32 only (``_check_dtype``): bf16 goes up, and the result comes back."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs).to(tl.float32)
    tl.store(out_ptr + 0 * BLOCK + offs, tl.exp(x).to(tl.bfloat16))
    tl.store(out_ptr + 1 * BLOCK + offs, tl.log(x).to(tl.bfloat16))
    tl.store(out_ptr + 2 * BLOCK + offs, tl.sqrt_rn(x).to(tl.bfloat16))
    tl.store(out_ptr + 3 * BLOCK + offs, tl.sin(x).to(tl.bfloat16))
    tl.store(out_ptr + 4 * BLOCK + offs, tl.cos(x).to(tl.bfloat16))
    tl.store(out_ptr + 5 * BLOCK + offs, tl.exp2(x).to(tl.bfloat16))
    tl.store(out_ptr + 6 * BLOCK + offs, tl.log2(x).to(tl.bfloat16))
    tl.store(out_ptr + 7 * BLOCK + offs, tl.rsqrt(x).to(tl.bfloat16))
    tl.store(out_ptr + 8 * BLOCK + offs, tl.floor(x).to(tl.bfloat16))
    tl.store(out_ptr + 9 * BLOCK + offs, tl.ceil(x).to(tl.bfloat16))


@triton.jit
def casts(f32_ptr, f64_ptr, i32_ptr, i64_ptr, bf_ptr, out_bf_ptr, out_f32_ptr, out_i32_ptr, out_f16_ptr,
          BLOCK: tl.constexpr):
    """Conversions into bf16 (rows of out_bf: from fp32, fp64, int32, int64, fp32 toward zero) and out of it."""
    offs = tl.arange(0, BLOCK)
    tl.store(out_bf_ptr + 0 * BLOCK + offs, tl.load(f32_ptr + offs).to(tl.bfloat16))
    tl.store(out_bf_ptr + 1 * BLOCK + offs, tl.load(f64_ptr + offs).to(tl.bfloat16))
    tl.store(out_bf_ptr + 2 * BLOCK + offs, tl.load(i32_ptr + offs).to(tl.bfloat16))
    tl.store(out_bf_ptr + 3 * BLOCK + offs, tl.load(i64_ptr + offs).to(tl.bfloat16))
    tl.store(out_bf_ptr + 4 * BLOCK + offs, tl.load(f32_ptr + offs).to(tl.bfloat16, fp_downcast_rounding="rtz"))
    bf = tl.load(bf_ptr + offs)
    tl.store(out_f32_ptr + offs, bf.to(tl.float32))
    tl.store(out_i32_ptr + offs, bf.to(tl.int32))
    tl.store(out_f16_ptr + offs, bf.to(tl.float16))


@triton.jit
def reductions(x_ptr, sum_ptr, row_sum_ptr, max_ptr, min_ptr, argmax_ptr, cumsum_ptr,
               M: tl.constexpr, N: tl.constexpr):
    rows = tl.arange(0, M)
    cols = tl.arange(0, N)
    tile = tl.load(x_ptr + rows[:, None] * N + cols[None, :])
    tl.store(sum_ptr, tl.sum(tl.reshape(tile, [M * N]), axis=0))
    tl.store(row_sum_ptr + rows, tl.sum(tile, axis=1))
    tl.store(max_ptr + rows, tl.max(tile, axis=1))
    tl.store(min_ptr + cols, tl.min(tile, axis=0))
    tl.store(argmax_ptr + rows, tl.argmax(tile, axis=1))
    tl.store(cumsum_ptr + rows[:, None] * N + cols[None, :], tl.cumsum(tile, axis=1))


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, bf_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """C = A @ B (fp32 accumulator) and the same rounded to bf16."""
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)
    tl.store(bf_ptr + rm[:, None] * N + rn[None, :], c.to(tl.bfloat16))


@triton.jit
def add_everywhere(counter_ptr, values_ptr, old_ptr, BLOCK: tl.constexpr):
    """Every lane adds its value into counter[0] (bf16 atomic_add) and records what it saw."""
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_add(counter_ptr + offs * 0, tl.load(values_ptr + offs), sem="acq_rel")
    tl.store(old_ptr + offs, old)


@triton.jit
def add_scalar_constant(counter_ptr):
    tl.atomic_add(counter_ptr, 1.0)


@triton.jit
def swap_if_equal(ptr, old_ptr, expected, BLOCK: tl.constexpr):
    """atomic_cas on bf16 words: swap in 2.5 where the word holds ``expected`` (a float, as bf16)."""
    offs = tl.arange(0, BLOCK)
    cmp = tl.full([BLOCK], expected, tl.bfloat16)
    tl.store(old_ptr + offs, tl.atomic_cas(ptr + offs, cmp, tl.full([BLOCK], 2.5, tl.bfloat16)))


@triton.jit
def inline_asm_on_bf16(x_ptr):
    x = tl.load(x_ptr)
    y = tl.inline_asm_elementwise("mov.b16 $0, $1;", "=h,h", [x], dtype=tl.bfloat16, is_pure=True, pack=1)
    tl.store(x_ptr, y)


@gluon.jit
def gluon_axpy(x_ptr, y_ptr, out_ptr, sum_ptr, a, BLOCK: gl.constexpr):
    """out = a * x + y in bf16 (a: fp32 argument, so the product is fp32 and is rounded on the store), and
    the bf16 sum of x * y."""
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.arange(0, BLOCK, layout=layout)
    x = gl.load(x_ptr + offs)
    y = gl.load(y_ptr + offs)
    gl.store(out_ptr + offs, (a * x + y).to(gl.bfloat16))
    gl.store(sum_ptr, gl.sum(x * y, axis=0))


@triton.jit
def adds_or_stores(counter_ptr, STORE: tl.constexpr):
    """Every program adds 1.0 to the bf16 counter atomically; with STORE, program 1 stores into it instead."""
    if STORE and tl.program_id(0) == 1:
        tl.store(counter_ptr, 5.0)
    else:
        tl.atomic_add(counter_ptr, 1.0, sem="relaxed")


@triton.jit
def add_into_rank(counter_ptr, half_ptr, single_ptr, old_ptr, old_half_ptr, old_single_ptr, cur_rank, to_rank,
                  heap_bases, BLOCK: tl.constexpr):
    """Every lane adds 1.0 to ``to_rank``'s bf16, fp16 and fp32 counters (iris.atomic_add) and keeps what it saw."""
    offs = tl.arange(0, BLOCK)
    lanes = tl.program_id(0) * BLOCK + offs
    old = iris.atomic_add(counter_ptr + offs * 0, tl.full([BLOCK], 1.0, tl.bfloat16), cur_rank, to_rank, heap_bases,
                          sem="relaxed")
    tl.store(old_ptr + lanes, old)
    old_half = iris.atomic_add(half_ptr + offs * 0, tl.full([BLOCK], 1.0, tl.float16), cur_rank, to_rank,
                               heap_bases, sem="relaxed")
    tl.store(old_half_ptr + lanes, old_half)
    old_single = iris.atomic_add(single_ptr + offs * 0, tl.full([BLOCK], 1.0, tl.float32), cur_rank, to_rank,
                                 heap_bases, sem="relaxed")
    tl.store(old_single_ptr + lanes, old_single)
