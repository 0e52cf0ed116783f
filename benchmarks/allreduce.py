"""all_reduce and all_gather on the symmetric heap against NCCL (torch.distributed), in the same run.

Run on one machine with N GPUs (one rank each)::

    torchrun --nproc_per_node=N benchmarks/allreduce.py            # timings, tables, plot
    torchrun --nproc_per_node=N benchmarks/allreduce.py --eager    # the eager table only
    torchrun --nproc_per_node=N benchmarks/allreduce.py --check    # correctness of every variant only
    torchrun --nproc_per_node=N benchmarks/allreduce.py --gluon    # Gluon all_gather and all_to_all only
    torchrun --nproc_per_node=N benchmarks/allreduce.py --peers --dtypes bf16   # all_reduce against every peer
    torchrun --nproc_per_node=N benchmarks/allreduce.py --others     # all_gather, reduce_scatter, all_to_all
    torchrun --nproc_per_node=N benchmarks/allreduce.py --peers --sizes 8K,1M  # only these sizes

NCCL runs in its own process group (torch.distributed initialised with NCCL; iris makes a gloo group of its
own for host exchange), with NVLink multicast (NVLS) off, as on the machines this was written for. Both
sides are timed as CUDA-graph replays (several calls per graph, timed with events; eager loops where a
capture fails, marked in the table), each figure the median of ``--rounds`` measurements (3 by default).
Reported per size: latency in µs and bus bandwidth, ``2 (n - 1) / n * bytes / t`` for all_reduce and
``(n - 1) / n * bytes / t`` for all_gather (bytes: the output). The table and the goals, met or missed, go to
benchmarks/RESULTS.md; the plot to benchmarks/allreduce_<N>gpu.png.

all_reduce is measured against every peer of :class:`Peers`, each in its own column: NCCL on an ordinary
buffer, NCCL on a buffer registered as a symmetric window (where NCCL 2.27+ runs its symmetric kernels; the
kernels it ran are read from a profile and said), and torch symmetric memory's one_shot and two_shot. A peer this
torch or machine cannot run is left out with the reason, in the table's text. Every column's result is checked
against an fp32 sum before it is timed. The "best peer" column is the fastest peer's time over ours ("auto": the
default config), and "auto ran" the variant that call ran.

``--others`` times all_gather, reduce_scatter (each variant) and all_to_all in bf16 against NCCL's
``all_gather_into_tensor``, ``reduce_scatter_tensor`` and ``all_to_all_single``, each checked against NCCL first;
their goals (issue 44's): at least 1.5x NCCL up to 256 KiB and never slower than NCCL.

``--gluon`` times the Gluon collectives (``Config(use_gluon=True)``) against the Triton kernels of the same
algorithms and NCCL: all_gather by the size rule (columns ``auto`` and ``gluon``), and all_to_all (columns
``triton`` and ``gluon``; NCCL's ``all_to_all_single`` moves the same bytes). Their goal: Gluon at least as fast
as Triton at every size (5% of noise allowed).

The eager table times what a notebook or an eager model sees up to 4 MiB: a host loop of calls
(``ctx.ccl.all_reduce(out, inp)`` as a user writes it, and ``dist.all_reduce``), wall time per call with
the GPU kept busy; and the host cost of one call, the time until the call returns, with the GPU idle
before it (median). Its goal (issue 44's): eager all_reduce at most 0.5x NCCL's eager time at every size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL starts: multicast stays off, for NCCL too
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")  # and for torch's symmetric memory

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks import copy_engines  # noqa: E402
from benchmarks.copy_engines import CEILING_WAYS  # noqa: E402
from benchmarks.results import environment, write_section  # noqa: E402
from iris.base.sizes import parse_size  # noqa: E402
from iris.ccl import ALL_GATHER_VARIANTS, ALL_REDUCE_VARIANTS, ALL_TO_ALL_VARIANTS, Config  # noqa: E402
from iris.ccl.config import REDUCE_SCATTER_VARIANTS  # noqa: E402
from iris.ccl.inbox import INBOX_BYTES  # noqa: E402
from iris.ccl.rules import ONE_SHOT_BYTES  # noqa: E402
from iris.perf import replay_time  # noqa: E402
from iris.perf.peers import NCCL_ALL_TO_ALL_GRAPH_BYTES, PEERS, Peers, graph_safe  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = [8 * KiB, 32 * KiB, 128 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB]
GATHER_SIZES = [8 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB]
ALL_TO_ALL_SIZES = [64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 256 * MiB]  # each rank's input
ALL_TO_ALL_ROW = 8192  # elements per row of all_to_all's input (every rank's chunk: 8192 / n)
GLUON_GOAL = 0.95  # Gluon's time at most Triton's / this
CHECK_SIZES = [8 * KiB + 6, 1 * MiB + 2, 16 * MiB]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
OURS = ("auto", *ALL_REDUCE_VARIANTS)
# Variants for small and medium tensors, not run beyond: remote float atomics are slow and need two fp32
# accumulators; the inboxes of one_shot and push hold 2 x world copies of the input.
MAX_BYTES = {"atomic": 64 * MiB, "one_shot": 64 * MiB, "push": 64 * MiB, "two_shot_push": 256 * MiB}
OTHER_SIZES = [8 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]  # --others
TIMED_MS = 20.0  # replays per measurement: about this long
COPY_ENGINES = "copy-engine ceiling"  # the column of what the copy engines take to move a collective's bus bytes
COPY_ENGINE_SIZES = (64 * MiB, 512 * MiB)  # its sizes (as an all_gather's output): the goal's, within the heap
COPY_ENGINE_GOAL = 0.9  # from 64 MiB, at least this fraction of the copy engines' bus bandwidth (issue 44)
ROUNDS = 3  # measurements per figure: the median is reported
EAGER_MAX_BYTES = 4 * MiB  # eager calls are timed up to this size: above it the kernel dominates anyway
EAGER_CALLS = 300  # calls per eager loop, the same on every rank (each call is a collective)
EAGER_GOAL = 0.5  # eager all_reduce at most this fraction of NCCL's eager time (issue 44)


def _size(nbytes: int) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def _config(variant: str) -> Config:
    return Config(all_reduce_variant=None if variant == "auto" else variant)


# ------------------------------------------------------------------ timing

def measure(fn, calls: int, timed_ms: float = TIMED_MS, graph: bool = True) -> tuple[float, bool]:
    """(µs per call, captured): ``calls`` calls captured in one CUDA graph, replayed for about ``timed_ms``, the
    slowest rank's time (:func:`iris.perf.replay_time`, shared with ``iris.perf.compare``; an eager loop where a
    capture fails, or where ``graph`` is False: a call that synchronises with the host cannot be captured)."""
    timing = replay_time(fn, calls, timed_ms, graph=graph)
    return timing.us, timing.captured


def median_of(fn, rounds: int, calls: int, timed_ms: float = TIMED_MS, graph: bool = True) -> tuple[float, bool]:
    """(µs per call, captured): the median of ``rounds`` measurements (:func:`measure`), one after another."""
    timings = [measure(fn, calls, timed_ms, graph) for _ in range(rounds)]
    return statistics.median(us for us, _ in timings), all(captured for _, captured in timings)


def rotated_medians(calls: dict, rounds: int, per_graph: int, timed_ms: float = TIMED_MS,
                    eager: tuple = ()) -> dict:
    """{name: (µs per call, captured)}: the median of ``rounds`` rounds, each timing every callable of ``calls``
    once (:func:`measure`, ``per_graph`` calls per graph; those named in ``eager`` as eager loops), starting one
    further along each round: a GPU that heats up clocks down (bf16 GEMMs reach the H200's power limit), so
    whatever ran first in a single pass would look faster than the rest."""
    names = list(calls)
    samples = {name: [] for name in names}
    for round_ in range(rounds if names else 0):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            samples[name].append(measure(calls[name], per_graph, timed_ms, graph=name not in eager))
    return {name: (statistics.median(us for us, _ in timings), all(captured for _, captured in timings))
            for name, timings in samples.items()}


def eager(fn) -> float:
    """µs per call of a host loop of ``EAGER_CALLS`` calls (wall time, the GPU drained at both ends); the
    slowest rank's."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(EAGER_CALLS):
        fn()
    torch.cuda.synchronize()
    us = torch.tensor([(time.perf_counter() - start) * 1e6 / EAGER_CALLS], device="cuda")
    dist.all_reduce(us, op=dist.ReduceOp.MAX)
    return us.item()


def host_cost(fn, calls: int = 100) -> float:
    """Median µs until one call returns, the GPU idle before each (the host path alone); the slowest rank's."""
    samples = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    us = torch.tensor([statistics.median(samples)], device="cuda")
    dist.all_reduce(us, op=dist.ReduceOp.MAX)
    return us.item()


def bench_eager(ctx, nbytes: int, dtype) -> dict:
    """{name: µs}: eager loops and host costs of NCCL and of ``ctx.ccl.all_reduce`` (size rule), and the
    latter's time captured in a graph, for comparison."""
    n = nbytes // torch.tensor([], dtype=dtype).element_size()
    inp, out = ctx.randn(n, dtype=dtype), ctx.zeros(n, dtype=dtype)
    nccl = inp.clone()
    ours = lambda: ctx.ccl.all_reduce(out, inp)  # as a user writes it: no workspace, no config
    row = {"NCCL eager": eager(lambda: dist.all_reduce(nccl)), "iris eager": eager(ours),
           "NCCL host": host_cost(lambda: dist.all_reduce(nccl)), "iris host": host_cost(ours),
           "iris graph": measure(ours, calls_per_graph(nbytes))[0]}
    workspace = ctx.ccl.all_reduce(out, inp)
    row["path"] = "direct" if all(b.direct for b in workspace.launches.values()) else "through Triton"
    return row


def calls_per_graph(nbytes: int) -> int:
    return 20 if nbytes <= 4 * MiB else 1


# ------------------------------------------------------------------ peers

# torch's one_shot has every rank read every peer's whole input, as our one_shot: not run beyond the same size.
PEER_MAX_BYTES = {"torch one_shot": MAX_BYTES["one_shot"]}


def too_far(got: torch.Tensor, reference: torch.Tensor, dtype, world: int) -> float | None:
    """The largest error of an all_reduce's ``got`` against the fp32 ``reference`` sum, where it is more than
    rounding allows (bf16 inputs: 2% of the sum's scale per rank; fp32: 0.01%); None where it is within."""
    tolerance = 2e-2 * world if dtype == torch.bfloat16 else 1e-4 * world
    error = (got.float() - reference).abs().max().item()
    return error if error > tolerance * max(1.0, reference.abs().max().item() / 4) else None


def bench_all_reduce(ctx, nbytes: int, dtype, peers: Peers, rounds: int = ROUNDS) -> dict:
    """{name: (µs, captured)} for every peer and every variant of ours, each checked against an fp32 sum first, and
    ``AUTO_RAN``: the variant the default config ran."""
    n = nbytes // torch.tensor([], dtype=dtype).element_size()
    world, dtype_name = ctx.num_ranks, str(dtype).removeprefix("torch.")
    inp = ctx.randn(n, dtype=dtype)
    out = ctx.zeros(n, dtype=dtype)
    reference = inp.to(torch.float32, copy=True)
    dist.all_reduce(reference)
    calls = calls_per_graph(nbytes)
    times = {}
    for name in PEERS:
        if nbytes > PEER_MAX_BYTES.get(name, nbytes):
            continue
        peer = peers.make(name, inp)
        if peer is None:
            continue

        def checked(peer=peer):
            peer.load()
            peer.call()
            torch.cuda.synchronize()
            error = too_far(peer.result, reference, dtype, world)
            if error is not None:
                raise ValueError(f"its sum differs from NCCL's fp32 sum by up to {error:.3g} ({dtype_name}, "
                                 f"{_size(nbytes)})")
            return True

        if peers.agreed(name, checked):
            times[name] = median_of(peer.call, rounds, calls)
            if name == "NCCL symmetric":
                peers.record_kernels((dtype, nbytes), peer.call)
        peer.release()
    for variant in OURS:
        if nbytes > MAX_BYTES.get(variant, nbytes):
            continue
        config = _config(variant)
        out.fill_(float("nan"))
        workspace = iris.ccl.all_reduce(out, inp, ctx, config=config)  # allocates, outside any capture
        torch.cuda.synchronize()
        error = too_far(out, reference, dtype, world)
        assert error is None, f"rank {ctx.cur_rank}: all_reduce {variant} {dtype_name} {_size(nbytes)}: error {error}"
        times[variant] = median_of(
            lambda c=config, w=workspace: iris.ccl.all_reduce(out, inp, ctx, config=c, workspace=w), rounds, calls)
        if variant == "auto":
            times[AUTO_RAN] = workspace.key[1]
        del workspace  # released (collectively) at the next allocation
    return with_copy_engines(times, ctx, 2 * nbytes, rounds)  # an all_reduce sends twice a gather's bus bytes


AUTO_RAN = "auto ran"  # bench_all_reduce's entry naming the variant "auto" ran (a string, not a timing)


def timed(times: dict) -> dict:
    """The timings of a size's entries ({name: (µs, captured)}), without :data:`AUTO_RAN`."""
    return {name: value for name, value in times.items() if name != AUTO_RAN}


def best_peer(times: dict) -> tuple[str, float] | None:
    """(the fastest peer's name, its µs) at one size, or None where no peer ran."""
    ran = {name: times[name][0] for name in PEERS if name in times}
    if not ran:
        return None
    name = min(ran, key=ran.get)
    return name, ran[name]


def copy_engine_time(ctx, gathered: int, rounds: int = ROUNDS) -> tuple[float, bool] | None:
    """(µs, captured): the copy engines' fastest all_gather of ``gathered`` output bytes, each rank's shard pushed
    into every peer by peer-to-peer memcpys (:func:`benchmarks.copy_engines.measure`, the fastest of
    :data:`~benchmarks.copy_engines.CEILING_WAYS`, median of ``rounds`` each); None outside
    :data:`COPY_ENGINE_SIZES`. A collective that sends as many bytes a rank (its bus bytes) is judged against it:
    ``gathered`` is twice an all_reduce's size, and the size of the other collectives' tables."""
    low, high = COPY_ENGINE_SIZES
    if not low <= gathered <= high:
        return None
    return min((copy_engines.measure(ctx, gathered, way, rounds) for way in CEILING_WAYS), key=lambda t: t[0])


def with_copy_engines(times: dict, ctx, gathered: int, rounds: int) -> dict:
    """``times`` with the :data:`COPY_ENGINES` column where :func:`copy_engine_time` measures one."""
    ceiling = copy_engine_time(ctx, gathered, rounds)
    return times if ceiling is None else {**times, COPY_ENGINES: ceiling}


def bench_all_gather(ctx, nbytes: int, dtype, rounds: int = ROUNDS, gluon: bool = True) -> dict:
    """{name: (µs, captured)} for NCCL's all_gather_into_tensor, ours by the size rule ("auto") and each variant (and
    the Gluon kernel, with ``gluon``)."""
    world = ctx.num_ranks
    n = nbytes // torch.tensor([], dtype=dtype).element_size() // world
    inp = ctx.randn(n, dtype=dtype)
    out = ctx.zeros(world * n, dtype=dtype)
    nccl_out = torch.empty_like(out)
    calls = calls_per_graph(nbytes)
    times = {"NCCL": median_of(lambda: dist.all_gather_into_tensor(nccl_out, inp), rounds, calls)}
    for variant in ("auto", *ALL_GATHER_VARIANTS, *["gluon"] * gluon):
        if nbytes > MAX_BYTES.get(variant, nbytes):
            continue
        config = Config(use_gluon=True) if variant == "gluon" else Config(
            all_gather_variant=None if variant == "auto" else variant)
        workspace = iris.ccl.all_gather(out, inp, ctx, config=config)
        times[variant] = median_of(
            lambda c=config, w=workspace: iris.ccl.all_gather(out, inp, ctx, config=c, workspace=w), rounds, calls)
        del workspace
    return with_copy_engines(times, ctx, nbytes, rounds)


def bench_reduce_scatter(ctx, nbytes: int, dtype, rounds: int = ROUNDS) -> dict:
    """{name: (µs, captured)} for NCCL's reduce_scatter_tensor and ours by the table ("auto") and each variant, each
    checked against NCCL's fp32 result first; ``nbytes``: each rank's input."""
    world = ctx.num_ranks
    n = nbytes // torch.tensor([], dtype=dtype).element_size()
    inp, out = ctx.randn(n, dtype=dtype), ctx.zeros(n, dtype=dtype)
    nccl_out = torch.empty(n // world, dtype=dtype, device=inp.device)
    reference = torch.empty(n // world, dtype=torch.float32, device=inp.device)
    dist.reduce_scatter_tensor(reference, inp.float())
    lo, hi = iris.ccl.owned_range(n, ctx.cur_rank, world)
    calls = calls_per_graph(nbytes)
    times = {"NCCL": median_of(lambda: dist.reduce_scatter_tensor(nccl_out, inp), rounds, calls)}
    for variant in ("auto", *REDUCE_SCATTER_VARIANTS):
        config = Config(reduce_scatter_variant=None if variant == "auto" else variant)
        workspace = iris.ccl.reduce_scatter(out, inp, ctx, config=config)
        torch.cuda.synchronize()
        error = too_far(out[lo:hi], reference[:hi - lo], dtype, world)
        assert error is None, f"rank {ctx.cur_rank}: reduce_scatter {variant} {_size(nbytes)}: error {error}"
        times[variant] = median_of(
            lambda c=config, w=workspace: iris.ccl.reduce_scatter(out, inp, ctx, config=c, workspace=w), rounds, calls)
        if variant == "auto":
            times[AUTO_RAN] = workspace.key[1]
        del workspace
    return with_copy_engines(times, ctx, nbytes, rounds)


def bench_all_to_all(ctx, nbytes: int, dtype, rounds: int = ROUNDS, gluon: bool = True) -> dict:
    """{name: (µs, captured)} for NCCL's all_to_all_single and ours: the default config ("auto"), each variant (push
    up to ``MAX_BYTES["push"]``: its inbox is twice the input) and Gluon, each checked against NCCL's result first;
    ``nbytes``: each rank's input, rows of ``ALL_TO_ALL_ROW`` elements."""
    rows = max(1, nbytes // torch.tensor([], dtype=dtype).element_size() // ALL_TO_ALL_ROW)
    inp = ctx.randn(rows, ALL_TO_ALL_ROW, dtype=dtype)
    out = ctx.zeros_like(inp)
    nccl_out = torch.empty_like(inp)
    calls = calls_per_graph(nbytes)
    times = {"NCCL": median_of(lambda: dist.all_to_all_single(nccl_out, inp), rounds, calls,
                               graph=graph_safe("all_to_all", nbytes))}
    # all_to_all_single splits the flat tensor into row blocks, ours splits columns: the reference sends each column
    # chunk as one row block, and puts the blocks received back side by side
    world, columns = ctx.num_ranks, ALL_TO_ALL_ROW // ctx.num_ranks
    by_destination = inp.view(rows, world, columns).transpose(0, 1).contiguous()
    received = torch.empty_like(by_destination)
    dist.all_to_all_single(received, by_destination)
    expected = received.transpose(0, 1).reshape(rows, ALL_TO_ALL_ROW)
    configs = {"auto": Config(), **{v: Config(all_to_all_variant=v) for v in ALL_TO_ALL_VARIANTS
                                    if v != "push" or nbytes <= MAX_BYTES["push"]}}
    if gluon:
        configs["gluon"] = Config(use_gluon=True)
    for name, config in configs.items():
        workspace = iris.ccl.all_to_all(out, inp, ctx, config=config)
        torch.cuda.synchronize()
        assert torch.equal(out, expected), f"rank {ctx.cur_rank}: all_to_all {name} {_size(nbytes)} differs from NCCL's"
        times[name] = median_of(
            lambda c=config, w=workspace: iris.ccl.all_to_all(out, inp, ctx, config=c, workspace=w), rounds, calls)
        if name == "auto":
            times[AUTO_RAN] = workspace.key[1]
        del workspace
    return with_copy_engines(times, ctx, nbytes, rounds)


# ------------------------------------------------------------------ correctness

def check(ctx) -> None:
    """Every all_reduce variant at a few odd sizes against NCCL on an fp32 copy of the same inputs; every
    all_gather variant exactly."""
    world, failures = ctx.num_ranks, []
    for name, dtype in DTYPES.items():
        for nbytes in CHECK_SIZES:
            n = nbytes // torch.tensor([], dtype=dtype).element_size()
            inp = ctx.randn(n, dtype=dtype)
            reference = inp.to(torch.float32, copy=True)
            dist.all_reduce(reference)
            for variant in OURS:
                out, workspace = ctx.zeros(n, dtype=dtype), None
                for _ in range(2):  # the second call reuses the workspace
                    workspace = iris.ccl.all_reduce(out, inp, ctx, config=_config(variant), workspace=workspace)
                error = too_far(out, reference, dtype, world)
                if error is not None:
                    failures.append(f"all_reduce {variant} {name} {_size(nbytes)}: max error {error:.3g}")
            nccl = torch.empty(world * n, dtype=dtype, device="cuda")
            dist.all_gather_into_tensor(nccl, inp)
            for variant in ALL_GATHER_VARIANTS:
                for gluon in (False, True):
                    gathered = ctx.zeros(world * n, dtype=dtype)
                    iris.ccl.all_gather(gathered, inp, ctx, config=Config(all_gather_variant=variant, use_gluon=gluon))
                    if not torch.equal(gathered, nccl):
                        failures.append(f"all_gather {variant}{' gluon' if gluon else ''} {name} {_size(nbytes)} "
                                        "differs from NCCL")
    torch.cuda.synchronize()
    everyone = [None] * world
    dist.all_gather_object(everyone, failures)
    if ctx.cur_rank == 0:
        bad = [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs]
        print("\n".join(bad) if bad else f"check passed: {len(OURS)} all_reduce variants x {len(DTYPES)} dtypes x "
              f"{len(CHECK_SIZES)} sizes, and {len(ALL_GATHER_VARIANTS)} all_gather variants (Triton and Gluon), on "
              f"{world} ranks")
    if any(everyone):
        sys.exit(1)


# ------------------------------------------------------------------ report

def busbw(nbytes: int, us: float, world: int, gather: bool = False) -> float:
    factor = (world - 1) / world if gather else 2 * (world - 1) / world
    return factor * nbytes / (us * 1e-6) / 1e9


GOALS = [  # (what, sizes it covers, needed NCCL time / our time, how a ratio reads)
    ("at least 2x lower latency than NCCL up to 256 KiB", lambda s: s <= 256 * KiB, 2.0, "{:.2f}x"),
    ("never slower than NCCL up to 4 MiB", lambda s: s <= 4 * MiB, 1.0, "{:.2f}x"),
    ("at least 90% of NCCL's bus bandwidth from 64 MiB", lambda s: s >= 64 * MiB, 0.9, "{:.0%} of NCCL"),
]


def speedup(times: dict, key: str = "auto") -> float:
    """NCCL's time over ours (> 1: ours faster; for bus bandwidth: our fraction of NCCL's)."""
    return times["NCCL"][0] / times[key][0]


def goal_line(name: str, by_size: dict, goal) -> str | None:
    """The goal met or missed by the size rule (column "auto")."""
    what, covers, needed, fmt = goal
    sizes = [s for s in by_size if covers(s)]
    if not sizes:
        return None
    worst = min(sizes, key=lambda s: speedup(by_size[s]))
    ratio = speedup(by_size[worst])
    line = f"- {name}, {what}: **{'met' if ratio >= needed else 'missed'}** (worst: {fmt.format(ratio)} at " \
           f"{_size(worst)}"
    if ratio < needed:
        by_variant = {k: t[0] for k, t in timed(by_size[worst]).items() if k not in (*PEERS, COPY_ENGINES)}
        fastest = min(by_variant, key=by_variant.get)
        best = speedup(by_size[worst], fastest)
        line += (f"; fastest variant there: {fastest} at {fmt.format(best)}, so "
                 + ("the size rule should pick it" if best >= needed else
                    "no variant reaches it: the algorithm or its launch shape is the limit"))
    return line + ")"


def goals(rows: dict) -> list[str]:
    """One line per goal and dtype, met or missed, with the worst size and, if missed, the fastest variant."""
    lines = [goal_line(name, by_size, goal) for name, by_size in rows.items() for goal in GOALS]
    lines += [copy_engine_goal(name, by_size) for name, by_size in rows.items()]
    return [line for line in lines if line]


def copy_engine_goal(name: str, by_size: dict) -> str | None:
    """Issue 44's goal from 64 MiB: "auto" at least :data:`COPY_ENGINE_GOAL` of the bus bandwidth of the copy
    engines moving as many bytes (column :data:`COPY_ENGINES`), met or missed at its worst size."""
    sizes = [s for s in by_size if COPY_ENGINES in by_size[s] and "auto" in by_size[s]]
    if not sizes:
        return None
    share = {s: by_size[s][COPY_ENGINES][0] / by_size[s]["auto"][0] for s in sizes}
    worst = min(sizes, key=share.get)
    return (f"- {name}, from 64 MiB at least {COPY_ENGINE_GOAL:.0%} of the copy engines' bus bandwidth: "
            f"**{'met' if share[worst] >= COPY_ENGINE_GOAL else 'missed'}** (worst: {share[worst]:.0%} at "
            f"{_size(worst)})")


OTHER_GOALS = [  # issue 44's for all_gather, reduce_scatter, all_to_all (auto against NCCL)
    ("at least 1.5x NCCL up to 256 KiB", lambda s: s <= 256 * KiB, 1.5, "{:.2f}x"),
    ("never slower than NCCL", lambda s: True, 1.0, "{:.2f}x"),
]

PEER_GOALS = [  # issue 44's, set for 4 ranks: (what, sizes covered, figure: "ratio" (best peer / auto) or "us", bound)
    ("at least 1.3x the best peer up to 256 KiB", lambda s: s <= 256 * KiB, "ratio", 1.3),
    ("at most 6 µs at 8 KiB", lambda s: s == 8 * KiB, "us", 6.0),
    ("never slower than the best peer up to 256 MiB", lambda s: s <= 256 * MiB, "ratio", 1.0),
]


def peer_goals(rows: dict) -> list[str]:
    """One line per goal of :data:`PEER_GOALS` and dtype: met or missed, by column "auto", at its worst size (the
    lowest ratio to the best peer, or the most µs) and the peer there."""
    lines = []
    for name, by_size in rows.items():
        for what, covers, figure, bound in PEER_GOALS:
            sizes = [s for s in by_size if covers(s) and "auto" in by_size[s] and best_peer(by_size[s])]
            if not sizes:
                continue
            ratio = {s: best_peer(by_size[s])[1] / by_size[s]["auto"][0] for s in sizes}
            if figure == "ratio":
                worst = min(sizes, key=ratio.get)
                met, reads = ratio[worst] >= bound, f"{ratio[worst]:.2f}x"
            else:
                worst = max(sizes, key=lambda s: by_size[s]["auto"][0])
                met, reads = by_size[worst]["auto"][0] <= bound, f"{by_size[worst]['auto'][0]:.1f} µs"
            peer, peer_us = best_peer(by_size[worst])
            lines.append(f"- {name}, {what}: **{'met' if met else 'missed'}** (worst: {reads} at {_size(worst)}; "
                         f"the best peer there: {peer}, {peer_us:.1f} µs)")
    return lines


def table(rows: dict, world: int, gather: bool) -> list[str]:
    """One table per entry of ``rows``: µs per call and bus GB/s of each column at each size; for all_reduce, the
    best peer's time over ours ("auto") and the variant "auto" ran."""
    lines = []
    for name, by_size in rows.items():
        keys = list(dict.fromkeys(k for times in by_size.values() for k in timed(times)))
        extra = ["best peer", AUTO_RAN] if any(AUTO_RAN in times for times in by_size.values()) else []
        lines += [f"**{name}** — µs per call (bus GB/s)", "",
                  "| size | " + " | ".join(keys + extra) + " |", "|---" * (len(keys) + len(extra) + 1) + "|"]
        for nbytes, times in by_size.items():
            cells = []
            for key in keys:
                if key not in times:
                    cells.append("–")
                    continue
                us, captured = times[key]
                cells.append(f"{us:.1f} ({busbw(nbytes, us, world, gather):.3g})" + ("" if captured else " eager"))
            if extra:
                best = best_peer(times)
                cells.append(f"{best[1] / times['auto'][0]:.2f}x ({best[0]})" if best and "auto" in times else "–")
                cells.append(times.get(AUTO_RAN, "–"))
            lines.append(f"| {_size(nbytes)} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def plot(reduce_rows: dict, gather_rows: dict, world: int, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(f"all_reduce {k}", v, False) for k, v in reduce_rows.items()]
    panels += [(f"all_gather {k}", v, True) for k, v in gather_rows.items()]
    figure, axes = plt.subplots(2, len(panels), figsize=(5 * len(panels), 8), squeeze=False)
    for column, (title, by_size, gather) in enumerate(panels):
        keys = {k for times in by_size.values() for k in timed(times)}
        for key in sorted(keys, key=lambda k: (k != "NCCL", k)):
            sizes = [s for s in by_size if key in by_size[s]]
            us = [by_size[s][key][0] for s in sizes]
            style = dict(marker="o", linewidth=2.5 if key in ("NCCL", "auto") else 1)
            axes[0][column].plot(sizes, us, label=key, **style)
            axes[1][column].plot(sizes, [busbw(s, t, world, gather) for s, t in zip(sizes, us, strict=True)], label=key,
                                 **style)
        axes[0][column].set(title=f"{title}, {world} GPUs", ylabel="µs per call (lower is better)",
                            xscale="log", yscale="log")
        axes[1][column].set(xlabel="bytes", ylabel="bus bandwidth GB/s", xscale="log")
        axes[0][column].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def eager_table(rows: dict) -> list[str]:
    """The eager goal per dtype (worst ratio over sizes) and one table per dtype."""
    lines = []
    for name, by_size in rows.items():
        worst = max(by_size, key=lambda s: by_size[s]["iris eager"] / by_size[s]["NCCL eager"])
        ratio = by_size[worst]["iris eager"] / by_size[worst]["NCCL eager"]
        lines.append(f"- {name}, eager all_reduce at most {EAGER_GOAL}x NCCL's eager time up to "
                     f"{_size(EAGER_MAX_BYTES)}: **{'met' if ratio <= EAGER_GOAL else 'missed'}** (worst: "
                     f"{ratio:.2f}x at {_size(worst)})")
    lines.append("")
    for name, by_size in rows.items():
        lines += [f"**{name} eager** — µs per call", "",
                  "| size | NCCL eager | iris eager | iris / NCCL | NCCL host | iris host | iris graph | iris path |",
                  "|---|---|---|---|---|---|---|---|"]
        for nbytes, row in by_size.items():
            lines.append(f"| {_size(nbytes)} | {row['NCCL eager']:.1f} | {row['iris eager']:.1f} | "
                         f"{row['iris eager'] / row['NCCL eager']:.2f}x | {row['NCCL host']:.1f} | "
                         f"{row['iris host']:.1f} | {row['iris graph']:.1f} | {row['path']} |")
        lines.append("")
    return lines


def report_eager(rows: dict, world: int) -> None:
    body = [
        f"{environment()}; {world} ranks, one per GPU; NCCL {'.'.join(map(str, torch.cuda.nccl.version()))} with "
        f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}. Eager: a host loop of {EAGER_CALLS} calls, wall "
        "time per call, slowest rank (iris: `ctx.ccl.all_reduce(out, inp)`, size rule, as a notebook calls it; "
        "NCCL: `dist.all_reduce`). Host: median time until one call returns with the GPU idle before it. "
        "Graph: the same iris call captured in a CUDA graph (20 per graph), for the kernel's own time. Path: "
        "how repeated calls launch (direct: the compiled kernel's launcher, iris.ccl.fast_path).",
        "", *eager_table(rows),
    ]
    print("\n".join(body))
    write_section(f"allreduce eager ({world} GPUs)", "\n".join(body))


def rules() -> str:
    """What picks the "auto" column, and the variants not run at every size, in words."""
    by_limit = {}
    for variant, limit in {**MAX_BYTES, **PEER_MAX_BYTES}.items():
        by_limit.setdefault(limit, []).append(variant)
    return (f"auto = the default config: this machine's tuning or the shipped table's row for this GPU and world size "
            f"(iris.ccl.tuning), else the size rules: all_reduce one_shot while bytes x (n-1)^2 <= "
            f"{_size(ONE_SHOT_BYTES)}, else two_shot_push; all_gather push while each rank's input bytes x (n-1) "
            f"<= {_size(INBOX_BYTES)} (input = size / n), else pull. "
            + "; ".join(f"{', '.join(v)} not run above {_size(limit)}" for limit, v in sorted(by_limit.items())) + ".")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check every variant's results against NCCL")
    parser.add_argument("--eager", action="store_true", help="only the eager table (host loops up to 4 MiB)")
    parser.add_argument("--gluon", action="store_true", help="only the Gluon collectives against Triton and NCCL")
    parser.add_argument("--peers", action="store_true", help="only the all_reduce tables, against every peer")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="measurements per figure (their median)")
    parser.add_argument("--others", action="store_true",
                        help="only all_gather, reduce_scatter and all_to_all against NCCL (bf16)")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="all_reduce's dtypes, e.g. bf16 (default: all)")
    parser.add_argument("--sizes", help="only these sizes, e.g. 8K,1M,64M (default: every size of the mode)")
    args = parser.parse_args()
    if args.sizes:
        wanted = {parse_size(text) for text in args.sizes.split(",")}
        for sizes in (SIZES, GATHER_SIZES, ALL_TO_ALL_SIZES, OTHER_SIZES):
            sizes[:] = [s for s in sizes if s in wanted]
    dtypes = {name: DTYPES[name] for name in args.dtypes.split(",")}
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    ctx = iris.iris("5GiB" if not args.check else "1GiB", backend="cuda")
    world = ctx.num_ranks
    eager_sizes = [size for size in SIZES if size <= EAGER_MAX_BYTES]
    peers = Peers(dist.group.WORLD)
    if args.check:
        check(ctx)
    elif args.gluon:
        gather_rows = {"bf16": {s: bench_all_gather(ctx, s, torch.bfloat16, args.rounds) for s in GATHER_SIZES}}
        all_to_all_rows = {"bf16": {s: bench_all_to_all(ctx, s, torch.bfloat16, args.rounds)
                                    for s in ALL_TO_ALL_SIZES}}
        if ctx.cur_rank == 0:
            report_gluon(gather_rows, all_to_all_rows, world)
    elif args.others:
        rows = {}
        for name, bench, sizes in (("all_gather bf16", bench_all_gather, OTHER_SIZES),
                                   ("reduce_scatter bf16", bench_reduce_scatter, OTHER_SIZES),
                                   ("all_to_all bf16", bench_all_to_all, ALL_TO_ALL_SIZES)):
            rows[name] = {}
            for size in sizes:
                # without the Gluon columns (--gluon has them), which double all_to_all's tunings
                options = {} if bench is bench_reduce_scatter else {"gluon": False}
                rows[name][size] = bench(ctx, size, torch.bfloat16, args.rounds, **options)
                if ctx.cur_rank == 0:  # as it goes: a run cut short still says what it measured
                    print(f"{name} {_size(size)}: {rows[name][size]}", flush=True)
        if ctx.cur_rank == 0:
            report_others(rows, world, args.rounds)
    elif args.eager:
        rows = {name: {s: bench_eager(ctx, s, dtype) for s in eager_sizes} for name, dtype in dtypes.items()}
        if ctx.cur_rank == 0:
            report_eager(rows, world)
    elif args.peers:
        reduce_rows = {name: {s: bench_all_reduce(ctx, s, dtype, peers, args.rounds) for s in SIZES}
                       for name, dtype in dtypes.items()}
        if ctx.cur_rank == 0:
            report_peers(reduce_rows, peers, world, args.rounds)
    else:
        eager_rows = {name: {s: bench_eager(ctx, s, dtype) for s in eager_sizes} for name, dtype in dtypes.items()}
        if ctx.cur_rank == 0:
            report_eager(eager_rows, world)
        reduce_rows = {name: {s: bench_all_reduce(ctx, s, dtype, peers, args.rounds) for s in SIZES}
                       for name, dtype in dtypes.items()}
        gather_rows = {"bf16": {s: bench_all_gather(ctx, s, torch.bfloat16, args.rounds) for s in GATHER_SIZES}}
        if ctx.cur_rank == 0:
            report(reduce_rows, gather_rows, peers, world, args.rounds)
    ctx.barrier()
    dist.destroy_process_group()


def timing_words(world: int, rounds: int) -> str:
    """How the tables were measured, in words: the machine, NCCL, the timer."""
    return (f"{environment()}; {world} ranks, one per GPU; NCCL {'.'.join(map(str, torch.cuda.nccl.version()))} "
            f"with NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}; every column timed as CUDA-graph replays "
            f"(20 calls per graph up to 4 MiB, 1 above), the slowest rank's mean, each figure the median of {rounds} "
            "such measurements; bus bandwidth 2(n-1)/n x bytes / t (all_gather: (n-1)/n x output bytes / t). "
            f"{COPY_ENGINES}: the copy engines moving the bytes a rank sends (an all_gather by peer-to-peer "
            "memcpys of twice an all_reduce's size, or of the size for the other collectives; the fastest of "
            f"{', '.join(CEILING_WAYS)}: benchmarks/copy_engines.py), measured from {_size(COPY_ENGINE_SIZES[0])} as "
            "the ceiling of the goal stated against it.")


def peer_words(rows: dict, peers: Peers) -> list[str]:
    """What each peer is, which could not run here and why, and which kernels NCCL ran on registered buffers."""
    lines = ["Peers: NCCL = `dist.all_reduce` on an ordinary buffer; NCCL symmetric = the same call on a buffer from "
             "NCCL's allocator (`torch.cuda.MemPool(backend.mem_allocator)`) registered as a symmetric window "
             "(`register_mem_pool(pool, symm=True)`); torch one_shot / two_shot = "
             "`torch.ops.symm_mem.one_shot_all_reduce_out` / `two_shot_all_reduce_out` on a buffer from "
             "`symm_mem.empty` after `symm_mem.rendezvous` (torch's CUDA backend, multicast off). Every column's "
             "result was checked against an fp32 sum before it was timed. best peer = the fastest peer's µs / auto's "
             "µs (above 1: iris faster).", ""]
    lines += [f"- {name}: not run here ({why})" for name, why in peers.unavailable.items()]
    for dtype_name, by_size in rows.items():
        seen = {}
        for nbytes in by_size:
            if (DTYPES[dtype_name], nbytes) in peers.kernels:
                kernels = ", ".join(peers.kernels[(DTYPES[dtype_name], nbytes)]) or "none seen in the profile"
                seen.setdefault(kernels, []).append(_size(nbytes))
        if seen:
            lines += [f"- NCCL symmetric, {dtype_name}: the kernels NCCL ran on the registered buffer (a profile of "
                      "one call per size; its symmetric kernels are named ncclSymk...): "
                      + "; ".join(f"{', '.join(sizes)}: {kernels} ("
                                  f"{'symmetric' if 'symk' in kernels.lower() else 'not symmetric'})"
                                  for kernels, sizes in seen.items())]
    return lines + [""]


def report(reduce_rows: dict, gather_rows: dict, peers: Peers, world: int, rounds: int) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    plot(reduce_rows, gather_rows, world, os.path.join(here, f"allreduce_{world}gpu.png"))
    body = [
        f"{timing_words(world, rounds)} {rules()} Plot: benchmarks/allreduce_{world}gpu.png.", "",
        *peer_words(reduce_rows, peers),
        "Goals (all_reduce, auto against NCCL):", "", *goals(reduce_rows), "",
        "Goals (all_reduce, auto against the best peer; issue 44's, set for 4 ranks):", "",
        *peer_goals(reduce_rows), "",
        "Goals (all_gather, auto against NCCL's all_gather_into_tensor):", "",
        *goals({f"all_gather {k}": v for k, v in gather_rows.items()}), "",
        *table(reduce_rows, world, gather=False),
        *table({f"all_gather {k}": v for k, v in gather_rows.items()}, world, gather=True),
    ]
    print("\n".join(body))
    write_section(f"allreduce ({world} GPUs)", "\n".join(body))


def report_others(rows: dict, world: int, rounds: int) -> None:
    goal_lines = [goal_line(name, by_size, goal) for name, by_size in rows.items() for goal in OTHER_GOALS]
    goal_lines += [copy_engine_goal(name, by_size) for name, by_size in rows.items()]
    body = [
        f"{timing_words(world, rounds)} auto = the default config (the shipped table's row for this GPU and world "
        "size, or this machine's tuning, else the size rules), which ran the variant in column 'auto ran'. Sizes: "
        "all_gather's output, reduce_scatter's and all_to_all's input per rank (all_to_all in rows of "
        f"{ALL_TO_ALL_ROW} elements). Peers: NCCL's all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single; "
        f"the last timed as an eager loop above {NCCL_ALL_TO_ALL_GRAPH_BYTES >> 20} MiB (marked eager), where its "
        "CUDA-graph replays never ended (iris.perf.peers.graph_safe).",
        "", "Goals (auto against NCCL; issue 44's):", "", *(line for line in goal_lines if line), "",
        *table(rows, world, gather=True),
    ]
    print("\n".join(body))
    write_section(f"collectives against NCCL ({world} GPUs)", "\n".join(body))


def report_peers(reduce_rows: dict, peers: Peers, world: int, rounds: int) -> None:
    body = [
        f"{timing_words(world, rounds)} {rules()}", "", *peer_words(reduce_rows, peers),
        "Goals (auto against the best peer; issue 44's, set for 4 ranks):", "", *peer_goals(reduce_rows), "",
        "Goals (auto against NCCL):", "", *goals(reduce_rows), "",
        *table(reduce_rows, world, gather=False),
    ]
    print("\n".join(body))
    write_section(f"allreduce against every peer ({world} GPUs)", "\n".join(body))


def gluon_goal(name: str, by_size: dict, triton: str) -> str:
    """Whether the Gluon column is at least as fast as the Triton one (``triton``) at every size, and the worst."""
    worst = max(by_size, key=lambda s: by_size[s]["gluon"][0] / by_size[s][triton][0])
    ratio = by_size[worst]["gluon"][0] / by_size[worst][triton][0]
    return (f"- {name}, Gluon at least as fast as Triton ({triton}), {1 / GLUON_GOAL - 1:.0%} noise allowed: "
            f"**{'met' if ratio <= 1 / GLUON_GOAL else 'missed'}** (worst: Gluon {ratio:.2f}x Triton's time at "
            f"{_size(worst)})")


def report_gluon(gather_rows: dict, all_to_all_rows: dict, world: int) -> None:
    body = [
        f"{environment()}; {world} ranks, one per GPU; NCCL {'.'.join(map(str, torch.cuda.nccl.version()))} with "
        f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}; CUDA-graph replays, slowest rank. Gluon: "
        "`Config(use_gluon=True)` (iris.ccl.gluon_all_gather, gluon_all_to_all: the Triton kernels' algorithms "
        "with explicit layouts). all_gather: auto = Triton by the size rule, gluon = Gluon by the same rule; bus "
        "bandwidth (n-1)/n x output bytes / t. all_to_all: auto = Triton; size = each rank's input, rows of "
        f"{ALL_TO_ALL_ROW} elements; NCCL = all_to_all_single; bus bandwidth (n-1)/n x input bytes / t.",
        "",
        *(gluon_goal(f"all_gather {k}", v, "auto") for k, v in gather_rows.items()),
        *(gluon_goal(f"all_to_all {k}", v, "auto") for k, v in all_to_all_rows.items()), "",
        *table({f"all_gather {k}": v for k, v in gather_rows.items()}, world, gather=True),
        *table({f"all_to_all {k}": v for k, v in all_to_all_rows.items()}, world, gather=True),
    ]
    print("\n".join(body))
    write_section(f"ccl gluon ({world} GPUs)", "\n".join(body))


if __name__ == "__main__":
    main()
