"""Lesson 11's MoE layer (dispatch, grouped expert matmul, combine) against the lesson's ``all_to_all_single`` layer.

Run with one rank per GPU::

    torchrun --nproc_per_node=2 benchmarks/lesson11_steps.py             # the lesson's layer and its baseline
    torchrun --nproc_per_node=2 benchmarks/lesson11_steps.py --sweep     # and other blocks for the experts
    torchrun --nproc_per_node=2 benchmarks/lesson11_steps.py --write     # and the table into RESULTS.md

Everything timed is the lesson's own code: notebooks/11_moe_dispatch_combine.ipynb's ``%%writefile moe_layer.py``
cell (:func:`benchmarks.lesson_modules.write_lesson_modules`: ``MoELayer``, three kernels a call), and from its
other cells (:func:`benchmarks.lesson_modules.lesson_function`) the gate (``layer_weights``, ``route``) and the
baseline, ``all_to_all_moe``: the layer as torch writes it, tokens sorted by expert, split sizes exchanged, the
rows sent and brought back with two ``all_to_all_single`` over NCCL. The shape is the lesson's GPU cell's: 128
tokens per rank, hidden size 1024, 4 experts per rank, top 2, bf16, the experts' blocks 64 x 64 x 64.

The baseline's split sizes go through the host (``.tolist()``), so it cannot be captured in a CUDA graph: it is
timed as an eager loop, and so is the lesson's layer, beside its CUDA-graph replays (three launches that never
wait for the host). Each figure is the median of ``ROUNDS`` rotated rounds
(:func:`benchmarks.allreduce.rotated_medians`), the slowest rank's µs per call; every layer's output is checked
against the baseline's before the timings and again after its replays.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off, for NCCL too

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.allreduce import rotated_medians  # noqa: E402
from benchmarks.lesson_modules import lesson_directory, lesson_function  # noqa: E402
from benchmarks.lesson_ranks import gpu_rank  # noqa: E402
from benchmarks.results import environment, steps_table, write_lesson_block  # noqa: E402

LESSON = ROOT / "notebooks" / "11_moe_dispatch_combine.ipynb"
TOKENS, HIDDEN, EXPERTS_PER_RANK, TOP_K = 128, 1024, 4, 2
BLOCKS = dict(block_m=64, block_n=64, block_k=64)  # the lesson's GPU cell's
SWEEP = [dict(block_m=m, block_n=n, block_k=k) for m, n, k in ((32, 64, 64), (64, 128, 64), (128, 64, 64),
                                                               (64, 64, 128), (128, 128, 64))]
CALLS = 5  # calls per captured graph (or per eager loop's step)
TIMED_MS = 40.0
ROUNDS = 3
BASELINE = "all_to_all_single layer (the lesson's baseline)"
FINAL = "MoELayer, CUDA graph"


def blocks_name(blocks: dict) -> str:
    return "x".join(str(blocks[k]) for k in ("block_m", "block_n", "block_k"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="also time the experts' blocks of SWEEP")
    parser.add_argument("--write", action="store_true", help="write the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    ctx = gpu_rank("1GiB")
    lesson_directory(LESSON)
    moe_layer = __import__("moe_layer")
    world, rank = ctx.num_ranks, ctx.cur_rank
    experts = EXPERTS_PER_RANK * world
    layer_weights = lesson_function(LESSON, "layer_weights", {"torch": torch})
    route = lesson_function(LESSON, "route", {"torch": torch})
    gate, all_experts = layer_weights(HIDDEN, experts, torch.bfloat16)
    mine = all_experts[rank * EXPERTS_PER_RANK:(rank + 1) * EXPERTS_PER_RANK].to(ctx.device)
    x = torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(rank)).to(ctx.device, torch.bfloat16)
    ids, weights = (t.to(ctx.device) for t in route(x.cpu(), gate, TOP_K))
    all_to_all_moe = lesson_baseline(mine, world, dist.group.WORLD)
    want = all_to_all_moe(x, ids, weights)

    layers = {"": BLOCKS} | ({f" {blocks_name(b)}": b for b in SWEEP} if args.sweep else {})
    calls, outputs = {BASELINE: lambda: all_to_all_moe(x, ids, weights)}, {}
    for suffix, blocks in layers.items():
        layer = moe_layer.MoELayer(ctx, mine, TOKENS, TOP_K, **blocks)
        y = ctx.zeros(TOKENS, HIDDEN, dtype=torch.bfloat16)
        names = ["MoELayer, eager", FINAL] if not suffix else [f"sweep: MoELayer{suffix}, CUDA graph"]
        for name in names:
            calls[name] = lambda layer=layer, y=y: layer(x, ids, weights, y)
            outputs[name] = y
        y.fill_(float("nan"))                 # every element must be written by the checked call
        layer(x, ids, weights, y)
        check(names[-1], y, want, rank)
    eager = (BASELINE, "MoELayer, eager")
    rows = rotated_medians(calls, ROUNDS, CALLS, TIMED_MS, eager=eager)
    torch.cuda.synchronize()
    for name, y in outputs.items():
        check(f"{name}, after its timing", y, want, rank)
    if rank == 0:
        lines = table(rows, world)
        print("\n".join(lines), flush=True)
        if args.write:
            write_lesson_block("11", "benchmarks/lesson11_steps.py", lines, world)
    ctx.barrier()
    dist.destroy_process_group()


def lesson_baseline(mine: torch.Tensor, world: int, group, top_k: int = TOP_K):
    """The lesson's ``all_to_all_moe(x, ids, weights)`` for this rank's experts ``mine`` (E_LOCAL x H x H), over
    ``group``: the function as its cell defines it, given the names it reads there (the group, the sizes, the
    experts)."""
    e_local, hidden = mine.shape[0], mine.shape[1]
    return lesson_function(LESSON, "all_to_all_moe", {
        "torch": torch, "dist": dist, "nccl": group, "world_size": world, "e_big": e_local * world,
        "e_local": e_local, "h_big": hidden, "mine_big": mine, "TOP_K": top_k})


def check(name: str, got: torch.Tensor, want: torch.Tensor, rank: int) -> None:
    """The lesson's own check of its layer against the all-to-all one (its GPU cell's tolerances)."""
    torch.cuda.synchronize()
    error = (got.float() - want.float()).abs().max().item()
    assert torch.allclose(got.float(), want.float(), rtol=2e-2, atol=5e-2), (
        f"rank {rank}: {name} differs from the all_to_all_single layer by up to {error:.3g}")


def table(rows: dict, world: int) -> list[str]:
    """The environment, then :func:`benchmarks.results.steps_table`."""
    eager_ratio = rows["MoELayer, eager"][0] / rows[BASELINE][0]
    return [f"{environment()}; {world} ranks, one per GPU; NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; "
            f"{TOKENS} tokens per rank, hidden {HIDDEN}, {EXPERTS_PER_RANK * world} experts ({EXPERTS_PER_RANK} per "
            f"rank), top {TOP_K}, bf16; experts' blocks {blocks_name(BLOCKS)}; {CALLS} calls per graph or eager "
            f"step, slowest rank, median of {ROUNDS} rotated rounds. The baseline synchronises with the host (its "
            f"split sizes), so it runs as an eager loop; eager against eager, the lesson's layer takes "
            f"{eager_ratio:.2f}x its time.", "", *steps_table("11", rows, BASELINE, FINAL)]


if __name__ == "__main__":
    main()
