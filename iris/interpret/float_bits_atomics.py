"""Float atomics that a GPU runs on the bits run on the bits on the CPU interpreter too.

Why, two interpreter gaps found by the randomized CPU-vs-GPU test (tests/test_device_diff.py):

* ``tl.atomic_xchg``/``atomic_and``/``atomic_or``/``atomic_xor`` on float32 and float64 compile for a GPU to
  ``atom.exch.b32``/``atom.and.b64``...: they act on the float's bits. The interpreter's native ``atomic_rmw``
  (triton 3.6) has no float case for them and raised ``ValueError('Unsupported data type')``.
* ``tl.atomic_min``/``atomic_max`` of floats are, in Triton's semantic, a signed-integer atomic for the lanes
  with a positive value and an unsigned one for the others, joined with ``tl.where``. For float64 the two old
  values are int64 and uint64 arrays, and the interpreter's ``create_select`` joined them with ``np.where``,
  whose type promotion makes float64 *values* of the integers: the old value 3.0 came back as 4.6e18 (its bits
  read as an integer). A GPU's select moves bits (both are ``i64`` in LLVM).

Fix, only where the installed interpreter needs it (each found by trying it, so triton 3.7 to 3.9 are
checked by feature): the four bitwise float atomics call the interpreter's integer atomic of the same width
with the float's bits (the native atomic, so they stay atomic across processes mapping one heap); a select of
two integer operands of one width and different signedness picks bits, typed as the result.

Examples
--------
>>> import iris.interpret; iris.interpret.activate()
>>> @triton.jit
... def swap(p, v, o):
...     tl.store(o, tl.atomic_xchg(p, tl.load(v)))
>>> p, o = torch.tensor([3.0]), torch.zeros(1); swap[(1,)](p, torch.tensor([1.5]), o); p.item(), o.item()
(1.5, 3.0)
"""

import functools

import numpy as np
import triton.language as tl
from triton._C.libtriton import ir
from triton.runtime.interpreter import InterpreterBuilder, TensorHandle, interpreter_builder

from ..base.patching import replace_once

BITWISE = ("XCHG", "AND", "OR", "XOR")
SAME_WIDTH_INTEGER = {np.dtype(np.float32): (np.int32, tl.int32), np.dtype(np.float64): (np.int64, tl.int64)}


def bitwise_float_atomics_refused() -> bool:
    """Whether the installed interpreter's native ``atomic_rmw`` refuses (or gets wrong) any of the four bitwise
    atomics on a float32, each tried on its own (a Triton may come to take one and not the others).

    Examples
    --------
    >>> bitwise_float_atomics_refused()   # after install(): the patched builder runs them on the bits
    False
    """
    one = np.float32(1.0).view(np.int32)
    # Each op's result on a word holding 0.0 with the operand 1.0, read as bits.
    expected = {"XCHG": one, "AND": 0, "OR": one, "XOR": one}
    value = TensorHandle(np.ones(1, dtype=np.float32), tl.float32)
    mask = TensorHandle(np.ones(1, dtype=bool), tl.int1)
    for name in BITWISE:
        word = np.zeros(1, dtype=np.float32)
        pointer = TensorHandle(np.array([word.ctypes.data], dtype=np.uint64), tl.pointer_type(tl.float32))
        try:
            interpreter_builder.create_atomic_rmw(getattr(ir.ATOMIC_OP, name), pointer, value, mask,
                                                  ir.MEM_SEMANTIC.RELAXED, ir.MEM_SYNC_SCOPE.GPU)
        except ValueError:
            return True
        if word.view(np.int32)[0] != expected[name]:
            return True
    return False


def select_promotes_to_float() -> bool:
    """Whether the installed interpreter's ``create_select`` of int64 and uint64 operands makes float64 values.

    Examples
    --------
    >>> select_promotes_to_float()   # after install()
    False
    """
    condition = TensorHandle(np.array([True]), tl.int1)
    signed = TensorHandle(np.array([2 ** 62 + 1], dtype=np.int64), tl.int64)
    unsigned = TensorHandle(np.array([1], dtype=np.uint64), tl.uint64)
    return np.asarray(interpreter_builder.create_select(condition, signed, unsigned).data).dtype.kind == "f"


def _on_the_bits(create_atomic_rmw):
    bitwise = {getattr(ir.ATOMIC_OP, name) for name in BITWISE}

    @functools.wraps(create_atomic_rmw)
    def rmw(self, rmw_op, ptr, val, mask, sem, scope):
        data = np.asarray(val.data)
        if rmw_op not in bitwise or data.dtype not in SAME_WIDTH_INTEGER:
            return create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope)
        numpy_int, triton_int = SAME_WIDTH_INTEGER[data.dtype]
        bits = TensorHandle(np.ascontiguousarray(data).view(numpy_int), triton_int)
        old = create_atomic_rmw(self, rmw_op, ptr, bits, mask, sem, scope)
        return TensorHandle(np.asarray(old.data).view(data.dtype), val.dtype.scalar)

    return rmw


def _selecting_bits(create_select):
    @functools.wraps(create_select)
    def select(self, condition, lhs, rhs):
        left, right = np.asarray(lhs.data), np.asarray(rhs.data)
        if not (left.dtype.kind in "iu" and right.dtype.kind in "iu" and left.dtype != right.dtype
                and left.dtype.itemsize == right.dtype.itemsize):
            return create_select(self, condition, lhs, rhs)
        # The result has the type of the last operand, as the interpreter's ternary_op gives it.
        return TensorHandle(np.where(condition.data, left.view(right.dtype), right), rhs.dtype.scalar)

    return select


def install():
    """Run bitwise float atomics and mixed-signedness selects on the bits, where the installed Triton does not."""
    if bitwise_float_atomics_refused():
        replace_once(InterpreterBuilder, "create_atomic_rmw", _on_the_bits)
    if select_promotes_to_float():
        replace_once(InterpreterBuilder, "create_select", _selecting_bits)
