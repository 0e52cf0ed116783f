"""Lesson 12's flash-decode across ranks against gathering the KV cache and ``scaled_dot_product_attention``.

Run with one rank per GPU::

    torchrun --nproc_per_node=2 benchmarks/lesson12_steps.py             # the lesson's kernel and its baselines
    torchrun --nproc_per_node=2 benchmarks/lesson12_steps.py --sweep     # and other splits and token blocks
    torchrun --nproc_per_node=2 benchmarks/lesson12_steps.py --write     # and the table into RESULTS.md

The kernel is the lesson's own: notebooks/12_flash_decode_across_ranks.ipynb's ``%%writefile
flash_decode_ranks.py`` cells (:func:`benchmarks.lesson_modules.write_lesson_modules`), through its
``FlashDecode`` (partial attention per (head, split), the partials stored into the home rank's heap with a flag per
head, merged there). The shape is the lesson's GPU cell's: one decode query of 32 heads of dimension 128 over
32768 tokens (bf16) split over the ranks, 8 splits of 64-token blocks per head on each rank, rank 0 the home.

Timed as the lesson times them, each captured in a CUDA graph and replayed (:func:`benchmarks.allreduce.measure`),
the slowest rank's µs per call, the median of ``ROUNDS`` rotated rounds: **gather + SDPA** (NCCL's
``all_gather_into_tensor`` of K and V, then ``scaled_dot_product_attention`` on the home rank), **flash-decode
across ranks** (``barrier=False``, then ``ctx.device_barrier()``: the gather synchronises the ranks too, and the
next call must not overwrite partials the home still reads), and **SDPA over this rank's tokens alone** (no
exchange at all: a bound). The home rank's output is checked against gather + SDPA's (on an output filled with NaN)
before the timings and again after them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off, for NCCL too

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.allreduce import rotated_medians  # noqa: E402
from benchmarks.lesson_modules import lesson_directory  # noqa: E402
from benchmarks.lesson_ranks import gpu_rank  # noqa: E402
from benchmarks.results import environment, steps_table, write_lesson_block  # noqa: E402

LESSON = ROOT / "notebooks" / "12_flash_decode_across_ranks.ipynb"
HEADS, DIM, TOKENS = 32, 128, 32768
SPLITS, BLOCK_S, HOME = 8, 64, 0  # the lesson's GPU cell's
SWEEP = [(splits, block) for splits in (4, 8, 16, 32) for block in (32, 64, 128) if (splits, block) != (8, 64)]
CALLS = 5  # calls per captured graph
TIMED_MS = 40.0
ROUNDS = 3
BASELINE = "gather + SDPA (NCCL all_gather of K and V, SDPA on the home rank)"


def kernel_name(splits: int, block: int) -> str:
    return f"flash-decode across ranks, {splits} splits of {block}-token blocks"


FINAL = kernel_name(SPLITS, BLOCK_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="also time the (splits, block) pairs of SWEEP")
    parser.add_argument("--write", action="store_true", help="write the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    ctx = gpu_rank("1GiB")
    lesson_directory(LESSON)
    flash_decode_ranks = __import__("flash_decode_ranks")
    world, rank = ctx.num_ranks, ctx.cur_rank
    s_local = TOKENS // world
    bf16 = dict(device=ctx.device, dtype=torch.bfloat16)
    q = torch.randn(HEADS, DIM, generator=torch.Generator(device=ctx.device).manual_seed(0), **bf16)
    cache = torch.Generator(device=ctx.device).manual_seed(1 + rank)   # each rank's own tokens
    K = torch.randn(s_local, HEADS, DIM, generator=cache, **bf16)
    V = torch.randn(s_local, HEADS, DIM, generator=cache, **bf16)
    K_gathered, V_gathered = torch.empty(TOKENS, HEADS, DIM, **bf16), torch.empty(TOKENS, HEADS, DIM, **bf16)

    def sdpa(K_, V_):
        return F.scaled_dot_product_attention(q[None, :, None], K_.transpose(0, 1)[None], V_.transpose(0, 1)[None])

    def gather_then_sdpa():
        dist.all_gather_into_tensor(K_gathered, K)
        dist.all_gather_into_tensor(V_gathered, V)
        return sdpa(K_gathered, V_gathered) if rank == HOME else None

    want = gather_then_sdpa()
    want = want[0, :, 0].float() if rank == HOME else None
    calls = {BASELINE: gather_then_sdpa}
    outputs = {}
    for splits, block in [(SPLITS, BLOCK_S)] + (SWEEP if args.sweep else []):
        if (s_local // splits) % block:
            continue                                  # a split must be whole blocks of tokens
        decode = flash_decode_ranks.FlashDecode(ctx, HEADS, DIM, splits, block, HOME)
        out = torch.empty(HEADS, DIM, device=ctx.device)

        def across_ranks(decode=decode, out=out):
            decode(out, q, K, V, barrier=False)       # no host barrier: a CUDA graph cannot hold one
            ctx.device_barrier()

        name = kernel_name(splits, block) if (splits, block) == (SPLITS, BLOCK_S) else \
            f"sweep: {kernel_name(splits, block)}"
        calls[name], outputs[name] = across_ranks, out
        out.fill_(float("nan"))                       # every element must be written by the checked call
        across_ranks()
        check(name, out, want, rank)
    calls["SDPA over this rank's tokens alone"] = lambda: sdpa(K, V)
    rows = rotated_medians(calls, ROUNDS, CALLS, TIMED_MS)
    for name, out in outputs.items():
        check(f"{name}, after its timing", out, want, rank)
    if rank == 0:
        lines = table(rows, world)
        print("\n".join(lines), flush=True)
        if args.write:
            write_lesson_block("12", "benchmarks/lesson12_steps.py", lines, world)
    ctx.barrier()
    dist.destroy_process_group()


def check(name: str, out: torch.Tensor, want: torch.Tensor | None, rank: int) -> None:
    """On the home rank, the lesson's own check against gather + SDPA (its GPU cell's tolerance); elsewhere none:
    the merged output is the home rank's alone."""
    torch.cuda.synchronize()
    if rank != HOME:
        return
    error = (out - want).abs().max().item()
    assert error < 3e-2, f"rank {rank}: {name} differs from gather + SDPA by {error:.3g} (NaN: an element unwritten)"


def table(rows: dict, world: int) -> list[str]:
    """The environment, then :func:`benchmarks.results.steps_table`."""
    return [f"{environment()}; {world} ranks, one per GPU; NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; "
            f"one decode query, {HEADS} heads of {DIM}, over {TOKENS} tokens ({TOKENS // world} per rank), bf16, "
            f"home rank {HOME}; CUDA graphs of {CALLS} calls, slowest rank, median of {ROUNDS} rotated rounds.", "",
            *steps_table("12", rows, BASELINE, FINAL)]


if __name__ == "__main__":
    main()
