"""Run compiled-path jit functions that interpreted kernels call as device functions.

Why: some ``JITFunction``s exist before the interpreter is switched on, and
``JITFunction.__call__`` (triton/runtime/jit.py) only raises "Cannot call @triton.jit'd outside of
the scope of a kernel":

* Gluon's own helpers ``gl.sum``, ``gl.max``, ``gl.zeros``, ``gl.cdiv``... are ``GluonJITFunction``s
  made at import by ``triton.experimental.gluon.language._standard`` whatever the mode;
* ``tl.sum``, ``tl.cdiv``... are ``JITFunction``s when ``triton`` was imported before
  ``TRITON_INTERPRET=1`` was set (e.g. ``import triton`` ahead of ``import iris`` in a notebook);
* a user's helper defined before ``import iris``.

Fix: while the interpreter is on, such a call runs an interpreted twin of the same Python function,
just as an ``InterpretedFunction`` would have.
"""

import functools

import triton
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from ..base.patching import replace_once
from .gluon import GluonInterpretedFunction

_interpreted_twins = {}  # raw Python function -> its InterpretedFunction


def interpreted_twin(jit_function):
    """The interpreted function equivalent to a compiled-path ``JITFunction``.

    Parameters
    ----------
    jit_function : triton.runtime.jit.JITFunction

    Returns
    -------
    triton.runtime.interpreter.InterpretedFunction
        A :class:`~iris.interpret.gluon.GluonInterpretedFunction` for Gluon functions; cached.

    Examples
    --------
    >>> from triton.experimental.gluon import language as gl
    >>> type(interpreted_twin(gl.sum)).__name__
    'GluonInterpretedFunction'
    """
    # Keyed by the raw function: hashing a JITFunction computes its cache key (a dependency walk).
    twin = _interpreted_twins.get(jit_function.fn)
    if twin is None:
        twin_class = GluonInterpretedFunction if jit_function.is_gluon() else InterpretedFunction
        twin = _interpreted_twins[jit_function.fn] = twin_class(jit_function.fn)
    return twin


def _calling_interpreted_twins(call_outside_kernel):
    @functools.wraps(call_outside_kernel)
    def call(self, *args, **kwargs):
        if triton.knobs.runtime.interpret:
            return interpreted_twin(self)(*args, **kwargs)
        return call_outside_kernel(self, *args, **kwargs)

    return call


def install():
    """Route ``JITFunction.__call__`` to the interpreted twin while the interpreter is on."""
    replace_once(JITFunction, "__call__", _calling_interpreted_twins)
