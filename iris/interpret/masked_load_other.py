"""A masked load's one-element ``other`` of -0.0 fills the masked lanes with -0.0, as on a GPU.

Why: Triton's semantic passes ``other.handle if other else None`` to the builder (triton 3.6 to 3.9), and the
interpreter gives a one-element tensor the truth value of its element (``_patch_lang_tensor``). So an ``other``
of one element that is zero counts as none, and the builder fills the masked lanes with +0.0. For 0 and +0.0
that is the same number; a -0.0 lost its sign (a lane of ``tl.load(p + tl.arange(0, 1), mask=..., other=x)``
with ``x`` -0.0 read +0.0 on the CPU and -0.0 on a GPU; tests/test_device_diff.py found it, seed 145008604).
Compiled kernels are not touched: their ``other`` is an IR value, which is true.

Fix: only where a probe kernel's masked lane loses the sign (found by trying it, not by comparing versions),
the semantic's ``load`` re-selects the masked lanes from ``other`` (``where(mask, loaded, other)``, bit for bit)
when the interpreter dropped it, i.e. when ``other`` is one element equal to zero.

Examples
--------
>>> import iris.interpret; iris.interpret.activate()
>>> @triton.jit
... def fill(src, other, out):
...     lane = tl.arange(0, 1)
...     tl.store(out + lane, tl.load(src + lane, mask=lane < 0, other=tl.load(other)))
>>> out = torch.empty(1); fill[(1,)](torch.ones(1), torch.tensor([-0.0]), out); torch.signbit(out).item()
True
"""

import torch
import triton
import triton.language as tl
from triton.language.semantic import TritonSemantic
from triton.runtime.interpreter import TensorHandle

from ..base.patching import replace_once


def drops_negative_zero() -> bool:
    """Whether a masked lane of a one-element load reads +0.0 where its ``other`` is -0.0 (the interpreter
    active).

    Examples
    --------
    >>> drops_negative_zero()   # after install()
    False
    """
    @triton.jit  # made here, after activate() made triton interpret
    def probe(src, other, out):
        lane = tl.arange(0, 1)
        tl.store(out + lane, tl.load(src + lane, mask=lane < 0, other=tl.load(other)))

    out = torch.full((1,), 5.0)
    probe[(1,)](torch.ones(1), torch.tensor([-0.0]), out)
    return not bool(torch.signbit(out).item())


def _other_kept(original):
    def load(self, ptr, mask, other, *rest, **options):
        loaded = original(self, ptr, mask, other, *rest, **options)
        dropped = (mask is not None and other is not None and isinstance(other.handle, TensorHandle)
                   and other.handle.data.size == 1 and not other.handle.data.any())
        if not dropped:
            return loaded
        return self.where(mask, loaded, self.cast(other, loaded.type.scalar))

    return load


def install():
    """The semantic's load keeps a one-element zero ``other``, where the installed Triton drops it."""
    if drops_negative_zero():
        replace_once(TritonSemantic, "load", _other_kept)
