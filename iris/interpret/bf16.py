"""bfloat16 on the CPU interpreter computes what a GPU computes.

Why: triton's interpreter keeps bf16 as its raw bits in uint16 arrays (``_get_np_dtype`` in
triton/runtime/interpreter.py) and runs its numpy code on them unchanged, so arithmetic on bf16 is integer
arithmetic on the bits (``x + x`` of 1.5 gave inf, ``tl.dot`` of two bf16 tiles was off by ~2e10), float
to bf16 conversions truncate instead of rounding, ``tl.sum``/``tl.max`` of bf16 sum and compare the bits,
bf16 atomics fail ("Unsupported data type"; on triton 3.6 to 3.8 already ``'InterpreterBuilder' object has
no attribute 'get_bf16'``).

Fix, at the level of ``InterpreterBuilder`` (which Triton kernels, ``@aggregate`` methods and Gluon kernels
all reach) and of the interpreter's numpy reductions and scans:

* bf16 stays 16 bits in memory and in handles; every float operation takes the exact fp32 value of each bf16
  operand, computes in fp32 as the interpreter does for fp32, and rounds a float result to bf16 (round to
  nearest even, inf kept, NaN as the GPU's canonical NaN 0x7FFF). For + - * / and sqrt this equals the
  correctly rounded bf16 operation (fp32 has more than twice bf16's precision plus two bits, so rounding
  twice is harmless); ``fma`` rounds once, as the GPU's ``fma.rn.bf16`` does; ``neg``/``abs`` flip/clear the
  sign bit; conversions into bf16 round once from the exact source value, whatever its type.
* ``tl.sum`` of bf16 adds in bf16 on every triton we support (``_pick_sum_dtype`` in
  triton/language/standard.py keeps float types, 3.6 to 3.9), so each addition rounds to bf16, pairwise
  (element i with element i + n/2, halving, like the GPU's shuffle tree); scans round after every step.
  ``min``/``max``/``argmin``/``argmax`` compare values, not bits.
* ``tl.dot`` of bf16 tiles multiplies the fp32 values (exact) and accumulates in fp32.
* bf16 ``atomic_add`` (and ``atomic_xchg``, should Triton allow it) are compare-and-swap loops on the 16-bit
  word (:func:`.atomic_adds.compare_and_swap_loop`, as fp16 and fp32 adds are there), so they are atomic
  across processes mapping the same heap.
* Every ``InterpreterBuilder.create_*`` method is classified below. A bf16 value reaching an operation that is
  not emulated (``dot_scaled``, inline asm, or a method that a newer Triton adds and this module does not
  know yet) raises :class:`UnsupportedBf16Operation`, naming it, instead of returning a wrong number.

Examples
--------
>>> @triton.jit  # after iris.interpret.activate()
... def double(x_ptr):
...     x = tl.load(x_ptr)
...     tl.store(x_ptr, x + x)
>>> x = torch.tensor([1.5], dtype=torch.bfloat16)
>>> double[(1,)](x)
>>> x.item()
3.0
"""

import functools

import numpy as np
import triton.language as tl
from triton._C.libtriton import ir
from triton.runtime import interpreter
from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

from ..base.patching import replace_once
from .atomic_adds import updated_words
from .errors import UnsupportedOnInterpreter

CANONICAL_NAN = 0x7FFF  # what NVIDIA GPUs produce for a NaN result in bf16 (cvt.rn.bf16.f32, add.rn.bf16)


class UnsupportedBf16Operation(UnsupportedOnInterpreter):
    """A bfloat16 value reached an interpreter operation that cannot compute it as a GPU would.

    Parameters
    ----------
    method : str
        The ``InterpreterBuilder`` method, e.g. ``"create_dot_scaled"``.
    operation : str, optional
        What the kernel asked for, when more precise than the method's name (``"atomic_rmw MAX"``).

    Examples
    --------
    >>> raise UnsupportedBf16Operation("create_dot_scaled")  # doctest: +SKIP
    Traceback (most recent call last):
    UnsupportedBf16Operation: dot_scaled on bfloat16 values (InterpreterBuilder.create_dot_scaled) is not ...
    """

    def __init__(self, method: str, operation: str = ""):
        self.feature = operation or method.removeprefix("create_")
        Exception.__init__(
            self,
            f"{self.feature} on bfloat16 values (InterpreterBuilder.{method}) is not emulated by the Triton CPU "
            "interpreter: it would compute on the raw bits and give a wrong number. Convert to float32 first "
            "(x.to(tl.float32)), or run this kernel on a GPU.",
        )


