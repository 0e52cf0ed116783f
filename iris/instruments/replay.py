"""Time a call on every rank in step as CUDA-graph replays, and report the slowest rank: the timer the benchmarks
and the bench view share.

``calls`` calls are captured in one CUDA graph, which is replayed back to back for about ``timed_ms`` (every
rank replays as often as the slowest to start needs: each replay may hold a collective, and a rank that
replayed more would wait for its peers forever); CUDA events around the replays give µs per call, and the
slowest rank's time is the answer. Back-to-back replays matter for short collectives: a host barrier before
every call would add the barrier's skew between ranks to every sample. Where any rank cannot capture the
call (a library that cannot be captured, a host synchronisation inside), every rank times an eager loop of
the same calls instead, and the result says so and why.

Examples
--------
>>> timing = replay_time(lambda: dist.all_reduce(x), calls=20)      # doctest: +SKIP
>>> timing.us, timing.captured                                      # doctest: +SKIP
(11.6, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

TIMED_MS = 20.0  # replays per measurement: about this long


@dataclass(frozen=True)
class ReplayTiming:
    """µs per call: ``us`` the slowest rank's, ``per_rank_us`` each rank's; ``captured`` False when an eager loop
    was timed instead of graph replays, ``why_eager`` saying why."""

    us: float
    per_rank_us: tuple[float, ...]
    captured: bool
    why_eager: str | None = None


def everyone(value, group=None) -> list:
    """Every rank's ``value``, in rank order, through ``group`` (a torch.distributed group; None: the default)."""
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, value, group=group)
    return out


def every_rank_us(ms: float, group=None) -> tuple[float, ...]:
    """Every rank's time ``ms`` (milliseconds, as :func:`iris.do_bench` gives it) in µs, in rank order
    (collective)."""
    return tuple(t * 1e3 for t in everyone(ms, group))


def capture(fn, calls: int):
    """(a function replaying ``calls`` calls of ``fn``, None) or (None, why the capture failed)."""
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception as exc:  # e.g. a library call that cannot be captured
        # Any exception, not only CUDA's RuntimeError: the caller gathers every rank's answer, and a rank that
        # raised here instead would leave its peers waiting in that gather.
        torch.cuda.synchronize()
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
    return graph.replay, None


def replay_time(fn, calls: int = 1, timed_ms: float = TIMED_MS, *, group=None, graph: bool = True,
                n_repeat: int | None = None) -> ReplayTiming:
    """µs per call of ``fn``, ranks in step, CUDA-graph replays where every rank can capture ``fn``.

    Collective: every rank calls it with the same arguments. ``fn`` runs once on a side stream first (as
    torch's graph docs ask, and so that it allocates and compiles outside the capture).

    Parameters
    ----------
    fn : callable
        What to time; called ``calls`` times per replay.
    calls : int
        Calls captured in one graph (several amortise the graph launch for calls of a few µs).
    timed_ms : float
        Replay for about this long (ignored when ``n_repeat`` is given).
    group : torch.distributed.ProcessGroup, optional
        Where the ranks agree on the number of replays and gather the times (None: the default group).
    graph : bool
        False: time an eager loop without trying to capture.
    n_repeat : int, optional
        Replays timed (the same on every rank); default: as many as fill ``timed_ms``.

    Returns
    -------
    ReplayTiming

    Examples
    --------
    >>> replay_time(lambda: torch.mm(a, b), calls=1).us      # doctest: +SKIP
    350.2
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    run, why = capture(fn, calls) if graph else (None, "graph=False was asked")
    whys = everyone(why, group)
    failed = [(rank, w) for rank, w in enumerate(whys) if w is not None]
    if failed:
        # One rank's failure makes every rank time eagerly: the same calls everywhere, collectives matched.
        why = "; ".join(f"rank {rank}: {w}" for rank, w in failed) if graph else why
        torch.cuda.synchronize()

        def run():
            for _ in range(calls):
                fn()
    run()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if n_repeat is None:
        start.record()
        run()
        end.record()
        end.synchronize()
        n_repeat = max(everyone(max(3, min(200, int(timed_ms / max(start.elapsed_time(end), 1e-3)))), group))
    dist.barrier(group=group)
    start.record()
    for _ in range(n_repeat):
        run()
    end.record()
    end.synchronize()
    per_rank = every_rank_us(start.elapsed_time(end) / (n_repeat * calls), group)
    return ReplayTiming(max(per_rank), per_rank, not failed, why if failed else None)
