"""Float atomic adds on the CPU interpreter give what an NVIDIA GPU gives, atomically across processes.

Why, two gaps of triton's native ``atomic_rmw`` (triton/runtime/interpreter.py and its C++ ``atomic_rmw``):

* float16 adds hold a C++ mutex of one process: two ranks mapping one heap could lose each other's updates;
* float32 adds keep subnormal numbers, but a GPU's ``atom.add.f32`` and ``red.add.f32`` flush subnormal inputs
  and results to a zero of the same sign (PTX ISA, ``atom``). The GPU-against-interpreter test
  (tests/gpu/test_device_diff_cuda.py, seed 1477773179) found it: an atomic add of -2^-128 onto 0.0 left
  -2^-128 on the interpreter and +0.0 on an H200, and two adds of -2^-127 gave -2^-126 against -0.0.
  Where subnormals never occur the two agree, so only kernels that add tiny numbers saw a difference.

float64 adds keep subnormals on GPUs too, and float16/bfloat16 adds are ``.noftz`` ones (Triton emits
``atom.add.noftz.f16``): those keep them as well, so nothing is flushed for them.

Fix: these adds are compare-and-swap loops on the word with the interpreter's own ``atomic_cas``, which is atomic
across processes; the float32 one flushes first where the installed interpreter keeps subnormals (checked by
trying it). The returned old value is the word's bits as they were, unflushed, as a GPU's ``atom`` returns them.
:mod:`.bf16` runs its bf16 adds through :func:`compare_and_swap_loop` too.

Examples
--------
>>> import iris.interpret; iris.interpret.activate()
>>> import torch, triton, triton.language as tl
>>> @triton.jit
... def add(p, v):
...     tl.atomic_add(p, tl.load(v))
>>> p = torch.zeros(1); add[(1,)](p, torch.tensor([2.0 ** -130])); p.item()   # a GPU flushes 2^-130 as well
0.0
"""

import functools

import numpy as np
import triton.language as tl
from triton._C.libtriton import interpreter as native
from triton._C.libtriton import ir
from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

from ..base.patching import replace_once

SIGN = np.uint32(0x8000_0000)
EXPONENT = np.uint32(0x7F80_0000)


def compare_and_swap_loop(addresses, values, lanes, order, update):
    """Apply ``update(old, value)`` to 16- or 32-bit words atomically, lane by lane, across processes.

    Parameters
    ----------
    addresses : numpy.ndarray
        uint64, flat: where each lane's word is.
    values : numpy.ndarray
        uint16 or uint32, flat: each lane's operand (bits); the words have its width.
    lanes : numpy.ndarray
        bool, flat: the lanes that take part.
    order : the interpreter's ``MEM_SEMANTIC``
        Memory order of the compare-and-swap that succeeds.
    update : callable
        ``update(old_bits, value_bits) -> new_bits`` on arrays of the words' type.

    Returns
    -------
    numpy.ndarray
        Of the words' type: each lane's word just before its update took effect (0 where the lane is off).

    Examples
    --------
    >>> word = np.zeros(1, dtype=np.uint32)
    >>> where = np.full(3, word.ctypes.data, dtype=np.uint64)
    >>> compare_and_swap_loop(where, np.ones(3, np.uint32), np.ones(3, bool), native.MEM_SEMANTIC.RELAXED,
    ...                       lambda old, value: old + value)
    array([0, 1, 2], dtype=uint32)
    >>> word
    array([3], dtype=uint32)
    """
    word = values.dtype
    old = np.zeros(addresses.shape, dtype=word)
    pending = np.flatnonzero(lanes)
    if not pending.size:
        return old
    seen = native.load(addresses[pending], np.ones(pending.size, dtype=bool), np.zeros(pending.size, word), word)
    while pending.size:
        # Lanes on one word all try; the first wins, the others see its result and retry with it. A lane of
        # another process that got in between is seen the same way.
        proposed = np.ascontiguousarray(update(seen, values[pending]), dtype=word)
        found = native.atomic_cas(np.ascontiguousarray(addresses[pending]), seen.copy(), proposed, order)
        swapped = found == seen
        old[pending[swapped]] = seen[swapped]
        pending, seen = pending[~swapped], np.ascontiguousarray(found[~swapped])
    return old


