"""What a small all_reduce costs at this world size, piece by piece: an empty kernel (the launch inside a CUDA graph),
the device barrier (one flag round trip between every rank), one_shot and two_shot_push at a few sizes, each with
the launch shape the shipped table or the size rules give, and with the one an untuned default gave (4096-element
blocks). With the GPUs' SM clock sampled during the run, so that a slow machine shows whether its clocks were low.

Run with one rank per GPU::

    torchrun --nproc_per_node=4 benchmarks/latency_floor.py            # prints the table, writes RESULTS.md

Why (issue 44): at 4 ranks, 8 KiB took 6.2-9.1 µs on two machines on 2026-11-28 and 5.1 µs in RESULTS.md of
2026-11-21. On a third 4x H200 machine this benchmark's first form (2026-11-28) found 4.4 µs with the tuned launch
shape (1024-element blocks: four programs share the 8 KiB) and 5.3 µs with the tree of 2026-11-21 (its one
4096-element block: one program does everything), the device barrier 3.1 µs in both trees, the empty kernel 1.0 µs,
and SM clocks at 1980 MHz whenever the GPUs were busy. So the code did not get slower, the default launch shape was
the cost that a table row removes, and what made the other two machines slower was not in the code.

Examples
--------
>>> rows = floor(ctx)                                   # doctest: +SKIP
>>> rows["device barrier"]                              # doctest: +SKIP
3.06
"""

from __future__ import annotations

import os
import subprocess
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import iris  # noqa: E402
from benchmarks.results import environment, write_section  # noqa: E402
from iris.ccl import Config  # noqa: E402
from iris.perf import replay_time  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
POINTS = [("one_shot", 8 * KiB), ("one_shot", 256 * KiB), ("one_shot", 1 * MiB), ("two_shot_push", 1 * MiB),
          ("two_shot_push", 4 * MiB)]
UNTUNED = {"block_size": 4096, "num_warps": 8}  # what a call got before tables and tuning (the 2026-11-21 default)
CALLS = 20  # calls per CUDA graph


def timed(fn) -> float:
    """µs per call, CUDA-graph replays, ranks in step, slowest rank (the median of 3 measurements)."""
    return sorted(replay_time(fn, calls=CALLS).us for _ in range(3))[1]


def floor(ctx) -> dict:
    """{row name: µs} for every piece (collective)."""
    rows = {}
    scratch = torch.empty(1, device=ctx.device)
    rows["empty kernel (one launch in a graph)"] = timed(lambda: scratch.fill_(1.0))
    rows["device barrier (one flag round trip)"] = timed(ctx.device_barrier)
    for variant, nbytes in POINTS:
        inp = ctx.randn(nbytes // 2, dtype=torch.bfloat16)
        out = ctx.zeros_like(inp)
        for label, config in (("table or rules", Config(all_reduce_variant=variant)),
                              ("untuned default", Config(all_reduce_variant=variant, comm_sms=ctx.get_cu_count(),
                                                         **UNTUNED))):
            workspace = ctx.ccl.all_reduce(out, inp, config=config)
            shape = f"{workspace.programs} programs of {workspace.key[5]}"
            rows[f"{variant} {nbytes // KiB} KiB, {label} ({shape})"] = timed(
                lambda c=config, o=out, i=inp: ctx.ccl.all_reduce(o, i, config=c))
    return rows


def sm_clocks() -> str:
    """The SM clock of every GPU now, as nvidia-smi reads it (empty where it cannot)."""
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=index,clocks.sm,clocks.max.sm", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip().replace("\n", "; ")
    except (OSError, subprocess.SubprocessError):
        return ""


def main() -> None:
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    ctx = iris.iris("1GiB", backend="cuda")
    rows = floor(ctx)
    clocks = sm_clocks()  # right after the last timing, while the clocks are still up
    if ctx.cur_rank == 0:
        body = [f"{environment()}; {ctx.num_ranks} ranks, one per GPU; bf16; CUDA-graph replays ({CALLS} calls per "
                "graph), slowest rank, median of 3. SM clocks right after (index, MHz, max MHz): "
                f"{clocks or 'not read'}.", "", "| piece | µs |", "|---|---|",
                *(f"| {name} | {us:.2f} |" for name, us in rows.items())]
        print("\n".join(body))
        write_section(f"latency floor ({ctx.num_ranks} GPUs)", "\n".join(body))
    ctx.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