# ---------------------------------------------------------------- what each builder method does with bf16

# Float operations whose result has their operands' type: computed on the fp32 values, rounded to bf16.
ROUNDED = frozenset({
    "create_fadd", "create_fsub", "create_fmul", "create_fdiv", "create_frem", "create_precise_divf",
    "create_approx_divf",  # triton 3.9+
    "create_minimumf", "create_minnumf", "create_maximumf", "create_maxnumf", "create_clampf",
    "create_exp", "create_exp2", "create_log", "create_log2", "create_sqrt", "create_precise_sqrt", "create_rsqrt",
    "create_sin", "create_cos", "create_erf", "create_floor", "create_ceil",
})
# Float comparisons: computed on the fp32 values, the result is int1.
COMPARED = frozenset(f"create_fcmp{p}" for p in ("OEQ", "ONE", "OLT", "OLE", "OGT", "OGE",
                                                  "UEQ", "UNE", "ULT", "ULE", "UGT", "UGE"))
# Operations with an implementation of their own here.
OWN = frozenset({
    "create_fneg",  # triton 3.8+ (3.6, 3.7 negate as 0 - x)
    "create_fabs", "create_fma", "create_dot", "create_print",
    "create_fp_ext", "create_fp_trunc", "create_fp_to_fp", "create_si_to_fp", "create_ui_to_fp",
    "create_fp_to_si", "create_fp_to_ui",
    "create_atomic_rmw",
    "create_tensor_pointer_load",  # triton 3.6, 3.7 (block pointers)
    "create_descriptor_load",
})
# Data movement: bf16 passes through as its 16 bits, which is what a GPU does too.
BIT_EXACT = frozenset({
    "create_load", "create_store", "create_masked_load", "create_masked_store",
    "create_atomic_cas",  # the interpreter compares and swaps 2-byte words bitwise, as the GPU's atom.cas.b16
    "create_atomic_load", "create_atomic_store",  # triton 3.9+
    "create_bitcast", "create_splat", "create_unsplat", "create_broadcast", "create_reshape", "create_expand_dims",
    "create_trans", "create_cat", "create_join", "create_split", "create_gather", "create_select",
    "create_addptr", "create_make_block_ptr", "create_advance", "create_tensor_pointer_store",
    "create_make_tensor_descriptor", "create_descriptor_store", "create_descriptor_gather",
    "create_descriptor_scatter",
})
# Integer, pointer and control operations: Triton's semantic never gives them a bf16 value; one that did
# would compute on the bits, so a bf16 operand is refused.
NOT_FOR_FLOATS = frozenset({
    "create_add", "create_sub", "create_mul", "create_sdiv", "create_udiv", "create_srem", "create_urem",
    "create_idiv", "create_shl", "create_lshr", "create_ashr", "create_and", "create_or", "create_xor",
    "create_minsi", "create_minui", "create_maxsi", "create_maxui", "create_iabs", "create_umulhi",
    "create_int_cast", "create_int_to_ptr", "create_ptr_to_int", "create_histogram",
    "create_atomic_poll",  # triton 3.9+, integers only
    "create_make_range", "create_get_program_id", "create_get_num_programs", "create_barrier",
    "create_assert", "create_assume",
    *(f"create_icmp{p}" for p in ("EQ", "NE", "SLT", "SLE", "SGT", "SGE", "ULT", "ULE", "UGT", "UGE")),
})
# Not emulated for bf16 (or at all): a bf16 operand raises UnsupportedBf16Operation.
REFUSED = frozenset({
    "create_dot_scaled",  # triton 3.8+: its bf16 operands go through an fp16 conversion
    "create_inline_asm", "create_extern_elementwise",
})

