"""The error a performance measurement raises on bad input: what went wrong, on which rank, and what to do.

Examples
--------
>>> raise PerfError("candidate 'mine' failed on rank 1: ZeroDivisionError")   # doctest: +SKIP
"""


class PerfError(RuntimeError):
    """A measurement that cannot be made as asked (raised on every rank alike, so that none waits for another)."""
