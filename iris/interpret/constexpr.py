"""Honour ``constexpr`` kernel annotations whatever their spelling (``gl.constexpr``, ``tl.constexpr``...).

Why: ``GridExecutor.__init__`` (triton/runtime/interpreter.py) decides which kernel arguments are
constexpr from the annotations of the *rewritten* kernel. ``FunctionRewriter._compile_and_exec``
compiles that rewrite from interpreter.py, whose ``from __future__ import annotations`` it inherits,
so every annotation is a string and ``_normalize_ty`` only recognises the texts ``"tl.constexpr"`` and
``"constexpr"``. A kernel written ``BLOCK: gl.constexpr`` then gets BLOCK as a runtime tensor and fails
in ``arange`` ("arange's arguments must be of type tl.constexpr").

Fix: after triton's own ``__init__``, resolve each string annotation in the kernel's globals and let
triton's ``_normalize_ty`` judge the resolved object (the class ``tl.constexpr`` normalises to
``"constexpr"`` whatever name it was reached through).
"""

import functools

from triton.runtime import interpreter
from triton.runtime.jit import _normalize_ty

from ..base.patching import replace_once


def is_constexpr_annotation(annotation, namespace):
    """Tell whether a kernel parameter annotation means ``constexpr``.

    Parameters
    ----------
    annotation : object or str
        The annotation, possibly as source text such as ``"gl.constexpr"``.
    namespace : dict
        Globals the annotation text is resolved in (the kernel's module).

    Returns
    -------
    bool

    Examples
    --------
    >>> from triton.experimental.gluon import language as gl
    >>> is_constexpr_annotation("gl.constexpr", {"gl": gl})
    True
    """
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, namespace)  # noqa: S307 - the user's own annotation text
        except Exception:
            pass  # unresolvable text: fall back to triton's textual rule below
    return _normalize_ty(annotation) == "constexpr"


def _resolving_constexprs(original_init):
    @functools.wraps(original_init)
    def init(self, fn, arg_names, grid, *args, **kwargs):
        original_init(self, fn, arg_names, grid, *args, **kwargs)
        annotations = fn.__annotations__
        self.constexprs = [
            name
            for name in arg_names
            if name in annotations and is_constexpr_annotation(annotations[name], fn.__globals__)
        ]

    return init


def install():
    """Wrap ``GridExecutor.__init__`` so constexpr arguments are found by meaning, not spelling."""
    replace_once(interpreter.GridExecutor, "__init__", _resolving_constexprs)
