"""Errors that iris raises inside an interpreted kernel reach the caller as themselves, not as nested reprs.

Why: triton's interpreter wraps any exception of a kernel in ``InterpreterError(repr(error))``, once per jit call
level, so an iris error raised while a kernel runs (``UnsupportedAtomicError`` from an iris atomic, say) read
``InterpreterError('InterpreterError(\\'UnsupportedAtomicError("iris.atomic_sub on int8 ...")\\')')``, its text
escaped twice. On a GPU the same error is the cause of a ``CompilationError`` that quotes the kernel's line.

Fix: the launch re-raises the first :class:`~iris.base.errors.RaisedAsIs` under the ``InterpreterError`` (each wrapper
keeps the one below as its ``__cause__``), with its own type and message; every other error stays as Triton raises
it. It is raised after the ``except`` block, not in it: raised there, the wrapper being handled would become its
``__context__``, and that wrapper's causes lead back to it, a cycle in which code that walks an error's causes and
contexts (loggers, test tools) never ends.

Examples
--------
>>> iris.atomic_sub(counter_i8, 1, rank, peer, heap_bases)   # in an interpreted kernel  # doctest: +SKIP
Traceback (most recent call last):
iris.language.core.UnsupportedAtomicError: iris.atomic_sub on int8 (rank 0): ...
"""

import functools

from triton.runtime.errors import InterpreterError

from ..base.errors import RaisedAsIs
from ..base.patching import replace_once
from .errors import first_cause


def _unwrapping(launch):
    @functools.wraps(launch)
    def run(self, *args, **kwargs):
        try:
            return launch(self, *args, **kwargs)
        except InterpreterError as error:
            ours = first_cause(error, RaisedAsIs)
            if ours is None:
                raise
        raise ours  # outside the handler: no wrapper becomes its context (see the module's docstring)

    return run


def install():
    """Re-raise :class:`RaisedAsIs` errors unwrapped from interpreted launches; idempotent."""
    from triton.runtime import interpreter

    replace_once(interpreter.GridExecutor, "__call__", _unwrapping)
