"""all_reduce and all_gather on the symmetric heap against NCCL (torch.distributed), in the same run.

Run on one machine with N GPUs (one rank each)::

    torchrun --nproc_per_node=N benchmarks/allreduce.py            # timings, tables, plot
    torchrun --nproc_per_node=N benchmarks/allreduce.py --eager    # the eager table only
    torchrun --nproc_per_node=N benchmarks/allreduce.py --check    # correctness of every variant only
    torchrun --nproc_per_node=N benchmarks/allreduce.py --gluon    # Gluon all_gather and all_to_all only

NCCL runs in its own process group (torch.distributed initialised with NCCL; iris makes a gloo group of its
own for host exchange), with NVLink multicast (NVLS) off, as on the machines this was written for. Both
sides are timed as CUDA-graph replays (several calls per graph, timed with events; eager loops where a
capture fails, marked in the table). Reported per size: latency in µs and bus bandwidth, ``2 (n - 1) / n *
bytes / t`` for all_reduce and ``(n - 1) / n * bytes / t`` for all_gather (bytes: the output). The table and
the goals, met or missed, go to benchmarks/RESULTS.md; the plot to benchmarks/allreduce_<N>gpu.png.

``--gluon`` times the Gluon collectives (``Config(use_gluon=True)``) against the Triton kernels of the same
algorithms and NCCL: all_gather by the size rule (columns ``auto`` and ``gluon``), and all_to_all (columns
``triton`` and ``gluon``; NCCL's ``all_to_all_single`` moves the same bytes). Their goal: Gluon at least as fast
as Triton at every size (5% of noise allowed).

The eager table times what a notebook or an eager model sees up to 4 MiB: a host loop of calls
(``ctx.ccl.all_reduce(out, inp)`` as a user writes it, and ``dist.all_reduce``), wall time per call with
the GPU kept busy; and the host cost of one call, the time until the call returns, with the GPU idle
before it (median). Its goal: eager all_reduce at most 0.6x NCCL's eager time at every size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL starts: multicast stays off, for NCCL too

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks.results import environment, write_section  # noqa: E402
from iris.ccl import ALL_GATHER_VARIANTS, ALL_REDUCE_VARIANTS, Config  # noqa: E402
from iris.ccl.inbox import INBOX_BYTES  # noqa: E402
from iris.ccl.rules import RING_FROM_BYTES, RING_FROM_WORLD  # noqa: E402
from iris.perf import replay_time  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = [8 * KiB, 32 * KiB, 128 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB]
GATHER_SIZES = [8 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB]
ALL_TO_ALL_SIZES = [64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB]  # each rank's input
ALL_TO_ALL_ROW = 8192  # elements per row of all_to_all's input (every rank's chunk: 8192 / n)
GLUON_GOAL = 0.95  # Gluon's time at most Triton's / this
CHECK_SIZES = [8 * KiB + 6, 1 * MiB + 2, 16 * MiB]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
OURS = ("auto", *ALL_REDUCE_VARIANTS)
# Variants for small and medium tensors, not run beyond: remote float atomics are slow and need two fp32
# accumulators; the inboxes of one_shot and push hold 2 x world copies of the input.
MAX_BYTES = {"atomic": 64 * MiB, "one_shot": 64 * MiB, "push": 64 * MiB}
TIMED_MS = 20.0  # replays per measurement: about this long
EAGER_MAX_BYTES = 4 * MiB  # eager calls are timed up to this size: above it the kernel dominates anyway
EAGER_CALLS = 300  # calls per eager loop, the same on every rank (each call is a collective)
EAGER_GOAL = 0.6  # eager all_reduce at most this fraction of NCCL's eager time


def _size(nbytes: int) -> str:
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def _config(variant: str) -> Config:
    return Config(all_reduce_variant=None if variant == "auto" else variant)


# ------------------------------------------------------------------ timing

def measure(fn, calls: int, timed_ms: float = TIMED_MS) -> tuple[float, bool]:
    """(µs per call, captured): ``calls`` calls captured in one CUDA graph, replayed for about ``timed_ms``, the
    slowest rank's time (:func:`iris.perf.replay_time`, shared with ``iris.perf.compare``; an eager loop where a
    capture fails)."""
    timing = replay_time(fn, calls, timed_ms)
    return timing.us, timing.captured


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


def bench_all_reduce(ctx, nbytes: int, dtype) -> dict:
    """{name: (µs, captured)} for NCCL and every variant of ours."""
    n = nbytes // torch.tensor([], dtype=dtype).element_size()
    inp = ctx.randn(n, dtype=dtype)
    out = ctx.zeros(n, dtype=dtype)
    nccl = inp.clone()
    calls = calls_per_graph(nbytes)
    times = {"NCCL": measure(lambda: dist.all_reduce(nccl), calls)}
    for variant in OURS:
        if nbytes > MAX_BYTES.get(variant, nbytes):
            continue
        config = _config(variant)
        workspace = iris.ccl.all_reduce(out, inp, ctx, config=config)  # allocates, outside any capture
        times[variant] = measure(
            lambda c=config, w=workspace: iris.ccl.all_reduce(out, inp, ctx, config=c, workspace=w), calls)
        del workspace  # released (collectively) at the next allocation
    return times


def bench_all_gather(ctx, nbytes: int, dtype) -> dict:
    """{name: (µs, captured)} for NCCL's all_gather_into_tensor, ours by the size rule ("auto") and each variant."""
    world = ctx.num_ranks
    n = nbytes // torch.tensor([], dtype=dtype).element_size() // world
    inp = ctx.randn(n, dtype=dtype)
    out = ctx.zeros(world * n, dtype=dtype)
    nccl_out = torch.empty_like(out)
    calls = calls_per_graph(nbytes)
    times = {"NCCL": measure(lambda: dist.all_gather_into_tensor(nccl_out, inp), calls)}
    for variant in ("auto", *ALL_GATHER_VARIANTS, "gluon"):
        if nbytes > MAX_BYTES.get(variant, nbytes):
            continue
        config = Config(use_gluon=True) if variant == "gluon" else Config(
            all_gather_variant=None if variant == "auto" else variant)
        workspace = iris.ccl.all_gather(out, inp, ctx, config=config)
        times[variant] = measure(
            lambda c=config, w=workspace: iris.ccl.all_gather(out, inp, ctx, config=c, workspace=w), calls)
        del workspace
    return times