CATEGORIES = {"rounded": ROUNDED, "compared": COMPARED, "own": OWN, "bit_exact": BIT_EXACT,
              "not_for_floats": NOT_FOR_FLOATS, "refused": REFUSED}


def classification(name: str):
    """The category of ``InterpreterBuilder.<name>`` for bf16 values, or None for a method this module does not know.

    Examples
    --------
    >>> classification("create_fadd"), classification("create_reshape"), classification("create_new_thing")
    ('rounded', 'bit_exact', None)
    """
    return next((category for category, names in CATEGORIES.items() if name in names), None)


def unclassified(builder=InterpreterBuilder):
    """The ``create_*`` methods of ``builder`` that no category names (a newer Triton's additions).

    Examples
    --------
    >>> unclassified()
    []
    """
    return sorted(name for name in dir(builder) if name.startswith("create_") and classification(name) is None)


# ---------------------------------------------------------------- bits and values


def to_fp32(bits):
    """The exact float32 values of bf16 bits (a bf16 is the upper half of a float32).

    Examples
    --------
    >>> to_fp32(np.array([0x3FC0, 0xFF80], dtype=np.uint16))
    array([ 1.5, -inf], dtype=float32)
    """
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_fp32(values, toward_zero=False):
    """float32 values rounded to bf16 bits: to nearest even (or toward zero), inf kept, NaN canonical.

    Examples
    --------
    >>> [hex(b) for b in round_fp32(np.array([3.0, 1.00390625, 1.01171875, np.nan], dtype=np.float32))]
    ['0x4040', '0x3f80', '0x3f82', '0x7fff']
    """
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    if not toward_zero:
        # Adding 0x7FFF plus the lowest kept bit carries into the kept half exactly when the dropped half is
        # above one half, or equal to it with an odd kept half; a carry out of the mantissa raises the exponent
        # (up to inf), which is right too.
        bits = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    rounded = (bits >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(CANONICAL_NAN), rounded)


def round_fp64(values, toward_zero=False):
    """float64 values rounded to bf16 bits once (not once to float32, then again).

    Examples
    --------
    >>> hex(round_fp64(np.array([1.0 + 2.0 ** -8 + 2.0 ** -40]))[0])  # just above a tie: rounds up
    '0x3f81'
    """
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = values.astype(np.float32)
        inexact = (nearest.astype(np.float64) != values) & ~np.isnan(values)
        if toward_zero:  # float32 toward zero, then bf16 toward zero: truncating twice is truncating once
            away = inexact & (np.abs(nearest.astype(np.float64)) > np.abs(values))
            nearest[away] = np.nextafter(nearest[away], np.float32(0))
        else:
            # Round to odd: an inexact float32 with an even last bit steps toward the exact value. Rounding that
            # (24 bits, more than bf16's 8 + 2) to nearest even gives the once-rounded result.
            odd = inexact & ((nearest.view(np.uint32) & np.uint32(1)) == 0)
            toward = np.where(nearest[odd] > values[odd], -np.inf, np.inf).astype(np.float32)
            nearest[odd] = np.nextafter(nearest[odd], toward)
    return round_fp32(nearest, toward_zero)


def _ints_to_bf16(data):
    """Integers rounded to bf16 bits once, exactly, whatever their width."""
    data = np.asarray(data)
    exact = data.astype(np.float64)
    big = np.abs(exact) >= 2.0 ** 53  # only (u)int64 get there; float64 would round them first
    if big.any():
        exact[big] = [_round_int_to_8_bits(int(v)) for v in data[big]]
    return round_fp64(exact)


def _round_int_to_8_bits(value: int) -> float:
    """``value`` rounded to nearest even at bf16's 8 significant bits, as a float (exact: few bits)."""
    magnitude = abs(value)
    shift = magnitude.bit_length() - 8
    if shift <= 0:
        return float(value)
    kept, dropped = divmod(magnitude, 1 << shift)
    half = 1 << (shift - 1)
    kept += dropped > half or (dropped == half and kept & 1)
    return float(kept << shift) * (1 if value >= 0 else -1)


def _is_bf16(handle) -> bool:
    # The data's dtype too: the interpreter's comparisons label their bool results with the operands' type.
    return (isinstance(handle, TensorHandle) and getattr(handle.dtype, "scalar", handle.dtype) == tl.bfloat16
            and np.asarray(handle.data).dtype == np.uint16)


