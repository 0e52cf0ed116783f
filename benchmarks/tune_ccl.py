"""Measure the table iris ships for this GPU model and world size: each collective's variant, block, grid and warps
chosen by timing, per dtype and size (the same tuner a user's first call runs, iris.ccl.tuning, with a budget that
lets it try every candidate).

Run on one machine with N GPUs (one rank each; ranks sharing a GPU are refused, their timings would mean nothing)::

    torchrun --nproc_per_node=N benchmarks/tune_ccl.py                       # every collective, bf16 and fp32
    torchrun --nproc_per_node=N benchmarks/tune_ccl.py --collectives all_reduce --dtypes bf16
    torchrun --nproc_per_node=N benchmarks/tune_ccl.py --collectives all_to_all --sizes 16M,256M

Rank 0 merges the rows into ``iris/ccl/tables/<gpu>.json`` (those of the same collective, world size, dtype and
size are replaced) and writes the table, with what the size rules alone take beside the tuned choice, to
benchmarks/RESULTS.md. Both are CUDA-graph timed with every rank in step, slowest rank.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off, as on the machines measured
# per point: every candidate the search visits (a count; "120s" would give seconds)
os.environ["IRIS_AUTOTUNE_BUDGET"] = os.environ.get("IRIS_TUNE_BUDGET", "1000")
os.environ["IRIS_AUTOTUNE_CACHE"] = os.path.join(tempfile.mkdtemp(prefix="iris-tune-"), "cache.json")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks.results import RESULTS, environment, write_section  # noqa: E402
from iris.base.sizes import parse_size  # noqa: E402
from iris.ccl import Config, tuning  # noqa: E402
from iris.ccl.groups import members  # noqa: E402
from iris.ccl.launch import has_copy_engines  # noqa: E402
from iris.ccl.rules import choose_all_to_all_variant, choose_gather_variant, choose_variant  # noqa: E402
from iris.instruments.replay import replay_time  # noqa: E402
from iris.perf.sweep import tensors  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
SIZES = {  # bytes: all_reduce's and reduce_scatter's input (and output), all_gather's output, all_to_all's input
    "all_reduce": [8 * KiB, 32 * KiB, 128 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB],
    "all_gather": [8 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB],
    "reduce_scatter": [8 * KiB, 64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB],
    "all_to_all": [64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 256 * MiB],
}
ROW = 8192  # elements per row of all_to_all's input
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def rule_config(ctx, collective: str, inp, world: int) -> Config:
    """What the size rules and defaults alone choose (iris before its tables), every tuned field set."""
    nbytes = inp.numel() * inp.element_size()
    fields = {"block_size": 4096, "comm_sms": ctx.get_cu_count(), "num_warps": 8}
    if collective == "all_reduce":
        fields["all_reduce_variant"] = choose_variant(nbytes, world)
    elif collective == "all_gather":
        fields["all_gather_variant"] = choose_gather_variant(None, nbytes, world, has_copy_engines(ctx, Config()))
    elif collective == "all_to_all":
        fields.update(block_size_m=32, block_size_n=64,
                      all_to_all_variant=choose_all_to_all_variant(None, nbytes, world,
                                                                   copy_engines=has_copy_engines(ctx, Config())))
        del fields["block_size"]
    return Config(**fields)


def call(ctx, collective: str, out, inp, config: Config):
    """One call through ``ctx.ccl``, which keeps its workspace (so calls after the first allocate nothing and a
    CUDA graph can capture them)."""
    return getattr(ctx.ccl, collective)(out, inp, config=config)


def tune_point(ctx, collective: str, dtype: torch.dtype, nbytes: int, world: int) -> tuple[dict, str]:
    """Tune one point (collective over every rank); its table row and its line of the RESULTS.md table."""
    out, inp = tensors(ctx, collective, nbytes, dtype, world, columns=ROW)
    calls = 10 if nbytes <= MiB else 1  # short calls: several per graph
    rule = rule_config(ctx, collective, inp, world)
    rule_us = replay_time(lambda: call(ctx, collective, out, inp, rule), calls=calls, timed_ms=10.0).us
    call(ctx, collective, out, inp, Config.autotune())
    made, _ = tuning.lookup(ctx, collective, Config(), inp, world)  # the tuning just made
    chosen = tuning.chosen_fields(made, collective)
    tuned = Config(**chosen)
    tuned_us = replay_time(lambda: call(ctx, collective, out, inp, tuned), calls=calls, timed_ms=10.0).us
    # keyed as calls look rows up (iris.ccl.tuning.table_row): by one rank's input, which is all_gather's output / world
    row = {"collective": collective, "world": world, "dtype": str(dtype).split(".")[-1],
           "bytes": inp.numel() * inp.element_size(), **chosen, "us": round(tuned_us, 2)}
    line = (f"| {collective} | {str(dtype).split('.')[-1]} | {nbytes // KiB} KiB | {rule_us:.1f} | {tuned_us:.1f} | "
            f"{rule_us / tuned_us:.2f}x | {', '.join(f'{k}={v}' for k, v in chosen.items())} |")
    return row, line


def point_of(line: str) -> tuple:
    """(collective, dtype, size) of a line of the tuned table: the point it measured."""
    return tuple(line.split(" | ")[:3])


def earlier_lines(title: str) -> dict:
    """{(collective, dtype, size): table line} of the section ``title`` of RESULTS.md as an earlier run left it."""
    text = RESULTS.read_text() if RESULTS.exists() else ""
    start = text.find(f"## {title}\n")
    if start < 0:
        return {}
    end = text.find("\n## ", start + 1)
    body = text[start:end if end >= 0 else len(text)]
    return {point_of(line): line for line in body.splitlines()
            if line.startswith("| ") and not line.startswith(("| collective", "|---"))}


def write(rows: list[dict], lines: list[str], world: int, gpu: str, ship: bool) -> None:
    """The RESULTS.md section of this world size and GPU, this run's points replacing the same points of an earlier
    run and keeping the others (the date says when the last run was); the shipped table too, unless ``ship`` is
    False."""
    title = f"Tuned collectives on {world}x {gpu}"
    merged = earlier_lines(title)
    merged.update({point_of(line): line for line in lines})
    header = ("| collective | dtype | size | size rules (µs) | tuned (µs) | speed-up | chosen |\n"
              "|---|---|---|---|---|---|---|")
    write_section(title, f"{environment()} (the last run; rows of earlier runs kept where it measured other "
                  "points)\n\n`benchmarks/tune_ccl.py`: each point's variant, block, grid and warps chosen by "
                  "the tuner (iris.ccl.tuning), beside the size rules alone (the defaults before tables), CUDA-graph "
                  "timed, slowest rank.\n\n" + header + "\n"
                  + "\n".join(merged[k] for k in sorted(merged, key=lambda k: (k[0], k[1], int(k[2].split()[0])))))
    if ship:
        print(f"table: {tuning.ship(rows, gpu)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--collectives", default=",".join(SIZES), help="comma-separated, of " + ", ".join(SIZES))
    parser.add_argument("--dtypes", default="bf16,fp32", help="comma-separated, of " + ", ".join(DTYPES))
    parser.add_argument("--sizes", help="only these sizes, e.g. 64M,256M (default: every size of each collective)")
    parser.add_argument("--no-ship", action="store_true", help="print and write RESULTS.md, leave the table alone")
    args = parser.parse_args()
    wanted = {parse_size(text) for text in args.sizes.split(",")} if args.sizes else None
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    ctx = iris.iris("16GiB")
    world, rank = ctx.get_num_ranks(), ctx.get_rank()
    why_not = tuning.timings_mean_nothing(ctx, members(ctx, None))
    if why_not:
        raise SystemExit(f"rank {rank}: not tuning: {why_not}")
    gpu = tuning.gpu_model(ctx)
    rows, lines = [], []
    for collective in args.collectives.split(","):
        for dtype_name in args.dtypes.split(","):
            for nbytes in [size for size in SIZES[collective] if wanted is None or size in wanted]:
                row, line = tune_point(ctx, collective, DTYPES[dtype_name], nbytes, world)
                rows.append(row)
                lines.append(line)
                if rank == 0:
                    print(line, flush=True)
        if rank == 0:  # after each collective: a run cut short keeps what it measured
            write(rows, lines, world, gpu, ship=not args.no_ship)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
