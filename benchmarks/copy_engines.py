"""What the copy engines reach when every rank pushes to every peer at once: the ceiling a copy-engine
transfer sets on this machine, and which way of queueing the copies gets there.

Run on one machine with N GPUs (one rank each)::

    torchrun --nproc_per_node=N benchmarks/copy_engines.py
    torchrun --nproc_per_node=N benchmarks/copy_engines.py --sizes 64M,256M

Each rank writes its shard (an all_gather's output / N) into every peer's copy of the output, on the heap
(``ctx.as_remote(out, peer)[mine].copy_(shard)``: a peer-to-peer memcpy, done by the copy engines, no SM). Five
ways, each timed as CUDA-graph replays with the ranks in step (the slowest rank's time, median of 3):

* ``in turn``: one stream, the peers from the next rank on (:func:`iris.ops.chunked.peers_in_turn`, the chunked
  path's order): at each step every rank sends to one peer, if the ranks keep in step;
* ``in step``: the same, with a device barrier (``ctx.device_barrier``) before each step, so that no rank starts
  a step before every rank has ended the last: every rank then receives from one peer at a time;
* ``stream per peer``: a stream for each peer, all copies at once;
* ``two streams per peer``: each peer's copy cut in halves, on two streams;
* ``pull, stream per peer``: every rank reads each peer's shard into its own output, a stream per peer (the
  reading GPU's copy engines).

Bus bandwidth counts as an all_gather's, ``(n - 1) / n x output bytes / t``: what each rank sends a second.
The table goes to benchmarks/RESULTS.md ("copy engines (N GPUs)"); ``benchmarks/allreduce.py`` measures the
fastest of :data:`CEILING_WAYS` in its own run as the ceiling of its goal from 64 MiB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks.results import environment, write_section  # noqa: E402
from iris.base.sizes import format_size, parse_size  # noqa: E402
from iris.ops.chunked import peers_in_turn  # noqa: E402
from iris.perf import replay_time  # noqa: E402

MiB = 1 << 20
SIZES = [4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1024 * MiB]  # the all_gather's output
ROUNDS = 3
WAYS = ("in turn", "in step", "stream per peer", "two streams per peer", "pull, stream per peer")
# The ways benchmarks/allreduce.py takes the fastest of as the copy engines' ceiling (the other two were never the
# fastest at any size measured on 4x or 2x H200, 2026-11-28: RESULTS.md, "copy engines").
CEILING_WAYS = ("in turn", "in step", "stream per peer")


def gather_by_copy_engines(ctx, out: torch.Tensor, way: str = "stream per peer"):
    """A callable that gathers every rank's shard of ``out`` (a heap tensor, its first dimension split evenly over
    the ranks) into every rank's ``out`` with peer-to-peer copies, queued ``way`` (one of :data:`WAYS`).

    Collective once called: every rank calls it, and the call is over on this rank when its copies are (a pull
    reads peers' shards as they were: the caller orders the shards' writes before, as the benchmarks do by
    writing them once). It forks from and joins the current stream, so it can be captured in a CUDA graph.

    Examples
    --------
    >>> out = ctx.zeros(4 << 20, dtype=torch.uint8)                         # doctest: +SKIP
    >>> gather = gather_by_copy_engines(ctx, out, "stream per peer")        # doctest: +SKIP
    >>> gather()                                                            # doctest: +SKIP
    """
    if way not in WAYS:
        raise ValueError(f"way {way!r}: use one of {', '.join(map(repr, WAYS))}")
    rank, world = ctx.cur_rank, ctx.num_ranks
    shard = out.shape[0] // world

    def rows(r, part=slice(None)):
        whole = range(r * shard, (r + 1) * shard)[part]
        return slice(whole.start, whole.stop)

    peers = peers_in_turn(rank, world)
    if way in ("in turn", "in step"):
        copies = [[(ctx.as_remote(out, p)[rows(rank)], out[rows(rank)]) for p in peers]]
    elif way == "stream per peer":
        copies = [[(ctx.as_remote(out, p)[rows(rank)], out[rows(rank)])] for p in peers]
    elif way == "two streams per peer":
        halves = (slice(None, shard // 2), slice(shard // 2, None))
        copies = [[(ctx.as_remote(out, p)[rows(rank, h)], out[rows(rank, h)])] for p in peers for h in halves]
    else:
        copies = [[(out[rows(p)], ctx.as_remote(out, p)[rows(p)])] for p in peers]
    streams = [torch.cuda.Stream(device=ctx.get_device()) for _ in copies]

    def gather():
        start = torch.cuda.current_stream()
        for stream, queue in zip(streams, copies, strict=True):
            stream.wait_stream(start)
            with torch.cuda.stream(stream):
                for dst, src in queue:
                    if way == "in step":
                        ctx.device_barrier()
                    dst.copy_(src)
        for stream in streams:
            start.wait_stream(stream)

    return gather


def bus_gbs(out_bytes: int, us: float, world: int) -> float:
    """An all_gather's bus bandwidth, GB/s: what each rank sent a second."""
    return (world - 1) / world * out_bytes / (us * 1e3)


def measure(ctx, out_bytes: int, way: str, rounds: int = ROUNDS) -> tuple[float, bool]:
    """(µs, captured) of one gather of ``out_bytes`` by ``way`` (CUDA-graph replays, slowest rank, median of
    ``rounds``; captured False where a replay fell back to an eager loop)."""
    world = ctx.num_ranks
    out = ctx.zeros(out_bytes // world * world, dtype=torch.uint8)
    gather = gather_by_copy_engines(ctx, out, way)
    ctx.barrier()
    timings = [replay_time(gather, calls=1) for _ in range(rounds)]
    ctx.barrier()  # no rank frees its output while a peer may still write into it
    del out
    return statistics.median(t.us for t in timings), all(t.captured for t in timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", help="all_gather output sizes, e.g. 64M,256M (default: 4 MiB to 1 GiB)")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else SIZES
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    ctx = iris.iris(f"{max(sizes) // MiB + 256}MiB", backend="cuda")
    world = ctx.num_ranks
    rows = {size: {way: measure(ctx, size, way, args.rounds)[0] for way in WAYS} for size in sizes}
    if ctx.cur_rank == 0:
        lines = [f"{environment()}; {world} ranks, one per GPU; every rank copies its shard (output / {world}) "
                 f"into every peer's output on the heap with peer-to-peer memcpys (copy engines), queued "
                 f"{len(WAYS)} ways (benchmarks/copy_engines.py says how); CUDA-graph replays, the slowest rank, "
                 f"median of {args.rounds}; µs per gather (bus GB/s: (n-1)/n x output bytes / t, what each rank "
                 "sends).", "",
                 "| output | " + " | ".join(WAYS) + " | fastest |", "|---|" + "---|" * (len(WAYS) + 1)]
        for size, by_way in rows.items():
            best = min(by_way, key=by_way.get)
            cells = [f"{us:.1f} ({bus_gbs(size, us, world):.0f})" for us in by_way.values()]
            lines.append(f"| {format_size(size)} | " + " | ".join(cells) + f" | {best} |")
        print("\n".join(lines), flush=True)
        write_section(f"copy engines ({world} GPUs)", "\n".join(lines))
    ctx.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
