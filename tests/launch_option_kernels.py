"""Kernels that upstream Iris's programs launch with AMD-only options (``waves_per_eu=2, kpack=2``...), for
tests/test_upstream_surface.py (CPU interpreter) and tests/gpu/test_upstream_cuda.py (compiled for the GPU).

* ``scale``: ``out = src * factor``; launched with the AMD-only options, which iris drops.
* ``packed``: has a parameter of its own named ``kpack``, which is the kernel's and is passed on.
"""

import triton
import triton.language as tl

import iris  # noqa: F401  before any kernel is defined: without a GPU it turns on the interpreter


@triton.jit
def scale(src, out, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + offs, tl.load(src + offs) * factor)


@triton.jit
def packed(out, kpack, BLOCK: tl.constexpr):
    tl.store(out + tl.arange(0, BLOCK), kpack)
