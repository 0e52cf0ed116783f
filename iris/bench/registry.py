"""The benchmarks a program registers with ``@bench.register``, in the order it registers them.

Examples
--------
>>> from iris.bench.axes import axis
>>> @axis("M", [8, 16])
... def copy(state, ctx): ...
>>> definition = BenchmarkDef.of(copy)
>>> definition.name, [a.name for a in definition.axes]
('copy', ['M'])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .axes import AxisDef


@dataclass
class BenchmarkDef:
    """A benchmark: its name (the function's), the function ``fn(state, ctx)`` and its axes, slowest first."""

    name: str
    fn: Callable
    axes: list[AxisDef]

    @classmethod
    def of(cls, fn: Callable) -> BenchmarkDef:
        """The definition ``@axis`` decorators gave ``fn``."""
        return cls(fn.__name__, fn, list(getattr(fn, "_bench_axes", [])))

    def axis_names(self) -> list[str]:
        return [a.name for a in self.axes]


_registry: list[BenchmarkDef] = []  # this process's benchmarks; a worker process re-registers its program's


def register(fn: Callable) -> Callable:
    """Decorator: make ``fn(state, ctx)`` a benchmark that :func:`iris.bench.main` runs; put it above every ``@axis``.

    Examples
    --------
    >>> import iris.bench as bench
    >>> @bench.register                                   # doctest: +SKIP
    ... @bench.axis("M", [1024])
    ... def copy(state, ctx): ...
    """
    if not callable(fn):
        raise TypeError(f"@bench.register decorates a function fn(state, ctx), not {fn!r}")
    _registry.append(BenchmarkDef.of(fn))
    return fn


def registered() -> list[BenchmarkDef]:
    """The benchmarks registered so far in this process, in registration order."""
    return list(_registry)