def _any_bf16(values) -> bool:
    return any(_is_bf16(v) or (isinstance(v, (list, tuple)) and _any_bf16(v)) for v in values)


def _touches_bf16(value) -> bool:
    """A bf16 value, or a pointer (plain, block or descriptor) to bf16, anywhere in ``value``."""
    if isinstance(value, (list, tuple)):
        return any(_touches_bf16(v) for v in value)
    if not isinstance(value, TensorHandle):
        value = getattr(value, "base", None)  # BlockPointerHandle, TensorDescHandle
    return isinstance(value, TensorHandle) and value.get_element_ty() == tl.bfloat16


def _widened(value):
    """A bf16 handle as a float32 handle of the same values; anything else unchanged."""
    return TensorHandle(to_fp32(value.data), tl.float32) if _is_bf16(value) else value


def _narrowed(handle):
    return TensorHandle(round_fp32(handle.data), tl.bfloat16)


def _float64(handle):
    """The exact values of a float handle as float64."""
    if _is_bf16(handle):
        return to_fp32(handle.data).astype(np.float64)
    return np.asarray(handle.data).astype(np.float64)


# ---------------------------------------------------------------- builder methods


def _in_fp32(original):
    """Compute a float operation on bf16 operands in fp32; round a float result back to bf16."""

    @functools.wraps(original)
    def op(self, *args):
        if not _any_bf16(args):
            return original(self, *args)
        result = original(self, *(_widened(a) for a in args))
        return _narrowed(result) if result.dtype == tl.float32 else result

    return op


def _compared_in_fp32(original):
    """Compare bf16 operands as fp32 values; the result is int1."""

    @functools.wraps(original)
    def op(self, lhs, rhs):
        if not _any_bf16((lhs, rhs)):
            return original(self, lhs, rhs)
        return TensorHandle(original(self, _widened(lhs), _widened(rhs)).data, tl.int1)

    return op


def _refusing(method):
    def make(original):
        @functools.wraps(original)
        def op(self, *args, **kwargs):
            if _touches_bf16(args) or _touches_bf16(tuple(kwargs.values())):
                raise UnsupportedBf16Operation(method)
            return original(self, *args, **kwargs)

        return op

    return make


def _refusing_values(method):
    """Refuse bf16 values (pointers to bf16 are fine: ``addptr`` and casts of pointers move no bf16)."""

    def make(original):
        @functools.wraps(original)
        def op(self, *args, **kwargs):
            if _any_bf16(args) or _any_bf16(tuple(kwargs.values())):
                raise UnsupportedBf16Operation(method)
            return original(self, *args, **kwargs)

        return op

    return make


def _sign_bit(operation):
    def make(original):
        @functools.wraps(original)
        def op(self, arg):
            if not _is_bf16(arg):
                return original(self, arg)
            # The GPU negates and takes absolute values on the sign bit alone (NaN payloads included).
            return TensorHandle(operation(np.asarray(arg.data, dtype=np.uint16)), tl.bfloat16)

        return op

    return make


_negated = _sign_bit(lambda bits: bits ^ np.uint16(0x8000))
_absolute = _sign_bit(lambda bits: bits & np.uint16(0x7FFF))


def _fused(create_fma):
    @functools.wraps(create_fma)
    def fma(self, x, y, z):
        if not _any_bf16((x, y, z)):
            return create_fma(self, x, y, z)
        a, b, c = np.broadcast_arrays(_float64(x), _float64(y), _float64(z))
        with np.errstate(invalid="ignore", over="ignore"):  # inf and NaN operands give inf and NaN, as on a GPU
            product = a * b  # exact: two bf16 significands make 16 bits
            total = product + c
            # The rounding error of that sum (TwoSum, exact); where it is not zero, round to odd so that rounding
            # to bf16 afterwards rounds once, as fma.rn.bf16 does.
            virtual = total - product
            error = (product - (total - virtual)) + (c - virtual)
        odd = np.isfinite(total) & (error != 0) & ((total.view(np.uint64) & np.uint64(1)) == 0)
        total[odd] = np.nextafter(total[odd], np.where(error[odd] > 0, np.inf, -np.inf))
        if _is_bf16(z):
            return TensorHandle(round_fp64(total), tl.bfloat16)
        return TensorHandle(total.astype(_numpy_float(z.dtype)), z.dtype.scalar)

    return fma


