"""The error raised for Triton/Gluon features the CPU interpreter does not emulate, and :func:`first_cause`,
which finds an error of ours under the interpreter's wrappers."""


class UnsupportedOnInterpreter(Exception):
    """A kernel used a feature that the Triton CPU interpreter cannot run.

    Raised instead of returning a silently wrong result: shared memory
    descriptors, TMA and mbarrier operations, warp specialization and the other
    NVIDIA/AMD-specific Gluon operations only exist on a GPU.

    Examples
    --------
    >>> raise UnsupportedOnInterpreter("gl.warp_specialize")  # doctest: +SKIP
    Traceback (most recent call last):
    UnsupportedOnInterpreter: gl.warp_specialize is not emulated by the Triton CPU interpreter ...
    """

    def __init__(self, feature: str, reason: str = ""):
        self.feature = feature
        why = f" ({reason})" if reason else ""
        super().__init__(
            f"{feature} is not emulated by the Triton CPU interpreter{why}. "
            "Run this kernel on a GPU, or write this part with plain gl.load/gl.store "
            "on global memory so that it also runs on the CPU."
        )


def first_cause(error, kind):
    """The first exception of type ``kind`` in ``error``'s chain of causes (``error`` itself included), or None.

    Triton's interpreter wraps a kernel's exception in ``InterpreterError``, once per jit call level, each wrapper
    keeping the one below as its ``__cause__``: the launch hooks find their own errors with this.

    Examples
    --------
    >>> try:
    ...     try:
    ...         raise KeyError("inner")
    ...     except KeyError as inner:
    ...         raise RuntimeError("outer") from inner
    ... except RuntimeError as outer:
    ...     type(first_cause(outer, KeyError)).__name__
    'KeyError'
    """
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__
    return None
