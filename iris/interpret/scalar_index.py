"""A kernel's runtime scalar as a Python int (``range(n)`` over a runtime ``n``) with numpy >= 2.4.

Why: the interpreter keeps a kernel's scalars as one-element arrays, and each launch gives Triton's tensor
class an ``__index__`` (``_patch_lang_tensor`` in triton/runtime/interpreter.py). triton 3.6's is
``int(self.handle.data)``; numpy 2.4 stopped converting arrays of one or more dimensions with ``int()``, so a
loop ``for k in range(n)`` over a kernel argument ``n`` fails with "only 0-dimensional arrays can be converted
to Python scalars" (numpy 1.25 to 2.3 warn with a DeprecationWarning at every such loop). triton 3.7 squeezes
the array first.

Fix: only where the installed Triton's ``__index__`` fails or warns on a one-element array (found by trying it,
not by comparing versions), each launch's ``__index__`` reads the array's one element instead.

Examples
--------
>>> import iris.interpret; iris.interpret.activate()   # on triton 3.6 with numpy 2.4: installed
>>> @triton.jit
... def fill(out, n):
...     for k in range(n):                                  # n is a runtime scalar
...         tl.store(out + k, k)
"""

import functools
import warnings

import numpy as np
from triton.runtime import interpreter

from ..base.patching import replace_once


class _Probe:
    """Stands in for ``tl.tensor``: a class whose ``__index__`` a launch sets, holding a one-element array."""

    def __init__(self, data):
        self.handle = type("Handle", (), {"data": data})()


def index_needs_fixing() -> bool:
    """Whether the installed Triton's per-launch ``__index__`` fails or warns on a one-element scalar array.

    Returns
    -------
    bool
        True with triton 3.6 (numpy >= 2.4 raises, older numpy warns), False with triton 3.7 and later.

    Examples
    --------
    >>> index_needs_fixing()   # triton 3.9
    False
    """
    scope = interpreter._LangPatchScope()
    probe_class = type("ProbeTensor", (_Probe,), {})
    try:
        interpreter._patch_lang_tensor(probe_class, scope)
        operator_index = probe_class.__index__
    finally:
        scope.restore()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            return operator_index(probe_class(np.array([7], dtype=np.int32))) != 7
    except (TypeError, DeprecationWarning):
        return True


def _element_index(self):
    return int(np.asarray(self.handle.data).reshape(-1)[0])


def _indexing_by_element(patch_lang_tensor):
    @functools.wraps(patch_lang_tensor)
    def patch(tensor, scope):
        patch_lang_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", _element_index)

    return patch


def install():
    """Make each launch's ``__index__`` read the scalar's element, where the installed Triton's cannot."""
    if index_needs_fixing():
        replace_once(interpreter, "_patch_lang_tensor", _indexing_by_element)