def _numpy_float(dtype):
    return {tl.float16: np.float16, tl.float32: np.float32, tl.float64: np.float64}[dtype.scalar]


def _dot(create_dot):
    @functools.wraps(create_dot)
    def dot(self, a, b, d, *options):
        if not _any_bf16((a, b, d)):
            return create_dot(self, a, b, d, *options)
        if not (_is_bf16(a) and _is_bf16(b)):  # bf16 with fp8 (converted to fp16 by the interpreter)
            raise UnsupportedBf16Operation("create_dot")
        # Products of bf16 values are exact in fp32; the tensor cores accumulate them in fp32.
        result = create_dot(self, _widened(a), _widened(b), _widened(d), *options)
        return _narrowed(result) if _is_bf16(d) else result

    return dot


def _printing(create_print):
    @functools.wraps(create_print)
    def print_(self, prefix, hex, values, *rest):
        if not hex:
            values = [_widened(v) for v in values]
        return create_print(self, prefix, hex, values, *rest)

    return print_


# Conversions. Triton's semantic sends bf16 <-> anything through fp32 except fp8 and (3.9+) fp16, which use
# create_fp_to_fp, and fp64 -> bf16, which is one create_fp_trunc.


def _extended(create_fp_ext):
    @functools.wraps(create_fp_ext)
    def fp_ext(self, src, dst_type):
        if not _is_bf16(src):
            return create_fp_ext(self, src, dst_type)
        return create_fp_ext(self, _widened(src), dst_type) if dst_type.scalar != tl.float32 else _widened(src)

    return fp_ext


def _truncated(create_fp_trunc):
    @functools.wraps(create_fp_trunc)
    def fp_trunc(self, src, dst_type):
        if dst_type.scalar != tl.bfloat16:
            return create_fp_trunc(self, src, dst_type)
        return TensorHandle(round_fp64(_float64(src)), tl.bfloat16)

    return fp_trunc


def _converted(create_fp_to_fp):
    @functools.wraps(create_fp_to_fp)
    def fp_to_fp(self, src, dst_type, rounding_mode):
        dst = dst_type.scalar
        if dst == tl.bfloat16:
            if src.dtype.scalar in (tl.float16, tl.float32, tl.float64, tl.bfloat16):
                values = _float64(src)
            else:  # fp8: widened exactly by the interpreter
                values = create_fp_to_fp(self, src, tl.float32, ir.ROUNDING_MODE.RTNE).data.astype(np.float64)
            return TensorHandle(round_fp64(values, rounding_mode == ir.ROUNDING_MODE.RTZ), tl.bfloat16)
        if not _is_bf16(src):
            return create_fp_to_fp(self, src, dst_type, rounding_mode)
        if dst in (tl.float32, tl.float64) or (dst == tl.float16 and rounding_mode != ir.ROUNDING_MODE.RTZ):
            # numpy rounds float32 -> float16 to nearest even; widening is exact.
            return TensorHandle(to_fp32(src.data).astype(_numpy_float(dst)), dst)
        return create_fp_to_fp(self, _widened(src), dst_type, rounding_mode)

    return fp_to_fp


def _from_ints(create_int_to_fp):
    @functools.wraps(create_int_to_fp)
    def int_to_fp(self, src, dst_type):
        if dst_type.scalar != tl.bfloat16:
            return create_int_to_fp(self, src, dst_type)
        return TensorHandle(_ints_to_bf16(src.data), tl.bfloat16)

    return int_to_fp


def _to_ints(create_fp_to_int):
    @functools.wraps(create_fp_to_int)
    def fp_to_int(self, src, dst_type):
        return create_fp_to_int(self, _widened(src), dst_type)

    return fp_to_int


# NaN padding of bf16 block-pointer and descriptor loads: the interpreter fills uint16 with float('nan').


