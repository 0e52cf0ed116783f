"""broadcast, reduce, gather, scatter and send/recv on the symmetric heap against NCCL (torch.distributed), in one run.

Run on one machine with N GPUs (one rank each)::

    torchrun --nproc_per_node=N benchmarks/rooted.py                      # every collective, 8 KiB to 256 MiB
    torchrun --nproc_per_node=N benchmarks/rooted.py --only broadcast,p2p --sizes 8K,64M

NCCL runs in torch.distributed's default group (NVLink multicast off, as on the machines this was written for); iris
makes a gloo group of its own for host exchange. Every figure is CUDA-graph replays (several calls per graph, timed
with events, the slowest rank's time; :func:`iris.perf.replay_time`), the median of ``--rounds`` measurements, the
columns rotated between rounds. Each of ours is checked against NCCL's result before it is timed (bit for bit; reduce
within bf16 rounding of an fp32 sum). The root is rank 0. Sizes are the message: the broadcast tensor, each rank's
reduce input, each rank's piece of gather and scatter, one send.

send/recv is a ping-pong (rank 0 sends, rank 1 sends back; the other ranks idle): the figure is half a round trip,
the one-way latency. The goals (issue 55), per collective at every world size measured: at least 1.5x NCCL up to
256 KiB, never slower up to 4 MiB, at least 90% of NCCL's bandwidth (time at most NCCL's / 0.9) from 64 MiB; send/recv
at 8 KiB at most half of NCCL's time. The table goes to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL starts: multicast stays off

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks.results import environment, write_section  # noqa: E402
from iris.base.sizes import parse_size  # noqa: E402
from iris.ccl import BROADCAST_VARIANTS, REDUCE_VARIANTS, Config  # noqa: E402
from iris.perf import replay_time  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
SIZES = [8 * KiB, 32 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]
COLLECTIVES = ("broadcast", "reduce", "gather", "scatter", "p2p")
ROUNDS = 3
TIMED_MS = 20.0
VARIANT_FIELD = {"broadcast": "broadcast_variant", "gather": "broadcast_variant", "scatter": "broadcast_variant",
                 "reduce": "reduce_variant"}
VARIANTS = {"broadcast": BROADCAST_VARIANTS, "gather": BROADCAST_VARIANTS, "scatter": BROADCAST_VARIANTS,
            "reduce": REDUCE_VARIANTS, "p2p": ()}
MAX_BYTES = {"push reduce": 64 * MiB}  # push's inbox holds 2 x world copies of the input


def _size(nbytes: int) -> str:
    for shift, unit in ((20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def per_graph(nbytes: int) -> int:
    return 20 if nbytes <= 4 * MiB else 2


def timed(calls: dict, nbytes: int, rounds: int) -> dict:
    """{name: (µs, captured)}: the median of ``rounds`` rounds of every callable, rotated each round."""
    names = list(calls)
    samples = {name: [] for name in names}
    for round_ in range(rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            timing = replay_time(calls[name], per_graph(nbytes), TIMED_MS)
            samples[name].append((timing.us, timing.captured))
    return {name: (statistics.median(us for us, _ in s), all(c for _, c in s)) for name, s in samples.items()}


def _same(what: str, got, expected, ctx, close: bool = False) -> None:
    torch.cuda.synchronize()
    if close:
        tolerance = 2e-2 * ctx.num_ranks * max(1.0, expected.float().abs().max().item() / 4)
        ok = (got.float() - expected.float()).abs().max().item() <= tolerance
    else:
        ok = torch.equal(got, expected)
    if not ok:
        raise AssertionError(f"rank {ctx.cur_rank}: {what} differs from NCCL's result")


def calls_for(ctx, collective: str, nbytes: int, p2p) -> dict:
    """{column: callable} for NCCL and each of ours ("auto" and every variant), each checked once first."""
    world, rank, dtype = ctx.num_ranks, ctx.cur_rank, torch.bfloat16
    n = nbytes // 2
    config = lambda v: Config(**{VARIANT_FIELD[collective]: None if v == "auto" else v})  # noqa: E731
    ours = {}
    if collective == "broadcast":
        t = ctx.randn(n, dtype=dtype)
        ref = t.clone()
        dist.broadcast(ref, src=0)
        nccl = t.clone()
        columns = {"NCCL": lambda: dist.broadcast(nccl, src=0)}
        for v in ("auto", *VARIANTS[collective]):
            out = ctx.zeros(n, dtype=dtype)
            ctx.ccl.broadcast(out, t, src=0, config=config(v))
            _same(f"broadcast {v}", out, ref, ctx)
            ours[v] = functools.partial(ctx.ccl.broadcast, out, t, src=0, config=config(v))
    elif collective == "reduce":
        t = ctx.randn(n, dtype=dtype)
        ref = t.float()
        dist.reduce(ref, dst=0)
        nccl = t.clone()
        columns = {"NCCL": lambda: dist.reduce(nccl, dst=0)}
        for v in ("auto", *VARIANTS[collective]):
            if nbytes > MAX_BYTES.get(f"{v} reduce", nbytes):
                continue
            out = ctx.zeros(n, dtype=dtype)
            ctx.ccl.reduce(out, t, root=0, config=config(v))
            if rank == 0:
                _same(f"reduce {v}", out, ref, ctx, close=True)
            ours[v] = functools.partial(ctx.ccl.reduce, out, t, root=0, config=config(v))
    elif collective == "gather":
        t = ctx.randn(n, dtype=dtype)
        pieces = [torch.empty_like(t) for _ in range(world)] if rank == 0 else None
        dist.gather(t, pieces, dst=0)
        columns = {"NCCL": lambda: dist.gather(t, pieces, dst=0)}
        for v in ("auto", *VARIANTS[collective]):
            out = ctx.zeros(world * n, dtype=dtype)
            ctx.ccl.gather(out, t, dst=0, config=config(v))
            if rank == 0:
                _same(f"gather {v}", out, torch.cat(pieces), ctx)
            ours[v] = functools.partial(ctx.ccl.gather, out, t, dst=0, config=config(v))
    elif collective == "scatter":
        t = ctx.randn(world * n, dtype=dtype)
        pieces = list(t.chunk(world)) if rank == 0 else None
        nccl = torch.empty(n, dtype=dtype, device=t.device)
        dist.scatter(nccl, pieces, src=0)
        ref = nccl.clone()
        columns = {"NCCL": lambda: dist.scatter(nccl, pieces, src=0)}
        for v in ("auto", *VARIANTS[collective]):
            out = ctx.zeros(n, dtype=dtype)
            ctx.ccl.scatter(out, t, src=0, config=config(v))
            _same(f"scatter {v}", out, ref, ctx)
            ours[v] = functools.partial(ctx.ccl.scatter, out, t, src=0, config=config(v))
    else:  # p2p: a ping-pong between ranks 0 and 1
        t = torch.randn(n, device=ctx.device).to(dtype)
        back = torch.empty_like(t)
        nccl_back = torch.empty_like(t)

        def ping(send, recv, into):
            if rank == 0:
                send(t, 1)
                recv(into, 1)
            elif rank == 1:
                recv(into, 0)
                send(into, 0)

        columns = {"NCCL": lambda: ping(dist.send, dist.recv, nccl_back)}
        ours["auto"] = lambda: ping(lambda x, p: ctx.ccl.send(x, dst=p, p2p_state=p2p),
                                    lambda x, p: ctx.ccl.recv(x, src=p, p2p_state=p2p), back)
        ours["auto"]()
        columns["NCCL"]()
        if rank == 0:
            _same("send/recv", back, t, ctx)
            _same("NCCL send/recv", nccl_back, t, ctx)
    return {**columns, **ours}


def goal(row: dict, nbytes: int, collective: str) -> str | None:
    """How ours ("auto") fares against this size's goal, or None where no goal applies."""
    nccl, auto = row["NCCL"][0], row["auto"][0]
    if collective == "p2p":
        return f"{auto / nccl:.2f}x NCCL's time (goal <= 0.5)" if nbytes == 8 * KiB else None
    if nbytes <= 256 * KiB:
        return ("met" if nccl / auto >= 1.5 else "missed") + f" (>= 1.5x: {nccl / auto:.2f}x)"
    if nbytes <= 4 * MiB:
        return ("met" if auto <= nccl else "missed") + f" (never slower: {nccl / auto:.2f}x)"
    if nbytes >= 64 * MiB:
        return ("met" if auto <= nccl / 0.9 else "missed") + f" (>= 90% of NCCL's bandwidth: {nccl / auto:.2f}x)"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(COLLECTIVES))
    parser.add_argument("--sizes", default=None, help="comma-separated, e.g. 8K,1M,64M")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--heap", default="8GiB")
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    ctx = iris.iris(args.heap)
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else SIZES
    only = args.only.split(",")
    p2p = ctx.ccl.init_p2p(max_numel=max(sizes) // 2, dtype=torch.bfloat16) if "p2p" in only else None
    lines = [f"{environment()}; {ctx.num_ranks} ranks, bf16, root 0; CUDA-graph replays, slowest rank, median of "
             f"{args.rounds}; µs (NCCL / ours in brackets)", "",
             "| collective | size | NCCL | ours (auto) | push | copy_engines / two_shot | goal |",
             "|---|---|---|---|---|---|---|"]
    for collective in only:
        if collective == "p2p" and ctx.num_ranks < 2:
            continue
        for nbytes in sizes:
            row = timed(calls_for(ctx, collective, nbytes, p2p), nbytes, args.rounds)
            other = next((row[v] for v in ("copy_engines", "two_shot") if v in row), None)
            cell = lambda t: "" if t is None else f"{t[0]:.1f}{'' if t[1] else ' (eager)'}"  # noqa: E731
            lines.append(f"| {collective} | {_size(nbytes)} | {cell(row['NCCL'])} | {cell(row['auto'])} "
                         f"({row['NCCL'][0] / row['auto'][0]:.2f}x) | {cell(row.get('push'))} | {cell(other)} | "
                         f"{goal(row, nbytes, collective) or ''} |")
            if ctx.cur_rank == 0:
                print(lines[-1], flush=True)
    if ctx.cur_rank == 0 and not args.no_write:
        write_section(f"Rooted collectives and send/recv against NCCL ({ctx.num_ranks} ranks)", "\n".join(lines))
    ctx.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
