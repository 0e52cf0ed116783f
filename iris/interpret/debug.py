"""Device assertions on the interpreter, for iris's debug mode.

Triton's interpreter never reads ``triton.knobs.runtime.debug``: its builder carries fixed default
options (``interpreter_builder.options``), so ``tl.device_assert`` is dropped even with TRITON_DEBUG=1.
And a failed assertion reaches the caller wrapped in ``InterpreterError(repr(...))`` once per jit call
level, which hides which kernel failed. :func:`enable_device_asserts` fixes both: assertions are traced,
and an assertion whose message a handler recognises is re-raised as the handler's exception.

Examples
--------
>>> enable_device_asserts(lambda kernel, failure: None)   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import functools

from ..base.patching import replace_once
from .errors import first_cause

_handlers = []


def enable_device_asserts(handler) -> None:
    """Compile ``tl.device_assert`` in on the interpreter; route failures through ``handler``.

    Parameters
    ----------
    handler : callable(kernel_name, AssertionError) -> Exception or None
        Returns the exception to raise instead of Triton's ``InterpreterError``, or None to leave it.
        The AssertionError's traceback still holds the frames of the jit functions that failed.
    """
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    builder.options = dataclasses.replace(builder.options, debug=True)
    if handler not in _handlers:
        _handlers.append(handler)
    replace_once(interpreter.GridExecutor, "__call__", _routing_assertions)


def _routing_assertions(launch):
    @functools.wraps(launch)
    def run(self, *args, **kwargs):
        from triton.runtime.errors import InterpreterError

        try:
            return launch(self, *args, **kwargs)
        except InterpreterError as error:
            failure = first_cause(error, AssertionError)
            for handler in _handlers if failure is not None else ():
                replacement = handler(self.fn.__name__, failure)
                if replacement is not None:
                    raise replacement from None
            raise

    return run
