"""``tl.minimum``/``tl.maximum`` of a NaN and a number give the number, as on a GPU.

Why: with its default ``propagate_nan``, ``tl.minimum`` lowers to ``minnumf`` (``maxnumf`` for ``tl.maximum``),
which returns the other operand when one is NaN (PTX ``min.f32``). triton 3.6 and 3.7's interpreter computed
``create_minnumf``/``create_maxnumf`` with ``np.minimum``/``np.maximum``, which return NaN: a kernel gave NaN on
the CPU where an H100 gave a number (seen comparing bf16 kernels on both, tests/gpu/test_bf16_cuda.py). triton 3.8
uses ``np.fmin``/``np.fmax``.

Fix: only where the installed interpreter's ``minnumf`` returns NaN for (NaN, 1), found by trying it, the two
builder methods compute with ``np.fmin``/``np.fmax``. ``minimumf``/``maximumf`` (``propagate_nan=ALL``) keep
returning NaN, as they should.

Examples
--------
>>> import iris.interpret; iris.interpret.activate()
>>> @triton.jit
... def smaller(x_ptr, y_ptr, out_ptr):
...     tl.store(out_ptr, tl.minimum(tl.load(x_ptr), tl.load(y_ptr)))
>>> out = torch.empty(1); smaller[(1,)](torch.tensor([float("nan")]), torch.tensor([1.0]), out); out.item()
1.0
"""

import numpy as np
import triton.language as tl
from triton.runtime.interpreter import InterpreterBuilder, TensorHandle, interpreter_builder

from ..base.patching import replace_once


def minnum_returns_nan() -> bool:
    """Whether the installed interpreter's ``create_minnumf`` gives NaN for (NaN, 1).

    Examples
    --------
    >>> minnum_returns_nan()   # triton 3.8 or 3.9, or after install()
    False
    """
    nan, one = (TensorHandle(np.array([value], dtype=np.float32), tl.float32) for value in (np.nan, 1.0))
    return bool(np.isnan(interpreter_builder.create_minnumf(nan, one).data).any())


def _numbers_first(numpy_operation):
    def make_replacement(original):
        def operation(self, lhs, rhs):
            return self.binary_op(lhs, rhs, numpy_operation)

        return operation

    make_replacement.__qualname__ = f"_numbers_first.{numpy_operation.__name__}"
    return make_replacement


def install():
    """``create_minnumf``/``create_maxnumf`` return the number beside a NaN, where the installed Triton's do not."""
    if minnum_returns_nan():
        replace_once(InterpreterBuilder, "create_minnumf", _numbers_first(np.fmin))
        replace_once(InterpreterBuilder, "create_maxnumf", _numbers_first(np.fmax))