def flushed(bits):
    """float32 bits with every subnormal made a zero of its sign, as ``atom.add.f32`` takes and leaves them.

    Examples
    --------
    >>> flushed(np.array([1.0, 2.0 ** -130, -(2.0 ** -140), 2.0 ** -126], np.float32).view(np.uint32)).view(np.float32)
    array([ 1.0000000e+00,  0.0000000e+00, -0.0000000e+00,  1.1754944e-38],
          dtype=float32)
    """
    return np.where(bits & EXPONENT == 0, bits & SIGN, bits)


def fp32_add(old, value):
    """The bits of ``atom.add.f32``: subnormal operands and a subnormal sum flushed (uint32 in and out)."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN come out as IEEE gives them, as on a GPU
        total = flushed(old).view(np.float32) + flushed(value).view(np.float32)
    return flushed(total.view(np.uint32))


def fp16_add(old, value):
    """The bits of a float16 add (uint16 in and out): one fp32 add rounded to fp16, the correctly rounded sum."""
    total = old.view(np.float16).astype(np.float32) + value.view(np.float16).astype(np.float32)
    return total.astype(np.float16).view(np.uint16)


def native_add_keeps_subnormals() -> bool:
    """Whether the installed interpreter's own float32 ``atomic_add`` leaves a subnormal sum unflushed.

    Examples
    --------
    >>> native_add_keeps_subnormals()   # every Triton so far: the CPU computes IEEE's gradual underflow
    True
    """
    word = np.zeros(1, dtype=np.float32)
    add = InterpreterBuilder.ir_rmw_op_to_interpreter_rmw_op[ir.ATOMIC_OP.FADD]
    # The C++ atomic itself, below every wrapper of the builder's method (this module's among them).
    native.atomic_rmw(add, np.array([word.ctypes.data], dtype=np.uint64), np.array([2.0 ** -130], dtype=np.float32),
                      np.ones(1, dtype=bool), native.MEM_SEMANTIC.RELAXED)
    return bool(word[0] != 0)


def updated_words(builder, ptr, val, mask, sem, update):
    """Run ``update`` on the words a builder's ``create_atomic_rmw`` call names, by :func:`compare_and_swap_loop`.

    Parameters
    ----------
    builder : InterpreterBuilder
    ptr, val, mask, sem
        As ``create_atomic_rmw`` takes them; the words are as wide as ``val``'s elements (2 or 4 bytes).
    update : callable
        ``update(old_bits, value_bits) -> new_bits``, on unsigned integers of that width.

    Returns
    -------
    TensorHandle
        The old values, typed as ``val``.
    """
    if sem not in builder.ir_sem_to_interpreter_sem:
        raise ValueError(f"unsupported semantic {sem}")
    shape = np.shape(ptr.data)
    word = np.dtype(f"u{np.asarray(val.data).dtype.itemsize}")
    old = compare_and_swap_loop(
        np.ascontiguousarray(ptr.data, dtype=np.uint64).reshape(-1),
        np.ascontiguousarray(np.broadcast_to(val.data, shape)).view(word).reshape(-1),
        np.broadcast_to(np.asarray(mask.data, dtype=bool), shape).reshape(-1),
        builder.ir_sem_to_interpreter_sem[sem], update)
    return TensorHandle(old.reshape(shape).view(np.asarray(val.data).dtype), val.dtype.scalar)


def _adds(updates):
    def make(create_atomic_rmw):
        @functools.wraps(create_atomic_rmw)
        def rmw(self, rmw_op, ptr, val, mask, sem, scope):
            element = ptr.get_element_ty()
            update = updates.get(element) if rmw_op == ir.ATOMIC_OP.FADD else None
            if update is None:
                return create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope)
            return updated_words(self, ptr, val, mask, sem, update)

        return rmw

    return make


def _fp16_and_fp32(create_atomic_rmw):
    return _adds({tl.float16: fp16_add, tl.float32: fp32_add})(create_atomic_rmw)


def _fp16(create_atomic_rmw):
    return _adds({tl.float16: fp16_add})(create_atomic_rmw)


def install():
    """Make float16 adds atomic across processes, and float32 adds flush subnormals where the interpreter does not."""
    replace_once(InterpreterBuilder, "create_atomic_rmw",
                 _fp16_and_fp32 if native_add_keeps_subnormals() else _fp16)