def _nan_padded_pointer_load(create_tensor_pointer_load):
    @functools.wraps(create_tensor_pointer_load)
    def load(self, ptr, boundary_check, padding_option, *rest):
        if padding_option != ir.PADDING_OPTION.PAD_NAN or not _touches_bf16(ptr):
            return create_tensor_pointer_load(self, ptr, boundary_check, padding_option, *rest)
        loaded = create_tensor_pointer_load(self, ptr, boundary_check, ir.PADDING_OPTION.PAD_ZERO, *rest)
        return _nan_outside(loaded, ptr.materialize_pointers(boundary_check)[1])

    return load


def _nan_padded_descriptor_load(create_descriptor_load):
    @functools.wraps(create_descriptor_load)
    def load(self, desc, indices, *rest, **named):
        if getattr(desc, "padding", None) != ir.PADDING_OPTION.PAD_NAN or not _touches_bf16(desc):
            return create_descriptor_load(self, desc, indices, *rest, **named)
        desc.padding = ir.PADDING_OPTION.PAD_ZERO
        try:
            loaded = create_descriptor_load(self, desc, indices, *rest, **named)
        finally:
            desc.padding = ir.PADDING_OPTION.PAD_NAN
        return _nan_outside(loaded, desc.materialize_pointers(indices)[1])

    return load


def _nan_outside(loaded, inside):
    inside = np.asarray(getattr(inside, "data", inside), dtype=bool)  # a TensorHandle on triton 3.9+
    return TensorHandle(np.where(inside, loaded.data, np.uint16(CANONICAL_NAN)), tl.bfloat16)


# ---------------------------------------------------------------- atomics


def _bf16_add(old, value):
    return round_fp32(to_fp32(old) + to_fp32(value))


def _exchanged(old, value):
    return value


def _atomics(create_atomic_rmw):
    @functools.wraps(create_atomic_rmw)
    def rmw(self, rmw_op, ptr, val, mask, sem, scope):
        if ptr.get_element_ty() != tl.bfloat16:
            return create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope)
        update = {ir.ATOMIC_OP.FADD: _bf16_add, ir.ATOMIC_OP.XCHG: _exchanged}.get(rmw_op)
        if update is None:
            raise UnsupportedBf16Operation("create_atomic_rmw", f"atomic_rmw {str(rmw_op).rsplit('.', 1)[-1]}")
        return updated_words(self, ptr, val, mask, sem, update)

    return rmw