def bench_all_to_all(ctx, nbytes: int, dtype) -> dict:
    """{name: (µs, captured)} for NCCL's all_to_all_single and ours, Triton and Gluon; ``nbytes``: each rank's
    input, rows of ``ALL_TO_ALL_ROW`` elements."""
    rows = max(1, nbytes // torch.tensor([], dtype=dtype).element_size() // ALL_TO_ALL_ROW)
    inp = ctx.randn(rows, ALL_TO_ALL_ROW, dtype=dtype)
    out = ctx.zeros_like(inp)
    nccl_out = torch.empty_like(inp)
    calls = calls_per_graph(nbytes)
    times = {"NCCL": measure(lambda: dist.all_to_all_single(nccl_out, inp), calls)}
    for name, config in (("triton", Config()), ("gluon", Config(use_gluon=True))):
        workspace = iris.ccl.all_to_all(out, inp, ctx, config=config)
        times[name] = measure(lambda c=config, w=workspace: iris.ccl.all_to_all(out, inp, ctx, config=c, workspace=w),
                              calls)
        del workspace
    return times


# ------------------------------------------------------------------ correctness

def check(ctx) -> None:
    """Every all_reduce variant at a few odd sizes against NCCL on an fp32 copy of the same inputs; every
    all_gather variant exactly."""
    world, failures = ctx.num_ranks, []
    for name, dtype in DTYPES.items():
        for nbytes in CHECK_SIZES:
            n = nbytes // torch.tensor([], dtype=dtype).element_size()
            inp = ctx.randn(n, dtype=dtype)
            reference = inp.float().clone()  # .float() of an fp32 tensor is the tensor itself
            dist.all_reduce(reference)
            tolerance = 2e-2 * world if dtype == torch.bfloat16 else 1e-4 * world
            for variant in OURS:
                out, workspace = ctx.zeros(n, dtype=dtype), None
                for _ in range(2):  # the second call reuses the workspace
                    workspace = iris.ccl.all_reduce(out, inp, ctx, config=_config(variant), workspace=workspace)
                error = (out.float() - reference).abs().max().item()
                if error > tolerance * max(1.0, reference.abs().max().item() / 4):
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
        by_variant = {k: t[0] for k, t in by_size[worst].items() if k != "NCCL"}
        fastest = min(by_variant, key=by_variant.get)
        best = speedup(by_size[worst], fastest)
        line += (f"; fastest variant there: {fastest} at {fmt.format(best)}, so "
                 + ("the size rule should pick it" if best >= needed else
                    "no variant reaches it: the algorithm or its launch shape is the limit"))
    return line + ")"


def goals(rows: dict) -> list[str]:
    """One line per goal and dtype, met or missed, with the worst size and, if missed, the fastest variant."""
    lines = (goal_line(name, by_size, goal) for name, by_size in rows.items() for goal in GOALS)
    return [line for line in lines if line]


def table(rows: dict, world: int, gather: bool) -> list[str]:
    lines = []
    for name, by_size in rows.items():
        keys = list(next(iter(by_size.values())))
        lines += [f"**{name}** — µs per call (bus GB/s)", "",
                  "| size | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
        for nbytes, times in by_size.items():
            cells = []
            for key in keys:
                if key not in times:
                    cells.append("–")
                    continue
                us, captured = times[key]
                cells.append(f"{us:.1f} ({busbw(nbytes, us, world, gather):.3g})" + ("" if captured else " eager"))
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
        keys = {k for times in by_size.values() for k in times}
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
    """The size rules that pick the "auto" column, and the variants not run at every size, in words."""
    by_limit = {}
    for variant, limit in MAX_BYTES.items():
        by_limit.setdefault(limit, []).append(variant)
    return (f"auto = the size rule: inboxes (one_shot, push) while each rank's input bytes x (n-1) <= "
            f"{_size(INBOX_BYTES)} (all_gather: input = size / n); above, all_reduce uses ring from "
            f"{_size(RING_FROM_BYTES)} on {RING_FROM_WORLD} ranks or more, else two_shot, and all_gather uses pull. "
            + "; ".join(f"{', '.join(v)} not run above {_size(limit)}" for limit, v in sorted(by_limit.items())) + ".")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check every variant's results against NCCL")
    parser.add_argument("--eager", action="store_true", help="only the eager table (host loops up to 4 MiB)")
    parser.add_argument("--gluon", action="store_true", help="only the Gluon collectives against Triton and NCCL")
    args = parser.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    ctx = iris.iris("5GiB" if not args.check else "1GiB", backend="cuda")
    world = ctx.num_ranks
    eager_sizes = [size for size in SIZES if size <= EAGER_MAX_BYTES]
    if args.check:
        check(ctx)
    elif args.gluon:
        gather_rows = {"bf16": {s: bench_all_gather(ctx, s, torch.bfloat16) for s in GATHER_SIZES}}
        all_to_all_rows = {"bf16": {s: bench_all_to_all(ctx, s, torch.bfloat16) for s in ALL_TO_ALL_SIZES}}
        if ctx.cur_rank == 0:
            report_gluon(gather_rows, all_to_all_rows, world)
    elif args.eager:
        rows = {name: {s: bench_eager(ctx, s, dtype) for s in eager_sizes} for name, dtype in DTYPES.items()}
        if ctx.cur_rank == 0:
            report_eager(rows, world)
    else:
        eager_rows = {name: {s: bench_eager(ctx, s, dtype) for s in eager_sizes} for name, dtype in DTYPES.items()}
        if ctx.cur_rank == 0:
            report_eager(eager_rows, world)
        reduce_rows = {name: {s: bench_all_reduce(ctx, s, dtype) for s in SIZES} for name, dtype in DTYPES.items()}
        gather_rows = {"bf16": {s: bench_all_gather(ctx, s, torch.bfloat16) for s in GATHER_SIZES}}
        if ctx.cur_rank == 0:
            report(reduce_rows, gather_rows, world)
    ctx.barrier()
    dist.destroy_process_group()


def report(reduce_rows: dict, gather_rows: dict, world: int) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    plot(reduce_rows, gather_rows, world, os.path.join(here, f"allreduce_{world}gpu.png"))
    body = [
        f"{environment()}; {world} ranks, one per GPU; NCCL {'.'.join(map(str, torch.cuda.nccl.version()))} with "
        f"NCCL_NVLS_ENABLE={os.environ.get('NCCL_NVLS_ENABLE')}; both sides timed as CUDA-graph replays "
        "(20 calls per graph up to 4 MiB, 1 above), slowest rank's mean; bus bandwidth 2(n-1)/n x bytes / t "
        f"(all_gather: (n-1)/n x output bytes / t). {rules()} Plot: benchmarks/allreduce_{world}gpu.png.",
        "",
        "Goals (all_reduce, auto against NCCL):", "", *goals(reduce_rows), "",
        "Goals (all_gather, auto against NCCL's all_gather_into_tensor):", "",
        *goals({f"all_gather {k}": v for k, v in gather_rows.items()}), "",
        *table(reduce_rows, world, gather=False),
        *table({f"all_gather {k}": v for k, v in gather_rows.items()}, world, gather=True),
    ]
    print("\n".join(body))
    write_section(f"allreduce ({world} GPUs)", "\n".join(body))


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
        f"bandwidth (n-1)/n x output bytes / t. all_to_all: size = each rank's input, rows of {ALL_TO_ALL_ROW} "
        "elements; NCCL = all_to_all_single; bus bandwidth (n-1)/n x input bytes / t.",
        "",
        *(gluon_goal(f"all_gather {k}", v, "auto") for k, v in gather_rows.items()),
        *(gluon_goal(f"all_to_all {k}", v, "triton") for k, v in all_to_all_rows.items()), "",
        *table({f"all_gather {k}": v for k, v in gather_rows.items()}, world, gather=True),
        *table({f"all_to_all {k}": v for k, v in all_to_all_rows.items()}, world, gather=True),
    ]
    print("\n".join(body))
    write_section(f"ccl gluon ({world} GPUs)", "\n".join(body))


if __name__ == "__main__":
    main()
