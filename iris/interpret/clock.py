"""Read the device clock on the CPU interpreter: the inline PTX that reads it runs as the monotonic clock.

Why: on a GPU, :func:`iris.language.tracing.device_clock` and ``device_sm_id`` are inline PTX
(``tl.inline_asm_elementwise``), which the interpreter refuses ("inline_asm not supported in interpreter
mode", ``InterpreterBuilder.create_inline_asm`` in triton/runtime/interpreter.py).

Fix: while interpreting, those two asm strings (and only they) are answered on the host: the global timer
by ``time.monotonic_ns()`` (a clock every process on the host shares, so ranks' timestamps compare
directly), the SM id by 0 (the CPU is one streaming multiprocessor). Any other inline asm is refused as
before.

Examples
--------
>>> @triton.jit
... def now(out):
...     tl.store(out, tl.inline_asm_elementwise(GLOBALTIMER_ASM, "=l", [], dtype=tl.int64, is_pure=False, pack=1))
"""

import time

import numpy as np
from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

from ..base.patching import replace_once

# The strings iris.language.tracing emits (it imports them from here: importing that module from here would define
# its kernels and aggregates before activate() has installed the interpreter's hooks).
GLOBALTIMER_ASM = "mov.u64 $0, %globaltimer;"  # nanoseconds, the GPU's global timer
SMID_ASM = "mov.u32 $0, %smid;"  # the streaming multiprocessor running the program


class _Answer:
    """What ``tl.inline_asm_elementwise`` expects of the builder: an operation with results."""

    def __init__(self, value, numpy_dtype, triton_dtype):
        self.handle = TensorHandle(np.array([value], dtype=numpy_dtype), triton_dtype)

    def get_result(self, index):
        return self.handle


def _host_answers(original):
    def create_inline_asm(self, inline_asm, constraints, values, types, is_pure, pack):
        if inline_asm == GLOBALTIMER_ASM:
            return _Answer(time.monotonic_ns(), np.int64, types[0])
        if inline_asm == SMID_ASM:
            return _Answer(0, np.int32, types[0])
        return original(self, inline_asm, constraints, values, types, is_pure, pack)

    return create_inline_asm


def install():
    """Answer the clock and SM-id asm of :mod:`iris.language.tracing` on the interpreter."""
    replace_once(InterpreterBuilder, "create_inline_asm", _host_answers)