def _float_arguments_as_fp32(implicit_cvt):
    """A float kernel argument is an fp32 scalar on a GPU (``mangle_type`` says "fp32"); the interpreter kept it a
    Python float, whose weak type made ``alpha * x`` of a bf16 ``x`` a bf16 product instead of an fp32 one."""

    @functools.wraps(implicit_cvt)
    def cvt(arg):
        if isinstance(arg, float):
            return tl.tensor(TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return implicit_cvt(arg)

    return cvt


def _get_bf16(self, value):
    """A bf16 constant: the Python float rounded once to bf16 (the compiler's constant does the same)."""
    return TensorHandle(round_fp64(np.array([value], dtype=np.float64)), tl.bfloat16)


# ---------------------------------------------------------------- reductions and scans (numpy, not the builder)


def _float_type_like(ty, element):
    return tl.block_type(element, ty.shape) if ty.is_block() else element


def _narrowed_tensor(tensor):
    return tl.core.tensor(_narrowed(tensor.handle), _float_type_like(tensor.type, tl.bfloat16))


def _pairwise_sum(values, axis):
    """bf16 sum along ``axis`` of fp32 values, rounding every addition: halves added element-wise, repeatedly."""
    values = np.moveaxis(values, axis, -1)
    while values.shape[-1] > 1:
        half = values.shape[-1] // 2
        summed = to_fp32(round_fp32(values[..., :half] + values[..., half:2 * half]))
        values = np.concatenate([summed, values[..., 2 * half:]], axis=-1)  # an odd one out waits a round
    return round_fp32(values[..., 0]) if values.shape[-1] else np.zeros(values.shape[:-1], np.uint16)


def _summing(reduce_sum):
    @functools.wraps(reduce_sum)
    def sum_(self, input):
        if input.dtype != tl.bfloat16:
            return reduce_sum(self, input)
        values = to_fp32(input.handle.data)
        if self.axis is None:
            total = _pairwise_sum(values.reshape(-1), 0)
            total = total.reshape((1,) * values.ndim) if self.keep_dims else total[()]
        else:
            total = _pairwise_sum(values, self.axis)
            total = np.expand_dims(total, self.axis) if self.keep_dims else total
        return self.to_tensor(total, tl.bfloat16)

    return sum_


def _comparing(min_max):
    @functools.wraps(min_max)
    def min_max_(self, input, val_reduce_op, idx_reduce_op=None):
        value = input[0] if isinstance(input, tuple) else input
        if value.dtype != tl.bfloat16:
            return min_max(self, input, val_reduce_op, idx_reduce_op)
        wide = tl.core.tensor(_widened(value.handle), _float_type_like(value.type, tl.float32))
        result = min_max(self, wide, val_reduce_op, idx_reduce_op)
        if val_reduce_op is None:
            return result  # indices only
        if idx_reduce_op is None:
            return _narrowed_tensor(result)
        return _narrowed_tensor(result[0]), result[1]

    return min_max_


def _scanning(combine):
    def make(scan):
        @functools.wraps(scan)
        def scan_(self, input):
            if input.dtype != tl.bfloat16:
                return scan(self, input)
            values = np.moveaxis(to_fp32(input.handle.data), self.axis, -1)
            out = np.empty(values.shape, dtype=np.uint16)
            running = None
            for k in range(values.shape[-1]):  # every step rounds to bf16, as the GPU's bf16 combine does
                running = values[..., k] if running is None else to_fp32(round_fp32(combine(running, values[..., k])))
                out[..., k] = round_fp32(running)
            return [self.to_tensor(np.moveaxis(out, -1, self.axis), tl.bfloat16)]

        return scan_

    return make


_cumulative_sum = _scanning(np.add)
_cumulative_product = _scanning(np.multiply)

# ---------------------------------------------------------------- install


def _own_replacements():
    return {
        "create_fneg": _negated, "create_fabs": _absolute, "create_fma": _fused, "create_dot": _dot,
        "create_print": _printing, "create_fp_ext": _extended, "create_fp_trunc": _truncated,
        "create_fp_to_fp": _converted, "create_si_to_fp": _from_ints, "create_ui_to_fp": _from_ints,
        "create_fp_to_si": _to_ints, "create_fp_to_ui": _to_ints, "create_atomic_rmw": _atomics,
        "create_tensor_pointer_load": _nan_padded_pointer_load,
        "create_descriptor_load": _nan_padded_descriptor_load,
    }


def _install_get_bf16():
    # triton 3.6 to 3.8 have no get_bf16 (bf16 constants, atomic_add(bf16_ptr, 1.0) failed); 3.9's truncates.
    if getattr(InterpreterBuilder, "get_bf16", None) is not _get_bf16:
        InterpreterBuilder.get_bf16 = _get_bf16


def install():
    """Make bf16 compute as on a GPU on the interpreter (see the module docstring); idempotent."""
    builder = InterpreterBuilder
    own = _own_replacements()
    for name in sorted(n for n in dir(builder) if n.startswith("create_")):
        category = classification(name)
        if category == "rounded":
            replace_once(builder, name, _in_fp32)
        elif category == "compared":
            replace_once(builder, name, _compared_in_fp32)
        elif category == "own":
            replace_once(builder, name, own[name])
        elif category == "not_for_floats":
            replace_once(builder, name, _refusing_values(name))
        elif category in ("refused", None):  # None: a method added by a newer Triton, not looked at yet
            replace_once(builder, name, _refusing(name))
    _install_get_bf16()
    replace_once(interpreter, "_implicit_cvt", _float_arguments_as_fp32)
    replace_once(interpreter.ReduceOps, "sum", _summing)
    replace_once(interpreter.ReduceOps, "min_max", _comparing)
    replace_once(interpreter.ScanOps, "cumsum", _cumulative_sum)
    replace_once(interpreter.ScanOps, "cumprod", _cumulative_product)
