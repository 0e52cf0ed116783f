"""The mark of iris's errors that a kernel may raise: the CPU interpreter's launch raises them as themselves.

Below every layer because the heap (:mod:`iris.heap.reach`), the device API (:mod:`iris.language.core`) and the
interpreter (:mod:`iris.interpret.kernel_errors`, which unwraps them) all need it.

Examples
--------
>>> class UnsupportedAtomicError(RaisedAsIs, TypeError): ...
>>> issubclass(UnsupportedAtomicError, RaisedAsIs)
True
"""


class RaisedAsIs(Exception):
    """Mixed into iris's own errors that a kernel may raise; the interpreted launch raises them unwrapped.

    Examples
    --------
    >>> class UnsupportedAtomicError(RaisedAsIs, TypeError): ...
    """
