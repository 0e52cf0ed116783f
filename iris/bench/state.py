"""What a benchmark function is given (:class:`State`) and what one point of its sweep gave (:class:`Result`).

A benchmark ``fn(state, ctx)`` is called once per point of its axes. Its body is setup, untimed: it reads the
point's axis values (``state["M"]``), declares the work one call does (``set_bytes``, ``set_flops``, counters)
and hands over the callable to time with ``state.exec``; the runner then times it with ``iris.do_bench``.

Examples
--------
>>> state = State({"M": 1024}, n_warmup=25, n_repeat=100)
>>> state["M"], state.get("N", 64)
(1024, 64)
>>> state.set_bytes(2 * 1024 * 4)
>>> state.exec(lambda: None)
>>> state._bytes, state._n_repeat
(8192, 100)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class SkipCombination(Exception):
    """Raised by :meth:`State.skip`: this point of the sweep is left out, and the output says so and why."""

    def __init__(self, reason: str = ""):
        super().__init__(reason)
        self.reason = reason


class State:
    """One point of a benchmark's sweep, as the benchmark function sees it (upstream Iris's ``State``).

    Parameters
    ----------
    params : dict
        The point's axis values, by axis name (``num_ranks`` included when the benchmark sweeps it).
    n_warmup, n_repeat : int
        Untimed and timed calls ``iris.do_bench`` makes unless the benchmark changes them.

    Examples
    --------
    >>> state = State({"M": 8}, n_warmup=1, n_repeat=3)
    >>> state.set_flops(2 * 8**3); state.add_counter("tiles", 4.0)
    >>> state.set_repeat(10); state._n_repeat
    10
    """

    def __init__(self, params: dict[str, Any], n_warmup: int, n_repeat: int):
        self._params = dict(params)
        self._bytes: int | None = None
        self._flops: int | None = None
        self._counters: dict[str, float] = {}
        self._exec_fn: Callable | None = None
        self._preamble_fn: Callable = lambda: None
        self._n_warmup = n_warmup
        self._n_repeat = n_repeat

    def __getitem__(self, name: str) -> Any:
        """The value of axis ``name`` at this point; a KeyError names the axes there are."""
        try:
            return self._params[name]
        except KeyError:
            raise KeyError(f"state[{name!r}]: this benchmark has no axis {name!r}; its axes are "
                           f"{sorted(self._params)}") from None

    def get(self, name: str, default: Any = None) -> Any:
        """The value of axis ``name``, or ``default`` when the benchmark has no such axis."""
        return self._params.get(name, default)

    def set_bytes(self, n: int) -> None:
        """Bytes one call moves: the output's ``BW (GB/s)`` is ``n / 1e9`` over the mean time in seconds."""
        self._bytes = n

    def set_flops(self, n: int) -> None:
        """Floating-point operations one call does: ``TFLOPS`` is ``n / 1e12`` over the mean time in seconds."""
        self._flops = n

    def add_counter(self, name: str, value: float) -> None:
        """A column of the benchmark's own (``name``), with this point's ``value``."""
        self._counters[name] = value

    def set_warmup(self, n: int) -> None:
        """Untimed calls before timing, for this point (default ``--n_warmup``, 25)."""
        self._n_warmup = n

    def set_repeat(self, n: int) -> None:
        """Timed calls, for this point (default ``--n_repeat``, 100); the time reported is their mean."""
        self._n_repeat = n

    def exec(self, fn: Callable, *, preamble_fn: Callable | None = None) -> None:
        """Hand over the callable to time; it is not called here.

        Once the benchmark function returns, ``iris.do_bench`` calls ``fn`` once untimed (compiling what it
        launches), ``n_warmup`` times untimed, then ``n_repeat`` times timed, with every rank in step.

        Parameters
        ----------
        fn : callable
            The work to time, e.g. ``lambda: ctx.ccl.all_gather(out, inp)``.
        preamble_fn : callable, optional
            Called before every call of ``fn``, outside the timed region: reset what ``fn`` consumes (zero an
            output, clear flags).
        """
        self._exec_fn = fn
        if preamble_fn is not None:
            self._preamble_fn = preamble_fn

    def skip(self, reason: str = "") -> None:
        """Leave this point out (call it during setup); the output shows it as skipped, with ``reason``."""
        raise SkipCombination(reason)


@dataclass
class Result:
    """What one point of one benchmark gave: upstream Iris's ``Result``.

    ``gpu_time_ms`` is the mean of ``all_times_ms`` (rank 0's timed calls, as upstream reports);
    ``bandwidth_gbps`` and ``tflops`` are the declared bytes and FLOPs over that mean; a skipped point has
    ``skipped`` set, a zero time and the reason.
    """

    benchmark_name: str
    params: dict[str, Any]
    gpu_time_ms: float
    all_times_ms: list[float]
    bandwidth_gbps: float | None = None
    tflops: float | None = None
    counters: dict[str, float] = field(default_factory=dict)
    skipped: bool = False
    skip_reason: str = ""
    world_size: int = 1
