"""``iris.do_bench``: time a function the way upstream Iris's benchmarks do, ranks in step.

Each timed call is preceded by ``barrier_fn`` (every rank waits for every other), ``preamble_fn`` (reset what
the call consumes), a flush of the GPU's L2 cache (so a call does not find the last one's data there) and
``barrier_fn`` again, so that all ranks start the call together; upstream's benchmarks pass ``ctx.barrier``.
On a GPU the call is timed with CUDA events around it; on the CPU backend with the host's clock (the
interpreter runs kernels synchronously, and there is no cache to flush).

Examples
--------
>>> ms = iris.do_bench(lambda: kernel[grid](...), barrier_fn=ctx.barrier, n_warmup=2, n_repeat=10)  # doctest: +SKIP
>>> len(do_bench(lambda: sum(range(1000)), n_warmup=1, n_repeat=3, return_mode="all"))
3
"""

from __future__ import annotations

import statistics
import time

import torch

from ..interpret import kernels_run_on_gpu

RETURN_MODES = {"mean": statistics.mean, "median": statistics.median, "min": min, "max": max, "all": list}
L2_FLUSH_BYTES = 256 << 20  # larger than any GPU's L2 (H100: 50 MiB), as upstream's


def _quantiles(times: list[float], quantiles) -> float | list[float]:
    """Linear-interpolated quantiles of ``times`` (one number when one quantile is asked); each in [0, 1]."""
    ordered = sorted(times)
    values = []
    for q in quantiles:
        point = q * (len(ordered) - 1)
        below, frac = int(point), point - int(point)
        above = min(below + 1, len(ordered) - 1)
        values.append(ordered[below] + frac * (ordered[above] - ordered[below]))
    return values[0] if len(values) == 1 else values


def do_bench(fn, barrier_fn=lambda: None, preamble_fn=lambda: None, n_warmup: int = 25, n_repeat: int = 100,
             quantiles=None, return_mode: str = "mean"):
    """Milliseconds that ``fn()`` takes, upstream Iris's signature and protocol.

    Parameters
    ----------
    fn : callable
        What to time, e.g. a kernel launch.
    barrier_fn : callable
        Synchronises the ranks (upstream's programs pass ``ctx.barrier``); called before and after the flush
        that precedes every call, and once more at the end. Default: no synchronisation.
    preamble_fn : callable
        Called before every call, untimed (e.g. to reset flags the call waits on).
    n_warmup, n_repeat : int
        Untimed calls first, then timed ones (``n_repeat`` >= 1).
    quantiles : sequence of float, optional
        Return these quantiles (in [0, 1]) of the times instead of ``return_mode``'s statistic.
    return_mode : {"mean", "median", "min", "max", "all"}
        The statistic returned; ``"all"`` returns every time.

    Returns
    -------
    float or list of float
        Milliseconds.

    Examples
    --------
    >>> do_bench(lambda: None, n_warmup=0, n_repeat=5, return_mode="min") >= 0
    True
    """
    if return_mode not in RETURN_MODES:
        raise ValueError(f"return_mode={return_mode!r}: use one of {sorted(RETURN_MODES)}")
    if n_repeat < 1 or n_warmup < 0:
        raise ValueError(f"n_repeat={n_repeat}, n_warmup={n_warmup}: time at least one call, warm up >= 0 times")
    # Checked before any call: a bad argument should not cost a whole benchmark.
    if quantiles is not None and any(not 0 <= q <= 1 for q in quantiles):
        raise ValueError(f"quantiles={list(quantiles)}: each must lie in [0, 1]")
    on_gpu = kernels_run_on_gpu()
    # A buffer larger than the L2: zeroing it leaves none of the last call's data in the cache.
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda") if on_gpu else None

    def prepare():
        barrier_fn()  # every rank is done with the last call before any cache is flushed
        preamble_fn()
        if flush is not None:
            flush.zero_()
        barrier_fn()  # ... and every rank has flushed before any launches the next

    barrier_fn()
    preamble_fn()
    fn()  # compiles what fn launches, untimed
    barrier_fn()
    for _ in range(n_warmup):
        prepare()
        fn()
    # Made before timing, as upstream's: creating an event between the barrier and the call would delay it.
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(n_repeat)] if on_gpu else []
    times = []
    for call in range(n_repeat):
        prepare()
        if on_gpu:
            events[call][0].record()
            fn()
            events[call][1].record()
        else:
            begin = time.perf_counter()
            fn()
            times.append((time.perf_counter() - begin) * 1e3)
    barrier_fn()
    if on_gpu:
        torch.cuda.synchronize()  # events are read only once they have happened, whatever barrier_fn does
        times = [start.elapsed_time(end) for start, end in events]
    if quantiles is not None:
        return _quantiles(times, quantiles)
    return RETURN_MODES[return_mode](times)
